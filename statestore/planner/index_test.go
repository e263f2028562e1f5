package planner

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
)

func resourceRec(workload, flavour string, placements ...statestore.Placement) *statestore.Record {
	return &statestore.Record{Type: "resource", Promise: "p", Pipeline: "x", Flavour: flavour, Placements: placements}
}

func on(group string, dests ...string) statestore.Placement {
	return statestore.Placement{Group: group, Destinations: dests}
}

// The index follows each record through every write: a placement that
// moves takes its entry along, a removed workload takes its entries away,
// and the counts are what counting the records gives.
func TestIndexFollowsRecords(t *testing.T) {
	m := memSnap{}
	write := func(w string, r *statestore.Record, files map[string]string) {
		t.Helper()
		u := upd(w, files)
		u.Record = r
		if _, err := m.apply(t, u); err != nil {
			t.Fatal(err)
		}
	}
	write("resource/ns/p/a/x", resourceRec("a", "gold", on(".", "d1"), on("extra", "d1")), map[string]string{"d1/a.yaml": "a"})
	write("resource/ns/p/b/x", resourceRec("b", "", on(".", "d2")), map[string]string{"d2/b.yaml": "b"})
	write("promise/p/x", &statestore.Record{Type: "promise", Promise: "p", Pipeline: "x", Placements: []statestore.Placement{on(".", "d1", "d2")}}, map[string]string{"d1/p.yaml": "p", "d2/p.yaml": "p"})
	load := func() bookkeeping.Load {
		t.Helper()
		l, err := bookkeeping.ReadLoad(m, []string{"d1", "d2", "d3"}, "")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	// a's two groups count twice on d1; promises do not count.
	if l := load(); fmt.Sprint(l.Total, l.ByFlavour) != "map[d1:2 d2:1] map[gold:map[d1:2]]" {
		t.Fatalf("load %v %v", l.Total, l.ByFlavour)
	}
	// Excluding a workload leaves its entries out.
	if l, _ := bookkeeping.ReadLoad(m, []string{"d1"}, "resource/ns/p/a/x"); l.Total["d1"] != 0 {
		t.Fatalf("a's own entries counted: %v", l.Total)
	}
	// b moves to d3 (drain), a is removed.
	write("resource/ns/p/b/x", resourceRec("b", "", on(".", "d3")), map[string]string{"d3/b.yaml": "b"})
	write("resource/ns/p/a/x", nil, nil)
	if l := load(); fmt.Sprint(l.Total, l.ByFlavour) != "map[d3:1] map[]" {
		t.Fatalf("after a move and a removal: %v %v", l.Total, l.ByFlavour)
	}
	for _, d := range []string{"d1", "d2", "d3"} {
		got, err := bookkeeping.PlacedOn(m, d)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string][]string{"d1": {"promise/p/x"}, "d2": {"promise/p/x"}, "d3": {"resource/ns/p/b/x"}}[d]
		if !reflect.DeepEqual(got, want) {
			t.Errorf("placed on %s: %v, want %v", d, got, want)
		}
	}
}

// A store written before the index (records only) is read the old way and
// migrated by its next write, whoever writes: afterwards it answers from
// the index exactly as the records did, and the claims of the old records
// refuse duplicates.
func TestLegacyStoreIsMigratedOnFirstWrite(t *testing.T) {
	old := map[string]*statestore.Record{
		"resource/ns/p/a/x": resourceRec("a", "gold", on(".", "d1")),
		"resource/ns/p/b/x": resourceRec("b", "", on(".", "d2"), on("two", "d2")),
		"promise/p/x":       {Type: "promise", Promise: "p", Pipeline: "x", Placements: []statestore.Placement{on(".", "d1")}, DefaultSelector: map[string]string{"tier": "gold"}},
	}
	m := memSnap{}
	for w, r := range old {
		r.Workload = w
		r.Objects = []statestore.Object{cm("d1", "resources", w+".yaml", "v1", "ns")}
		r.Objects[0].Name = "cm-" + r.Promise + "-" + w[len(w)-3:len(w)-2]
		r.Files = []string{"d1/" + w + ".yaml"}
		m[statestore.RecordPath(w)] = r.Encode()
		m["d1/"+w+".yaml"] = []byte("x")
	}
	f, err := bookkeeping.ReadFacts(m, "resource/ns/p/a/x", "p")
	if err != nil || f.All == nil || f.Own == nil || len(f.Promise) != 1 {
		t.Fatalf("legacy facts: %+v, %v", f, err)
	}
	// Another workload's render migrates the store.
	if _, err := m.apply(t, upd("resource/ns/p/c/x", map[string]string{"d3/c.yaml": "c"})); err != nil {
		t.Fatal(err)
	}
	if ok, _ := bookkeeping.Indexed(m); !ok {
		t.Fatal("not migrated")
	}
	f, err = bookkeeping.ReadFacts(m, "resource/ns/p/a/x", "p")
	if err != nil || f.All != nil || f.Own == nil || len(f.Promise) != 1 || f.Promise[0].DefaultSelector["tier"] != "gold" {
		t.Fatalf("indexed facts: %+v, %v", f, err)
	}
	l, err := bookkeeping.ReadLoad(m, []string{"d1", "d2"}, "")
	if err != nil || fmt.Sprint(l.Total, l.ByFlavour) != "map[d1:1 d2:2] map[gold:map[d1:1]]" {
		t.Fatalf("migrated load %v %v, %v", l.Total, l.ByFlavour, err)
	}
	// An old record's object is claimed: a copy by another workload is refused.
	dup := upd("resource/ns/p/d/x", map[string]string{"d1/d.yaml": "d"}, old["resource/ns/p/a/x"].Objects[0])
	var oe *statestore.OwnedError
	if err := bookkeeping.CheckClaims(m, dup, nil); !errors.As(err, &oe) || oe.Owner != "resource/ns/p/a/x" {
		t.Fatalf("duplicate of a migrated record's object: %v", err)
	}
	// The owner moving its object elsewhere releases the migrated claim,
	// which its record never listed.
	moved := upd("resource/ns/p/a/x", map[string]string{"d2/a.yaml": "a"}, cm("d2", "resources", "a.yaml", "v1", "ns"))
	moved.Record = resourceRec("a", "gold", on(".", "d2"))
	moved.Record.Objects = []statestore.Object{cm("d2", "resources", "a.yaml", "v1", "ns")}
	if _, err := m.apply(t, moved); err != nil {
		t.Fatal(err)
	}
	if err := bookkeeping.CheckClaims(m, dup, nil); err != nil {
		t.Fatalf("the released object is still claimed: %v", err)
	}
	if l, _ := bookkeeping.ReadLoad(m, []string{"d1", "d2"}, ""); fmt.Sprint(l.Total) != "map[d2:3]" {
		t.Fatalf("load after the move: %v", l.Total)
	}
}

// failingPrefetch is a lazy snapshot whose prefetch fails and which logs.
type failingPrefetch struct {
	memSnap
	logged []string
}

func (f *failingPrefetch) Capabilities() statestore.SnapshotCapabilities {
	return statestore.SnapshotCapabilities{Prefetch: f.Prefetch, Debug: f.Debug}
}

func (f *failingPrefetch) Prefetch(statestore.Hint) error { return errors.New("server hung up") }

func (f *failingPrefetch) Debug(msg string, args ...any) {
	f.logged = append(f.logged, fmt.Sprint(append([]any{msg}, args...)...))
}

// A failed prefetch is not an error of the lookups (they read one path at
// a time), and it is not silent: the snapshot logs it, with the error.
func TestFailedPrefetchIsLogged(t *testing.T) {
	snap := &failingPrefetch{memSnap: memSnap{}}
	rec := resourceRec("w", "", on(".", "d1"))
	if _, err := snap.apply(t, statestore.Update{Workload: "w", Files: map[string][]byte{"d1/a.yaml": []byte("a")}, Record: rec}); err != nil {
		t.Fatal(err)
	}
	snap.logged = nil
	f, err := bookkeeping.ReadFacts(snap, "w", "")
	if err != nil || f.Own == nil {
		t.Fatalf("ReadFacts after a failed prefetch: %+v, %v; want the record read path by path", f, err)
	}
	if len(snap.logged) == 0 {
		t.Fatal("the failed prefetch was not logged")
	}
	for _, l := range snap.logged {
		if !strings.Contains(l, "prefetch failed: the lookups read one path at a time instead") || !strings.Contains(l, "server hung up") {
			t.Errorf("logged %q, want the fallback and the error", l)
		}
	}
}

// ParseIndexPath reads back exactly what IndexPaths writes.
func TestParseIndexPath(t *testing.T) {
	r := &statestore.Record{Workload: "resource/ns/pg/db/configure", Type: "resource", Flavour: "gold",
		Placements: []statestore.Placement{{Group: ".", Destinations: []string{"east", "west"}}}}
	p := &statestore.Record{Workload: "promise/pg/install", Type: "promise",
		Placements: []statestore.Placement{{Group: ".", Destinations: []string{"east"}}}}
	n := 0
	for _, rec := range []*statestore.Record{r, p} {
		for path := range bookkeeping.IndexPaths(rec) {
			e, ok := bookkeeping.ParseIndexPath(path)
			if !ok || e.Type != rec.Type || e.Resource() != (rec.Type == "resource") || e.Name == "" ||
				(e.Destination != "east" && e.Destination != "west") {
				t.Fatalf("%s: %+v %v", path, e, ok)
			}
			if rec == r && e.Flavour != "gold" {
				t.Fatalf("%s: flavour %q", path, e.Flavour)
			}
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d entries", n)
	}
	for _, bad := range []string{".render/placed/east", ".render/placed/east/resource/gold", "clusters/east/x.yaml", ".render/placed/east/resource/x"} {
		if e, ok := bookkeeping.ParseIndexPath(bad); ok {
			t.Errorf("%s parsed as %+v", bad, e)
		}
	}
}
