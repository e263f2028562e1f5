package bookkeeping

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/render-dev/render/statestore"
)

// check fails unless d's ledger counts what the records imply.
func checkLedger(t *testing.T, m *memLedgers, lg Ledgers, d, what string) {
	t.Helper()
	if got, want := ledgerCounts(t, lg, d), truth(t, m, d); !maps.Equal(got, want) {
		t.Fatalf("%s: ledger counts %v, the index holds %v", what, got, want)
	}
}

// changeObjects lists the change objects in d's folder.
func changeObjects(m *memLedgers, d string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for p := range m.objs {
		if strings.HasPrefix(p, ChangeDir(d)+"/") {
			out = append(out, p)
		}
	}
	return out
}

// Two writers of different workloads on one destination, interleaved as
// racing renders are (both announce, then both commit and settle): each
// writes only objects of its own, each once and only where none exists;
// neither reads or writes the base, nor needs the other's version, and
// neither loses a condition. The old protocol wrote the base four times,
// each conditioned on the version its writer read, and the second writer
// of each phase lost its first try.
func TestWritersOfDifferentWorkloadsShareNoObject(t *testing.T) {
	m := newMemLedgers()
	lg := m.ledgers()
	ctx := context.Background()
	write(t, m, lg, "z", nil, placed("z", "d", "small"), true)
	if ok, err := lg.Fold(ctx, "d"); err != nil || !ok {
		t.Fatalf("fold: %v, %v", ok, err)
	}
	m.writes = nil
	a, b := NewLoadState(), NewLoadState()
	recA, recB := placed("a", "d", "small"), placed("b", "d", "")
	for _, w := range []struct {
		ls   *LoadState
		name string
		rec  *statestore.Record
	}{{a, "a", recA}, {b, "b", recB}} {
		if err := lg.Announce(ctx, w.ls, LedgerChanges(w.name, nil, w.rec, nil)); err != nil {
			t.Fatal(err)
		}
	}
	checkLedger(t, m, lg, "d", "both announced")
	m.commit("a", recA)
	a.Committed("a", recA)
	m.commit("b", recB)
	b.Committed("b", recB)
	checkLedger(t, m, lg, "d", "both committed")
	lg.Settle(ctx, b)
	lg.Settle(ctx, a)
	checkLedger(t, m, lg, "d", "both settled")
	seen := map[string]bool{}
	for _, w := range m.writes {
		if w.path == LedgerPath("d") {
			t.Errorf("a writer wrote the base (%s)", w.version)
		}
		if w.version != IfAbsent || seen[w.path] {
			t.Errorf("write of %s conditioned on %q (again: %v): a writer needed a version", w.path, w.version, seen[w.path])
		}
		seen[w.path] = true
		if !strings.Contains(w.path, "/"+a.nonce+".") && !strings.Contains(w.path, "/"+b.nonce+".") {
			t.Errorf("write of %s is neither writer's", w.path)
		}
	}
	if len(m.writes) != 4 {
		t.Errorf("%d writes, want 4 (an announcement and a settlement each): %v", len(m.writes), m.writes)
	}
}

// A writer whose settlement lands after a fold that read its change
// pending: the fold keeps the change as under way in the base and deletes
// none of its objects, and a settlement that is stale by then (the
// workload committed again since, and a fold folded that) does not
// mislead readers.
func TestFoldRacingASettle(t *testing.T) {
	m := newMemLedgers()
	lg := m.ledgers()
	ctx := context.Background()
	first := NewLoadState()
	rec1 := placed("w", "d", "small")
	if err := lg.Announce(ctx, first, LedgerChanges("w", nil, rec1, nil)); err != nil {
		t.Fatal(err)
	}
	m.commit("w", rec1)
	first.Committed("w", rec1)
	// The first write's settlement is late; a second write of w moves it
	// to another flavour, then a third removes it from d, both settled.
	rec2 := placed("w", "d", "large")
	write(t, m, lg, "w", rec1, rec2, true)
	checkLedger(t, m, lg, "d", "second write settled, first not")
	if ok, err := lg.Fold(ctx, "d"); err != nil || !ok {
		t.Fatalf("fold: %v, %v", ok, err)
	}
	checkLedger(t, m, lg, "d", "folded with the first write pending")
	if n := pending(t, lg, "d"); n != 1 {
		t.Fatalf("%d writes under way, want the first", n)
	}
	// The first write settles now, from the record it committed: stale.
	lg.Settle(ctx, first)
	checkLedger(t, m, lg, "d", "the stale settlement landed after the fold")
	if ok, err := lg.Fold(ctx, "d"); err != nil || !ok {
		t.Fatalf("second fold: %v, %v", ok, err)
	}
	checkLedger(t, m, lg, "d", "stale settlement folded")
	if n := len(changeObjects(m, "d")); n != 0 || pending(t, lg, "d") != 0 {
		t.Fatalf("after the second fold: %d change objects, %d under way", n, pending(t, lg, "d"))
	}
	l, _, _ := lg.Read(ctx, "d")
	if l.Format != ledgerFormat || len(l.Pending) != 0 || !maps.Equal(l.Entries, ResourceEntries(rec2)["d"]) {
		t.Fatalf("base %+v, want w's entries only", l)
	}
}

// A fold that read a workload's settled write folds it while a new write
// of the same workload announces, commits and settles: the fold deletes
// only what it read, and the count stays right throughout.
func TestFoldRacingANewAnnouncement(t *testing.T) {
	m := newMemLedgers()
	lg := m.ledgers()
	ctx := context.Background()
	rec1 := placed("w", "d", "small")
	write(t, m, lg, "w", nil, rec1, true)
	r, err := lg.readLedger(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	next := NewLoadState()
	if err := lg.Announce(ctx, next, LedgerChanges("w", rec1, nil, nil)); err != nil {
		t.Fatal(err)
	}
	if !lg.fold(ctx, r) {
		t.Fatal("the fold lost")
	}
	checkLedger(t, m, lg, "d", "folded beside the new announcement")
	if n := len(changeObjects(m, "d")); n != 1 {
		t.Fatalf("%d change objects, want the new announcement's", n)
	}
	m.commit("w", nil)
	next.Committed("w", nil)
	checkLedger(t, m, lg, "d", "new write committed")
	lg.Settle(ctx, next)
	checkLedger(t, m, lg, "d", "new write settled")
	if got := ledgerCounts(t, lg, "d"); len(got) != 0 {
		t.Fatalf("d holds nothing, counted %v", got)
	}
}

// Two folds of the same reads: one writes the base, the other loses its
// condition and deletes nothing.
func TestFoldRacingAFold(t *testing.T) {
	m := newMemLedgers()
	lg := m.ledgers()
	ctx := context.Background()
	write(t, m, lg, "a", nil, placed("a", "d", "small"), true)
	if ok, _ := lg.Fold(ctx, "d"); !ok {
		t.Fatal("first fold lost")
	}
	write(t, m, lg, "b", nil, placed("b", "d", "small"), true)
	r1, err := lg.readLedger(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	r2, err := lg.readLedger(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	if !lg.fold(ctx, r1) {
		t.Fatal("the first of two folds lost")
	}
	write(t, m, lg, "c", nil, placed("c", "d", ""), true)
	before := len(changeObjects(m, "d"))
	if lg.fold(ctx, r2) {
		t.Fatal("the second of two folds won on a base that moved")
	}
	if after := len(changeObjects(m, "d")); after != before {
		t.Fatalf("the losing fold deleted change objects: %d, then %d", before, after)
	}
	checkLedger(t, m, lg, "d", "after racing folds")
}

// A reader whose listing a fold overtakes (the fold writes the base and
// deletes the objects listed before the reader reads their content) reads
// the base again and counts right.
func TestReaderOvertakenByAFold(t *testing.T) {
	m := newMemLedgers()
	lg := m.ledgers()
	ctx := context.Background()
	// A batch's change, too long to name: its content is read.
	ls := NewLoadState()
	changes := map[string]map[string][]string{}
	var recs []*statestore.Record
	for i := range 12 {
		w := fmt.Sprintf("team/a-long-workload-name-%02d", i)
		rec := placed(w, "d", "small")
		recs = append(recs, rec)
		for d, byW := range LedgerChanges(w, nil, rec, nil) {
			if changes[d] == nil {
				changes[d] = map[string][]string{}
			}
			maps.Copy(changes[d], byW)
		}
	}
	if err := lg.Announce(ctx, ls, changes); err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		m.commit(rec.Workload, rec)
		ls.Committed(rec.Workload, rec)
	}
	lg.Settle(ctx, ls)
	for _, p := range changeObjects(m, "d") {
		if c, ok := parseChange(strings.TrimPrefix(p, ChangeDir("d")+"/")); !ok || c.inline != nil {
			t.Fatalf("%s: want a change named by its content's hash", p)
		}
	}
	m.afterList = func() {
		if ok, err := lg.Fold(ctx, "d"); err != nil || !ok {
			t.Errorf("the overtaking fold: %v, %v", ok, err)
		}
	}
	r, err := lg.readLedger(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	if !r.gone {
		t.Fatal("the reader did not see its listing overtaken")
	}
	if got, want := countMembers(r.members), truth(t, m, "d"); !maps.Equal(got, want) {
		t.Fatalf("overtaken reader counted %v, the index holds %v", got, want)
	}
}

// A ledger of the old format (a base with its writers' changes pending in
// it) is read right beside change objects, and a fold rewrites it in the
// new format with the old pending change kept.
func TestOldFormatLedger(t *testing.T) {
	m := newMemLedgers()
	lg := m.ledgers()
	ctx := context.Background()
	recA := placed("a", "d", "small")
	m.commit("a", recA)
	recOld := placed("old", "d", "large")
	// An older render announced "old" in the base, committed, and died.
	base := &Ledger{Format: ledgerFormatOld, Entries: maps.Clone(ResourceEntries(recA)["d"]),
		Pending: map[string]map[string][]string{"n1": LedgerChanges("old", nil, recOld, nil)["d"]}}
	if _, err := m.WriteObject(ctx, LedgerPath("d"), base.encode(), IfAbsent); err != nil {
		t.Fatal(err)
	}
	m.commit("old", recOld)
	checkLedger(t, m, lg, "d", "old format, a change pending")
	write(t, m, lg, "a", recA, placed("a", "d", ""), true)
	write(t, m, lg, "b", nil, placed("b", "d", "small"), true)
	checkLedger(t, m, lg, "d", "old format and change objects")
	if ok, _ := lg.Fold(ctx, "d"); !ok {
		t.Fatal("fold lost")
	}
	checkLedger(t, m, lg, "d", "folded")
	l, _, _ := lg.Read(ctx, "d")
	if l.Format != ledgerFormat || len(l.Pending["n1"]) == 0 {
		t.Fatalf("folded base %+v: want the new format, with the old change pending", l)
	}
}

// A dead writer's pending change stays, counted from its workload's
// record, through folds, later writes of the workload and its removal.
func TestDeadWritersChangeThroughFolds(t *testing.T) {
	m := newMemLedgers()
	lg := m.ledgers()
	ctx := context.Background()
	rec := placed("w", "d", "small")
	write(t, m, lg, "w", nil, rec, false) // committed, never settled
	for i, next := range []*statestore.Record{placed("w", "d", "large"), placed("w", "e", "large"), nil} {
		if ok, _ := lg.Fold(ctx, "d"); !ok {
			t.Fatalf("fold %d lost", i)
		}
		checkLedger(t, m, lg, "d", fmt.Sprintf("fold %d", i))
		write(t, m, lg, "w", rec, next, true)
		rec = next
		checkLedger(t, m, lg, "d", fmt.Sprintf("write %d", i))
	}
	if ok, _ := lg.Fold(ctx, "d"); !ok {
		t.Fatal("last fold lost")
	}
	checkLedger(t, m, lg, "d", "last fold")
	if n := pending(t, lg, "d"); n != 1 {
		t.Fatalf("%d writes under way, want the dead one", n)
	}
	if n := len(changeObjects(m, "d")); n != 1 {
		t.Fatalf("%d change objects, want the dead write's", n)
	}
}

// Writes of a few workloads, some of the same workload at once (as
// racing renders of one workload are: only one commits; a loser plans
// again and widens its announcement), some dying, interleaved at random
// with folds (their reads and writes apart, other steps between, even
// between a read's listing and the rest of it) and reads, and folds whose
// deletes are cut off halfway: every read counts what the records imply.
func TestLedgerRandomInterleavings(t *testing.T) {
	for seed := range uint64(400) {
		rnd := rand.New(rand.NewPCG(seed, 7))
		m := newMemLedgers()
		lg := m.ledgers()
		lg.FoldAt = 1 + rnd.IntN(4)
		lg.FoldEvery = 1 + rnd.IntN(3)
		if seed%2 == 1 {
			m.deletes = func(paths []string) []string {
				rnd.Shuffle(len(paths), func(i, j int) { paths[i], paths[j] = paths[j], paths[i] })
				return paths[:rnd.IntN(len(paths)+1)]
			}
		}
		ctx := context.Background()
		type inflight struct {
			w         string
			ls        *LoadState
			planned   *statestore.Record // the record it planned on
			want      *statestore.Record
			committed bool
		}
		var writes []*inflight
		var reads []*ledgerRead
		dests := []string{"d", "e"}
		var step func(k int, nested bool)
		step = func(k int, nested bool) {
			switch {
			case k < 3: // a write plans and announces
				w := fmt.Sprintf("w%d", rnd.IntN(4))
				var want *statestore.Record
				if rnd.IntN(4) > 0 {
					want = placed(w, dests[rnd.IntN(2)], []string{"small", "", "large"}[rnd.IntN(3)])
				}
				m.mu.Lock()
				planned := m.recs[w]
				m.mu.Unlock()
				in := &inflight{w: w, ls: NewLoadState(), planned: planned, want: want}
				if err := lg.Announce(ctx, in.ls, LedgerChanges(w, planned, want, nil)); err != nil {
					t.Fatal(err)
				}
				writes = append(writes, in)
			case k < 5 && len(writes) > 0: // a write commits, if its record did not move
				in := writes[rnd.IntN(len(writes))]
				m.mu.Lock()
				cur := m.recs[in.w]
				m.mu.Unlock()
				switch {
				case in.committed:
				case cur == in.planned:
					m.commit(in.w, in.want)
					in.ls.Committed(in.w, in.want)
					in.committed = true
				default: // lost a race: plans again, and widens its announcement
					in.planned = cur
					if err := lg.Announce(ctx, in.ls, LedgerChanges(in.w, cur, in.want, nil)); err != nil {
						t.Fatal(err)
					}
				}
			case k < 7 && len(writes) > 0: // a write ends: settles, or dies
				i := rnd.IntN(len(writes))
				if rnd.IntN(6) > 0 {
					lg.Settle(ctx, writes[i].ls)
				}
				writes = append(writes[:i], writes[i+1:]...)
			case k < 8: // a fold reads, perhaps with other steps after its listing
				if !nested && rnd.IntN(2) == 0 {
					m.afterList = func() {
						for range 1 + rnd.IntN(4) {
							step(rnd.IntN(9), true)
						}
					}
				}
				r, err := lg.readLedger(ctx, dests[rnd.IntN(2)])
				m.afterList = nil
				if err != nil {
					t.Fatal(err)
				}
				reads = append(reads, r)
			case k < 9 && len(reads) > 0: // a fold writes what it read
				i := rnd.IntN(len(reads))
				lg.fold(ctx, reads[i])
				reads = append(reads[:i], reads[i+1:]...)
			}
		}
		for i := range 80 {
			if k := rnd.IntN(10); k < 9 {
				step(k, false)
				continue
			}
			for _, d := range dests {
				checkLedger(t, m, lg, d, fmt.Sprintf("seed %d step %d on %s", seed, i, d))
			}
		}
		for _, d := range dests {
			checkLedger(t, m, lg, d, fmt.Sprintf("seed %d, at the end, on %s", seed, d))
		}
	}
}

// A read whose listing two folds overtake before it reads the base: the
// first folds a write the read listed and deletes its object, the workload
// writes again, and the second folds that, no longer listing the first
// write. The read takes the first write's settlement for the name (as it
// was when the read listed it) over a base that holds the second: a fold
// of that read would write the name back as it was, for good. It lists the
// folder again first, misses what it listed, and does nothing.
func TestFoldOfAReadTwoFoldsOvertook(t *testing.T) {
	m := newMemLedgers()
	lg := m.ledgers()
	ctx := context.Background()
	rec1, rec2 := placed("w", "d", "small"), placed("w", "d", "large")
	write(t, m, lg, "w", nil, rec1, true)
	write(t, m, lg, "x", nil, placed("x", "d", ""), true)
	m.afterList = func() {
		if ok, err := lg.Fold(ctx, "d"); err != nil || !ok {
			t.Errorf("first overtaking fold: %v, %v", ok, err)
		}
		write(t, m, lg, "w", rec1, rec2, true)
		if ok, err := lg.Fold(ctx, "d"); err != nil || !ok {
			t.Errorf("second overtaking fold: %v, %v", ok, err)
		}
	}
	r, err := lg.readLedger(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	if lg.fold(ctx, r) {
		t.Fatal("a fold of a read two folds overtook wrote the base")
	}
	checkLedger(t, m, lg, "d", "after the overtaken fold")
}
