package planner

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
	"github.com/render-dev/render/statestore/wait"
)

// memSnap is a Snapshot held in memory.
type memSnap map[string][]byte

func (m memSnap) Compare(p string, data []byte) (bool, bool, error) {
	old, ok := m[p]
	return ok, ok && bytes.Equal(old, data), nil
}

func (m memSnap) ReadFile(p string) ([]byte, error) {
	if b, ok := m[p]; ok {
		return b, nil
	}
	return nil, fmt.Errorf("%s: %w", p, statestore.ErrNotFound)
}

func (m memSnap) Capabilities() statestore.SnapshotCapabilities {
	return statestore.SnapshotCapabilities{}
}

func (m memSnap) List(dir string) ([]string, error) {
	var out []string
	for p := range m {
		if strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out, nil
}

// apply plans u on m and, if that succeeds, makes m hold the plan.
func (m memSnap) apply(t *testing.T, u statestore.Update) (Plan, error) {
	t.Helper()
	plan, err := PlanUpdate(m, u)
	if err != nil {
		return plan, err
	}
	for _, op := range plan.Ops {
		if op.Delete {
			delete(m, op.Path)
		} else {
			m[op.Path] = op.Data
		}
	}
	return plan, nil
}

func (m memSnap) visible() map[string]string {
	out := map[string]string{}
	for p, b := range m {
		if !layout.IsMeta(p) {
			out[p] = string(b)
		}
	}
	return out
}

func cm(dest, section, file, apiVersion, ns string) statestore.Object {
	return statestore.Object{APIVersion: apiVersion, Kind: "ConfigMap", Namespace: ns, Name: "cm",
		Section: section, File: file, Destination: dest, Source: "out/" + file}
}

// upd is a workload's update: files (path: content), objects recorded.
func upd(workload string, files map[string]string, objs ...statestore.Object) statestore.Update {
	u := statestore.Update{Workload: workload, Files: map[string][]byte{},
		Record: &statestore.Record{Type: "promise", Promise: "p", Pipeline: "x", Objects: objs}}
	for p, c := range files {
		u.Files[p] = []byte(c)
	}
	return u
}

func TestPlanUpdate(t *testing.T) {
	type step struct {
		u statestore.Update
		// wantErr: "" for success, else the owner an OwnedError must name.
		wantErr string
		diff    statestore.Diff
	}
	shared := func(u statestore.Update) statestore.Update {
		u.Shared = map[string][]byte{"d/canary.yaml": []byte("canary\n")}
		return u
	}
	agg := func(u statestore.Update, part string) statestore.Update {
		u.Aggregates = []statestore.Aggregate{{Target: "d/all.yaml", Contribution: []byte(part)}}
		return u
	}
	res := cm("d", "resources", "resources/a.yaml", "v1", "ns")
	tests := []struct {
		name  string
		steps []step
		want  map[string]string // visible files at the end
	}{
		{
			name: "write, rewrite unchanged, prune",
			steps: []step{
				{u: upd("w/a", map[string]string{"d/a.yaml": "1", "d/b.yaml": "1"}), diff: statestore.Diff{Added: []string{"d/a.yaml", "d/b.yaml"}}},
				{u: upd("w/a", map[string]string{"d/a.yaml": "1", "d/b.yaml": "1"})},
				{u: upd("w/a", map[string]string{"d/a.yaml": "2"}), diff: statestore.Diff{Changed: []string{"d/a.yaml"}, Deleted: []string{"d/b.yaml"}}},
			},
			want: map[string]string{"d/a.yaml": "2"},
		},
		{
			name: "another workload's path is refused and left alone",
			steps: []step{
				{u: upd("w/a", map[string]string{"d/a.yaml": "a"}), diff: statestore.Diff{Added: []string{"d/a.yaml"}}},
				{u: upd("w/b", map[string]string{"d/a.yaml": "b"}), wantErr: "w/a"},
				{u: upd("w/b", map[string]string{"d/b.yaml": "b"}), diff: statestore.Diff{Added: []string{"d/b.yaml"}}},
				{u: statestore.Update{Workload: "w/b"}, diff: statestore.Diff{Deleted: []string{"d/b.yaml"}}},
			},
			want: map[string]string{"d/a.yaml": "a"},
		},
		{
			name: "a path nobody records is taken over",
			steps: []step{
				{u: upd("w/a", map[string]string{"d/stray.yaml": "a"}), diff: statestore.Diff{Changed: []string{"d/stray.yaml"}}},
			},
			want: map[string]string{"d/stray.yaml": "a"},
		},
		{
			name: "shared files are written once and never deleted",
			steps: []step{
				{u: shared(upd("w/a", map[string]string{"d/a.yaml": "a"})), diff: statestore.Diff{Added: []string{"d/a.yaml", "d/canary.yaml"}}},
				{u: shared(upd("w/b", map[string]string{"d/b.yaml": "b"})), diff: statestore.Diff{Added: []string{"d/b.yaml"}}},
				{u: statestore.Update{Workload: "w/a"}, diff: statestore.Diff{Deleted: []string{"d/a.yaml"}}},
			},
			want: map[string]string{"d/b.yaml": "b", "d/canary.yaml": "canary\n"},
		},
		{
			name: "aggregates hold every part in workload order",
			steps: []step{
				{u: agg(upd("w/b", nil), "kind: B\n"), diff: statestore.Diff{Added: []string{"d/all.yaml"}}},
				{u: agg(upd("w/a", nil), "kind: A\n"), diff: statestore.Diff{Changed: []string{"d/all.yaml"}}},
				{u: agg(upd("w/b", nil), ""), diff: statestore.Diff{Changed: []string{"d/all.yaml"}}},
			},
			want: map[string]string{"d/all.yaml": "kind: A\n"},
		},
		{
			name: "an aggregate whose last part goes is deleted",
			steps: []step{
				{u: agg(upd("w/a", nil), "kind: A\n"), diff: statestore.Diff{Added: []string{"d/all.yaml"}}},
				{u: statestore.Update{Workload: "w/a"}, diff: statestore.Diff{Deleted: []string{"d/all.yaml"}}},
			},
			want: map[string]string{},
		},
		{
			name: "a duplicate object in one section is refused, naming its owner",
			steps: []step{
				{u: upd("w/a", map[string]string{"d/resources/a.yaml": "a"}, res), diff: statestore.Diff{Added: []string{"d/resources/a.yaml"}}},
				{u: upd("w/b", map[string]string{"d/resources/b.yaml": "b"}, cm("d", "resources", "resources/b.yaml", "v1", "ns")), wantErr: "w/a"},
			},
			want: map[string]string{"d/resources/a.yaml": "a"},
		},
		{
			name: "identity ignores the version and defaults the namespace",
			steps: []step{
				{u: upd("w/a", map[string]string{"d/a.yaml": "a"}, cm("d", ".", "a.yaml", "example.com/v1", "")), diff: statestore.Diff{Added: []string{"d/a.yaml"}}},
				{u: upd("w/b", map[string]string{"d/b.yaml": "b"}, cm("d", ".", "b.yaml", "example.com/v2", "default")), wantErr: "w/a"},
				{u: upd("w/b", map[string]string{"d/b.yaml": "b"}, cm("d", ".", "b.yaml", "other.com/v1", "")), diff: statestore.Diff{Added: []string{"d/b.yaml"}}},
			},
			want: map[string]string{"d/a.yaml": "a", "d/b.yaml": "b"},
		},
		{
			name: "the same object in another section or destination is allowed",
			steps: []step{
				{u: upd("w/a", map[string]string{"d/resources/a.yaml": "a"}, res), diff: statestore.Diff{Added: []string{"d/resources/a.yaml"}}},
				{u: upd("w/b", map[string]string{"d/dependencies/b.yaml": "b"}, cm("d", "dependencies", "dependencies/b.yaml", "v1", "ns")), diff: statestore.Diff{Added: []string{"d/dependencies/b.yaml"}}},
				{u: upd("w/c", map[string]string{"e/resources/c.yaml": "c"}, cm("e", "resources", "resources/c.yaml", "v1", "ns")), diff: statestore.Diff{Added: []string{"e/resources/c.yaml"}}},
			},
			want: map[string]string{"d/resources/a.yaml": "a", "d/dependencies/b.yaml": "b", "e/resources/c.yaml": "c"},
		},
		{
			name: "an object is free again once its owner stops writing it",
			steps: []step{
				{u: upd("w/a", map[string]string{"d/resources/a.yaml": "a"}, res), diff: statestore.Diff{Added: []string{"d/resources/a.yaml"}}},
				{u: upd("w/a", map[string]string{"d/resources/a.yaml": "a"})},
				{u: upd("w/b", map[string]string{"d/resources/b.yaml": "b"}, cm("d", "resources", "resources/b.yaml", "v1", "ns")), diff: statestore.Diff{Added: []string{"d/resources/b.yaml"}}},
				{u: upd("w/b", map[string]string{"d/resources/b.yaml": "b2"}, cm("d", "resources", "resources/b.yaml", "v1", "ns")), diff: statestore.Diff{Changed: []string{"d/resources/b.yaml"}}},
			},
			want: map[string]string{"d/resources/a.yaml": "a", "d/resources/b.yaml": "b2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := memSnap{"d/stray.yaml": []byte("nobody's")}
			for i, st := range tt.steps {
				before := fmt.Sprint(m)
				plan, err := m.apply(t, st.u)
				if st.wantErr != "" {
					var oe *statestore.OwnedError
					if !errors.As(err, &oe) || !errors.Is(err, statestore.ErrConflict) || oe.Owner != st.wantErr || !strings.Contains(err.Error(), st.wantErr) {
						t.Fatalf("step %d (%s): err = %v, want an OwnedError naming %s", i, st.u.Workload, err, st.wantErr)
					}
					if fmt.Sprint(m) != before || plan.Changed() {
						t.Fatalf("step %d: a refused update changed the snapshot", i)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d (%s): %v", i, st.u.Workload, err)
				}
				if !reflect.DeepEqual(plan.Diff, st.diff) {
					t.Fatalf("step %d (%s): diff = %+v, want %+v", i, st.u.Workload, plan.Diff, st.diff)
				}
			}
			got := m.visible()
			if tt.name != "a path nobody records is taken over" {
				delete(got, "d/stray.yaml")
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("files = %v, want %v", got, tt.want)
			}
		})
	}
}

// A claim another writer uploaded before committing its record (an S3
// writer mid-way) refuses everyone else, naming that writer.
func TestPlanUpdateUncommittedClaim(t *testing.T) {
	m := memSnap{}
	o := cm("d", "resources", "resources/a.yaml", "v1", "ns")
	m[bookkeeping.ClaimPath(o)] = bookkeeping.Claims(statestore.Update{Workload: "w/a", Record: &statestore.Record{Objects: []statestore.Object{o}}})[bookkeeping.ClaimPath(o)]
	_, err := PlanUpdate(m, upd("w/b", map[string]string{"d/resources/b.yaml": "b"}, cm("d", "resources", "resources/b.yaml", "v1", "ns")))
	var oe *statestore.OwnedError
	if !errors.As(err, &oe) || oe.Owner != "w/a" || !strings.Contains(err.Error(), "out/resources/a.yaml") {
		t.Fatalf("err = %v, want an OwnedError naming w/a and its file", err)
	}
	// Its own writer takes it up.
	if _, err := PlanUpdate(m, upd("w/a", map[string]string{"d/resources/a.yaml": "a"}, o)); err != nil {
		t.Fatalf("the claim's own writer: %v", err)
	}
}

// Re-planning after a lost race is planning on the winner's tree: the
// duplicate found there, not only the one visible before the race.
func TestPlanUpdateReplanAfterRace(t *testing.T) {
	base := memSnap{}
	a := upd("w/a", map[string]string{"d/resources/a.yaml": "a"}, cm("d", "resources", "resources/a.yaml", "v1", "ns"))
	b := upd("w/b", map[string]string{"d/resources/b.yaml": "b"}, cm("d", "resources", "resources/b.yaml", "v1", "ns"))
	// Both plan on the same empty snapshot: neither sees the other.
	if _, err := PlanUpdate(base, a); err != nil {
		t.Fatal(err)
	}
	if _, err := PlanUpdate(base, b); err != nil {
		t.Fatal(err)
	}
	// a wins; b re-plans on a's result and is refused.
	if _, err := base.apply(t, a); err != nil {
		t.Fatal(err)
	}
	var oe *statestore.OwnedError
	if _, err := PlanUpdate(base, b); !errors.As(err, &oe) || oe.Owner != "w/a" {
		t.Fatalf("re-plan: err = %v, want an OwnedError naming w/a", err)
	}
}

// A workload whose record holds a part of an aggregated file that has no
// parts left (its writer deleted the part and failed before it deleted
// the file: S3 writes one object at a time) finds render's own leftover
// there, not Kratix's documents: its next render rebuilds the file from
// the parts, and keeps nothing of it as a legacy part.
func TestPlanUpdateOwnLeftoverIsNotKratixs(t *testing.T) {
	const target = "d/all.yaml"
	for _, c := range []struct {
		name         string
		contribution string
		want         map[string]string
	}{
		{"removed", "", map[string]string{}},
		{"contributing again", "kind: B\n", map[string]string{target: "kind: B\n"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := memSnap{}
			u := upd("w/a", nil)
			u.Aggregates = []statestore.Aggregate{{Target: target, Contribution: []byte("kind: A\n")}}
			if _, err := m.apply(t, u); err != nil {
				t.Fatal(err)
			}
			delete(m, statestore.AggregatePath(target, "w/a")) // the part went, the file stayed
			u.Aggregates[0].Contribution = []byte(c.contribution)
			if _, err := m.apply(t, u); err != nil {
				t.Fatal(err)
			}
			if got := m.visible(); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("store holds %v, want %v", got, c.want)
			}
			if _, ok := m[path.Join(layout.MetaDir, "aggregate", target, LegacyPart)]; ok {
				t.Fatal("render's own leftover was kept as Kratix's part")
			}
		})
	}
}

// An update computed from one record of its workload (Update.Basis) is
// refused on a store that holds another one by then (here, the workload
// was moved), unless the store holds the update already; a basis of no
// record is refused where a record exists, and one that copied files is
// refused once they changed. (The campaign's drain races: a render put a
// drained resource back where it had been, a drain wrote its copies over a
// newer render.)
func TestPlanUpdateBasis(t *testing.T) {
	read := func(m memSnap) *statestore.Record {
		t.Helper()
		r, err := statestore.ReadRecord(m, statestore.RecordPath("w/a"))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	on := func(u statestore.Update, dest string) statestore.Update {
		u.Record.Placements = []statestore.Placement{{Group: ".", Destinations: []string{dest}}}
		return u
	}
	m := memSnap{}
	first := on(upd("w/a", map[string]string{"d1/a.yaml": "1"}), "d1")
	first.Basis = &statestore.Basis{}
	if _, err := m.apply(t, first); err != nil {
		t.Fatalf("an update based on no record, on a store without one: %v", err)
	}
	basis := read(m)
	second := on(upd("w/a", map[string]string{"d1/a.yaml": "2"}), "d1")
	second.Basis = &statestore.Basis{Record: basis}
	// A drain moves the workload first.
	if _, err := m.apply(t, on(upd("w/a", map[string]string{"d2/a.yaml": "1"}), "d2")); err != nil {
		t.Fatal(err)
	}
	var se *statestore.StaleError
	if _, err := PlanUpdate(m, second); !errors.As(err, &se) || se.Workload != "w/a" || !errors.Is(err, statestore.ErrStale) || wait.Classify(err) != wait.ClassPermanent {
		t.Fatalf("planned on a newer record: err = %v, want a permanent StaleError naming w/a", err)
	}
	if _, err := PlanUpdate(m, first); !errors.As(err, &se) {
		t.Fatalf("based on no record, on a store with one: err = %v, want a StaleError", err)
	}
	// An update the store already holds is not stale: its own, landed.
	second.Basis = nil
	if _, err := m.apply(t, second); err != nil {
		t.Fatal(err)
	}
	second.Basis = &statestore.Basis{Record: basis}
	if p, err := PlanUpdate(m, second); err != nil || p.Changed() {
		t.Fatalf("an update the store holds, on a stale basis: plan %v, err %v; want nothing to do", p.Ops, err)
	}
	// The basis as it is: planned as usual, whatever files its record
	// lists.
	third := on(upd("w/a", map[string]string{"d1/b.yaml": "3"}), "d1")
	b := *read(m)
	b.Files = nil
	third.Basis = &statestore.Basis{Record: &b, Files: map[string][]byte{"d1/a.yaml": []byte("2")}}
	if p, err := PlanUpdate(m, third); err != nil || !p.Changed() {
		t.Fatalf("on its own basis: plan %v, err %v", p.Ops, err)
	}
	// Copies of files that changed since.
	third.Basis.Files["d1/a.yaml"] = []byte("1")
	if _, err := PlanUpdate(m, third); !errors.As(err, &se) {
		t.Fatalf("copied files that changed since: err = %v, want a StaleError", err)
	}
	// A record that places nothing and says nothing is no record.
	n := memSnap{statestore.RecordPath("w/a"): (&statestore.Record{Workload: "w/a", Type: "promise", Promise: "p"}).Encode()}
	if _, err := PlanUpdate(n, first); err != nil {
		t.Fatalf("based on no record, on a record that places nothing: %v", err)
	}
}

// A prune, a drain and a drain's undo compute their update from the
// files the workload's record lists (Update.Basis.Files set): they write
// again, or move, the files they keep, and the plan deletes whatever else
// the record owns. Another render of the workload that lands in between
// with the same placements and objects and one file more (one that holds
// no Kubernetes object, so the record differs only in its file list)
// leaves a record Basis.Holds takes for the basis; planned on it, such an
// update would delete that file, which it never read. It is refused as
// stale. A render's update (no Basis.Files) replaces the workload's files
// whatever the record lists, as it would after reading the store again.
func TestPlanUpdateBasisFileAddedSince(t *testing.T) {
	placed := func(files map[string]string) statestore.Update {
		u := upd("w/a", files)
		u.Record.Placements = []statestore.Placement{{Group: ".", Destinations: []string{"d1"}}}
		return u
	}
	m := memSnap{}
	if _, err := m.apply(t, placed(map[string]string{"d1/a.yaml": "1"})); err != nil {
		t.Fatal(err)
	}
	basis, err := statestore.ReadRecord(m, statestore.RecordPath("w/a"))
	if err != nil {
		t.Fatal(err)
	}
	// A prune (or a drain) computed from that record: it keeps d1/a.yaml,
	// as read.
	prune := placed(map[string]string{"d1/a.yaml": "1"})
	prune.Message = statestore.Message{Subject: "prune"}
	prune.Basis = &statestore.Basis{Record: basis, Files: map[string][]byte{"d1/a.yaml": []byte("1")}}
	// Another render lands first: the same, and a README.
	if _, err := m.apply(t, placed(map[string]string{"d1/a.yaml": "1", "d1/README.md": "newer"})); err != nil {
		t.Fatal(err)
	}
	var se *statestore.StaleError
	p, err := PlanUpdate(m, prune)
	if !errors.As(err, &se) {
		t.Fatalf("planned on a record that lists a file added since: diff %+v, err %v; want a StaleError (it would delete d1/README.md unread)", p.Diff, err)
	}
	// Computed again from the store as it is now, it holds.
	now, err := statestore.ReadRecord(m, statestore.RecordPath("w/a"))
	if err != nil {
		t.Fatal(err)
	}
	again := prune
	again.Basis = &statestore.Basis{Record: now, Files: map[string][]byte{"d1/a.yaml": []byte("1"), "d1/README.md": []byte("newer")}}
	again.Files = map[string][]byte{"d1/a.yaml": []byte("1"), "d1/README.md": []byte("newer")}
	if _, err := PlanUpdate(m, again); err != nil {
		t.Fatalf("computed from the store as it is: %v", err)
	}
	// A render's update on the older record replaces the files as before.
	render := placed(map[string]string{"d1/a.yaml": "2"})
	render.Basis = &statestore.Basis{Record: basis}
	if p, err := PlanUpdate(m, render); err != nil || !p.Changed() {
		t.Fatalf("a render on a record whose files changed since: diff %+v, err %v; want it planned", p.Diff, err)
	}
}
