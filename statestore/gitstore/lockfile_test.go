package gitstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/render-dev/render/statestore"
)

// lockedStore is a local store with one commit on main, and the path of
// its branch lock.
func lockedStore(t *testing.T, cfg Config) (*Store, statestore.Update, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state.git")
	cfg.URL = "file://" + dir
	s := mustNew(t, cfg)
	u := statestore.Update{Workload: "w/a", Files: map[string][]byte{"d/a.yaml": []byte("a\n")}, Record: &statestore.Record{}, Message: statestore.Message{Subject: "t"}}
	if _, err := s.Apply(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	u.Files["d/b.yaml"] = []byte("b\n")
	return s, u, filepath.Join(dir, "refs", "heads", "main.lock")
}

// deadPid is the pid of a process that has ended.
func deadPid(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skipf("cannot run a child process: %v", err)
	}
	return cmd.ProcessState.Pid()
}

// A lock left by a render killed on this host (its process is gone) is
// taken over at once, not after staleLock.
func TestDeadOwnersLockIsTakenOverAtOnce(t *testing.T) {
	var warnings []string
	var mu sync.Mutex
	s, u, lock := lockedStore(t, Config{RetryDeadline: 5 * time.Second, Warn: func(msg string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		warnings = append(warnings, fmt.Sprint(append([]any{msg}, args...)...))
	}})
	dead := thisProcess()
	dead.pid, dead.start = deadPid(t), ""
	if err := os.WriteFile(lock, []byte(dead.line()), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := s.Apply(context.Background(), u); err != nil {
		t.Fatalf("a dead writer's lock (pid %d) was not taken over: %v", dead.pid, err)
	}
	if took := time.Since(start); took > staleLock/2 {
		t.Errorf("took %v: the lock was waited out, not taken over", took)
	}
	if _, err := os.Stat(lock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the lock is still there: %v", err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "is gone") || !strings.Contains(warnings[0], fmt.Sprint(dead.pid)) {
		t.Errorf("warnings = %q, want one saying the owner pid %d is gone", warnings, dead.pid)
	}
}

// A lock whose owner is a running process on this host is never taken
// over, however old: the render waits, then gives up naming the owner.
func TestLiveOwnersLockIsKept(t *testing.T) {
	var warnings []string
	s, u, lock := lockedStore(t, Config{MaxAttempts: 3, Warn: func(msg string, args ...any) {
		warnings = append(warnings, fmt.Sprint(append([]any{msg}, args...)...))
	}})
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Skipf("cannot start a child process: %v", err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	live := thisProcess()
	live.pid, live.start = sleeper.Process.Pid, processStart(sleeper.Process.Pid)
	content := []byte(live.line())
	if err := os.WriteFile(lock, content, 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * staleLock)
	os.Chtimes(lock, old, old)
	if _, err := s.Apply(context.Background(), u); !errors.Is(err, statestore.ErrConflict) {
		t.Fatalf("with a live owner's lock: err = %v, want ErrConflict", err)
	}
	if data, err := os.ReadFile(lock); err != nil || string(data) != string(content) {
		t.Fatalf("the live owner's lock was removed or changed: %q, %v", data, err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], fmt.Sprintf("pid %d", live.pid)) {
		t.Errorf("warnings = %q, want one naming pid %d", warnings, live.pid)
	}
}

// A take-over removes only the lock it judged stale: a lock released and
// taken again by a live writer between the judgement and the removal (here
// by the test hook) is left alone.
func TestTakeOverRemovesOnlyTheSameLock(t *testing.T) {
	s, u, lock := lockedStore(t, Config{MaxAttempts: 1})
	if err := os.WriteFile(lock, []byte("0123456789012345678901234567890123456789\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * staleLock)
	os.Chtimes(lock, old, old)
	fresh := []byte(thisProcess().line())
	lockTestHook = func(lock string) {
		// The old lock's owner finishes; a new writer takes the lock.
		os.Remove(lock)
		os.WriteFile(lock, fresh, 0o644)
	}
	t.Cleanup(func() { lockTestHook = nil })
	if _, err := s.Apply(context.Background(), u); !errors.Is(err, statestore.ErrConflict) {
		t.Fatalf("err = %v, want ErrConflict (the branch is locked by the new writer)", err)
	}
	if data, err := os.ReadFile(lock); err != nil || string(data) != string(fresh) {
		t.Fatalf("the new writer's lock was removed or changed: %q, %v", data, err)
	}
	if _, err := os.Stat(lock + ".takeover"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the take-over guard was left behind: %v", err)
	}
}

// While render holds a branch lock, the lock names its owner: pid and host.
func TestLockNamesItsOwner(t *testing.T) {
	s, u, lock := lockedStore(t, Config{})
	// Hold the lock as a writer does, then let a waiter read it.
	lr := s.repo.(*localRepo)
	f, err := os.OpenFile(lock, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(thisProcess().line())
	f.Close()
	fi, data, err := readLock(lock)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := parseOwner(data)
	host, _ := os.Hostname()
	if !ok || o.pid != os.Getpid() || o.host != strings.Join(strings.Fields(host), "_") || o.gone() {
		t.Fatalf("lock %q: owner %+v ok=%v, want this process, alive", data, o, ok)
	}
	if lr.takeOver(lock) {
		t.Fatalf("a live owner's lock was taken over")
	}
	fi2, data2, _ := readLock(lock)
	if !sameLock(fi, data, fi2, data2) {
		t.Fatalf("the lock changed")
	}
	os.Remove(lock)
	if _, err := s.Apply(context.Background(), u); err != nil {
		t.Fatal(err)
	}
}
