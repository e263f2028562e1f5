package gitstore

import (
	"fmt"
	"maps"
	"math/rand"
	"path"
	"reflect"
	"slices"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
	"github.com/render-dev/render/statestore/planner"
)

// listedOnly hides a snapshot's summary, so ReadLoad counts entries.
type listedOnly struct{ statestore.Snapshot }

// Capabilities are the snapshot's, without its SummaryLoad.
func (l listedOnly) Capabilities() statestore.SnapshotCapabilities {
	c := l.Snapshot.Capabilities()
	c.SummaryLoad = nil
	return c
}

// summaryLoad asks snap's declared SummaryLoad, as ReadLoad does; a git
// snapshot that does not declare one fails the test.
func summaryLoad(t *testing.T, snap statestore.Snapshot, dests []string) (map[string]map[string]int, []string, error) {
	t.Helper()
	sl := snap.Capabilities().SummaryLoad
	if sl == nil {
		t.Fatalf("%T declares no SummaryLoad: a git branch keeps the counts summary", snap)
	}
	return sl(dests)
}

// countAll counts every destination's entries by flavour folder, as a reader
// without the summary would.
func countAll(t *testing.T, snap *treeSnap, dests []string) map[string]map[string]int {
	t.Helper()
	out := map[string]map[string]int{}
	for _, d := range dests {
		c, err := bookkeeping.CountEntries(snap, d)
		if err != nil {
			t.Fatal(err)
		}
		for f, n := range c {
			if out[d] == nil {
				out[d] = map[string]int{}
			}
			out[d][f] = n
		}
	}
	return out
}

// checkSummary fails unless the summary answers for every destination with
// what counting the entries gives, and ReadLoad gives the same load with
// and without it, for any excluded workload.
func checkSummary(t *testing.T, snap *treeSnap, dests []string, exclude string) {
	t.Helper()
	counts, rest, err := summaryLoad(t, snap, dests)
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) > 0 {
		t.Fatalf("the summary cannot answer for %v", rest)
	}
	if want := countAll(t, snap, dests); !reflect.DeepEqual(counts, want) {
		t.Fatalf("summary %v, entries %v", counts, want)
	}
	got, err := bookkeeping.ReadLoad(snap, dests, exclude)
	if err != nil {
		t.Fatal(err)
	}
	want, err := bookkeeping.ReadLoad(listedOnly{snap}, dests, exclude)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("load excluding %q: %v from the summary, %v from the entries", exclude, got, want)
	}
}

func writeWorkload(t *testing.T, snap *treeSnap, u statestore.Update) *treeSnap {
	t.Helper()
	plan, err := planner.PlanUpdate(snap, u)
	if err != nil {
		t.Fatal(err)
	}
	if !plan.Changed() {
		return snap
	}
	next, err := snap.apply(plan.Ops)
	if err != nil {
		t.Fatal(err)
	}
	return next
}

func randomUpdate(rng *rand.Rand, workload string, dests []string) statestore.Update {
	u := statestore.Update{Workload: workload}
	if rng.Intn(5) == 0 {
		return u // removed
	}
	flavour := []string{"", "gold", "silver"}[rng.Intn(3)]
	rec := &statestore.Record{Type: "resource", Promise: "p", Pipeline: "configure", Flavour: flavour}
	files := map[string][]byte{}
	for g := range 1 + rng.Intn(2) {
		d := dests[rng.Intn(len(dests))]
		group := "."
		if g > 0 {
			group = "extra"
		}
		rec.Placements = append(rec.Placements, statestore.Placement{Group: group, Destinations: []string{d}})
		files[path.Join(d, "resources", workload, group+".yaml")] = fmt.Appendf(nil, "v%d", rng.Intn(3))
	}
	u.Record, u.Files = rec, files
	return u
}

// The summary follows the index through every kind of write (a new
// workload, a move, a second group, a change of flavour, a removal) and
// always answers what counting the entries answers, in a store written by
// render from the start.
func TestLoadSummaryFollowsIndex(t *testing.T) {
	dests := []string{"d0", "d1", "d2", "d3", "long-" + fmt.Sprintf("%0120d", 7)}
	rng := rand.New(rand.NewSource(1))
	snap := newTreeSnap(memory.NewStorage(), plumbing.ZeroHash, "clusters")
	var workloads []string
	for i := range 12 {
		workloads = append(workloads, fmt.Sprintf("resource/ns/p/w%02d/configure", i))
	}
	for step := range 150 {
		w := workloads[rng.Intn(len(workloads))]
		snap = writeWorkload(t, snap, randomUpdate(rng, w, dests))
		if step%10 == 9 {
			checkSummary(t, snap, dests, workloads[rng.Intn(len(workloads))])
		}
	}
	checkSummary(t, snap, dests, "")
	// Every workload removed: no destination holds anything, and the
	// summary says so (or holds no counts at all).
	for _, w := range workloads {
		snap = writeWorkload(t, snap, statestore.Update{Workload: w})
	}
	counts, rest, err := summaryLoad(t, snap, dests)
	if err != nil || len(rest) > 0 || len(counts) > 0 {
		t.Fatalf("empty store: counts %v, rest %v, %v", counts, rest, err)
	}
}

// A write that changes the index and not the summary (an older render, or
// any other tool) cannot mislead a reader: that destination's counts are
// stale by their stamp, ReadLoad counts its entries instead, and the next
// write by render, whatever it touches, counts it afresh.
func TestLoadSummaryStaleStamp(t *testing.T) {
	dests := []string{"d0", "d1", "d2"}
	snap := newTreeSnap(memory.NewStorage(), plumbing.ZeroHash, "")
	rng := rand.New(rand.NewSource(2))
	for i := range 9 {
		u := randomUpdate(rng, fmt.Sprintf("resource/ns/p/w%d/configure", i), dests)
		if u.Record == nil {
			continue
		}
		snap = writeWorkload(t, snap, u)
	}
	checkSummary(t, snap, dests, "")
	// An older render adds a resource on d1 without the summary.
	old := statestore.Update{Workload: "resource/ns/p/old/configure", Files: map[string][]byte{"d1/old.yaml": []byte("x")},
		Record: &statestore.Record{Type: "resource", Promise: "p", Pipeline: "configure",
			Placements: []statestore.Placement{{Group: ".", Destinations: []string{"d1"}}}}}
	plan, err := planner.PlanUpdate(snap, old)
	if err != nil {
		t.Fatal(err)
	}
	root, err := snap.applyOps(plan.Ops)
	if err != nil {
		t.Fatal(err)
	}
	stale := newTreeSnap(snap.s, root, "")
	_, rest, err := summaryLoad(t, stale, dests)
	if err != nil || !reflect.DeepEqual(rest, []string{"d1"}) {
		t.Fatalf("rest %v, %v: want d1, whose index changed behind the summary", rest, err)
	}
	got, err := bookkeeping.ReadLoad(stale, dests, "")
	if err != nil {
		t.Fatal(err)
	}
	want, err := bookkeeping.ReadLoad(listedOnly{stale}, dests, "")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("load %v, want %v", got, want)
	}
	// render's next write, on d0 only, mends d1's counts too.
	next := writeWorkload(t, stale, statestore.Update{Workload: "resource/ns/p/new/configure", Files: map[string][]byte{"d0/new.yaml": []byte("y")},
		Record: &statestore.Record{Type: "resource", Promise: "p", Pipeline: "configure",
			Placements: []statestore.Placement{{Group: ".", Destinations: []string{"d0"}}}}})
	checkSummary(t, next, dests, "")
}

// A store written by a tool other than render (storegen) gets the same
// summary render would have written, and a store written before the
// summary existed gets one with its first write.
func TestWithLoadSummary(t *testing.T) {
	dests := []string{"d0", "d1", "d2"}
	rng := rand.New(rand.NewSource(3))
	byRender := newTreeSnap(memory.NewStorage(), plumbing.ZeroHash, "")
	for i := range 30 {
		byRender = writeWorkload(t, byRender, randomUpdate(rng, fmt.Sprintf("resource/ns/p/w%d/configure", i), dests))
	}
	files := map[string][]byte{}
	all, err := byRender.List("")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range all {
		if path.Dir(p) == LoadDir {
			continue
		}
		if files[p], err = byRender.ReadFile(p); err != nil {
			t.Fatal(err)
		}
	}
	// Without the summary: written as a tool would, tree by tree.
	bare := newTreeSnap(memory.NewStorage(), plumbing.ZeroHash, "")
	var ops []planner.Op
	for _, p := range slices.Sorted(maps.Keys(files)) {
		ops = append(ops, planner.Op{Path: p, Data: files[p]})
	}
	root, err := bare.applyOps(ops)
	if err != nil {
		t.Fatal(err)
	}
	bare = newTreeSnap(bare.s, root, "")
	if _, rest, err := summaryLoad(t, bare, dests); err != nil || len(rest) != 3 {
		t.Fatalf("a store without a summary answered for %v (%v)", rest, err)
	}
	// With WithLoadSummary: the same tree as render's own.
	withSum, err := WithLoadSummary(files)
	if err != nil {
		t.Fatal(err)
	}
	ops = ops[:0]
	for _, p := range slices.Sorted(maps.Keys(withSum)) {
		ops = append(ops, planner.Op{Path: p, Data: withSum[p]})
	}
	gen := newTreeSnap(memory.NewStorage(), plumbing.ZeroHash, "")
	if root, err = gen.applyOps(ops); err != nil {
		t.Fatal(err)
	}
	if root != byRender.root {
		t.Errorf("the generated store's tree %s differs from render's %s", root, byRender.root)
	}
	// The first write to the store without a summary makes it whole.
	first := writeWorkload(t, bare, randomUpdate(rand.New(rand.NewSource(4)), "resource/ns/p/first/configure", dests))
	checkSummary(t, first, dests, "")
}
