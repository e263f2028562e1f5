package s3store

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/planner"
	"github.com/render-dev/render/statestore/wait"
)

// recordHold holds a write's listings of the records folder until release
// is closed (closing held as it starts to hold the first), and closes
// listed once a listing of folder dir (relative to the store's path) was
// answered.
type recordHold struct {
	base    http.RoundTripper
	dir     string
	hold    sync.Once
	held    chan struct{}
	release chan struct{}
	answer  sync.Once
	listed  chan struct{}
}

func (h *recordHold) RoundTrip(r *http.Request) (*http.Response, error) {
	prefix := r.URL.Query().Get("prefix")
	if r.Method == http.MethodGet && strings.HasPrefix(prefix, testPath+"/"+statestore.RecordsDir+"/") {
		h.hold.Do(func() { close(h.held) })
		select {
		case <-h.release:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
	resp, err := h.base.RoundTrip(r)
	if err == nil && r.Method == http.MethodGet && prefix == testPath+"/"+h.dir {
		h.answer.Do(func() { close(h.listed) })
	}
	return resp, err
}

// noTombstone refuses every PUT of a tombstone (a removal's commit) as a
// server that cannot be reached would; everything else goes through.
type noTombstone struct{ base http.RoundTripper }

func (n noTombstone) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/"+statestore.RecordsDir+"/") && r.Body != nil {
		data, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return nil, err
		}
		if bytes.Contains(data, []byte(tombstonePrefix)) {
			return nil, &netError{syscall.ECONNREFUSED}
		}
		r.Body = io.NopCloser(bytes.NewReader(data))
	}
	return n.base.RoundTrip(r)
}

// A write plans on listings made after it read its workload's record,
// never before: a listing made before may show files that another write
// of the workload deleted before the record was read. Here a removal of
// w/x names its intent, deletes a.yaml and b.yaml, fails to commit (its
// tombstone refused until its retry deadline) and lets go of its lease;
// all of it between a render's listing of d/w/ and its listing of the
// record. Before the fix the render's listings ran side by side: it saw
// a.yaml and b.yaml as they were before the removal and the record the
// removal let go of, which owns them, so it uploaded only c.yaml and
// committed a record that listed two files the store did not hold. That
// is what the simulated campaign's s3 seed 15 reported (w1's record,
// written by writer 7's configure, listed its aggregate part, files and
// placement entries, while writer 4's removal of w1 failed), and its
// replays no longer showed which listing came first. Now the render
// lists its record first and d/w/ after it. (The wait for d/w/'s listing
// ends after 3 s: with the fix it comes after the held one.)
func TestWritePlansOnListingsAfterItsRecord(t *testing.T) {
	t.Run("fresh", func(t *testing.T) { testListingsAfterRecord(t, "") })
	// The same through a render's view: its Snapshot, read with the
	// engine's hint for a promise (the promise's records folder listed
	// whole, beside the files), which the write's first attempt plans on.
	// Before the fix the view listed the records folder and d/w/ side by
	// side.
	t.Run("view", func(t *testing.T) { testListingsAfterRecord(t, "hint") })
	// And through a view that read the files and never the record: the
	// write would list the record after them. It lists afresh.
	t.Run("view without the record", func(t *testing.T) { testListingsAfterRecord(t, "files") })
}

// testListingsAfterRecord races the render, after a view read with the
// engine's hint ("hint"), or one that read d/w/a.yaml alone ("files"), or
// none ("").
func testListingsAfterRecord(t *testing.T, view string) {
	m := testenv.MinIO(t)
	cfg := minioConfig(m, m.CreateBucket(t, "order"))
	const key = "w/x"
	applyOK(t, open(t, cfg), filesUpdate(key, map[string]string{"d/w/a.yaml": "0\n", "d/w/b.yaml": "0\n"}))

	hold := &recordHold{base: http.DefaultTransport, dir: "d/w/", held: make(chan struct{}), release: make(chan struct{}), listed: make(chan struct{})}
	rcfg := cfg
	rcfg.Transport = hold
	want := map[string]string{"d/w/a.yaml": "0\n", "d/w/b.yaml": "0\n", "d/w/c.yaml": "B\n"}
	rendered := make(chan error, 1)
	go func() {
		s, u := open(t, rcfg), filesUpdate(key, want)
		if view != "" {
			snap, err := s.Snapshot(testCtx(t))
			if err != nil {
				rendered <- err
				return
			}
			if view == "hint" {
				statestore.Prefetch(snap, planner.UpdateHint(u).Merge(statestore.Hint{Dirs: []string{statestore.RecordsDir + "/w"}}))
			} else if _, err := snap.ReadFile("d/w/a.yaml"); err != nil {
				rendered <- err
				return
			}
			u.View = snap
		}
		_, err := s.Apply(testCtx(t), u)
		rendered <- err
	}()
	waitFor(t, hold.held, "the render's listing of the record")
	// Before the fix the render lists d/w/ meanwhile; with it, not before
	// its record (this wait then ends after 3 s).
	select {
	case <-hold.listed:
	case <-time.After(3 * time.Second):
	}

	acfg := cfg
	acfg.Transport = noTombstone{base: http.DefaultTransport}
	ctx := wait.WithRetryDeadline(testCtx(t), 4*time.Second)
	if _, err := open(t, acfg).Apply(ctx, statestore.Update{Workload: key, Destinations: []string{"d"}}); err == nil {
		t.Fatal("the removal committed: nothing to test")
	}
	if got := contents(t, open(t, cfg)); len(got) != 0 {
		t.Fatalf("the removal left %v: nothing to test", got)
	}
	if data, err := getKey(t, m.Client(t), cfg.Bucket, testPath+"/"+statestore.RecordPath(key)); err != nil ||
		len(storedPending(data)) == 0 || storedLease(data).Writer != "" {
		t.Fatalf("the removal did not leave its intent let go of (%v): nothing to test\n%s", err, data)
	}
	close(hold.release)
	if err := waitFor(t, rendered, "the render"); err != nil {
		t.Fatalf("the render did not land: %v", err)
	}

	s := open(t, cfg)
	recs, err := s.Records(testCtx(t))
	if err != nil || len(recs) != 1 {
		t.Fatalf("records %v, %v", recs, err)
	}
	got := contents(t, s)
	for _, f := range recs[0].Files {
		if _, ok := got[f]; !ok && !strings.HasPrefix(f, ".render/") {
			t.Errorf("the record lists %s, which the store does not hold (it holds %v)", f, got)
		}
	}
	for p, data := range want {
		if got[p] != data {
			t.Errorf("%s holds %q, want %q (the render landed)", p, got[p], data)
		}
	}
	checkMarker(t, m, cfg.Bucket, "d")
}
