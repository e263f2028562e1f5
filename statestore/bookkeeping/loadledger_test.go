package bookkeeping

import (
	"context"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/render-dev/render/statestore"
)

// memLedgers is a LedgerStorage in memory: objects with versions, and the
// index entries that the records in it imply (the index is a pure
// function of the records). Its tests run without servers; s3store's
// load tests run the same protocol against MinIO.
type memLedgers struct {
	mu       sync.Mutex
	objs     map[string][]byte
	versions map[string]string
	next     int
	recs     map[string]*statestore.Record
	listings int // ListEntries calls
	// writes logs every WriteObject: its path and condition.
	writes []memWrite
	// afterList, when set, runs after a ListFolder (once).
	afterList func()
	// deletes, when set, says which of the paths a DeleteObjects asks
	// for it deletes (one cut off halfway).
	deletes func(paths []string) []string
}

type memWrite struct{ path, version string }

func newMemLedgers() *memLedgers {
	return &memLedgers{objs: map[string][]byte{}, versions: map[string]string{}, recs: map[string]*statestore.Record{}}
}

func (m *memLedgers) ReadObject(_ context.Context, p string) ([]byte, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	data, ok := m.objs[p]
	if !ok {
		return nil, "", ErrNoObject
	}
	return append([]byte(nil), data...), m.versions[p], nil
}

func (m *memLedgers) WriteObject(_ context.Context, p string, data []byte, version string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes = append(m.writes, memWrite{p, version})
	cur, exists := m.versions[p]
	switch {
	case version == AnyVersion:
	case version == IfAbsent && exists, version != IfAbsent && cur != version:
		return "", ErrVersionMoved
	}
	m.next++
	m.objs[p], m.versions[p] = append([]byte(nil), data...), "v"+strconv.Itoa(m.next)
	return m.versions[p], nil
}

func (m *memLedgers) ListFolder(_ context.Context, dir string) ([]string, error) {
	m.mu.Lock()
	var out []string
	for p := range m.objs {
		if name, ok := strings.CutPrefix(p, dir+"/"); ok && !strings.Contains(name, "/") {
			out = append(out, name)
		}
	}
	f := m.afterList
	m.afterList = nil
	m.mu.Unlock()
	if f != nil {
		f()
	}
	return out, nil
}

func (m *memLedgers) DeleteObjects(_ context.Context, paths []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.deletes != nil {
		paths = m.deletes(paths)
	}
	for _, p := range paths {
		delete(m.objs, p)
		delete(m.versions, p)
	}
	return nil
}

func (m *memLedgers) ListEntries(_ context.Context, d string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.listings++
	var out []string
	for _, r := range m.recs {
		for p := range IndexPaths(r) {
			if e, ok := ParseIndexPath(p); ok && e.Resource() && e.Destination == d {
				out = append(out, p)
			}
		}
	}
	return out, nil
}

func (m *memLedgers) CurrentRecord(_ context.Context, w string) (*statestore.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.recs[w], nil
}

// commit stands for a write's commit: w's record becomes rec (nil: gone).
func (m *memLedgers) commit(w string, rec *statestore.Record) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rec == nil {
		delete(m.recs, w)
	} else {
		m.recs[w] = rec
	}
}

func (m *memLedgers) ledgers() Ledgers {
	each := func(ctx context.Context, jobs []func(context.Context) error) error {
		var first error
		for _, job := range jobs {
			if err := job(ctx); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	// No write folds on its own: the tests fold where they mean to.
	return Ledgers{Storage: m, Reads: each, Writes: each, Listed: &Listed{}, FoldEvery: 1 << 30}
}

func placed(w, d, flavour string) *statestore.Record {
	return &statestore.Record{Workload: w, Type: "resource", Promise: "p", Pipeline: "configure", Flavour: flavour,
		Placements: []statestore.Placement{{Group: ".", Destinations: []string{d}}}}
}

// write is one write of w, from old to rec, through the protocol; settle
// false stands for a writer that dies after its commit.
func write(t *testing.T, m *memLedgers, lg Ledgers, w string, old, rec *statestore.Record, settle bool) {
	t.Helper()
	ls := NewLoadState()
	if err := lg.Announce(context.Background(), ls, LedgerChanges(w, old, rec, nil)); err != nil {
		t.Fatal(err)
	}
	m.commit(w, rec)
	ls.Committed(w, rec)
	if settle {
		lg.Settle(context.Background(), ls)
	}
}

// truth counts the entries the records imply, as a listing would.
func truth(t *testing.T, m *memLedgers, d string) map[string]int {
	t.Helper()
	paths, err := m.ListEntries(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	out := countResources(paths, nil)
	for f, n := range out {
		if n == 0 {
			delete(out, f)
		}
	}
	return out
}

func ledgerCounts(t *testing.T, lg Ledgers, d string) map[string]int {
	t.Helper()
	c, err := lg.Counts(context.Background(), []string{d})
	if err != nil {
		t.Fatal(err)
	}
	return c[d]
}

// pending counts the writes whose change on d is under way.
func pending(t *testing.T, lg Ledgers, d string) int {
	t.Helper()
	p, err := lg.Pending(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	return len(p)
}

// A ledger counts what the index holds at every step: while a change is
// announced and not committed, once it is committed and not settled
// (counted from the record), after another writer changed the ledger
// between this writer's announcement and its settlement (which then reads
// the ledger and the record again), and after a writer that died before
// settling left its change pending.
func TestLedgerFollowsIndex(t *testing.T) {
	m := newMemLedgers()
	lg := m.ledgers()
	ctx := context.Background()
	check := func(what string) {
		t.Helper()
		if got, want := ledgerCounts(t, lg, "d"), truth(t, m, "d"); !maps.Equal(got, want) {
			t.Fatalf("%s: ledger counts %v, the index holds %v", what, got, want)
		}
	}
	write(t, m, lg, "a", nil, placed("a", "d", "small"), true)
	check("after a settled write")

	// b announces; c writes and settles meanwhile; b commits, then settles
	// on a ledger that moved since its announcement.
	b := NewLoadState()
	recB := placed("b", "d", "")
	if err := lg.Announce(ctx, b, LedgerChanges("b", nil, recB, nil)); err != nil {
		t.Fatal(err)
	}
	check("announced, not committed")
	write(t, m, lg, "c", nil, placed("c", "d", "small"), true)
	check("another write between announcement and commit")
	m.commit("b", recB)
	b.Committed("b", recB)
	check("committed, not settled")
	lg.Settle(ctx, b)
	check("settled on a ledger that moved")
	if n := pending(t, lg, "d"); n != 0 {
		t.Fatalf("%d changes left pending", n)
	}

	// a moves to e and dies before settling: both ledgers count it from
	// its record until it is removed.
	write(t, m, lg, "a", placed("a", "d", "small"), placed("a", "e", "small"), false)
	check("a dead writer's move, on the destination it left")
	if got, want := ledgerCounts(t, lg, "e"), truth(t, m, "e"); !maps.Equal(got, want) || want["small"] != 1 {
		t.Fatalf("a dead writer's move, on the destination it reached: ledger counts %v, the index holds %v", got, want)
	}
	write(t, m, lg, "a", placed("a", "e", "small"), nil, true)
	check("the dead writer's workload removed")
	if got := ledgerCounts(t, lg, "e"); len(got) != 0 {
		t.Fatalf("e holds nothing, its ledger counts %v", got)
	}
	if n := pending(t, lg, "d"); n != 1 {
		t.Fatalf("only the dead writer's change stays pending: %d", n)
	}
}

// A destination without a ledger is counted from a listing, and the next
// write makes its ledger from that listing, only where none exists yet;
// from then on its load is read without listing.
func TestLedgerMadeFromListing(t *testing.T) {
	m := newMemLedgers()
	for i, f := range []string{"small", "", "small"} {
		w := "w" + strconv.Itoa(i)
		m.commit(w, placed(w, "d", f))
	}
	lg := m.ledgers()
	want := map[string]int{"small": 2, "_": 1}
	if got := ledgerCounts(t, lg, "d"); !maps.Equal(got, want) || m.listings != 1 {
		t.Fatalf("counted %v with %d listings, want %v with one", got, m.listings, want)
	}
	lg.CreateListed(context.Background())
	if got := ledgerCounts(t, lg, "d"); !maps.Equal(got, want) || m.listings != 1 {
		t.Fatalf("after the ledger was made: counted %v with %d listings, want %v with no more", got, m.listings, want)
	}
	// A listing older than a ledger someone else made does not replace it.
	m.objs[LedgerPath("d")] = (&Ledger{Format: ledgerFormat, Entries: map[string]string{"x": "large"}}).encode()
	lg.Listed.entries = map[string]map[string]string{"d": {"y": "small"}}
	lg.CreateListed(context.Background())
	if got := ledgerCounts(t, lg, "d"); !maps.Equal(got, map[string]int{"large": 1}) {
		t.Fatalf("CreateListed overwrote a ledger: %v", got)
	}
}

// TestSettleMadeBaseNotMadeAgain: a write that counted a destination from
// a listing (no base) and whose settlement's fold made the base (the one
// write in FoldEvery that reads after settling) does not write the base
// again from its listing: that write could only be refused. (Scenario 5's
// one-file requests one after another: 5 PUTs of bases, one refused, for
// 4 destinations.) A write whose settlement read found a base made by
// another writer does not write it either.
func TestSettleMadeBaseNotMadeAgain(t *testing.T) {
	for _, made := range []string{"by its fold", "by another writer"} {
		m := newMemLedgers()
		m.commit("w0", placed("w0", "d", "small"))
		lg := m.ledgers()
		lg.FoldEvery = 1 // every write reads after settling
		if got := ledgerCounts(t, lg, "d"); !maps.Equal(got, map[string]int{"small": 1}) {
			t.Fatalf("counted %v", got)
		}
		if made == "by another writer" {
			other := m.ledgers()
			if got := ledgerCounts(t, other, "d"); len(got) == 0 {
				t.Fatalf("counted %v", got)
			}
			other.CreateListed(context.Background())
		}
		write(t, m, lg, "w1", nil, placed("w1", "d", ""), true)
		lg.CreateListed(context.Background())
		var bases []memWrite
		for _, w := range m.writes {
			if w.path == LedgerPath("d") {
				bases = append(bases, w)
			}
		}
		if len(bases) != 1 {
			t.Errorf("base made %s: the base written %d times (%v), want once", made, len(bases), bases)
		}
		if got, want := ledgerCounts(t, lg, "d"), truth(t, m, "d"); !maps.Equal(got, want) {
			t.Errorf("base made %s: counted %v, want %v", made, got, want)
		}
	}
}
