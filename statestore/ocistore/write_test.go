package ocistore_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/ocistore"
	"github.com/render-dev/render/statestore/planner"
)

// interposer passes requests to the registry and notes each one answered
// (but the authentication challenges). Those
// refuse picks are answered 400 without reaching it; once the first
// request after picks has been answered 200 OK, run is called (once)
// before the answer goes back, so another writer can move first.
type interposer struct {
	refuse func(*http.Request) bool
	after  func(*http.Request) bool
	run    func()

	mu   sync.Mutex
	ran  bool
	seen []string
	// challenges counts the answers 401 (authentication challenges).
	challenges int
}

func (ip *interposer) RoundTrip(req *http.Request) (*http.Response, error) {
	if ip.refuse != nil && ip.refuse(req) {
		return &http.Response{StatusCode: http.StatusBadRequest, Status: "400 Bad Request", Header: http.Header{},
			Body: io.NopCloser(strings.NewReader("{}")), Request: req}, nil
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err == nil {
		ip.mu.Lock()
		if resp.StatusCode == http.StatusUnauthorized {
			ip.challenges++
		} else {
			ip.seen = append(ip.seen, req.Method+" "+req.URL.Path)
		}
		ip.mu.Unlock()
	}
	if err == nil && resp.StatusCode == http.StatusOK && ip.after != nil && ip.after(req) {
		ip.mu.Lock()
		first := !ip.ran
		ip.ran = true
		ip.mu.Unlock()
		if first {
			ip.run()
		}
	}
	return resp, err
}

// count returns how many requests were method to a path holding part.
func (ip *interposer) count(method, part string) int {
	ip.mu.Lock()
	defer ip.mu.Unlock()
	n := 0
	for _, s := range ip.seen {
		if strings.HasPrefix(s, method+" ") && strings.Contains(s, part) {
			n++
		}
	}
	return n
}

func isStateRead(req *http.Request) bool {
	return req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/manifests/"+ocistore.StateTag)
}

func fileUpdate(w string, files map[string]string) statestore.Update {
	u := statestore.Update{Workload: w, Destinations: []string{"d1"}, Files: map[string][]byte{},
		Record: &statestore.Record{Type: "promise", Promise: "p", Pipeline: w}}
	for p, c := range files {
		u.Files[p] = []byte(c)
	}
	return u
}

func storeFiles(t *testing.T, s *ocistore.Store) map[string]string {
	t.Helper()
	snap, err := s.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	paths, err := snap.List("d1")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range paths {
		b, err := snap.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[p] = string(b)
	}
	return out
}

// overtaken writes mine through an interposer, on a store holding one
// seed file, while another writer commits theirs between mine's first read
// of the state and its lock. refuse picks what mine's requests the
// registry refuses. It returns mine's result, the interposer, the other
// writer's client and mine's error.
func overtaken(t *testing.T, r *testenv.RegistryServer, mine, theirs statestore.Update, refuse func(*http.Request) bool) (statestore.Result, *interposer, *ocistore.Store, error) {
	t.Helper()
	ctx := context.Background()
	cfg := config(r, repoName("overtaken"))
	other := open(t, cfg)
	if _, err := other.Apply(ctx, fileUpdate("w/seed", map[string]string{"d1/seed.yaml": "seed\n"})); err != nil {
		t.Fatal(err)
	}
	var otherErr error
	ip := &interposer{after: isStateRead, refuse: refuse, run: func() { _, otherErr = other.Apply(ctx, theirs) }}
	cfg.Transport = ip
	res, err := open(t, cfg).Apply(ctx, mine)
	if otherErr != nil {
		t.Fatalf("the other writer: %v", otherErr)
	}
	return res, ip, other, err
}

// A writer whose state moved between its read and its lock plans again
// on the state it reads under the lock, without letting the lock go and
// queueing again: one ticket, the state read twice, planned twice, and
// both writers' files in the store and its artifact.
func TestCommitAfterTheStateMoved(t *testing.T) {
	r := testenv.Registry(t)
	res, ip, other, err := overtaken(t, r, fileUpdate("w/a", map[string]string{"d1/a.yaml": "a\n"}),
		fileUpdate("w/b", map[string]string{"d1/b.yaml": "b\n"}), nil)
	if err != nil || !res.Updated || res.Attempts != 2 {
		t.Fatalf("a write whose state moved before its lock: %+v, %v; want it written on its second plan", res, err)
	}
	if tickets, reads := ip.count(http.MethodPut, "/manifests/lock-t-"), ip.count(http.MethodGet, "/manifests/"+ocistore.StateTag); tickets != 1 || reads != 2 {
		t.Errorf("%d lock tickets and %d reads of the state, want 1 and 2: %v", tickets, reads, ip.seen)
	}
	want := map[string]string{"d1/seed.yaml": "seed\n", "d1/a.yaml": "a\n", "d1/b.yaml": "b\n"}
	if got := storeFiles(t, other); !reflect.DeepEqual(got, want) {
		t.Fatalf("the store holds %v, want %v", got, want)
	}
	if got := orasPull(t, r, r.Addr()+"/"+other.DestinationRepository("d1")+":latest"); len(got) != 3 {
		t.Fatalf("d1:latest holds %v, want the three files", got)
	}
}

// A write refused when it plans again under the lock (the other writer
// took its file meanwhile) writes nothing, and when its lock cannot be
// released its error says so too.
func TestRefusedUnderTheLockSaysTheLockStays(t *testing.T) {
	r := testenv.Registry(t)
	_, _, other, err := overtaken(t, r, fileUpdate("w/a", map[string]string{"d1/x.yaml": "a\n"}),
		fileUpdate("w/b", map[string]string{"d1/x.yaml": "b\n"}), isTicketDelete)
	var oe *statestore.OwnedError
	if !errors.As(err, &oe) || oe.Owner != "w/b" || !strings.Contains(err.Error(), "release the writers' lock (lock-t-") {
		t.Fatalf("a write refused under a lock that stays: %v; want the OwnedError naming w/b and the lock", err)
	}
	if got := storeFiles(t, other); !reflect.DeepEqual(got, map[string]string{"d1/seed.yaml": "seed\n", "d1/x.yaml": "b\n"}) {
		t.Fatalf("the store holds %v after the refused write", got)
	}
}

// A writer that died between its commit (the state tag) and its
// destinations' tags leaves them behind the state: the next write, even
// one that changes no file, repairs them under the lock, and says it
// wrote.
func TestRepairAfterADeadWriter(t *testing.T) {
	r := testenv.Registry(t)
	ctx := context.Background()
	cfg := config(r, repoName("repair"))
	u := fileUpdate("w/a", map[string]string{"d1/a.yaml": "a\n"})
	dying := cfg
	dying.Transport = &interposer{refuse: func(req *http.Request) bool {
		return req.Method == http.MethodPut && strings.Contains(req.URL.Path, "/"+cfg.Repository+"/d1/manifests/")
	}}
	if _, err := open(t, dying).Apply(ctx, u); err == nil || !strings.Contains(err.Error(), "publish") {
		t.Fatalf("a write whose destination tags were refused: %v", err)
	}
	if tags := r.Tags(t, cfg.Registry+"/"+cfg.Repository+"/d1"); len(tags) != 0 {
		t.Fatalf("d1 has tags %v before the repair", tags)
	}
	s := open(t, cfg)
	res, err := s.Apply(ctx, u)
	if err != nil || !res.Updated || len(res.Added)+len(res.Changed)+len(res.Deleted) != 0 {
		t.Fatalf("the write after a dead writer: %+v, %v; want a repair that changes no file", res, err)
	}
	for _, tag := range []string{"latest", "render-1"} {
		if got := orasPull(t, r, cfg.Registry+"/"+cfg.Repository+"/d1:"+tag); !reflect.DeepEqual(got, map[string]string{"a.yaml": "a\n"}) {
			t.Fatalf("d1:%s after the repair holds %v", tag, got)
		}
	}
	if res, err := s.Apply(ctx, u); err != nil || res.Updated {
		t.Fatalf("a write after the repair: %+v, %v; want nothing to do", res, err)
	}
}

// A render reads the state once: its write's first attempt plans on the
// state the Store's Snapshot read, given as the update's View (or, after
// a write, the state it committed, its Result's View), with no request of
// its own but a HEAD per destination. A state another writer moved
// meanwhile is found under the lock, and the write lands on its second
// plan.
func TestRenderReadsTheStateOnce(t *testing.T) {
	r := testenv.Registry(t)
	ctx := context.Background()
	cfg := config(r, repoName("once"))
	other := open(t, cfg)
	a := fileUpdate("w/a", map[string]string{"d1/a.yaml": "a\n"})
	if _, err := other.Apply(ctx, a); err != nil {
		t.Fatal(err)
	}
	ip := &interposer{}
	mine := cfg
	mine.Transport = ip
	s := open(t, mine)
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	statestore.Prefetch(snap, planner.UpdateHint(a))
	a.View = snap
	if res, err := s.Apply(ctx, a); err != nil || res.Updated {
		t.Fatalf("an unchanged render: %+v, %v", res, err)
	}
	if reads, heads := ip.count(http.MethodGet, "/manifests/"+ocistore.StateTag), ip.count(http.MethodHead, "/d1/manifests/latest"); reads != 1 || heads != 1 || len(ip.seen) != 4 {
		t.Errorf("an unchanged render read the state %d times and HEADed d1 %d times, want once each (and its two layers): %v", reads, heads, ip.seen)
	}
	if ip.challenges != 0 {
		t.Errorf("the registry challenged %d requests: the username and password did not go with the first", ip.challenges)
	}

	// Another writer moves the state; this Store's next write plans on
	// what it saw, loses under the lock, and plans again there.
	if _, err := other.Apply(ctx, fileUpdate("w/b", map[string]string{"d1/b.yaml": "b\n"})); err != nil {
		t.Fatal(err)
	}
	c := fileUpdate("w/c", map[string]string{"d1/c.yaml": "c\n"})
	c.View = snap
	res, err := s.Apply(ctx, c)
	if err != nil || !res.Updated || res.Attempts != 2 {
		t.Fatalf("a write planned on a state another writer moved: %+v, %v; want it written on its second plan", res, err)
	}
	want := map[string]string{"d1/a.yaml": "a\n", "d1/b.yaml": "b\n", "d1/c.yaml": "c\n"}
	if got := storeFiles(t, other); !reflect.DeepEqual(got, want) {
		t.Fatalf("the store holds %v, want %v", got, want)
	}

	// After its commit the Store plans on the state it committed.
	ip.mu.Lock()
	ip.seen = nil
	ip.mu.Unlock()
	c.View = res.View
	if res, err := s.Apply(ctx, c); err != nil || res.Updated {
		t.Fatalf("the same write again: %+v, %v", res, err)
	}
	if reads := ip.count(http.MethodGet, "/manifests/"+ocistore.StateTag); reads != 0 || len(ip.seen) != 1 {
		t.Errorf("a write after this Store's commit read the state %d times: %v; want only the HEAD of d1", reads, ip.seen)
	}
}
