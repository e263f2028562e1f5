package wait

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestEnsureRetryDeadlineKeepsTheRendersClock(t *testing.T) {
	ctx := WithRetryDeadline(context.Background(), time.Second)
	at, budget := RetryDeadline(ctx)
	at2, budget2 := RetryDeadline(EnsureRetryDeadline(ctx, time.Hour))
	if !at.Equal(at2) || budget != budget2 {
		t.Fatalf("EnsureRetryDeadline replaced the render's deadline: %v/%v -> %v/%v", at, budget, at2, budget2)
	}
	if _, b := RetryDeadline(EnsureRetryDeadline(context.Background(), time.Hour)); b != time.Hour {
		t.Fatalf("EnsureRetryDeadline without a deadline: budget %v, want 1h", b)
	}
}

// fixedClock stands still until moved.
type fixedClock struct{ now time.Time }

func (c *fixedClock) Now() time.Time { return c.now }
func (c *fixedClock) Sleep(ctx context.Context, d time.Duration) error {
	c.now = c.now.Add(d)
	return ctx.Err()
}

// TestProgressMovesTheDeadlineUpToFourBudgets: each time the render sees
// another writer land, its deadline moves to one budget from then (never
// earlier than it was), and never past four budgets from the start.
func TestProgressMovesTheDeadlineUpToFourBudgets(t *testing.T) {
	clock := &fixedClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	start := clock.now
	ctx := WithRetryDeadline(WithClock(context.Background(), clock), 10*time.Second)
	derived, cancel := context.WithCancel(ctx) // the render's contexts share its deadline
	defer cancel()

	clock.now = start.Add(8 * time.Second)
	if err := For(ctx, 3*time.Second, 1, nil); err == nil {
		t.Fatal("a wait past the deadline was begun without progress")
	}
	Progress(derived)
	if at, _ := RetryDeadline(ctx); !at.Equal(start.Add(18 * time.Second)) {
		t.Fatalf("after progress at 8s the deadline is %v, want 18s", at.Sub(start))
	}
	if err := For(ctx, 3*time.Second, 1, nil); err != nil {
		t.Fatalf("a wait within the moved deadline: %v", err)
	}
	clock.now = start.Add(9 * time.Second) // progress seen earlier than the last never moves it back
	Progress(ctx)
	if at, _ := RetryDeadline(ctx); !at.Equal(start.Add(19 * time.Second)) {
		t.Fatalf("deadline %v, want 19s", at.Sub(start))
	}
	for s := 20; s <= 60; s += 5 {
		clock.now = start.Add(time.Duration(s) * time.Second)
		Progress(ctx)
	}
	if at, _ := RetryDeadline(ctx); !at.Equal(start.Add(Extended(10 * time.Second))) {
		t.Fatalf("after progress at 60s the deadline is %v, want %v (four budgets)", at.Sub(start), Extended(10*time.Second))
	}
	clock.now = start.Add(39 * time.Second)
	err := For(ctx, 2*time.Second, 7, nil)
	if err == nil || !strings.Contains(err.Error(), "longest a render waits on a busy store") {
		t.Fatalf("a wait past four budgets: %v, want the limit named", err)
	}
	// A deadline of its own (Within) is not moved by the render's progress.
	within := Within(ctx, time.Second)
	Progress(ctx)
	if at, _ := RetryDeadline(within); !at.Equal(clock.now.Add(time.Second)) {
		t.Fatalf("Within's deadline moved with the render's: %v", at.Sub(clock.now))
	}
}

// TestSentWorkRunsToTheLatestDeadline: work already sent to the server may
// run until the latest the deadline may be moved to, four budgets from the
// start, wherever the deadline stands.
func TestSentWorkRunsToTheLatestDeadline(t *testing.T) {
	clock := &fixedClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	start := clock.now
	ctx := WithRetryDeadline(WithClock(context.Background(), clock), 10*time.Second)
	for _, at := range []time.Duration{0, 9 * time.Second, 35 * time.Second} {
		clock.now = start.Add(at)
		if got := Sent(ctx).Sub(start); got != Extended(10*time.Second) {
			t.Fatalf("sent at %v: until %v, want %v", at, got, Extended(10*time.Second))
		}
	}
	if at, _ := RetryDeadline(ctx); !at.Equal(start.Add(10 * time.Second)) {
		t.Fatalf("Sent moved the deadline itself: %v", at.Sub(start))
	}
	if got := time.Until(Sent(context.Background())); got < DefaultRetryDeadline-time.Second || got > DefaultRetryDeadline {
		t.Fatalf("Sent without a deadline: %v from now, want the default", got)
	}
}
