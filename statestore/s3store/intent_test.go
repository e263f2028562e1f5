package s3store

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
	"github.com/render-dev/render/statestore/wait"
)

// holdPut holds the first PUT whose path ends in suffix until release is
// closed, and closes held when it starts holding it.
type holdPut struct {
	base    http.RoundTripper
	suffix  string
	once    sync.Once
	held    chan struct{}
	release chan struct{}
}

func (h *holdPut) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, h.suffix) {
		first := false
		h.once.Do(func() { first = true })
		if first {
			close(h.held)
			select {
			case <-h.release:
			case <-r.Context().Done():
				return nil, r.Context().Err()
			}
		}
	}
	return h.base.RoundTrip(r)
}

// A write of a workload never writes over the intent of another write of
// the same workload that may still be under way: that write's uploads and
// deletes (S3 has no conditional DELETE) would land after the commit
// planned on its intent. Here a drain moves w/a's file from d1 to d2 and is
// held after naming its intent, before its upload; a render of w/a (on d1,
// where the record places it, with new bytes) runs meanwhile. Before the
// fix the render committed on the drain's intent; the drain then uploaded
// d2's copy and deleted d1's file (the render's), lost its commit and gave
// up as stale: the render's record listed a file the store did not hold,
// and d2's copy belonged to no workload (the simulated campaign's s3 seed
// 1085). Now the render waits for the drain's write to end, then plans on
// what it committed.
func TestWriteWaitsForAnotherWritesIntent(t *testing.T) {
	m := testenv.MinIO(t)
	cfg := minioConfig(m, m.CreateBucket(t, "intent"))
	const key = "resource/team/db/w7/configure"
	rec := func(dest string) *statestore.Record {
		return &statestore.Record{Type: "resource", Promise: "db", Namespace: "team", Name: "w7", Pipeline: "configure",
			Placements: []statestore.Placement{{Group: "g", Destinations: []string{dest}}}}
	}
	applyOK(t, open(t, cfg), statestore.Update{Workload: key, Record: rec("d1"), Destinations: []string{"d1"},
		Files: map[string][]byte{"d1/w7/b.yaml": []byte("old\n")}})
	recs, err := open(t, cfg).Records(testCtx(t))
	if err != nil || len(recs) != 1 {
		t.Fatalf("records %v, %v", recs, err)
	}
	basis := recs[0]

	hold := &holdPut{base: http.DefaultTransport, suffix: "/d2/w7/b.yaml", held: make(chan struct{}), release: make(chan struct{})}
	dcfg := cfg
	dcfg.Transport = hold
	drained := make(chan error, 1)
	go func() {
		_, err := open(t, dcfg).Apply(testCtx(t), statestore.Update{Workload: key, Record: rec("d2"), Destinations: []string{"d2"},
			Files: map[string][]byte{"d2/w7/b.yaml": []byte("old\n")},
			Basis: &statestore.Basis{Record: &basis, Files: map[string][]byte{"d1/w7/b.yaml": []byte("old\n")}}})
		drained <- err
	}()
	waitFor(t, hold.held, "the drain's upload of d2/w7/b.yaml")

	waiting := make(chan struct{})
	var once sync.Once
	rcfg := cfg
	rcfg.Debug = func(msg string, args ...any) {
		if strings.Contains(msg, "another write of the workload") {
			once.Do(func() { close(waiting) })
		}
	}
	rendered := make(chan error, 1)
	go func() {
		_, err := open(t, rcfg).Apply(testCtx(t), statestore.Update{Workload: key, Record: rec("d1"), Destinations: []string{"d1"},
			Files: map[string][]byte{"d1/w7/b.yaml": []byte("new\n")}, Basis: &statestore.Basis{Record: &basis}})
		rendered <- err
	}()
	var renderErr error
	renderDone := false
	select {
	case <-waiting:
	case renderErr = <-rendered:
		renderDone = true
	case <-testCtx(t).Done():
		t.Fatal("the render neither ended nor waited")
	}
	close(hold.release)
	drainErr := waitFor(t, drained, "the drain")
	if !renderDone {
		renderErr = waitFor(t, rendered, "the render")
	}

	// Whatever each writer returned, the record and the files agree: every
	// file the record lists is there, and every file is the record's.
	s := open(t, cfg)
	recs, err = s.Records(testCtx(t))
	if err != nil || len(recs) != 1 {
		t.Fatalf("records %v, %v", recs, err)
	}
	got := contents(t, s)
	var files []string
	for p := range got {
		files = append(files, p)
	}
	slices.Sort(files)
	var listed []string
	for _, f := range recs[0].Files {
		if !strings.HasPrefix(f, ".render/") {
			listed = append(listed, f)
		}
	}
	if !slices.Equal(files, listed) {
		t.Fatalf("the record lists %v, the store holds %v (drain: %v; render: %v)", listed, files, drainErr, renderErr)
	}
	// And each writer that returned success is what the store holds; one
	// that did not was refused as stale.
	for _, w := range []struct {
		name, file, data string
		err              error
	}{{"drain", "d2/w7/b.yaml", "old\n", drainErr}, {"render", "d1/w7/b.yaml", "new\n", renderErr}} {
		switch {
		case w.err == nil && got[w.file] != w.data:
			t.Errorf("the %s landed, but the store holds %v", w.name, got)
		case w.err != nil && !errors.Is(w.err, statestore.ErrStale):
			t.Errorf("the %s failed with %v, want success or a stale update", w.name, w.err)
		}
	}
	if drainErr != nil && renderErr != nil {
		t.Errorf("neither writer landed: drain %v, render %v", drainErr, renderErr)
	}
}

// An intent's lease is stored beside its pending paths and read back; a
// lease holds for writes other than its own until its end and leaseSkew
// after, and a released intent (the zero lease) holds nothing.
func TestIntentLease(t *testing.T) {
	until := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	sealed := sealRecord((&statestore.Record{Workload: "w/a", Type: "promise", Promise: "p", Pipeline: "x"}).Encode(), []string{"d"})
	before := bytes.Clone(sealed)
	stored := withPending(sealed, []string{"d/w/x.yaml"}, lease{Writer: "a", Until: until})
	if got := storedLease(stored); got.Writer != "a" || !got.Until.Equal(until) {
		t.Fatalf("stored lease %+v, want writer a until %v", got, until)
	}
	if got := storedPending(stored); !slices.Equal(got, []string{"d/w/x.yaml"}) {
		t.Fatalf("pending %v", got)
	}
	if _, err := statestore.DecodeRecord("r.json", stored); err != nil {
		t.Fatalf("the intent is no record: %v", err)
	}
	l := storedLease(stored)
	for _, c := range []struct {
		id   string
		at   time.Time
		want bool
	}{
		{"b", until.Add(-time.Minute), true},
		{"b", until.Add(leaseSkew - time.Second), true},
		{"b", until.Add(leaseSkew), false},
		{"a", until.Add(-time.Minute), false}, // its own
	} {
		if got := l.heldFor(c.id, c.at); got != c.want {
			t.Errorf("heldFor(%s, %v) = %v, want %v", c.id, c.at, got, c.want)
		}
	}
	released := withPending(sealed, []string{"d/w/x.yaml"}, lease{})
	if l := storedLease(released); l.heldFor("b", until.Add(-time.Minute)) {
		t.Errorf("a released intent holds: %+v", l)
	}
	if !bytes.Equal(sealed, before) {
		t.Fatalf("withPending changed the sealed record it was given:\n%s\nwas\n%s", sealed, before)
	}
}

// lostClaim forwards the first PUT of a claim and answers it with a broken
// connection (the claim landed, its answer was lost), lets the store's own
// retry of it through (refused: the claim is there), then refuses every
// request but PUTs of records: the write gives up at its deadline.
type lostClaim struct {
	base http.RoundTripper
	mu   sync.Mutex
	puts int
}

func (l *lostClaim) RoundTrip(r *http.Request) (*http.Response, error) {
	claim := r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/"+bookkeeping.ClaimsDir+"/")
	l.mu.Lock()
	n := l.puts
	if claim {
		l.puts++
	}
	l.mu.Unlock()
	switch {
	case claim && n == 0:
		resp, err := l.base.RoundTrip(r)
		if err == nil {
			resp.Body.Close()
		}
		return nil, &netError{syscall.ECONNRESET}
	case claim && n == 1:
		return l.base.RoundTrip(r)
	case n >= 2 || claim:
	case n == 0:
		return l.base.RoundTrip(r)
	}
	if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/"+statestore.RecordsDir+"/") {
		return l.base.RoundTrip(r)
	}
	return nil, &netError{syscall.ECONNREFUSED}
}

// A claim whose upload landed with its answer lost, and which the store's
// retry then found there (its precondition refused), may be this write's:
// the write that gives up afterwards keeps its intent naming it, so the
// claim stays the workload's (for its next write to settle) rather than
// nobody's. Before the fix the write took its intent back as if it had
// uploaded nothing, and the claim belonged to no workload (the simulated
// campaign's s3 seed 1085, writer 33).
func TestLostClaimStaysOwned(t *testing.T) {
	m := testenv.MinIO(t)
	cfg := minioConfig(m, m.CreateBucket(t, "lostclaim"))
	u := statestore.Update{Workload: "resource/team/db/w4/configure", Destinations: []string{"d1"},
		Record: &statestore.Record{Type: "resource", Promise: "db", Namespace: "team", Name: "w4", Pipeline: "configure",
			Placements: []statestore.Placement{{Group: "g", Destinations: []string{"d1"}}},
			Objects: []statestore.Object{{APIVersion: "v1", Kind: "ConfigMap", Namespace: "team", Name: "w4-a", Section: "resources",
				File: "resources/team/db/w4/configure/g/a.yaml", Destination: "d1", Source: "a.yaml"}}},
		Files: map[string][]byte{"d1/resources/team/db/w4/configure/g/a.yaml": []byte("kind: ConfigMap\n")}}
	applyOK(t, open(t, cfg), statestore.Update{Workload: u.Workload, Destinations: []string{"d1"}, Record: &statestore.Record{Type: "resource",
		Promise: "db", Namespace: "team", Name: "w4", Pipeline: "configure", Placements: u.Record.Placements},
		Files: map[string][]byte{"d1/resources/team/db/w4/configure/g/old.yaml": []byte("old\n")}})

	wcfg := cfg
	lc := &lostClaim{base: http.DefaultTransport}
	wcfg.Transport = lc
	ctx := wait.WithRetryDeadline(testCtx(t), 2*time.Second)
	if _, err := open(t, wcfg).Apply(ctx, u); err == nil {
		t.Fatal("the write landed: nothing to test")
	}
	if lc.puts < 2 {
		t.Fatalf("the claim was put %d times, want 2 (lost, then refused)", lc.puts)
	}
	all := storeFiles(t, m.Client(t), cfg.Bucket)
	recs, err := open(t, cfg).Records(testCtx(t))
	if err != nil || len(recs) != 1 {
		t.Fatalf("records %v, %v", recs, err)
	}
	for _, f := range all {
		if strings.HasPrefix(f, bookkeeping.ClaimsDir+"/") && !slices.Contains(recs[0].Files, f) {
			t.Errorf("claim %s belongs to no workload (the record lists %v)", f, recs[0].Files)
		}
	}
}

// fastClock is a wait.DeadlineClock that runs k times faster than
// the machine's, so that a test sees leases run out (and waits for them)
// in a fraction of their real length.
type fastClock struct {
	start time.Time
	k     time.Duration
}

func newFastClock(k int) *fastClock { return &fastClock{start: time.Now(), k: time.Duration(k)} }

func (c *fastClock) Now() time.Time { return c.start.Add(time.Since(c.start) * c.k) }

func (c *fastClock) Sleep(ctx context.Context, d time.Duration) error {
	return wait.RealClock{}.Sleep(ctx, d/c.k)
}

func (c *fastClock) WithDeadline(ctx context.Context, at time.Time) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, at.Sub(c.Now())/c.k)
}

// on returns ctx running on c, with a retry deadline of budget on c.
func (c *fastClock) on(ctx context.Context, budget time.Duration) context.Context {
	return wait.WithRetryDeadline(wait.WithClock(ctx, c), budget)
}

// starve holds the first upload whose path ends in suffix, as a writer
// starved before sending it would be, for up to hold of real time or until
// the request's context ends, and then sends it only if its context has
// not ended. It notes when the writer last wrote its record (named or
// renewed its intent: the lease the held request was sent under) before
// the held request, when that ended and whether it was sent, and any
// upload or delete the writer sends after the held request ended by its
// context and before it names an intent again.
type starve struct {
	base   http.RoundTripper
	suffix string
	hold   time.Duration
	clock  *fastClock

	mu         sync.Mutex
	held       bool
	recordAt   time.Time
	leaseFrom  time.Time
	endedAt    time.Time
	sent       bool
	lapsed     bool
	afterLapse []string
}

func (s *starve) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx := r.Context()
	record := strings.Contains(r.URL.Path, "/"+statestore.RecordsDir+"/")
	write := r.Method == http.MethodPut || r.Method == http.MethodDelete || r.Method == http.MethodPost && r.URL.Query().Has("delete")
	s.mu.Lock()
	hold := !s.held && r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, s.suffix)
	s.held = s.held || hold
	switch {
	case ctx.Err() != nil:
		s.mu.Unlock()
		return nil, ctx.Err() // never sent: as the standard transport does
	case write && record:
		s.recordAt, s.lapsed = s.clock.Now(), false
	case write && s.lapsed:
		s.afterLapse = append(s.afterLapse, r.Method+" "+r.URL.Path)
	}
	if hold {
		s.leaseFrom = s.recordAt
	}
	s.mu.Unlock()
	if hold {
		select {
		case <-time.After(s.hold):
		case <-ctx.Done():
		}
		s.mu.Lock()
		s.endedAt, s.sent, s.lapsed = s.clock.Now(), ctx.Err() == nil, ctx.Err() != nil
		s.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return s.base.RoundTrip(r)
}

// A writer starved past its lease (here before its upload of x, for far
// longer than the lease) sends nothing more on its intent: the held upload
// is cut off when the lease has leaseMargin left, and the writer uploads
// and deletes nothing more until it has named its intent again, under a
// new lease. Then it plans again and lands. Before the lease, the upload
// was sent whenever the writer woke, however long after its intent (the
// simulated campaign's s3 seed 1085).
func TestLapsedLeaseSendsNothing(t *testing.T) {
	m := testenv.MinIO(t)
	cfg := minioConfig(m, m.CreateBucket(t, "lapse"))
	upd := func(files map[string]string) statestore.Update { return filesUpdate("w/lapse", files) }
	applyOK(t, open(t, cfg), upd(map[string]string{"d/w/x.yaml": "0\n", "d/w/z.yaml": "0\n"}))

	clk := newFastClock(5)
	st := &starve{base: http.DefaultTransport, suffix: "/d/w/x.yaml", hold: 20 * time.Second, clock: clk}
	acfg := cfg
	acfg.Transport = st
	want := map[string]string{"d/w/x.yaml": "A\n", "d/w/y.yaml": "A\n"}
	res, err := open(t, acfg).Apply(clk.on(testCtx(t), 10*time.Minute), upd(want))
	if err != nil {
		t.Fatalf("the write did not land: %v", err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.sent {
		t.Fatalf("the upload held for %v (%v on the write's clock) was sent when the writer woke, %v after its intent",
			st.hold, st.hold*clk.k, st.endedAt.Sub(st.leaseFrom))
	}
	// Cut off when the lease had leaseMargin left (give or take the time
	// this goroutine takes to see it on a loaded machine).
	if held := st.endedAt.Sub(st.leaseFrom); held > leaseTerm-leaseMargin+5*time.Second {
		t.Errorf("the held upload ended %v after the intent was written, past its lease (%v, the writer stops %v before its end)", held, leaseTerm, leaseMargin)
	}
	if len(st.afterLapse) > 0 {
		t.Errorf("after its lease ran out the writer sent %v before naming its intent again", st.afterLapse)
	}
	if res.Attempts < 2 {
		t.Errorf("the write landed in %d attempt(s), want it to plan again after its lease ran out", res.Attempts)
	}
	s := open(t, cfg)
	if got := contents(t, s); !maps.Equal(got, want) {
		t.Fatalf("the store holds %v, want %v", got, want)
	}
	checkMarker(t, m, cfg.Bucket, "d")
}

// A write whose intent another write named and never let go of (a render
// killed mid-write) waits for that write's lease, and no longer: at most
// leaseTerm + leaseSkew after the dead write's last renewal, not its retry
// deadline (a render's next run after a SIGKILL has its own 2-minute
// deadline: internal/testinfra/faulttest's TestKillS3). Then it takes the intent
// over and lands, deleting what the dead write had named and it does not
// want.
func TestDeadWritersLeaseHoldsUpOneLease(t *testing.T) {
	m := testenv.MinIO(t)
	cfg := minioConfig(m, m.CreateBucket(t, "dead"))
	upd := func(files map[string]string) statestore.Update { return filesUpdate("w/dead", files) }
	applyOK(t, open(t, cfg), upd(map[string]string{"d/w/a.yaml": "0\n"}))

	// The dead write: its intent, naming b.yaml under a fresh lease, and
	// its upload of b.yaml; then nothing.
	clk := newFastClock(5)
	c := m.Client(t)
	recKey := testPath + "/" + statestore.RecordPath("w/dead")
	sealed, err := getKey(t, c, cfg.Bucket, recKey)
	if err != nil {
		t.Fatal(err)
	}
	died := clk.Now()
	intent := withPending(sealed, []string{"d/w/b.yaml"}, lease{Writer: "dead", Until: died.Add(leaseTerm)})
	for key, data := range map[string][]byte{recKey: intent, testPath + "/d/w/b.yaml": []byte("dead\n")} {
		if _, err := c.PutObject(testCtx(t), cfg.Bucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	want := map[string]string{"d/w/a.yaml": "B\n"}
	if _, err := open(t, cfg).Apply(clk.on(testCtx(t), wait.DefaultRetryDeadline), upd(want)); err != nil {
		t.Fatalf("the next write did not land: %v", err)
	}
	took := clk.Now().Sub(died)
	t.Logf("the next write landed %v after the dead write's intent (lease %v, skew %v)", took, leaseTerm, leaseSkew)
	if took < leaseTerm+leaseSkew {
		t.Errorf("the next write landed %v after the dead write's intent, within its lease (%v, and %v for skew)", took, leaseTerm, leaseSkew)
	}
	// Give the write itself a minute of the fast clock (12 s of the
	// machine's, for a loaded one): far below the dead write's retry
	// deadline, which a lease as long as that would have held it up for.
	if limit := leaseTerm + leaseSkew + time.Minute; took > limit {
		t.Errorf("the next write landed %v after the dead write's intent, want at most %v (its lease, skew, and time for the write)", took, limit)
	}
	s := open(t, cfg)
	if got := contents(t, s); !maps.Equal(got, want) {
		t.Fatalf("the store holds %v, want %v", got, want)
	}
	if data, err := getKey(t, c, cfg.Bucket, recKey); err != nil || len(storedPending(data)) > 0 || storedLease(data).Writer != "" {
		t.Fatalf("the record still names an intent or a lease (%v):\n%s", err, data)
	}
	checkMarker(t, m, cfg.Bucket, "d")
}

// filesUpdate is workload's update to destination d writing files (path:
// content), with an empty record.
func filesUpdate(workload string, files map[string]string) statestore.Update {
	u := statestore.Update{Workload: workload, Files: map[string][]byte{}, Record: &statestore.Record{}, Destinations: []string{"d"}}
	for p, c := range files {
		u.Files[p] = []byte(c)
	}
	return u
}

// A write that waits for another write's lease on its workload's intent
// waits while that lease is renewed, past its own retry budget: a lease
// renewed is a writer alive and working (the store is busy, not down, and
// each renewal moves the waiter's deadline on: wait.Progress). It stops
// waiting once the lease is let go of.
func TestRenewedLeaseIsProgress(t *testing.T) {
	m := testenv.MinIO(t)
	s := open(t, minioConfig(m, m.CreateBucket(t, "renewed")))
	const recPath = ".render/records/w7.json"
	sealed := sealRecord((&statestore.Record{Workload: "w/7", Type: "promise", Promise: "p", Pipeline: "x"}).Encode(), []string{"d"})
	pending := []string{"d/w7/a.yaml"}
	other := lease{Writer: "other", Until: time.Now().Add(leaseTerm)}
	if _, err := s.put(testCtx(t), recPath, withPending(sealed, pending, other), cond{}); err != nil {
		t.Fatal(err)
	}
	var released atomic.Bool
	done := make(chan struct{})
	defer func() { <-done }()
	go func() {
		defer close(done)
		// The other write renews its lease every second for five seconds,
		// then lets go of it.
		for range 5 {
			time.Sleep(time.Second)
			l := lease{Writer: "other", Until: time.Now().Add(leaseTerm)}
			if _, err := s.put(context.Background(), recPath, withPending(sealed, pending, l), cond{unconditional: true}); err != nil {
				t.Errorf("renewing: %v", err)
			}
		}
		released.Store(true)
		if _, err := s.put(context.Background(), recPath, withPending(sealed, pending, lease{}), cond{unconditional: true}); err != nil {
			t.Errorf("letting go: %v", err)
		}
	}()
	ctx := wait.WithRetryDeadline(testCtx(t), 3*time.Second)
	if err := s.awaitLease(ctx, recPath, "me", other); err != nil {
		t.Fatalf("awaitLease: %v", err)
	}
	if !released.Load() {
		t.Fatal("the wait for a lease that was being renewed ended at the waiter's 3s budget, before the lease was let go of")
	}
}
