package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
)

// The cases of what the write loop and the engine rely on beyond single
// writes: batches, prefetch hints, the load on destinations, cancellation.

func init() {
	Cases = append(Cases,
		Case{"Batch", testBatch},
		Case{"PrefetchHints", testPrefetchHints},
		Case{"Load", testLoad},
		Case{"CancelledBeforeWrite", testCancelledBeforeWrite},
		Case{"CancelledMidWrite", testCancelledMidWrite},
		Case{"StaleHandOverNeverReverts", testStaleHandOver},
	)
}

// An update handed over after a lost race and still waiting when a newer
// render of the same workload lands must never be carried over it: that
// would bring the older render back. (A store without hand-over has
// nothing waiting: a newer render simply wins.)
func testStaleHandOver(t *testing.T, h Harness) {
	open := h.Fresh(t)
	s := open()
	defer s.Close()
	apply(t, s, update("w/a", map[string]string{"d1/a/x.yaml": "1\n"}))
	older := update("w/a", map[string]string{"d1/a/x.yaml": "2\n", "d1/a/old.yaml": "2\n"})
	if h.Pending != nil {
		h.Pending(t, open(), older)
	}
	newer := update("w/a", map[string]string{"d1/a/x.yaml": "3\n"})
	apply(t, open(), newer)
	if h.Fold != nil {
		h.Fold(t, open())
	}
	// Another workload's write goes through whatever waits, too.
	apply(t, open(), update("w/b", map[string]string{"d1/b/y.yaml": "b\n"}))
	equal(t, "contents", contents(t, s), map[string]string{"d1/a/x.yaml": "3\n", "d1/b/y.yaml": "b\n"})
	if h.Fold != nil {
		// Nothing of the older render is left waiting either.
		h.Fold(t, open())
		equal(t, "contents after another fold", contents(t, s), map[string]string{"d1/a/x.yaml": "3\n", "d1/b/y.yaml": "b\n"})
	}
}

// applyAll writes a batch: as one change where the store can.
func applyAll(t *testing.T, s statestore.Store, us []statestore.Update) statestore.Result {
	t.Helper()
	res, err := s.ApplyAll(patient(), us)
	if err != nil {
		t.Fatalf("ApplyAll: %v", err)
	}
	return res
}

// A batch of several workloads' updates lands whole, each planned on top
// of the ones before it: a later update sees an earlier one's files (it
// may not take a file the earlier one owns), and a batch that changes
// nothing writes nothing.
func testBatch(t *testing.T, h Harness) {
	s := h.Fresh(t)()
	defer s.Close()
	us := []statestore.Update{
		update("w/a", map[string]string{"d1/a/x.yaml": "a\n"}),
		update("w/b", map[string]string{"d1/b/x.yaml": "b\n", "d2/b/y.yaml": "b\n"}),
		update("w/c", map[string]string{"d2/c/z.yaml": "c\n"}),
	}
	res := applyAll(t, s, us)
	if !res.Updated {
		t.Fatal("a batch of new workloads reported no change")
	}
	equal(t, "added", sorted(res.Added...), sorted("d1/a/x.yaml", "d1/b/x.yaml", "d2/b/y.yaml", "d2/c/z.yaml"))
	equal(t, "contents", contents(t, s), map[string]string{"d1/a/x.yaml": "a\n", "d1/b/x.yaml": "b\n", "d2/b/y.yaml": "b\n", "d2/c/z.yaml": "c\n"})
	equal(t, "records", len(records(t, s)), 3)
	if again := applyAll(t, s, us); again.Updated {
		t.Fatalf("the same batch again changed the store: %+v", again)
	}
	// Within a batch, ownership holds between its updates too.
	_, err := s.ApplyAll(patient(), []statestore.Update{
		update("w/d", map[string]string{"d3/d/x.yaml": "d\n"}),
		update("w/e", map[string]string{"d3/d/x.yaml": "stolen\n"}),
	})
	var oe *statestore.OwnedError
	if !errors.As(err, &oe) || oe.Owner != "w/d" {
		t.Fatalf("a batch whose second update takes the first's file: got %v, want an OwnedError naming w/d", err)
	}
	// A store that writes a batch as one change writes none of a refused
	// batch; one that writes updates one after the other (S3) stops at
	// the refused one, having written those before it.
	atomic := s.Capabilities().AtomicBatches
	if got := contents(t, s)["d3/d/x.yaml"]; atomic && got != "" || !atomic && got != "d\n" {
		t.Fatalf("after a refused batch (atomic %v), d3/d/x.yaml holds %q", atomic, got)
	}
}

// A snapshot that takes prefetch hints answers the same with and without
// them, for paths and folders that exist and for those that do not.
func testPrefetchHints(t *testing.T, h Harness) {
	open := h.Fresh(t)
	s := open()
	defer s.Close()
	apply(t, s, update("w/a", map[string]string{"d1/a/one.yaml": "one\n", "d1/a/deep/two.yaml": "two\n"}))
	look := func(snap statestore.Snapshot) []string {
		var out []string
		for _, p := range []string{"d1/a/one.yaml", "d1/a/deep/two.yaml", "d1/missing.yaml", "nowhere/x.yaml"} {
			exists, same, err := snap.Compare(p, []byte("one\n"))
			out = append(out, fmt.Sprint(p, exists, same, err == nil))
			data, err := snap.ReadFile(p)
			out = append(out, fmt.Sprint(p, string(data), errors.Is(err, statestore.ErrNotFound)))
		}
		for _, d := range []string{"d1", "d1/a/deep", "nowhere", ""} {
			list, err := snap.List(d)
			var files []string
			for _, f := range list {
				if !layout.IsMeta(f) {
					files = append(files, f)
				}
			}
			out = append(out, fmt.Sprint(d, files, err))
		}
		return out
	}
	plain, err := open().Snapshot(patient())
	if err != nil {
		t.Fatal(err)
	}
	want := look(plain)
	hinted, err := open().Snapshot(patient())
	if err != nil {
		t.Fatal(err)
	}
	h2 := statestore.Hint{
		Paths: []string{"d1/a/one.yaml", "d1/missing.yaml"},
		Reads: []string{"d1/a/deep/two.yaml", "nowhere/x.yaml"},
		Dirs:  []string{"d1", "nowhere", statestore.RecordsDir},
		Load:  []string{"d1", "d9"},
	}
	if p := hinted.Capabilities().Prefetch; p != nil {
		if err := p(h2); err != nil {
			t.Fatalf("Prefetch: %v", err)
		}
	} else {
		t.Logf("%s's snapshots take no hints: a second plain snapshot must answer the same", s)
	}
	equal(t, "lookups after a prefetch", look(hinted), want)
}

// The load on destinations, as the spread strategy reads it from the
// placement index (bookkeeping.ReadLoad), counts every placed resource
// group, by flavour, leaves the excluded workload out, and follows moves
// and removals.
func testLoad(t *testing.T, h Harness) {
	s := h.Fresh(t)()
	defer s.Close()
	placed := func(workload, flavour string, dests ...string) statestore.Update {
		u := update(workload, map[string]string{dests[0] + "/" + workload + "/x.yaml": "x\n"})
		u.Record.Type, u.Record.Flavour = "resource", flavour
		u.Record.Placements = []statestore.Placement{{Group: ".", Destinations: dests}}
		u.Destinations = dests
		return u
	}
	apply(t, s, placed("r/1", "gold", "east"))
	apply(t, s, placed("r/2", "gold", "east"))
	apply(t, s, placed("r/3", "", "west"))
	apply(t, s, placed("r/4", "silver", "west"))
	read := func(exclude string) bookkeeping.Load {
		t.Helper()
		snap, err := s.Snapshot(patient())
		if err != nil {
			t.Fatal(err)
		}
		l, err := bookkeeping.ReadLoad(snap, []string{"east", "west", "north"}, exclude)
		if err != nil {
			t.Fatalf("ReadLoad: %v", err)
		}
		return l
	}
	check := func(what string, l bookkeeping.Load, total map[string]int, flavours map[string]map[string]int) {
		t.Helper()
		got := map[string]int{}
		for d, n := range l.Total {
			if n != 0 {
				got[d] = n
			}
		}
		gotF := map[string]map[string]int{}
		for f, m := range l.ByFlavour {
			for d, n := range m {
				if n != 0 {
					if gotF[f] == nil {
						gotF[f] = map[string]int{}
					}
					gotF[f][d] = n
				}
			}
		}
		if !reflect.DeepEqual(got, total) || !reflect.DeepEqual(gotF, flavours) {
			t.Fatalf("%s: load %v %v, want %v %v", what, got, gotF, total, flavours)
		}
	}
	check("four placed", read(""), map[string]int{"east": 2, "west": 2},
		map[string]map[string]int{"gold": {"east": 2}, "silver": {"west": 1}})
	check("r/1 left out", read("r/1"), map[string]int{"east": 1, "west": 2},
		map[string]map[string]int{"gold": {"east": 1}, "silver": {"west": 1}})
	apply(t, s, placed("r/2", "gold", "north")) // moved
	apply(t, s, removal("r/4"))
	check("after a move and a removal", read(""), map[string]int{"east": 1, "west": 1, "north": 1},
		map[string]map[string]int{"gold": {"east": 1, "north": 1}})
}

// A write whose context is cancelled before it starts writes nothing and
// says why.
func testCancelledBeforeWrite(t *testing.T, h Harness) {
	s := h.Fresh(t)()
	defer s.Close()
	apply(t, s, update("w/a", map[string]string{"d1/a/x.yaml": "a\n"}))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Apply(ctx, update("w/a", map[string]string{"d1/a/y.yaml": "changed\n"}))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled write: got %v, want context.Canceled", err)
	}
	equal(t, "contents", contents(t, s), map[string]string{"d1/a/x.yaml": "a\n"})
}

// A write cancelled at any moment leaves the workload as it was or as the
// update says, never a mix: whatever the store's readers see is one render
// or the other.
func testCancelledMidWrite(t *testing.T, h Harness) {
	open := h.Fresh(t)
	before := map[string]string{}
	after := map[string]string{}
	for i := range 12 {
		before[fmt.Sprintf("d1/w/old-%02d.yaml", i)] = "old\n"
		after[fmt.Sprintf("d1/w/new-%02d.yaml", i)] = "new\n"
	}
	s := open()
	defer s.Close()
	apply(t, s, update("w/a", before))
	for trial := range 8 {
		ctx, cancel := context.WithCancel(context.Background())
		want := after
		if trial%2 == 1 {
			want = before
		}
		time.AfterFunc(time.Duration(trial)*3*time.Millisecond, cancel)
		w := open()
		_, err := w.Apply(ctx, update("w/a", want))
		cancel()
		w.Close()
		got := contents(t, s)
		other := before
		if trial%2 == 1 {
			other = after
		}
		switch {
		case reflect.DeepEqual(got, want):
		case err != nil && reflect.DeepEqual(got, other):
		default:
			t.Fatalf("trial %d: a write cancelled mid-way (error %v) left %v", trial, err, got)
		}
		// Whatever happened, the next write brings the workload to the
		// update.
		apply(t, s, update("w/a", want))
		equal(t, "contents after a write that finished", contents(t, s), want)
	}
}
