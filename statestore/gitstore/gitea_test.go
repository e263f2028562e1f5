package gitstore_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"

	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/gitstore"
	"github.com/render-dev/render/statestore/storetest"
	"github.com/render-dev/render/statestore/wait"
)

func giteaStore(t *testing.T, g *testenv.GiteaServer, cloneURL, user, password string) *gitstore.Store {
	t.Helper()
	s, err := gitstore.New(gitstore.Config{
		Name: "GitStateStore/gitea", URL: cloneURL, Path: "clusters",
		Auth:  &githttp.BasicAuth{Username: user, Password: password},
		Debug: testDebug(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestGiteaConformance runs the store suite against a real Gitea over HTTP
// with basic auth.
func TestGiteaConformance(t *testing.T) {
	g := testenv.Gitea(t)
	storetest.Run(t, storetest.Harness{
		Fresh: func(t *testing.T) func() statestore.Store {
			u := g.CreateRepo(t, "conformance")
			return func() statestore.Store { return giteaStore(t, g, u, g.AdminUser(), g.AdminToken()) }
		},
		Missing: func(t *testing.T) statestore.Store {
			return giteaStore(t, g, g.URL()+"/"+g.AdminUser()+"/"+testenv.UniqueName("never-created")+".git", g.AdminUser(), g.AdminToken())
		},
		// The same backend races 64 writers over the file and SSH
		// transports (the SSH one with group commit, through real git
		// receive-pack without hooks), the benchmark 16 and 64 render
		// processes on Gitea, and 16 render processes with every core busy in internal/testinfra/chaos's
		// TestManySidecars/git-http. Here 8 (more writers than cores, so
		// group commit folds several requests in one push) keep the
		// suite's time down: Gitea runs three hook processes per push and
		// one per ref a push changes, and on a loaded 2-core machine (load
		// average 50-60) 16 writers' first pushes alone took 2.5 minutes
		// and the whole case more than 10.
		Writers: 8,
		Pending: pendingHook, Fold: foldHook,
	})
}

// TestGiteaAuthFailures: a wrong password is ErrAuth, names the store, and
// never shows the password.
func TestGiteaAuthFailures(t *testing.T) {
	g := testenv.Gitea(t)
	repo := g.CreateRepoInfo(t, "auth")
	g.API(t, http.MethodPatch, "/repos/"+repo.Owner+"/"+repo.Name, map[string]any{"private": true}, nil)
	const wrong = "definitely-not-the-password-42"
	s := giteaStore(t, g, repo.CloneURL, g.AdminUser(), wrong)
	_, err := s.Records(context.Background())
	if !errors.Is(err, statestore.ErrAuth) {
		t.Fatalf("err = %v, want ErrAuth", err)
	}
	if !strings.Contains(err.Error(), "GitStateStore/gitea") || strings.Contains(err.Error(), wrong) {
		t.Fatalf("error must name the store and hide the password: %v", err)
	}
	// A user who may read but not write is refused at push time, with
	// Gitea's own reason and no retry loop.
	user := g.CreateUser(t, "reader", "reader-password-1")
	g.AddCollaborator(t, repo.Owner, repo.Name, user, "read")
	r := giteaStore(t, g, repo.CloneURL, user, "reader-password-1")
	_, err = r.Apply(context.Background(), statestore.Update{Workload: "w/a", Files: map[string][]byte{"d/a.yaml": []byte("a\n")},
		Record: &statestore.Record{}, Message: statestore.Message{Subject: "test"}})
	if err == nil || !(errors.Is(err, statestore.ErrAuth) || errors.Is(err, statestore.ErrRejected)) {
		t.Fatalf("push by a read-only user: err = %v, want ErrAuth or ErrRejected", err)
	}
	// A token works as the password.
	token := g.CreateToken(t, g.AdminUser(), g.AdminPassword(), "write:repository")
	ts := giteaStore(t, g, repo.CloneURL, g.AdminUser(), token)
	if _, err := ts.Apply(context.Background(), statestore.Update{Workload: "w/a", Files: map[string][]byte{"d/a.yaml": []byte("a\n")},
		Record: &statestore.Record{}, Message: statestore.Message{Subject: "test"}}); err != nil {
		t.Fatalf("push with a token: %v", err)
	}
}

// TestGiteaTLS puts Gitea behind a TLS proxy: verification is on by
// default, a custom CA makes it pass, and skipping verification is an
// explicit opt-in.
func TestGiteaTLS(t *testing.T) {
	g := testenv.Gitea(t)
	target, _ := url.Parse(g.URL())
	proxy := httptest.NewTLSServer(httputil.NewSingleHostReverseProxy(target))
	defer proxy.Close()
	repo := g.CreateRepoInfo(t, "tls")
	u, _ := url.Parse(repo.CloneURL)
	tlsURL := proxy.URL + u.Path

	open := func(cfg gitstore.Config) *gitstore.Store {
		cfg.Name, cfg.URL = "GitStateStore/tls", tlsURL
		cfg.Auth = &githttp.BasicAuth{Username: g.AdminUser(), Password: g.AdminToken()}
		s, err := gitstore.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if _, err := open(gitstore.Config{}).Records(context.Background()); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("untrusted certificate accepted: %v", err)
	}
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: proxy.Certificate().Raw})
	if _, err := x509.ParseCertificate(proxy.Certificate().Raw); err != nil {
		t.Fatal(err)
	}
	s := open(gitstore.Config{CABundle: ca})
	if _, err := s.Apply(context.Background(), statestore.Update{Workload: "w/a", Files: map[string][]byte{"d/a.yaml": []byte("a\n")},
		Record: &statestore.Record{}, Message: statestore.Message{Subject: "test"}}); err != nil {
		t.Fatalf("with the CA: %v", err)
	}
	if _, err := open(gitstore.Config{InsecureSkipTLS: true}).Records(context.Background()); err != nil {
		t.Fatalf("with verification skipped: %v", err)
	}
}

// pendingHook and foldHook give the suite git's hand-over: a request left
// by a writer that died, and a leader's fold.
func pendingHook(t *testing.T, s statestore.Store, u statestore.Update) {
	t.Helper()
	if err := gitstore.PublishRequest(context.Background(), s.(*gitstore.Store), u); err != nil {
		t.Fatalf("publish request: %v", err)
	}
}

func foldHook(t *testing.T, s statestore.Store) {
	t.Helper()
	if err := gitstore.FoldPending(context.Background(), s.(*gitstore.Store)); err != nil {
		t.Fatalf("fold: %v", err)
	}
}

// testDebug is a store's debug log for a test: with RENDER_TEST_DEBUG set,
// every line goes to the test's log (where a slow test spent its time).
func testDebug(t *testing.T) func(string, ...any) {
	if os.Getenv("RENDER_TEST_DEBUG") == "" {
		return nil
	}
	return func(msg string, args ...any) {
		t.Log(append([]any{time.Now().Format("15:04:05.000"), msg}, args...)...)
	}
}

// earlyClock reads the time behind the real one by behind: a retry deadline
// of a few seconds on it passes, on the real clock, behind earlier, which
// shortens driver.Finishing's grace (what a sent push may outlast the
// deadline by) for a test.
type earlyClock struct{ behind time.Duration }

func (c earlyClock) Now() time.Time { return time.Now().Add(-c.behind) }
func (c earlyClock) Sleep(ctx context.Context, d time.Duration) error {
	return wait.RealClock{}.Sleep(ctx, d)
}

// TestSlowPushIsNotARefusal: a request's push that the server has not
// answered when the retry deadline passes (a loaded server: at a load
// average of 55 pushes took minutes) fails with the deadline, not as a
// refusal; called a refusal, it turned group commit off for the store
// ("group commit is off for this store ... write rejected: unexpected
// client error ... context deadline exceeded", in the benchmark).
func TestSlowPushIsNotARefusal(t *testing.T) {
	g := testenv.Gitea(t)
	repo := g.CreateRepoInfo(t, "slow-push")
	seed := giteaStore(t, g, repo.CloneURL, g.AdminUser(), g.AdminToken())
	if _, err := seed.Apply(context.Background(), groupUpdate("w/seed", map[string]string{"d1/seed/a.yaml": "seed\n"})); err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(g.URL())
	rp := httputil.NewSingleHostReverseProxy(target)
	done := make(chan struct{})
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
			// A server that does not answer in time.
			select {
			case <-r.Context().Done():
			case <-done:
			}
			return
		}
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	defer close(done)
	u, _ := url.Parse(repo.CloneURL)
	s := giteaStore(t, g, proxy.URL+u.Path, g.AdminUser(), g.AdminToken())
	ctx := wait.WithClock(context.Background(), earlyClock{behind: 27 * time.Second})
	ctx = wait.WithRetryDeadline(ctx, 2*time.Second)
	err := gitstore.PublishRequest(ctx, s, groupUpdate("w/slow", map[string]string{"d1/slow/a.yaml": "slow\n"}))
	if err == nil || errors.Is(err, statestore.ErrRejected) || !errors.Is(err, statestore.ErrDeadline) {
		t.Fatalf("a push still on its way at the deadline: got %v, want the retry deadline, not a refusal", err)
	}
}
