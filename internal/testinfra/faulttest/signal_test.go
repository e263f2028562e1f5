package faulttest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore/s3store"
)

// signalDocs is how many files the signalled renders read: enough that
// reading, planning and publishing each take a while.
const signalDocs = 2000

// waitLog waits until the process's stderr matches re, at most limit; the
// process ending first fails the test.
func (p *process) waitLog(t testing.TB, re string, limit time.Duration) {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if rx.MatchString(p.err.String()) {
			return
		}
		if p.exited() {
			t.Fatalf("render ended before logging %q:\n%s", re, p.res)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("render did not log %q within %v; stderr:\n%s", re, limit, p.err.String())
}

func (p *process) signal(t testing.TB, s os.Signal) time.Time {
	t.Helper()
	if err := p.cmd.Process.Signal(s); err != nil {
		t.Fatal(err)
	}
	return time.Now()
}

// lastLine is the last line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// gitConsistent checks a Gitea repository as git fsck does (with the git
// command when there is one: a bare clone of every ref, fsck'd), and that
// no request ref of render's group commit is left behind.
func gitConsistent(t *testing.T, g *testenv.GiteaServer, cloneURL string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rem := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{cloneURL}})
	refs, err := rem.ListContext(ctx, &git.ListOptions{Auth: &githttp.BasicAuth{Username: g.AdminUser(), Password: g.AdminToken()}})
	if err != nil {
		t.Fatalf("list refs: %v", err)
	}
	var requests []string
	for _, r := range refs {
		if strings.HasPrefix(r.Name().String(), "refs/render/") {
			requests = append(requests, r.Name().String())
		}
	}
	if _, err := exec.LookPath("git"); err != nil {
		// No git command: clone everything with go-git, which reads every
		// object it is sent.
		if _, err := git.CloneContext(ctx, memory.NewStorage(), nil, &git.CloneOptions{URL: cloneURL,
			Auth: &githttp.BasicAuth{Username: g.AdminUser(), Password: g.AdminToken()}}); err != nil {
			t.Fatalf("clone: %v", err)
		}
		return
	}
	dir := filepath.Join(t.TempDir(), "fsck.git")
	if out, err := exec.CommandContext(ctx, "git", "clone", "--quiet", "--mirror", g.AdminAuthURL(cloneURL), dir).CombinedOutput(); err != nil {
		t.Fatalf("git clone --mirror: %v\n%s", err, strings.ReplaceAll(string(out), g.AdminToken(), "***"))
	}
	if out, err := exec.CommandContext(ctx, "git", "--git-dir", dir, "fsck", "--no-progress", "--strict").CombinedOutput(); err != nil {
		t.Fatalf("git fsck: %v\n%s", err, out)
	}
	// A request ref may stay after its own push landed it (the store's
	// next write deletes it), but none may still be pending.
	mirror, err := git.PlainOpen(dir)
	if err != nil {
		t.Fatal(err)
	}
	pending, err := testenv.PendingRequests(mirror, "main", "clusters")
	if err != nil {
		t.Fatalf("read requests: %v", err)
	}
	for _, p := range pending {
		t.Errorf("a pending request is left behind: %s", p)
	}
	if len(requests) > 1 {
		t.Errorf("request refs left behind: %v, want at most the last write's", requests)
	}
}

// TestSignals: a one-shot render into a Gitea repository and a MinIO bucket
// at once gets a signal while it reads its inputs, while it plans and while
// it publishes. Before publishing it stops at once with the signal's exit
// code, one line, and both stores untouched; while publishing it finishes,
// says so, and leaves both stores whole (a rerun has nothing to do). A
// second signal exits at once, and leaves the branch old or new. After each
// step the repository passes git fsck and holds no stray request ref.
func TestSignals(t *testing.T) {
	t.Parallel()
	g := testenv.Gitea(t)
	repo := g.CreateRepoInfo(t, "signals")
	m := testenv.MinIO(t)
	c := m.Client(t)
	bucket := m.CreateBucket(t, "signals")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const s3prefix = "clusters/dev-s3/"

	w := newWorkflow(t, "sig")
	w.setPlatform(t, gitStore("git", repo.CloneURL, g.AdminUser(), g.AdminToken()),
		bucketStore("minio", m.Endpoint(), bucket, m.AccessKey(), m.SecretKey()),
		destination("dev-git", "GitStateStore", "git"), destination("dev-s3", "BucketStateStore", "minio"))
	type state struct {
		git tree
		s3  map[string]string
	}
	read := func() state {
		l, err := listBucket(ctx, c, bucket, s3prefix)
		if err != nil {
			t.Fatal(err)
		}
		return state{remoteTree(t, repo.CloneURL, g.AdminUser(), g.AdminToken()), l}
	}
	// whole checks that a render has nothing left to do, and that the
	// bucket's marker vouches for what is there.
	whole := func(what string) state {
		t.Helper()
		before := read()
		r := mustRender(t, w, 0)
		if !strings.Contains(r.stdout, "GitStateStore/git: up to date") || !strings.Contains(r.stdout, "BucketStateStore/minio: up to date") {
			t.Fatalf("%s: a rerun still had work to do, so the stores were not whole:\n%s", what, r)
		}
		if after := read(); after.git.commit != before.git.commit || !sameListing(after.s3, before.s3) {
			t.Fatalf("%s: a rerun changed the stores", what)
		}
		markers := readMarkers(ctx, c, bucket, s3prefix, before.s3)
		if len(markers) == 0 || !s3store.CheckListing(before.s3, markers).Complete() {
			t.Fatalf("%s: the markers do not vouch for the destination", what)
		}
		return before
	}

	w.docs(t, 0, signalDocs, "v1")
	mustRender(t, w, 0)
	old := whole("first render")

	steps := []struct {
		name, log string
		sig       syscall.Signal
		code      int
		line      string
	}{
		{"reading", `msg="reading inputs"`, syscall.SIGINT, 130, "render: SIGINT: stopped while reading inputs: nothing was written"},
		{"planning", `msg=planning`, syscall.SIGTERM, 143, "render: SIGTERM: stopped while planning: nothing was written"},
		{"publishing", `msg=publishing`, syscall.SIGTERM, 143, "render: SIGTERM while publishing: the publish finished (BucketStateStore/minio: finished, wrote "},
	}
	for i, s := range steps {
		w.docs(t, 0, signalDocs, fmt.Sprintf("v%d", i+2)) // every file changes
		p := start(t, w, "--log-level", "debug")
		p.waitLog(t, s.log, 2*time.Minute)
		sent := p.signal(t, s.sig)
		r := p.wait(t, 3*time.Minute)
		took := r.took - sent.Sub(p.start)
		if r.code != s.code || !strings.HasPrefix(lastLine(r.stderr), s.line) {
			t.Fatalf("%s: want exit %d and a last line starting %q, got %s", s.name, s.code, s.line, r)
		}
		now := read()
		if s.name != "publishing" {
			if took > 2*time.Second {
				t.Errorf("%s: the render took %v to stop after %v", s.name, took.Round(time.Millisecond), s.sig)
			}
			if now.git.commit != old.git.commit || !sameListing(now.s3, old.s3) {
				t.Fatalf("%s: a render stopped before publishing changed a store", s.name)
			}
		} else {
			if now.git.commit == old.git.commit || sameListing(now.s3, old.s3) {
				t.Fatalf("%s: the publish did not finish in both stores", s.name)
			}
			if !strings.Contains(r.stderr, "GitStateStore/git: finished, wrote "+now.git.commit[:12]) {
				t.Errorf("%s: the last line does not name the commit %s:\n%s", s.name, now.git.commit[:12], r.stderr)
			}
			whole(s.name)
		}
		gitConsistent(t, g, repo.CloneURL)
		t.Logf("%s: %v, exit %d %v after the signal", s.name, s.sig, r.code, took.Round(time.Millisecond))
		old = now
	}

	// A second signal while publishing exits at once. The branch is the
	// old commit or the new one, whole; a rerun completes both stores.
	w.docs(t, 0, signalDocs, "v9")
	p := start(t, w, "--log-level", "debug")
	p.waitLog(t, `msg=publishing`, 2*time.Minute)
	p.signal(t, syscall.SIGTERM)
	p.waitLog(t, `finishing the publish under way`, time.Minute)
	sent := p.signal(t, syscall.SIGINT)
	r := p.wait(t, time.Minute)
	took := r.took - sent.Sub(p.start)
	if r.code != 130 || !strings.Contains(lastLine(r.stderr), "render: SIGINT again: exiting at once; the publish in progress is abandoned") {
		t.Fatalf("second signal: want exit 130 and a line saying so, got %s", r)
	}
	if took > 2*time.Second {
		t.Errorf("second signal: the render took %v to exit", took.Round(time.Millisecond))
	}
	gitConsistent(t, g, repo.CloneURL)
	mustRender(t, w, 0)
	final := whole("after a second signal")
	if now := read(); now.git.commit != old.git.commit && !now.git.equal(final.git) {
		t.Fatalf("second signal: the branch holds neither the old state nor the new one")
	}
	t.Logf("second signal: exit %d %v after it", r.code, took.Round(time.Millisecond))
}

// TestTimeoutEndsRender: `timeout 5 render` on a large input, with a store
// that accepts connections and never answers, ends within a second of the
// timeout's SIGTERM, having written nothing.
func TestTimeoutEndsRender(t *testing.T) {
	// Not parallel: the second it is allowed is for render, not for
	// waiting on a CPU the other tests of this package hold.
	if _, err := exec.LookPath("timeout"); err != nil {
		t.Skip("no timeout command")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // a server that hangs: it reads and never answers
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				buf := make([]byte, 4096)
				for {
					if _, err := conn.Read(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	w := newWorkflow(t, "big")
	w.setPlatform(t, gitStore("hung", "http://"+ln.Addr().String()+"/state.git", "u", "p"), destination("dev", "GitStateStore", "hung"))
	w.docs(t, 0, 20000, "v1")
	cmd := exec.Command("timeout", append([]string{"5", renderBin(t)}, w.args()...)...)
	cmd.Dir, cmd.Env = w.dir, w.env()
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	start := time.Now()
	err = cmd.Run()
	took := time.Since(start)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 124 {
		t.Fatalf("timeout 5 render: want exit 124 (timed out), got %v after %v:\n%s", err, took, stderr.String())
	}
	if took > 6*time.Second {
		t.Fatalf("timeout 5 render ended after %v, more than a second after the timeout:\n%s", took.Round(time.Millisecond), stderr.String())
	}
	// Where it is at 5s depends on the machine: reading 20,000 files, or
	// waiting for the store.
	if !regexp.MustCompile(`^render: SIGTERM: stopped while (reading inputs|planning): nothing was written$`).MatchString(lastLine(stderr.String())) {
		t.Errorf("last line %q, want it to say that SIGTERM stopped the render before anything was written", lastLine(stderr.String()))
	}
	t.Logf("timeout 5 render on %d files ended after %v", 20000, took.Round(time.Millisecond))
}
