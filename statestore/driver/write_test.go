package driver

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/planner"
	"github.com/render-dev/render/statestore/wait"
)

// stepBackend's committer fails every commit with err.
type stepBackend struct {
	err     error
	commits int
}

func (b *stepBackend) String() string { return "test store" }
func (b *stepBackend) Begin(context.Context, []statestore.Update) (Committer, error) {
	return Committer{Snapshot: b.Snapshot, Commit: b.Commit}, nil
}
func (b *stepBackend) Snapshot(context.Context, int, statestore.Snapshot) (statestore.Snapshot, error) {
	return planner.NewOverlay(noFiles{}), nil
}
func (b *stepBackend) Commit(context.Context, *Change) (Outcome, error) {
	b.commits++
	return Outcome{}, b.err
}

// A step of a commit that retries its own lost races (S3's markers and
// load summaries, through RetryPolicy.Conflicts) and gives up because the
// render's retry deadline would pass ends the write: the write loop does
// not start over on a budget that is spent. Any other lost race is
// planned again.
func TestSpentDeadlineEndsTheWrite(t *testing.T) {
	ctx := wait.WithRetryDeadline(context.Background(), time.Minute)
	u := statestore.Update{Workload: "w/a", Files: map[string][]byte{"d/x.yaml": []byte("x\n")}, Record: &statestore.Record{}}
	spent := wait.LostRace(time.Second).Pause(wait.WithRetryDeadline(context.Background(), time.Nanosecond), 8, fmt.Errorf("%w: other renders kept rewriting its marker", statestore.ErrConflict))
	b := &stepBackend{err: spent}
	if _, err := Write(ctx, b, RetryPolicy{}, []statestore.Update{u}); !errors.Is(err, statestore.ErrDeadline) || b.commits != 1 {
		t.Fatalf("a step that spent the deadline: %d commits, %v; want 1, ErrDeadline", b.commits, err)
	}
	if wait.Classify(spent) != wait.ClassPermanent {
		t.Fatalf("Classify(%v) = %v, want ClassPermanent", spent, wait.Classify(spent))
	}
	b = &stepBackend{err: &ConflictError{Op: "write", What: "another writer was first"}}
	if _, err := Write(ctx, b, RetryPolicy{MaxAttempts: 3}, []statestore.Update{u}); !errors.Is(err, statestore.ErrConflict) || b.commits != 3 {
		t.Fatalf("a lost race: %d commits, %v; want 3 (MaxAttempts), ErrConflict", b.commits, err)
	}
}

// noFiles is a snapshot of an empty store.
type noFiles struct{}

func (noFiles) Compare(string, []byte) (bool, bool, error) { return false, false, nil }

func (noFiles) ReadFile(p string) ([]byte, error) {
	return nil, fmt.Errorf("%s: %w", p, statestore.ErrNotFound)
}

func (noFiles) List(string) ([]string, error) { return nil, nil }
func (noFiles) Capabilities() statestore.SnapshotCapabilities {
	return statestore.SnapshotCapabilities{}
}
