package gitstore

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
func TestBusyServerIsNotADeadServer(t *testing.T) {
	if _, err := exec.LookPath("git-receive-pack"); err != nil {
		t.Fatalf("git-receive-pack is needed: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "state.git")
	if out, err := exec.Command("git", "init", "--bare", "-b", "main", dir).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "hooks", "pre-receive"), []byte("#!/bin/sh\ncat >/dev/null\nsleep 0.6\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	const writers = 6
	const budget = 1500 * time.Millisecond
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
			t.Errorf("writer %d gave up after %v on a busy server (budget %v): %v", i, took[i].Round(time.Millisecond), budget, err)
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
