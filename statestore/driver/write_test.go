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

// raceClock is a clock that moves only when slept on, or when a commit
// takes time.
type raceClock struct{ now time.Time }

func (c *raceClock) Now() time.Time { return c.now }
func (c *raceClock) Sleep(ctx context.Context, d time.Duration) error {
	c.now = c.now.Add(d)
	return ctx.Err()
}

// losingBackend loses the race lose times, each commit taking a second,
// then lands.
type losingBackend struct {
	clock   *raceClock
	lose    int
	commits int
}

func (b *losingBackend) String() string { return "test store" }
func (b *losingBackend) Begin(context.Context, []statestore.Update) (Committer, error) {
	return Committer{Snapshot: func(context.Context, int, statestore.Snapshot) (statestore.Snapshot, error) {
		return planner.NewOverlay(noFiles{}), nil
	}, Commit: func(context.Context, *Change) (Outcome, error) {
		b.commits++
		b.clock.now = b.clock.now.Add(time.Second)
		if b.commits <= b.lose {
			return Outcome{}, &ConflictError{Op: "write", What: "another writer was first"}
		}
		return Outcome{}, nil
	}}, nil
}

// TestLostRacesAreProgress: a write that keeps losing races to other
// writers whose writes land is not given up at its retry deadline: each
// lost race moves the deadline on (wait.Progress), so contention alone
// never spends it. Here every commit takes a second and the budget is
// three: the write lands at its eleventh attempt, twelve seconds in.
func TestLostRacesAreProgress(t *testing.T) {
	clock := &raceClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	ctx := wait.WithRetryDeadline(wait.WithClock(context.Background(), clock), 3*time.Second)
	u := statestore.Update{Workload: "w/a", Files: map[string][]byte{"d/x.yaml": []byte("x\n")}, Record: &statestore.Record{}}
	b := &losingBackend{clock: clock, lose: 10}
	res, err := Write(ctx, b, RetryPolicy{Limit: 100 * time.Millisecond}, []statestore.Update{u})
	if err != nil || res.Attempts != 11 {
		t.Fatalf("a write that lost 10 races of a second each, budget 3s: %d attempts, %v; want 11, landed", res.Attempts, err)
	}
}
