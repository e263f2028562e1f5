package gitstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/gitstore"
)

// holdingProxy stands between one writer and Gitea. It holds the writer's
// first push at its advertisement (so that another writer can move the
// branch first: the writer then hands its update over as a request), then
// holds the writer's first listing of the refs after that push (its first
// poll, so that a leader can carry the request meanwhile), and notes every
// request the writer sends, with what each fetch asked for.
type holdingProxy struct {
	rp *httputil.ReverseProxy

	mu        sync.Mutex
	log       []proxied
	pushHeld  bool
	pushed    bool // the writer's request was pushed
	pollHeld  bool
	atPush    chan struct{}
	letPush   chan struct{}
	atPoll    chan struct{}
	letPoll   chan struct{}
	released  int // len(log) when the poll was let go
	heldIndex int
	// holdPoll is which of the writer's polls after its push is held (the
	// first, unless set). With relist set, every listing of the refs
	// from the held poll on shows the writer's request as the poll before
	// it did, whatever the server holds: a leader's push seen half-way,
	// the branch moved and the request not yet deleted.
	holdPoll int
	polls    int
	relist   bool
	request  []byte // the request's line in the listing before the held one
}

// proxied is one request the writer sent.
type proxied struct {
	kind string // "advertisement (fetch)", "upload-pack", "advertisement (push)", "receive-pack"
	body string // an upload-pack request's pkt-lines
}

func newHoldingProxy(target string) *holdingProxy {
	u, _ := url.Parse(target)
	p := &holdingProxy{
		rp:     httputil.NewSingleHostReverseProxy(u),
		atPush: make(chan struct{}), letPush: make(chan struct{}),
		atPoll: make(chan struct{}), letPoll: make(chan struct{}),
		released: -1, holdPoll: 1,
	}
	p.rp.ModifyResponse = p.listing
	return p
}

// listing notes the writer's request in the listings of the refs before
// the held poll, and shows it again in those from the held poll on
// (relist).
func (p *holdingProxy) listing(resp *http.Response) error {
	r := resp.Request
	if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/info/refs") || r.URL.Query().Get("service") != "git-upload-pack" {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.relist || !p.pushed {
		return nil
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if !p.pollHeld {
		// A pkt-line naming a pending request: four hex digits of length,
		// the hash, a space, the ref.
		for i := 0; i+4 <= len(body); {
			var n int
			if _, err := fmt.Sscanf(string(body[i:i+4]), "%04x", &n); err != nil || i+n > len(body) {
				break
			}
			if line := body[i : i+n]; bytes.Contains(line, []byte(" refs/render/pending/")) {
				p.request = append([]byte(nil), line...)
			}
			i += max(n, 4)
		}
	} else if len(p.request) > 0 && !bytes.Contains(body, p.request[4:]) {
		// Before the closing flush-pkt.
		if end := bytes.LastIndex(body, []byte("0000")); end > 0 {
			body = append(append(append([]byte(nil), body[:end]...), p.request...), body[end:]...)
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return nil
}

func (p *holdingProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var e proxied
	switch {
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/info/refs") && r.URL.Query().Get("service") == "git-upload-pack":
		e.kind = "advertisement (fetch)"
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/info/refs"):
		e.kind = "advertisement (push)"
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-upload-pack"):
		e.kind = "upload-pack"
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		e.body = string(body)
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack"):
		e.kind = "receive-pack"
	default:
		e.kind = r.Method + " " + r.URL.Path
	}
	p.mu.Lock()
	p.log = append(p.log, e)
	var wait chan struct{}
	switch {
	case e.kind == "advertisement (push)" && !p.pushHeld:
		p.pushHeld, wait = true, p.letPush
		close(p.atPush)
	case e.kind == "advertisement (fetch)" && p.pushed && !p.pollHeld:
		if p.polls++; p.polls == p.holdPoll {
			p.pollHeld, wait = true, p.letPoll
			p.heldIndex = len(p.log) - 1
			close(p.atPoll)
		}
	}
	p.mu.Unlock()
	if wait != nil {
		<-wait
	}
	p.rp.ServeHTTP(w, r)
	if e.kind == "receive-pack" {
		p.mu.Lock()
		p.pushed = true
		p.mu.Unlock()
	}
}

// after is what the writer sent from its held poll on.
func (p *holdingProxy) after() []proxied {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]proxied(nil), p.log[p.heldIndex:]...)
}

// scene is one writer behind a holdingProxy, racing writers that go to
// Gitea directly. The writer's first push is held at its advertisement;
// the test moves the branch meanwhile (the writer then hands its update
// over as a request), and the proxy holds one of its polls after that.
type scene struct {
	t       *testing.T
	ctx     context.Context
	p       *holdingProxy
	direct  func() *gitstore.Store // a writer straight to Gitea
	proxied *gitstore.Store        // the writer behind the proxy
	done    chan error             // its Apply's error, once it returns
}

// newScene seeds a new repository with one workload, and puts a proxy,
// set up by configure, in front of it.
func newScene(t *testing.T, name string, configure func(*holdingProxy)) *scene {
	t.Helper()
	return newSceneIn(t, name, configure, true)
}

// newSceneIn is newScene, in a repository that holds a first commit when
// seeded, or is empty.
func newSceneIn(t *testing.T, name string, configure func(*holdingProxy), seeded bool) *scene {
	t.Helper()
	g := testenv.Gitea(t)
	repo := g.CreateRepoInfo(t, name)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	sc := &scene{t: t, ctx: ctx, done: make(chan error, 1),
		direct: func() *gitstore.Store { return giteaStore(t, g, repo.CloneURL, g.AdminUser(), g.AdminToken()) }}
	if seeded {
		sc.land(groupUpdate("w/seed", map[string]string{"d1/seed/a.yaml": "seed\n"}))
	}
	sc.p = newHoldingProxy(g.URL())
	if configure != nil {
		configure(sc.p)
	}
	srv := httptest.NewServer(sc.p)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { // a held request would hold srv.Close up
		for _, ch := range []chan struct{}{sc.p.letPush, sc.p.letPoll} {
			select {
			case <-ch:
			default:
				close(ch)
			}
		}
	})
	u, _ := url.Parse(repo.CloneURL)
	sc.proxied = giteaStore(t, g, srv.URL+u.Path, g.AdminUser(), g.AdminToken())
	return sc
}

// land applies u straight to Gitea.
func (sc *scene) land(u statestore.Update) {
	sc.t.Helper()
	if _, err := sc.direct().Apply(sc.ctx, u); err != nil {
		sc.t.Fatal(err)
	}
}

// start applies u through the proxy, in the background; updated says,
// once done has its error, whether the update landed.
func (sc *scene) start(u statestore.Update) (updated *bool) {
	updated = new(bool)
	go func() {
		res, err := sc.proxied.Apply(sc.ctx, u)
		*updated = res.Updated
		sc.done <- err
	}()
	return updated
}

// wait waits until the proxy holds the writer at ch.
func (sc *scene) wait(ch chan struct{}, what string) {
	sc.t.Helper()
	select {
	case <-ch:
	case err := <-sc.done:
		sc.t.Fatalf("the writer returned (%v) before %s", err, what)
	case <-sc.ctx.Done():
		sc.t.Fatalf("timed out waiting for %s", what)
	}
}

// handOver holds the writer's first push until another writer has moved
// the branch (so the writer hands its update over as a request), then
// waits until the proxy holds the poll it was set to hold.
func (sc *scene) handOver() {
	sc.t.Helper()
	sc.wait(sc.p.atPush, "its first push")
	sc.land(groupUpdate("w/first", map[string]string{"d1/first/a.yaml": "first\n"}))
	close(sc.p.letPush)
	sc.wait(sc.p.atPoll, "its held poll")
}

// finish lets the held poll go and returns the writer's error.
func (sc *scene) finish() error {
	sc.t.Helper()
	close(sc.p.letPoll)
	select {
	case err := <-sc.done:
		return err
	case <-sc.ctx.Done():
		sc.t.Fatal("the writer did not return")
		return nil
	}
}

// holds reports whether the branch holds path with content want.
func (sc *scene) holds(path, want string) bool {
	sc.t.Helper()
	snap, err := sc.direct().Snapshot(sc.ctx)
	if err != nil {
		sc.t.Fatal(err)
	}
	got, err := snap.ReadFile(path)
	return err == nil && string(got) == want
}

// checkAfterLanding checks what the writer sent from its held poll on:
// one listing of the refs and fetches of commits alone (filter tree:0,
// no depth), between minFetches and one; no other fetch, no push.
func (sc *scene) checkAfterLanding(minFetches int) {
	sc.t.Helper()
	sc.checkAfterLandingListed(minFetches, 1)
}

// checkAfterLandingListed is checkAfterLanding with listings of the refs
// the writer may send after the landing.
func (sc *scene) checkAfterLandingListed(minFetches, wantListings int) {
	sc.t.Helper()
	var kinds []string
	listings, fetches := 0, 0
	for _, e := range sc.p.after() {
		kinds = append(kinds, e.kind)
		switch e.kind {
		case "advertisement (fetch)":
			listings++
		case "upload-pack":
			fetches++
			if !strings.Contains(e.body, "filter tree:0") || strings.Contains(e.body, "deepen") {
				sc.t.Errorf("after the landing the writer fetched more than commits: %q", e.body)
			}
		default:
			sc.t.Errorf("after the landing the writer sent %s", e.kind)
		}
	}
	if listings != wantListings || fetches < minFetches || fetches > 1 {
		sc.t.Errorf("after the landing the writer sent %v; want %d listings and %d to 1 fetch of commits", kinds, wantListings, minFetches)
	}
}

// TestCarriedWriterConfirmsWithoutAFetch: a writer whose request a leader
// carried confirms its landing from what the poll that found its request
// gone shows and the commits the branch gained, without fetching the
// branch's tree again and without pushing. From the landing on it sends
// the one listing of the refs that sees its request gone and at most one
// fetch of commits alone (filter tree:0, no depth); before, it fetched the
// tip whole again (an advertisement and a fetch at depth 1 of the tree,
// which on a loaded Gitea took up to 30 s after the landing) and planned
// its update once more.
func TestCarriedWriterConfirmsWithoutAFetch(t *testing.T) {
	sc := newScene(t, "carried", nil)
	sc.carry()
	sc.checkAfterLanding(0)
}

// carry hands a writer's update over as a request, and has a leader carry
// it (its push deletes it) while the writer's poll is held: the poll, let
// go, sees the request gone, and the writer must report its update landed.
func (sc *scene) carry() {
	sc.t.Helper()
	updated := sc.start(groupUpdate("w/carried", map[string]string{"d1/carried/a.yaml": "carried\n"}))
	sc.handOver()
	sc.land(groupUpdate("w/leader", map[string]string{"d1/leader/a.yaml": "leader\n"}))
	if err := sc.finish(); err != nil || !*updated {
		sc.t.Fatalf("carried writer: updated %v, %v; want its update landed", *updated, err)
	}
	if !sc.holds("d1/carried/a.yaml", "carried\n") {
		sc.t.Fatal("d1/carried/a.yaml is not on the branch: the leader did not carry the request")
	}
}

// TestCarriedWriterConfirmsInARepositoryFirstSeenEmpty: a burst of
// writers into a repository that was empty when they first fetched it (a
// new platform's first renders) confirms a carried landing as in one that
// was not. The first fetch of an empty repository gets no advertisement
// (git sends none, or only a zero id), so the clone did not know whether
// the server filters fetches, and every carried writer fetched the new
// tip whole and planned again: 64 writers at once over SSH exited 20 s
// after the leader's push had landed, each fetching 3,196 objects at once.
// Now the fetch of commits asks its own session's advertisement (over
// http one listing more, once) and sends commits alone.
func TestCarriedWriterConfirmsInARepositoryFirstSeenEmpty(t *testing.T) {
	sc := newSceneIn(t, "carried-empty", nil, false)
	sc.carry()
	sc.checkAfterLandingListed(1, 2)
}

// TestDroppedRequestIsNotTakenForLanded: a waiting writer whose request a
// newer render of its workload dropped as stale (it landed first, and its
// push deleted the request it overtook) does not take the gone request
// for a landing: no commit on the branch names its request, so it plans
// again and meets the staleness (its basis, no record, no longer holds).
func TestDroppedRequestIsNotTakenForLanded(t *testing.T) {
	sc := newScene(t, "dropped", nil)
	up := groupUpdate("w/same", map[string]string{"d1/same/a.yaml": "older\n"})
	up.Basis = &statestore.Basis{} // planned where the workload had no record
	sc.start(up)
	sc.handOver()
	// A newer render of the same workload lands and drops the request.
	sc.land(resourceUpdate(groupUpdate("w/same", map[string]string{"d1/same/a.yaml": "newer\n"}), "d1"))
	if err := sc.finish(); !errors.Is(err, statestore.ErrStale) {
		t.Fatalf("a writer whose request was dropped as stale returned %v; want the staleness", err)
	}
	if !sc.holds("d1/same/a.yaml", "newer\n") {
		t.Fatal("d1/same/a.yaml is not the newer render's")
	}
}

// TestCarriedWriterSeesItsUpdateBeforeItsRequestGoes: a leader's push
// moves the branch and deletes the requests it carries in one atomic
// update, but the server commits it ref by ref, and a listing made
// meanwhile shows the new tip with the carried request still there (in CI
// on a loaded Gitea, the deletions followed the branch by seconds, and a
// writer so carried polled on). A waiting writer whose poll shows the
// branch moved asks the commits the branch gained whether its update is
// among them, and returns once it is: it neither polls on nor leads
// (which fetches the tip whole and plans again). The proxy shows the
// request in every listing from the leader's push on, as if the deletion
// never came.
func TestCarriedWriterSeesItsUpdateBeforeItsRequestGoes(t *testing.T) {
	sc := newScene(t, "halfway", func(p *holdingProxy) { p.holdPoll, p.relist = 2, true })
	updated := sc.start(groupUpdate("w/carried", map[string]string{"d1/carried/a.yaml": "carried\n"}))
	sc.handOver()
	sc.land(groupUpdate("w/leader", map[string]string{"d1/leader/a.yaml": "leader\n"}))
	if !sc.holds("d1/carried/a.yaml", "carried\n") {
		t.Fatal("d1/carried/a.yaml is not on the branch: the leader did not carry the request")
	}
	if len(sc.p.request) == 0 {
		t.Fatal("the proxy saw no request in the writer's first poll")
	}
	if err := sc.finish(); err != nil || !*updated {
		t.Fatalf("carried writer: updated %v, %v; want its update landed", *updated, err)
	}
	sc.checkAfterLanding(1)
}
