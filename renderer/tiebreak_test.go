package renderer

import (
	"fmt"
	"hash/fnv"
	"testing"
)

// TestTieBreakIsTheDocumentedHash pins the documented rule: among equally
// loaded candidates, a resource group goes to the destination with the
// highest FNV-1a 64 hash of "<workload identity>#<group>@<destination>"
// (rendezvous hashing), so every machine makes the same choice and adding a
// destination moves only the groups that now hash highest on it.
func TestTieBreakIsTheDocumentedHash(t *testing.T) {
	names := []string{"a", "b", "c", "d"}
	var dests []Destination
	for _, n := range names {
		dests = append(dests, dest(n, nil))
	}
	rendezvous := func(key string, among []string) string {
		best, bestH := "", uint64(0)
		for _, d := range among {
			h := fnv.New64a()
			h.Write([]byte(key + "@" + d))
			if v := h.Sum64(); best == "" || v > bestH {
				best, bestH = d, v
			}
		}
		return best
	}
	for i := range 40 {
		name := fmt.Sprintf("req-%02d", i)
		in := Input{Workflow: resourceWF(name), Output: files("x.yaml"), Destinations: dests}
		got := group(t, mustRender(t, in), DefaultGroup).Destinations
		key := fmt.Sprintf("resource/%s/%s/%s/%s#%s", in.Workflow.Namespace, in.Workflow.Promise, name, in.Workflow.Pipeline, DefaultGroup)
		if want := rendezvous(key, names); len(got) != 1 || got[0] != want {
			t.Fatalf("%s went to %v; the documented tie-break (highest FNV-1a of %q@destination) picks %s", name, got, key, want)
		}
		// A lower load still wins over the hash.
		in.Load = Load{Total: map[string]int{"a": 1, "b": 1, "c": 1, "d": 1}}
		in.Load.Total[rendezvous(key, names)] = 2
		got = group(t, mustRender(t, in), DefaultGroup).Destinations
		others := []string{}
		for _, n := range names {
			if n != rendezvous(key, names) {
				others = append(others, n)
			}
		}
		if want := rendezvous(key, others); got[0] != want {
			t.Fatalf("%s with its hash winner more loaded went to %v, want %s (the least loaded, ties by hash)", name, got, want)
		}
	}
}
