package planner

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
)

// countingSnap is a memSnap that counts its lookups and records the hints
// it is given, as a lazy snapshot would see them.
type countingSnap struct {
	memSnap
	lists, reads int
	hints        []statestore.Hint
}

func (c *countingSnap) List(dir string) ([]string, error) {
	c.lists++
	return c.memSnap.List(dir)
}

func (c *countingSnap) ReadFile(p string) ([]byte, error) {
	c.reads++
	return c.memSnap.ReadFile(p)
}

func (c *countingSnap) Capabilities() statestore.SnapshotCapabilities {
	return statestore.SnapshotCapabilities{Prefetch: c.Prefetch}
}

func (c *countingSnap) Prefetch(h statestore.Hint) error {
	c.hints = append(c.hints, h)
	return nil
}

// indexedStore is a store holding n resources' records, with the index.
func indexedStore(t *testing.T, n int) memSnap {
	t.Helper()
	m := memSnap{}
	for i := range n {
		u := upd(fmt.Sprintf("resource/ns/p/r%03d/x", i), map[string]string{fmt.Sprintf("d/r%03d.yaml", i): "a"})
		u.Record = resourceRec(u.Workload, "", on(".", "d"))
		if _, err := m.apply(t, u); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// A drain or a prune reads a view of a store for no workload: on an
// indexed store that reads no record at all (a walk of every record's
// folder would cost a store of 100,000 workloads one request per folder).
func TestReadFactsOfNoWorkloadReadsNothing(t *testing.T) {
	snap := &countingSnap{memSnap: indexedStore(t, 50)}
	f, err := bookkeeping.ReadFacts(snap, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if f.Own != nil || f.All != nil || len(f.Promise)+len(f.Siblings) > 0 || snap.lists+snap.reads > 0 {
		t.Errorf("facts %+v after %d listings and %d reads, want none", f, snap.lists, snap.reads)
	}
}

// A batch tells the snapshot what every update will look at before it
// plans the first one, so that a lazy snapshot fetches it in a few requests
// for all of them, not in a few per update.
func TestPlanBatchHintsEveryUpdateFirst(t *testing.T) {
	snap := &countingSnap{memSnap: indexedStore(t, 3)}
	var us []statestore.Update
	for i := range 20 {
		u := upd(fmt.Sprintf("resource/ns/p/new%02d/x", i), map[string]string{fmt.Sprintf("e/new%02d.yaml", i): "b"})
		u.Record = resourceRec(u.Workload, "", on(".", "e"))
		us = append(us, u)
	}
	if _, _, err := PlanBatch(snap, us); err != nil {
		t.Fatal(err)
	}
	if len(snap.hints) == 0 {
		t.Fatal("no hint")
	}
	first := snap.hints[0]
	for _, u := range us {
		if !slices.Contains(first.Reads, statestore.RecordPath(u.Workload)) {
			t.Fatalf("the first hint does not name %s's record: %v", u.Workload, strings.Join(first.Reads, " "))
		}
		for p := range u.Files {
			if !slices.Contains(first.Paths, p) {
				t.Fatalf("the first hint does not name %s", p)
			}
		}
	}
}
