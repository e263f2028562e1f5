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

	"github.com/render-dev/render/internal/testenv"
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
	g := testenv.Gitea(t)
	repo := g.CreateRepoInfo(t, "carried")
	direct := func() *gitstore.Store { return giteaStore(t, g, repo.CloneURL, g.AdminUser(), g.AdminPassword()) }
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := direct().Apply(ctx, groupUpdate("w/seed", map[string]string{"d1/seed/a.yaml": "seed\n"})); err != nil {
		t.Fatal(err)
	}

	p := newHoldingProxy(g.URL())
	srv := httptest.NewServer(p)
	defer srv.Close()
	u, _ := url.Parse(repo.CloneURL)
	carried := giteaStore(t, g, srv.URL+u.Path, g.AdminUser(), g.AdminPassword())
	type result struct {
		updated bool
		err     error
	}
	done := make(chan result, 1)
	go func() {
		res, err := carried.Apply(ctx, groupUpdate("w/carried", map[string]string{"d1/carried/a.yaml": "carried\n"}))
		done <- result{res.Updated, err}
	}()
	wait := func(ch chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case r := <-done:
			t.Fatalf("the writer returned (%+v) before %s", r, what)
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		}
	}
	wait(p.atPush, "its first push")
	// Another writer moves the branch: the held push finds it moved and
	// hands the update over as a request.
	if _, err := direct().Apply(ctx, groupUpdate("w/first", map[string]string{"d1/first/a.yaml": "first\n"})); err != nil {
		t.Fatal(err)
	}
	close(p.letPush)
	wait(p.atPoll, "its first poll")
	// A leader carries the request (its push deletes it) while the
	// writer's poll is held: the poll, let go, sees the request gone.
	if _, err := direct().Apply(ctx, groupUpdate("w/leader", map[string]string{"d1/leader/a.yaml": "leader\n"})); err != nil {
		t.Fatal(err)
	}
	close(p.letPoll)
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("the carried writer did not return")
	}
	if r.err != nil || !r.updated {
		t.Fatalf("carried writer: updated %v, %v; want its update landed", r.updated, r.err)
	}
	snap, err := direct().Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := snap.ReadFile("d1/carried/a.yaml"); err != nil || string(got) != "carried\n" {
		t.Fatalf("d1/carried/a.yaml on the branch = %q, %v: the leader did not carry the request", got, err)
	}

	after := p.after()
	var kinds []string
	listings, fetches := 0, 0
	for _, e := range after {
		kinds = append(kinds, e.kind)
		switch e.kind {
		case "advertisement (fetch)":
			listings++
		case "upload-pack":
			fetches++
			if !strings.Contains(e.body, "filter tree:0") || strings.Contains(e.body, "deepen") {
				t.Errorf("after the landing the writer fetched more than commits: %q", e.body)
			}
		default:
			t.Errorf("after the landing the writer sent %s", e.kind)
		}
	}
	if listings != 1 || fetches > 1 {
		t.Errorf("after the landing the writer sent %v; want the one listing that sees its request gone and at most one fetch of commits", kinds)
	}
}

// TestDroppedRequestIsNotTakenForLanded: a waiting writer whose request a
// newer render of its workload dropped as stale (it landed first, and its
// push deleted the request it overtook) does not take the gone request
// for a landing: no commit on the branch names its request, so it plans
// again and meets the staleness (its basis, no record, no longer holds).
func TestDroppedRequestIsNotTakenForLanded(t *testing.T) {
	g := testenv.Gitea(t)
	repo := g.CreateRepoInfo(t, "dropped")
	direct := func() *gitstore.Store { return giteaStore(t, g, repo.CloneURL, g.AdminUser(), g.AdminPassword()) }
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := direct().Apply(ctx, groupUpdate("w/seed", map[string]string{"d1/seed/a.yaml": "seed\n"})); err != nil {
		t.Fatal(err)
	}
	p := newHoldingProxy(g.URL())
	srv := httptest.NewServer(p)
	defer srv.Close()
	u, _ := url.Parse(repo.CloneURL)
	older := giteaStore(t, g, srv.URL+u.Path, g.AdminUser(), g.AdminPassword())
	done := make(chan error, 1)
	go func() {
		up := groupUpdate("w/same", map[string]string{"d1/same/a.yaml": "older\n"})
		up.Basis = &statestore.Basis{} // planned where the workload had no record
		_, err := older.Apply(ctx, up)
		done <- err
	}()
	wait := func(ch chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case err := <-done:
			t.Fatalf("the writer returned (%v) before %s", err, what)
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		}
	}
	wait(p.atPush, "its first push")
	if _, err := direct().Apply(ctx, groupUpdate("w/first", map[string]string{"d1/first/a.yaml": "first\n"})); err != nil {
		t.Fatal(err)
	}
	close(p.letPush)
	wait(p.atPoll, "its first poll")
	// A newer render of the same workload lands and drops the request.
	if _, err := direct().Apply(ctx, resourceUpdate(groupUpdate("w/same", map[string]string{"d1/same/a.yaml": "newer\n"}), "d1")); err != nil {
		t.Fatal(err)
	}
	close(p.letPoll)
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		t.Fatal("the writer did not return")
	}
	if !errors.Is(err, statestore.ErrStale) {
		t.Fatalf("a writer whose request was dropped as stale returned %v; want the staleness", err)
	}
	snap, serr := direct().Snapshot(ctx)
	if serr != nil {
		t.Fatal(serr)
	}
	if got, _ := snap.ReadFile("d1/same/a.yaml"); string(got) != "newer\n" {
		t.Fatalf("d1/same/a.yaml = %q, want the newer render's", got)
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
	g := testenv.Gitea(t)
	repo := g.CreateRepoInfo(t, "halfway")
	direct := func() *gitstore.Store { return giteaStore(t, g, repo.CloneURL, g.AdminUser(), g.AdminPassword()) }
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := direct().Apply(ctx, groupUpdate("w/seed", map[string]string{"d1/seed/a.yaml": "seed\n"})); err != nil {
		t.Fatal(err)
	}
	p := newHoldingProxy(g.URL())
	p.holdPoll, p.relist = 2, true
	srv := httptest.NewServer(p)
	defer srv.Close()
	defer func() { // a held request would hold srv.Close up
		for _, ch := range []chan struct{}{p.letPush, p.letPoll} {
			select {
			case <-ch:
			default:
				close(ch)
			}
		}
	}()
	u, _ := url.Parse(repo.CloneURL)
	carried := giteaStore(t, g, srv.URL+u.Path, g.AdminUser(), g.AdminPassword())
	type result struct {
		updated bool
		err     error
	}
	done := make(chan result, 1)
	go func() {
		res, err := carried.Apply(ctx, groupUpdate("w/carried", map[string]string{"d1/carried/a.yaml": "carried\n"}))
		done <- result{res.Updated, err}
	}()
	wait := func(ch chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case r := <-done:
			t.Fatalf("the writer returned (%+v) before %s", r, what)
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		}
	}
	wait(p.atPush, "its first push")
	if _, err := direct().Apply(ctx, groupUpdate("w/first", map[string]string{"d1/first/a.yaml": "first\n"})); err != nil {
		t.Fatal(err)
	}
	close(p.letPush)
	wait(p.atPoll, "its second poll")
	if _, err := direct().Apply(ctx, groupUpdate("w/leader", map[string]string{"d1/leader/a.yaml": "leader\n"})); err != nil {
		t.Fatal(err)
	}
	snap, err := direct().Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := snap.ReadFile("d1/carried/a.yaml"); err != nil || string(got) != "carried\n" {
		t.Fatalf("d1/carried/a.yaml on the branch = %q, %v: the leader did not carry the request", got, err)
	}
	if len(p.request) == 0 {
		t.Fatal("the proxy saw no request in the writer's first poll")
	}
	close(p.letPoll)
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("the carried writer did not return")
	}
	if r.err != nil || !r.updated {
		t.Fatalf("carried writer: updated %v, %v; want its update landed", r.updated, r.err)
	}
	var kinds []string
	listings, fetches := 0, 0
	for _, e := range p.after() {
		kinds = append(kinds, e.kind)
		switch e.kind {
		case "advertisement (fetch)":
			listings++
		case "upload-pack":
			fetches++
			if !strings.Contains(e.body, "filter tree:0") || strings.Contains(e.body, "deepen") {
				t.Errorf("after the landing the writer fetched more than commits: %q", e.body)
			}
		default:
			t.Errorf("after the landing the writer sent %s", e.kind)
		}
	}
	if listings != 1 || fetches != 1 {
		t.Errorf("after the landing the writer sent %v; want the one listing that shows the branch moved and one fetch of commits", kinds)
	}
}
