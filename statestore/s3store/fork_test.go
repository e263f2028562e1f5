package s3store

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"path"
	"slices"
	"strings"
	"testing"
)

// copyFork is what fork did before it shared its parent's layers: a new
// snapshot holding a copy of everything the parent knew that a fork
// inherits. sn must hold no frozen layer (it is such a copy itself, or
// was never forked).
func copyFork(sn *snapshot) *snapshot {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	if sn.empty {
		return nil
	}
	out := sn.s.newSnapshot(sn.ctx)
	out.verdict = sn.verdict
	for _, d := range sn.deep {
		if !strings.HasPrefix(d+"/", aggregatePrefix) && !strings.HasPrefix(aggregatePrefix, d+"/") && d != "" {
			out.deep = append(out.deep, d)
		}
	}
	for dir, sps := range sn.spans {
		if !strings.HasPrefix(dir+"/", aggregatePrefix) {
			out.spans[dir] = slices.Clone(sps)
		}
	}
	for p := range sn.points {
		if !strings.HasPrefix(p, aggregatePrefix) {
			out.points[p] = true
		}
	}
	for dir, ls := range sn.subs {
		if !strings.HasPrefix(dir+"/", aggregatePrefix) {
			out.subs[dir] = slices.Clone(ls)
		}
	}
	for dir, sps := range sn.subSpans {
		if !strings.HasPrefix(dir+"/", aggregatePrefix) {
			out.subSpans[dir] = slices.Clone(sps)
		}
	}
	for dir := range sn.folders {
		if !strings.HasPrefix(dir+"/", aggregatePrefix) {
			out.folders[dir] = true
		}
	}
	for p, o := range sn.objs {
		if out.layer.covers(p) {
			out.objs[p] = o
			if data, ok := sn.cache[p]; ok {
				out.cache[p] = data
			}
		}
	}
	return out
}

// forkWorld generates what listings of a small bucket that changes
// between them could show: the same random steps are applied to a
// snapshot and to its copy (copyFork), so that their answers can be
// compared.
type forkWorld struct {
	rng  *rand.Rand
	dirs []string
	n    int
}

func (w *forkWorld) name() string {
	return string(rune('a'+w.rng.IntN(6))) + string(rune('a'+w.rng.IntN(6)))
}

func (w *forkWorld) etag() string { w.n++; return fmt.Sprintf("e%d", w.n) }

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// step is one thing a snapshot found out, applied to several snapshots.
type step func(sn *snapshot)

func (w *forkWorld) step() step {
	dir := w.dirs[w.rng.IntN(len(w.dirs))]
	switch w.rng.IntN(6) {
	case 0, 1: // a delimited listing of a range, as listRange makes
		a, b := w.name(), w.name()
		if b < a {
			a, b = b, a
		}
		sp := span{after: a, last: b, toEnd: w.rng.IntN(4) == 0}
		found, subs := map[string]object{}, map[string]bool{}
		for range w.rng.IntN(5) {
			if n := w.name(); sp.holds(n) {
				found[n] = object{etag: w.etag(), size: int64(w.rng.IntN(3))}
			}
		}
		for range w.rng.IntN(3) {
			if n := w.name() + "/"; sp.holds(n) {
				subs[n] = true
			}
		}
		return func(sn *snapshot) {
			sn.addSpan(dir, maps.Clone(found), sp)
			sn.addSubs(dir, maps.Clone(subs), sp)
			if sp.toEnd {
				sn.mu.Lock()
				sn.subs[dir] = append(sn.subs[dir], subList{after: sp.after, names: maps.Clone(subs)})
				sn.mu.Unlock()
			}
		}
	case 2: // a recursive listing, as listDeep makes
		found := map[string]object{}
		for range w.rng.IntN(6) {
			p := join(dir, w.name())
			if w.rng.IntN(2) == 0 {
				p = join(join(dir, w.name()), w.name())
			}
			found[p] = object{etag: w.etag(), size: 1}
		}
		return func(sn *snapshot) {
			sn.mu.Lock()
			defer sn.mu.Unlock()
			for p, o := range found {
				sn.add(p, o)
				sn.markFolder(path.Dir(p))
			}
			sn.deep = append(sn.deep, dir)
		}
	case 3: // a GET alone, as readPoints makes
		p, exists, o := join(dir, w.name()), w.rng.IntN(2) == 0, object{etag: w.etag(), size: 2}
		return func(sn *snapshot) {
			sn.mu.Lock()
			defer sn.mu.Unlock()
			if sn.covered(p) {
				return
			}
			if exists {
				sn.objs[p], sn.cache[p] = o, []byte("point "+o.etag)
				sn.markFolder(path.Dir(p))
			}
			sn.points[p] = true
		}
	case 4: // a read of what a listing showed, as readRaw makes
		p := join(dir, w.name())
		return func(sn *snapshot) {
			sn.mu.Lock()
			defer sn.mu.Unlock()
			if o, ok, _ := sn.obj(p); ok {
				if _, ok := sn.cached(p); !ok {
					sn.cache[p] = []byte("read " + o.etag)
				}
			}
		}
	default: // the index marker made (see indexed)
		o := object{etag: w.etag(), size: 3}
		return func(sn *snapshot) { sn.indexed(o) }
	}
}

// agree fails t when sn and ref answer differently about any path or
// folder of the world.
func (w *forkWorld) agree(t *testing.T, what string, sn, ref *snapshot) {
	t.Helper()
	sn.mu.Lock()
	defer sn.mu.Unlock()
	ref.mu.Lock()
	defer ref.mu.Unlock()
	for _, dir := range w.dirs {
		if got, want := sn.paths(dir), ref.paths(dir); !slices.Equal(got, want) {
			t.Fatalf("%s: paths(%q) = %v, want %v", what, dir, got, want)
		}
		if got, want := sn.hasFolder(dir), ref.hasFolder(dir); got != want {
			t.Fatalf("%s: hasFolder(%q) = %v, want %v", what, dir, got, want)
		}
		if got, want := sn.deepCovered(dir), ref.deepCovered(dir); got != want {
			t.Fatalf("%s: deepCovered(%q) = %v, want %v", what, dir, got, want)
		}
		for _, l := range []string{"a", "b", "c", "d", "e", "f"} {
			for _, m := range []string{"a", "c", "f"} {
				p := join(dir, l+m)
				if got, want := sn.covered(p), ref.covered(p); got != want {
					t.Fatalf("%s: covered(%q) = %v, want %v", what, p, got, want)
				}
				o, ok, _ := sn.obj(p)
				ro, rok, _ := ref.obj(p)
				if ok != rok || o != ro {
					t.Fatalf("%s: obj(%q) = %+v, %v, want %+v, %v", what, p, o, ok, ro, rok)
				}
				data, ok := sn.cached(p)
				rdata, rok := ref.cached(p)
				if ok != rok || string(data) != string(rdata) {
					t.Fatalf("%s: cached(%q) = %q, %v, want %q, %v", what, p, data, ok, rdata, rok)
				}
				if got, want := sn.subSpansHold(dir, l+m+"/"), ref.subSpansHold(dir, l+m+"/"); got != want {
					t.Fatalf("%s: subSpansHold(%q, %q) = %v, want %v", what, dir, l+m+"/", got, want)
				}
			}
		}
		same := func(a, b subList) bool { return a.after == b.after && maps.Equal(a.names, b.names) }
		if got, want := sn.subLists(dir), ref.subLists(dir); !slices.EqualFunc(got, want, same) {
			t.Fatalf("%s: listings of %q to its end %v, want %v", what, dir, got, want)
		}
	}
	if sn.verdict != ref.verdict {
		t.Fatalf("%s: verdict %d, want %d", what, sn.verdict, ref.verdict)
	}
}

// TestForkAnswersAsTheCopy: a fork that shares its parent's layers
// answers every question about every path and folder as the copy fork
// made before (copyFork), and so does the parent after it was forked,
// over random listings of a bucket that changes between them, forks of
// forks, and parents and forks that go on listing after a fork: the
// first answer about a path still wins, and nothing of the parts of
// aggregated files, or of a recursive listing that showed them, is
// inherited.
func TestForkAnswersAsTheCopy(t *testing.T) {
	st := unitStore(t, Config{})
	ctx := context.Background()
	for trial := range 300 {
		w := &forkWorld{rng: rand.New(rand.NewPCG(39, uint64(trial))), dirs: []string{
			"", "d", "d/e", ".render", ".render/workloads", ".render/aggregate", ".render/aggregate/t.yaml", "x",
		}}
		// Each pair is a snapshot under test and its reference; forks
		// add pairs, and steps go to any of them.
		type pair struct{ sn, ref *snapshot }
		pairs := []pair{{st.newSnapshot(ctx), st.newSnapshot(ctx)}}
		for i := range 40 {
			k := w.rng.IntN(len(pairs))
			p := pairs[k]
			if w.rng.IntN(5) == 0 && len(pairs) < 6 {
				f, rf := p.sn.fork(ctx), copyFork(p.ref)
				pairs = append(pairs, pair{f, rf})
				w.agree(t, fmt.Sprintf("trial %d, step %d: parent %d after the fork", trial, i, k), p.sn, p.ref)
				w.agree(t, fmt.Sprintf("trial %d, step %d: fork %d of %d", trial, i, len(pairs)-1, k), f, rf)
				continue
			}
			s := w.step()
			s(p.sn)
			s(p.ref)
			w.agree(t, fmt.Sprintf("trial %d, step %d: snapshot %d", trial, i, k), p.sn, p.ref)
		}
	}
}

// TestForkCostsTheSameWhateverTheParentHolds: forking a view of 100,000
// objects copies nothing: the fork's own layer is empty, and it shares
// the parent's frozen layer, which a second fork does not freeze again.
func TestForkCostsTheSameWhateverTheParentHolds(t *testing.T) {
	sn := unitStore(t, Config{}).newSnapshot(context.Background())
	found := map[string]object{}
	for i := range 100000 {
		found[fmt.Sprintf("w%06d.yaml", i)] = object{etag: "e", size: 1}
	}
	sn.addSpan("d", found, span{toEnd: true})
	a, b := sn.fork(context.Background()), sn.fork(context.Background())
	for _, f := range []*snapshot{a, b} {
		if !f.layer.isEmpty() || len(f.base) != 1 || f.base[0].f != sn.base[0].f {
			t.Fatalf("a fork holds %d objects of its own and %d layers, not the parent's one layer", len(f.objs), len(f.base))
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if o, ok, _ := a.obj("d/w099999.yaml"); !ok || o.etag != "e" {
		t.Fatalf("the fork does not show the parent's object: %+v, %v", o, ok)
	}
}
