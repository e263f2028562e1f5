package gitstore

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/planner"
)

// brokenRefs is a ref store whose listing fails.
type brokenRefs struct{ memory.ReferenceStorage }

func (brokenRefs) IterReferences() (storer.ReferenceIter, error) {
	return nil, errors.New("refs unreadable")
}

// A writer that cannot list the pending updates does not push as if there
// were none: fold says so, and the group-commit push fails with it.
func TestFoldReportsUnlistableRequests(t *testing.T) {
	s := mustNew(t, Config{URL: "https://git.example.com/state.git"})
	st := memory.NewStorage()
	ov := newOverlay(st)
	head := plumbing.NewHash("0123456789abcdef0123456789abcdef01234567")
	got, deletes, stale, err := s.fold(ov, s.newSnap(ov, plumbing.ZeroHash), head, "w/mine", brokenRefs{memory.ReferenceStorage{}}, pendingSpace("main", ""))
	if err == nil || err.Error() != "list pending updates: refs unreadable" {
		t.Fatalf("fold: %v, want the listing's error", err)
	}
	if got != head || len(deletes)+len(stale) != 0 {
		t.Errorf("fold moved the head to %s with %d deletes on a failed listing", got, len(deletes))
	}
}

// unfetchable is a partial clone's object store whose server is gone.
type unfetchable struct{ *memory.Storage }

func (unfetchable) fetchMissing([]plumbing.Hash) error { return errors.New("server hung up") }

// A prefetch that fails on a partial clone reaches the store's Debug log,
// and the lookups still answer, one path at a time.
func TestFailedPrefetchReachesTheStoreLog(t *testing.T) {
	var logged []string
	s := mustNew(t, Config{URL: "https://git.example.com/state.git", Debug: func(msg string, args ...any) {
		logged = append(logged, fmt.Sprint(append([]any{msg}, args...)...))
	}})
	st := memory.NewStorage()
	root, err := newTreeSnap(st, plumbing.ZeroHash, "").applyOps([]planner.Op{{Path: "d1/a.yaml", Data: []byte("a\n")}})
	if err != nil {
		t.Fatal(err)
	}
	snap := s.newSnap(unfetchable{st}, root)
	statestore.Prefetch(snap, statestore.Hint{Reads: []string{"d1/a.yaml"}})
	if len(logged) != 1 || !strings.Contains(logged[0], "prefetch failed") || !strings.Contains(logged[0], "server hung up") {
		t.Errorf("logged %q, want the failed prefetch and its error", logged)
	}
	// A snapshot made from it (a plan applied) logs the same way.
	next, err := snap.apply([]planner.Op{{Path: "d1/b.yaml", Data: []byte("b\n")}})
	if err != nil {
		t.Fatal(err)
	}
	logged = nil
	statestore.Prefetch(next, statestore.Hint{Dirs: []string{"d1"}})
	if len(logged) != 1 {
		t.Errorf("after apply: logged %q, want the failed prefetch", logged)
	}
	if got, err := snap.ReadFile("d1/a.yaml"); err != nil || string(got) != "a\n" {
		t.Errorf("read after the failed prefetch: %q, %v", got, err)
	}
}
