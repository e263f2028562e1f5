package gitstore

import (
	"context"
	"fmt"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/wait"
)

// TestBusyServerIsNotADeadServer: on a server where every push takes a
// good part of the retry budget (a pre-receive hook that sleeps, as
// Gitea's hook processes take seconds on a loaded machine), writers that
// lose a race must not give up while the group gets through. Before the
// deadline moved on with progress, a writer whose first push lost and
// whose request then took the rest of its budget to publish gave up
// before its first poll ("gave up after 1.5s, 0 tries"): the campaign's
// git-http seed 90015.
//
// The budget is one and a half pushes' time, as measured on this server
// at this moment (six pushes at once, beside whatever else the machine
// runs): a loser's first push and its request's push take about two, so
// the old rule gave up every time; with the progress rule each step gives
// the writer a budget again, and the whole burst (about four pushes' time)
// fits in the latest deadline (four budgets).
func TestBusyServerIsNotADeadServer(t *testing.T) {
	if _, err := exec.LookPath("git-receive-pack"); err != nil {
		t.Fatalf("git-receive-pack is needed: %v", err)
	}
	const writers = 6
	const hook = "#!/bin/sh\ncat >/dev/null\nsleep 1\n"
	push := pushTime(t, bareRepo(t, hook), writers)
	budget := push * 3 / 2
	t.Logf("a push takes %v here now, with %d at once: a budget of %v", push.Round(time.Millisecond), writers, budget.Round(time.Millisecond))

	dir := bareRepo(t, hook)
	var wg sync.WaitGroup
	errs := make([]error, writers)
	took := make([]time.Duration, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := mustNewRemote(t, Config{URL: "file://" + dir, Path: "clusters"})
			ctx := wait.WithRetryDeadline(context.Background(), budget)
			t0 := time.Now()
			_, errs[i] = s.Apply(ctx, statestore.Update{
				Workload: fmt.Sprintf("w/%d", i), Files: map[string][]byte{fmt.Sprintf("d/%d.yaml", i): []byte("x\n")},
				Record: &statestore.Record{}, Message: statestore.Message{Subject: "test"},
			})
			took[i] = time.Since(t0)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("writer %d gave up after %v on a busy server (budget %v): %v", i, took[i].Round(time.Millisecond), budget.Round(time.Millisecond), err)
		}
	}
	s := mustNewRemote(t, Config{URL: "file://" + dir, Path: "clusters"})
	recs, err := s.Records(context.Background())
	if err != nil || len(recs) != writers {
		t.Fatalf("records: %d, %v; want %d", len(recs), err, writers)
	}
	out, err := exec.Command("git", "-C", dir, "for-each-ref", "refs/render/").CombinedOutput()
	if err != nil || len(out) != 0 {
		t.Fatalf("requests left on the server: %q, %v", out, err)
	}
}

// pushTime is the longest of n pushes at once, each of a branch of its own,
// into the bare repository dir, by the git CLI.
func pushTime(t *testing.T, dir string, n int) time.Duration {
	t.Helper()
	work := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q", "-b", "main", work},
		{"-C", work, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "calibrate"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	var mu sync.Mutex
	var longest time.Duration
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			if out, err := exec.Command("git", "-C", work, "push", "-q", "file://"+dir, fmt.Sprintf("main:refs/heads/b%d", i)).CombinedOutput(); err != nil {
				t.Errorf("calibrating push: %v\n%s", err, out)
			}
			mu.Lock()
			longest = max(longest, time.Since(t0))
			mu.Unlock()
		}()
	}
	wg.Wait()
	return longest
}
