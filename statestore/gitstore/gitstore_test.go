package gitstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/storetest"
)

// TestLocalConformance runs the suite on a bare repository written in place.
func TestLocalConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		Fresh: func(t *testing.T) func() statestore.Store {
			dir := filepath.Join(t.TempDir(), "state.git")
			return func() statestore.Store { return mustNew(t, Config{URL: "file://" + dir, Path: "clusters"}) }
		},
		Missing: func(t *testing.T) statestore.Store {
			return mustNew(t, Config{URL: "file://" + filepath.Join(t.TempDir(), "no", "such", "repo.git")})
		},
	})
}

// TestRemoteConformance runs the suite through the clone-and-push path,
// against a bare repository served by the git binaries over file://.
func TestRemoteConformance(t *testing.T) {
	if _, err := exec.LookPath("git-upload-pack"); err != nil {
		if _, err := exec.LookPath("git"); err != nil {
			t.Fatal("git is needed for go-git's file transport")
		}
	}
	storetest.Run(t, storetest.Harness{
		Fresh: func(t *testing.T) func() statestore.Store {
			dir := bareRepo(t, "")
			return func() statestore.Store { return mustNewRemote(t, Config{URL: "file://" + dir, Path: "clusters"}) }
		},
		Missing: func(t *testing.T) statestore.Store {
			return mustNewRemote(t, Config{URL: "file://" + filepath.Join(t.TempDir(), "missing.git")})
		},
		Pending: pendingHook, Fold: foldHook,
	})
}

// pendingHook and foldHook give the suite git's hand-over: a request left
// by a writer that died, and a leader's fold.
func pendingHook(t *testing.T, s statestore.Store, u statestore.Update) {
	t.Helper()
	if err := PublishRequest(context.Background(), s.(*Store), u); err != nil {
		t.Fatalf("publish request: %v", err)
	}
}

func foldHook(t *testing.T, s statestore.Store) {
	t.Helper()
	if err := FoldPending(context.Background(), s.(*Store)); err != nil {
		t.Fatalf("fold: %v", err)
	}
}

func mustNew(t *testing.T, cfg Config) *Store {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// mustNewRemote forces the remote (clone and push) path for a file:// URL.
func mustNewRemote(t *testing.T, cfg Config) *Store {
	s := mustNew(t, cfg)
	s.repo = newRemoteRepo(s.cfg)
	return s
}

// TestRejectedPushCarriesServerMessage: a pre-receive hook's refusal is not
// a lost race; it is returned at once with the hook's own words.
func TestRejectedPushCarriesServerMessage(t *testing.T) {
	dir := bareRepo(t, "#!/bin/sh\necho 'policy: main is frozen for the release' >&2\nexit 1\n")
	s := mustNewRemote(t, Config{URL: "file://" + dir, MaxAttempts: 3})
	res, err := s.Apply(context.Background(), statestore.Update{
		Workload: "w/a", Files: map[string][]byte{"d/a.yaml": []byte("a\n")},
		Record: &statestore.Record{}, Message: statestore.Message{Subject: "test"},
	})
	if !errors.Is(err, statestore.ErrRejected) {
		t.Fatalf("err = %v, want ErrRejected", err)
	}
	if !strings.Contains(err.Error(), "main is frozen for the release") {
		t.Fatalf("error does not carry the hook's message: %v", err)
	}
	if !strings.Contains(err.Error(), s.String()) {
		t.Fatalf("error does not name the store: %v", err)
	}
	if res.Attempts != 1 {
		t.Fatalf("a refusal was retried as a race: %d attempts", res.Attempts)
	}
}

// TestUnreachableRemoteGivesUp: a closed port is retried until the
// deadline, then reported as unreachable.
func TestUnreachableRemoteGivesUp(t *testing.T) {
	s := mustNew(t, Config{URL: "http://127.0.0.1:1/state.git", RetryDeadline: 300 * time.Millisecond})
	_, err := s.Records(context.Background())
	if !errors.Is(err, statestore.ErrUnreachable) {
		t.Fatalf("err = %v, want ErrUnreachable", err)
	}
}

func TestRedactURL(t *testing.T) {
	for _, in := range []string{
		"https://user:s3cret@git.example.com/x.git",
		"failed: Get \"https://user:s3cret@host/x\": dial tcp",
		"https://user:p@s3cret@git.example.com/x.git",
		"https://user:s3cret@@host",
	} {
		if out := RedactURL(in); strings.Contains(out, "s3cret") || strings.Contains(out, "p@") {
			t.Errorf("RedactURL(%q) = %q", in, out)
		}
	}
}

// TestHeldLockIsReported: a branch lock held longer than a live writer
// would hold it is reported once (naming the lock file) while the render
// waits for it.
func TestHeldLockIsReported(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state.git")
	var warnings []string
	cfg := Config{URL: "file://" + dir, MaxAttempts: 3, Warn: func(msg string, args ...any) {
		warnings = append(warnings, fmt.Sprint(append([]any{msg}, args...)...))
	}}
	s := mustNew(t, cfg)
	u := statestore.Update{Workload: "w/a", Files: map[string][]byte{"d/a.yaml": []byte("a\n")}, Record: &statestore.Record{}, Message: statestore.Message{Subject: "t"}}
	if _, err := s.Apply(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(dir, "refs", "heads", "main.lock")
	if err := os.WriteFile(lock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-10 * time.Second)
	os.Chtimes(lock, old, old)
	u.Files["d/b.yaml"] = []byte("b\n")
	_, err := s.Apply(context.Background(), u)
	if !errors.Is(err, statestore.ErrConflict) {
		t.Fatalf("with the lock held: err = %v, want ErrConflict after the attempts", err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], lock) {
		t.Fatalf("warnings = %q, want one naming %s", warnings, lock)
	}
}

// A name that does not resolve is a configuration mistake: it is reported
// at once, not retried as an unreachable server until the deadline.
func TestUnresolvableHostIsNotRetried(t *testing.T) {
	dns := &net.DNSError{Err: "no such host", Name: "gitea.invalid", IsNotFound: true}
	err := translate(plumbing.NewUnexpectedError(&url.Error{Op: "Get", URL: "https://gitea.invalid/x.git", Err: dns}))
	if errors.Is(err, statestore.ErrUnreachable) {
		t.Fatalf("translate(no such host) = %v; it must not be retried as unreachable", err)
	}
	var got *net.DNSError
	if !errors.As(err, &got) {
		t.Fatalf("translate dropped the error chain: %v", err)
	}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	if err := translate(plumbing.NewUnexpectedError(&url.Error{Op: "Get", URL: "https://x", Err: refused})); !errors.Is(err, statestore.ErrUnreachable) {
		t.Fatalf("translate(connection refused) = %v, want ErrUnreachable", err)
	}
}

// TestGroupCommitFallsBackWhenRequestsAreRefused: a server whose hook
// refuses render's request refs turns group commit off for the store with
// one warning, and racing writers still all land by taking turns.
func TestGroupCommitFallsBackWhenRequestsAreRefused(t *testing.T) {
	dir := bareRepo(t, "#!/bin/sh\nwhile read old new ref; do case \"$ref\" in refs/render/*) echo \"policy: no $ref\" >&2; exit 1;; esac; done\n")
	const writers = 8
	var mu sync.Mutex
	warnings := map[int]int{}
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := mustNewRemote(t, Config{URL: "file://" + dir, Path: "clusters", Warn: func(msg string, _ ...any) {
				if strings.Contains(msg, "group commit is off") {
					mu.Lock()
					warnings[i]++
					mu.Unlock()
				}
			}})
			_, errs[i] = s.Apply(context.Background(), statestore.Update{
				Workload: fmt.Sprintf("w/%d", i), Files: map[string][]byte{fmt.Sprintf("d/%d.yaml", i): []byte("x\n")},
				Record: &statestore.Record{}, Message: statestore.Message{Subject: "test"},
			})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("writer %d: %v", i, err)
		}
	}
	for i, n := range warnings {
		if n != 1 {
			t.Errorf("writer %d warned %d times, want once", i, n)
		}
	}
	if len(warnings) == 0 {
		t.Error("no writer said that group commit is off, though some must have lost a race")
	}
	s := mustNewRemote(t, Config{URL: "file://" + dir, Path: "clusters"})
	recs, err := s.Records(context.Background())
	if err != nil || len(recs) != writers {
		t.Fatalf("records: %d, %v; want %d", len(recs), err, writers)
	}
}

// bareRepo makes an empty bare repository whose branch is main, with
// preReceive as its pre-receive hook unless that is empty, and returns
// its folder.
func bareRepo(t *testing.T, preReceive string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state.git")
	if out, err := exec.Command("git", "init", "--bare", "-b", "main", dir).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	if preReceive != "" {
		if err := os.WriteFile(filepath.Join(dir, "hooks", "pre-receive"), []byte(preReceive), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
