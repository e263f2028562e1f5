package s3store

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
)

// loadDests are the destinations the load tests place resources on.
var loadDests = []string{"dev", "dest-1", "dest-2"}

// flavouredUpdate is resourceUpdate with flavour f ("" for none).
func flavouredUpdate(ns, name, dest, f string, version int) statestore.Update {
	u := resourceUpdate(ns, name, dest, version)
	u.Record.Flavour = f
	return u
}

// indexLoad counts the resource index entries of dests by listing them:
// the truth a load summary must agree with.
func indexLoad(t *testing.T, s *Store) map[string]map[string]int {
	t.Helper()
	out := map[string]map[string]int{}
	for _, d := range loadDests {
		entries, err := s.ledgers().ListEntries(testCtx(t), d)
		if err != nil {
			t.Fatal(err)
		}
		if c := (&bookkeeping.Ledger{Entries: entries}).Counts(d, nil); len(c) > 0 {
			out[d] = c
		}
	}
	return out
}

// summaryLoad is what a render reads: the counts a fresh snapshot's
// SummaryLoad gives.
func summaryLoad(t *testing.T, s *Store) map[string]map[string]int {
	t.Helper()
	snap, err := s.Snapshot(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	sl := snap.Capabilities().SummaryLoad
	if sl == nil {
		t.Fatal("an S3 snapshot declares no SummaryLoad: a bucket keeps the ledgers summary")
	}
	counts, rest, err := sl(loadDests)
	if err != nil || len(rest) > 0 {
		t.Fatalf("SummaryLoad: %v, rest %v", err, rest)
	}
	return counts
}

func sameLoad(t *testing.T, what string, got, want map[string]map[string]int) {
	t.Helper()
	if !maps.EqualFunc(got, want, func(a, b map[string]int) bool { return maps.Equal(a, b) }) {
		t.Fatalf("%s: load %v, the index holds %v", what, got, want)
	}
}

// pendingIn returns the pending announcements of d's summary.
func pendingIn(t *testing.T, s *Store, d string) map[string]map[string][]string {
	t.Helper()
	p, err := s.ledgers().Pending(testCtx(t), d)
	if err != nil {
		t.Fatalf("summary of %s: %v", d, err)
	}
	return p
}

// TestLoadSummaryExactUnderConcurrentWriters races renders of different
// workloads that place, move and remove resources of two flavours on the
// same destinations, with no lock between them: afterwards the load read
// from the summaries equals the count of the index entries, and no
// change is left pending.
func TestLoadSummaryExactUnderConcurrentWriters(t *testing.T) {
	m := testenv.MinIO(t)
	cfg := minioConfig(m, m.CreateBucket(t, "load"))
	raceLoadWriters(t, cfg, nil)
}

// TestLoadSummaryFoldedUnderConcurrentWriters: the same race, with every
// write reading the summaries it settled in and folding those that hold
// three settled writes or more, side by side with the other writes and
// folds: the load stays exact, and the folds left fewer change objects
// than the writes made.
func TestLoadSummaryFoldedUnderConcurrentWriters(t *testing.T) {
	m := testenv.MinIO(t)
	cfg := minioConfig(m, m.CreateBucket(t, "folded"))
	raceLoadWriters(t, cfg, func(s *Store) { s.foldAt, s.foldEvery = 3, 1 })
	objs := listAll(t, open(t, cfg), bookkeeping.LoadDir)
	changes := 0
	for p := range objs {
		if strings.HasPrefix(summaryOf(p), "d") && strings.HasSuffix(summaryOf(p), " changes") {
			changes++
		}
	}
	// 24 writers, 42 writes, two change objects each.
	if changes >= 2*42 {
		t.Errorf("%d change objects left: nothing was folded", changes)
	}
	t.Logf("%d change objects left of %d", changes, 2*42)
}

// atOnce runs f(0) to f(n-1) side by side and fails t with the first
// error any returned, once all have ended (what names them in a timeout).
func atOnce(t *testing.T, n int, what string, f func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- f(i)
		}()
	}
	waitGroup(t, &wg, what)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// listAll lists every object below dir, relative to the store.
func listAll(t *testing.T, s *Store, dir string) map[string]object {
	t.Helper()
	sn, err := s.list(testCtx(t), dir)
	if err != nil {
		t.Fatal(err)
	}
	return sn.objs
}

// raceLoadWriters races 24 renders of different workloads that place,
// move, re-flavour and remove resources on loadDests (tweak, when set,
// adjusts each writer's Store), then checks the summaries against the
// index.
func raceLoadWriters(t *testing.T, cfg Config, tweak func(*Store)) {
	t.Helper()
	applyOK(t, open(t, cfg), flavouredUpdate("team", "first", "dev", "small", 1))
	atOnce(t, 24, "the writers", func(i int) error {
		s, err := New(cfg)
		if err != nil {
			return err
		}
		defer s.Close()
		if tweak != nil {
			tweak(s)
		}
		f := []string{"small", "", "large"}[i%3]
		name := fmt.Sprintf("r%02d", i)
		steps := []statestore.Update{flavouredUpdate("team", name, loadDests[i%3], f, 1)}
		switch i % 4 {
		case 1: // moves to another destination
			steps = append(steps, flavouredUpdate("team", name, loadDests[(i+1)%3], f, 2))
		case 2: // changes flavour
			steps = append(steps, flavouredUpdate("team", name, loadDests[i%3], "medium", 2))
		case 3: // is removed
			u := steps[0]
			steps = append(steps, statestore.Update{Workload: u.Workload, Message: u.Message})
		}
		for _, u := range steps {
			if _, err := s.Apply(testCtx(t), u); err != nil {
				return fmt.Errorf("%s: %w", u.Workload, err)
			}
		}
		return nil
	})
	s := open(t, cfg)
	want := indexLoad(t, s)
	if want["dev"]["small"] == 0 || want["dest-1"]["medium"] == 0 {
		t.Fatalf("the writers left an unexpected index: %v", want)
	}
	sameLoad(t, "after concurrent writers", summaryLoad(t, s), want)
	for _, d := range loadDests {
		if p := pendingIn(t, s, d); len(p) > 0 {
			t.Errorf("summary of %s: changes left pending: %v", d, p)
		}
	}
}

// loadLog records the requests below the load summaries: method, path
// relative to the store, and status.
type loadLog struct {
	base http.RoundTripper
	mu   sync.Mutex
	reqs []string
}

func (l *loadLog) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.base.RoundTrip(r)
	if _, rel, ok := strings.Cut(r.URL.Path, "/"+testPath+"/"+bookkeeping.LoadDir+"/"); ok {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		l.mu.Lock()
		l.reqs = append(l.reqs, fmt.Sprintf("%s %s %d", r.Method, bookkeeping.LoadDir+"/"+rel, status))
		l.mu.Unlock()
	}
	return resp, err
}

// TestLoadWritersOfDifferentWorkloadsShareNoObject: 16 renders of
// different workloads place resources on one destination at once. Each
// writes two objects of its own in the destination's summary (an
// announcement, then a settlement), each once and only where none exists:
// none reads or writes the summary's base, none needs another's version,
// and none is refused a condition. (Before, each read the base and wrote
// it twice, conditionally, and lost and retried those writes to the
// others.)
func TestLoadWritersOfDifferentWorkloadsShareNoObject(t *testing.T) {
	m := testenv.MinIO(t)
	cfg := minioConfig(m, m.CreateBucket(t, "noshare"))
	applyOK(t, open(t, cfg), flavouredUpdate("team", "first", "dev", "small", 1))
	if ok, err := open(t, cfg).ledgers().Fold(testCtx(t), "dev"); err != nil || !ok {
		t.Fatalf("fold: %v, %v", ok, err)
	}
	log := &loadLog{base: http.DefaultTransport}
	wcfg := cfg
	wcfg.Transport = log
	const writers = 16
	atOnce(t, writers, "the writers", func(i int) error {
		s, err := New(wcfg)
		if err == nil {
			defer s.Close()
			_, err = s.Apply(testCtx(t), flavouredUpdate("team", fmt.Sprintf("w%02d", i), "dev", []string{"small", ""}[i%2], 1))
		}
		return err
	})
	puts := map[string]int{}
	for _, r := range log.reqs {
		method, rest, _ := strings.Cut(r, " ")
		p, status, _ := strings.Cut(rest, " ")
		switch {
		case summaryOf(p) != "dev changes":
			t.Errorf("a writer sent %s", r)
		case method != http.MethodPut || status != "200":
			t.Errorf("a writer sent %s: want only PUTs that succeed", r)
		}
		puts[p]++
	}
	if len(puts) != 2*writers {
		t.Errorf("%d objects written for %d writers, want two each", len(puts), writers)
	}
	for p, n := range puts {
		if n != 1 {
			t.Errorf("%s written %d times", p, n)
		}
	}
	s := open(t, cfg)
	sameLoad(t, "after the writers", summaryLoad(t, s), indexLoad(t, s))
	if p := pendingIn(t, s, "dev"); len(p) > 0 {
		t.Errorf("changes left pending: %v", p)
	}
}

// summaryOf names what a path below the load summaries is: "<d> base"
// or "<d> changes" (for the destinations of loadDests).
func summaryOf(p string) string {
	for _, d := range loadDests {
		switch {
		case p == bookkeeping.LedgerPath(d):
			return d + " base"
		case strings.HasPrefix(p, bookkeeping.ChangeDir(d)+"/") && !strings.Contains(strings.TrimPrefix(p, bookkeeping.ChangeDir(d)+"/"), "/"):
			return d + " changes"
		}
	}
	return p
}

// failLoadPuts fails every PUT of a load summary after the first armed
// ones: a writer that dies after its commit, before it settles.
type failLoadPuts struct {
	base  http.RoundTripper
	mu    sync.Mutex
	allow int // load summary PUTs still let through
}

func (f *failLoadPuts) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/"+bookkeeping.LoadDir+"/") {
		f.mu.Lock()
		ok := f.allow > 0
		f.allow--
		f.mu.Unlock()
		if !ok {
			return nil, errors.New("test: the writer died before settling")
		}
	}
	return f.base.RoundTrip(r)
}

// TestLoadPendingCountedFromRecords: a writer that committed but never
// settled its announcement leaves it pending; readers count the workload
// from its record, through later writes of other workloads on the same
// destination and through the workload's own removal.
func TestLoadPendingCountedFromRecords(t *testing.T) {
	m := testenv.MinIO(t)
	cfg := minioConfig(m, m.CreateBucket(t, "pending"))
	s := open(t, cfg)
	applyOK(t, s, flavouredUpdate("team", "b", "dev", "small", 1))

	dying := cfg
	dying.Transport = &failLoadPuts{base: http.DefaultTransport, allow: 1} // the announcement only
	a := flavouredUpdate("team", "a", "dev", "small", 1)
	applyOK(t, open(t, dying), a)
	if p := pendingIn(t, s, "dev"); len(p) != 1 {
		t.Fatalf("the dead writer's announcement: pending %v", p)
	}
	want := map[string]map[string]int{"dev": {"small": 2}}
	sameLoad(t, "index", indexLoad(t, s), want)
	sameLoad(t, "with a change pending", summaryLoad(t, s), want)

	applyOK(t, s, flavouredUpdate("team", "c", "dev", "", 1))
	want = map[string]map[string]int{"dev": {"small": 2, "_": 1}}
	sameLoad(t, "index", indexLoad(t, s), want)
	sameLoad(t, "after another workload's write", summaryLoad(t, s), want)

	applyOK(t, s, statestore.Update{Workload: a.Workload, Message: a.Message})
	want = map[string]map[string]int{"dev": {"small": 1, "_": 1}}
	sameLoad(t, "index", indexLoad(t, s), want)
	sameLoad(t, "after the workload's removal", summaryLoad(t, s), want)
	if p := pendingIn(t, s, "dev"); len(p) != 1 {
		t.Fatalf("only the dead writer's announcement stays: pending %v", p)
	}
}

// TestLoadSummariesMigrate: a store whose destinations have index entries
// and no summaries (written before them) is counted from a listing of
// each destination's entries; the next render that writes makes the
// summaries, and from then on the load is read without listing.
func TestLoadSummariesMigrate(t *testing.T) {
	m := testenv.MinIO(t)
	cfg := minioConfig(m, m.CreateBucket(t, "migrate"))
	var us []statestore.Update
	for i := range 30 {
		us = append(us, flavouredUpdate("team", fmt.Sprintf("s%02d", i), loadDests[i%3], []string{"small", ""}[i%2], 1))
	}
	seeder := open(t, cfg)
	if err := seeder.Seed(testCtx(t), us); err != nil {
		t.Fatal(err)
	}
	sameLoad(t, "summaries Seed made", summaryLoad(t, seeder), indexLoad(t, seeder))
	var summaries []string
	for _, d := range loadDests {
		summaries = append(summaries, bookkeeping.LedgerPath(d))
	}
	if err := seeder.remove(testCtx(t), summaries); err != nil { // a store from before summaries
		t.Fatal(err)
	}
	cnt := &listings{counter: newCounter()}
	counted := cfg
	counted.Transport = cnt
	s := open(t, counted)
	want := indexLoad(t, s)
	cnt.take()
	cnt.prefixes()
	sameLoad(t, "no summaries", summaryLoad(t, s), want)
	if n, _ := cnt.take(); n["LIST"] != 2*len(loadDests) {
		t.Fatalf("counting without summaries: requests %v, want two listings per destination (its changes, its entries)", n)
	}
	cnt.prefixes()
	applyOK(t, s, flavouredUpdate("team", "new", "dev", "small", 1))
	want["dev"]["small"]++
	sameLoad(t, "index", indexLoad(t, s), want)
	cnt.take()
	cnt.prefixes()
	sameLoad(t, "summaries made by the write", summaryLoad(t, open(t, counted)), want)
	if n, _ := cnt.take(); n["LIST"] != len(loadDests) || n["GET"] != len(loadDests) {
		t.Fatalf("counting from summaries: requests %v, want one listing of its changes and one GET per destination", n)
	}
	for _, l := range cnt.prefixes() {
		if prefix, delim, _ := strings.Cut(l, "|"); delim != "/" || !strings.HasPrefix(prefix, testPath+"/"+bookkeeping.LoadDir+"/") {
			t.Errorf("counting from summaries listed %q", l)
		}
	}
}

// A batch (ApplyAll, as render drain writes one) that moves 24 resources
// from one destination to two others announces its changes in each load
// summary once before its writes and settles them once after: two change
// objects beside each of the three summaries (and no write of their
// bases), not two per resource; the writes land side by side, the load
// read from the summaries equals the index, and nothing is left pending.
func TestBatchAnnouncesOnce(t *testing.T) {
	m := testenv.MinIO(t)
	cfg := minioConfig(m, m.CreateBucket(t, "batchload"))
	s := open(t, cfg)
	var moves []statestore.Update
	for i := range 24 {
		u := flavouredUpdate("team", fmt.Sprintf("r%02d", i), "dev", "", 1)
		applyOK(t, s, u)
		recs, err := open(t, cfg).Snapshot(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		data, err := recs.ReadFile(statestore.RecordPath(u.Workload))
		if err != nil {
			t.Fatal(err)
		}
		basis, err := statestore.DecodeRecord(statestore.RecordPath(u.Workload), data)
		if err != nil {
			t.Fatal(err)
		}
		mv := flavouredUpdate("team", fmt.Sprintf("r%02d", i), loadDests[1+i%2], "", 1)
		mv.Basis = &statestore.Basis{Record: &basis}
		moves = append(moves, mv)
	}
	cnt := newCounter()
	wcfg := cfg
	wcfg.Transport = cnt
	w := open(t, wcfg)
	view, err := w.Snapshot(testCtx(t)) // a drain's view
	if err != nil {
		t.Fatal(err)
	}
	for i := range moves {
		moves[i].View = view
	}
	res, err := w.ApplyAll(testCtx(t), moves)
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != len(moves) {
		t.Errorf("%d attempts for %d moves: some lost a race", res.Attempts, len(moves))
	}
	_, puts := cnt.take()
	summaries := map[string]int{}
	for _, p := range puts {
		if strings.HasPrefix(p, bookkeeping.LoadDir+"/") {
			summaries[summaryOf(p)]++
		}
	}
	// Each destination: its pending object, then its settled one; no
	// write of a summary's base.
	if want := map[string]int{"dev changes": 2, "dest-1 changes": 2, "dest-2 changes": 2}; !maps.Equal(summaries, want) {
		t.Errorf("load summary writes %v, want %v", summaries, want)
	}
	s = open(t, cfg)
	want := indexLoad(t, s)
	if len(want["dev"]) > 0 || want["dest-1"]["_"] != 12 || want["dest-2"]["_"] != 12 {
		t.Fatalf("after the moves the index holds %v", want)
	}
	sameLoad(t, "after the batch", summaryLoad(t, s), want)
	for _, d := range loadDests {
		if p := pendingIn(t, s, d); len(p) > 0 {
			t.Errorf("summary of %s: changes left pending: %v", d, p)
		}
	}
}

// TestLoadSummaryOfAnOlderRender: a summary an older render wrote (format
// 1: the entries, and the changes under way in the summary itself; here
// one of a writer that committed and died before settling) is read right
// beside this render's change objects, and the first fold rewrites it in
// this render's format, keeping the older writer's change as under way.
func TestLoadSummaryOfAnOlderRender(t *testing.T) {
	m := testenv.MinIO(t)
	cfg := minioConfig(m, m.CreateBucket(t, "older"))
	s := open(t, cfg)
	a, old := flavouredUpdate("team", "a", "dev", "small", 1), flavouredUpdate("team", "old", "dev", "large", 1)
	applyOK(t, s, a)
	applyOK(t, s, old)
	recA, err := s.ledgers().Storage.CurrentRecord(testCtx(t), a.Workload)
	if err != nil {
		t.Fatal(err)
	}
	recOld, err := s.ledgers().Storage.CurrentRecord(testCtx(t), old.Workload)
	if err != nil {
		t.Fatal(err)
	}
	// What an older render left: a's entry, old's change pending.
	legacy := fmt.Sprintf(`{"format":1,"entries":%s,"pending":{"0123":%s}}`,
		mustJSON(t, bookkeeping.ResourceEntries(recA)["dev"]), mustJSON(t, bookkeeping.LedgerChanges(old.Workload, nil, recOld, nil)["dev"]))
	objs := listAll(t, s, bookkeeping.LoadDir)
	var gone []string
	for p := range objs {
		gone = append(gone, p)
	}
	if err := s.remove(testCtx(t), gone); err != nil {
		t.Fatal(err)
	}
	if _, err := s.put(testCtx(t), bookkeeping.LedgerPath("dev"), []byte(legacy), cond{}); err != nil {
		t.Fatal(err)
	}
	sameLoad(t, "an older render's summary", summaryLoad(t, s), indexLoad(t, s))
	applyOK(t, s, flavouredUpdate("team", "a", "dev", "", 2))
	applyOK(t, s, flavouredUpdate("team", "b", "dev", "small", 1))
	sameLoad(t, "beside change objects", summaryLoad(t, s), indexLoad(t, s))
	if ok, err := s.ledgers().Fold(testCtx(t), "dev"); err != nil || !ok {
		t.Fatalf("fold: %v, %v", ok, err)
	}
	sameLoad(t, "folded", summaryLoad(t, s), indexLoad(t, s))
	base, _, err := s.ledgers().Read(testCtx(t), "dev")
	if err != nil || base.Format != 2 || len(base.Pending["0123"]) == 0 {
		t.Fatalf("folded base %+v (%v): want format 2, the older render's change kept", base, err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
