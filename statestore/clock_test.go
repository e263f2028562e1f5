package statestore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// stepClock is a Clock whose Sleep only moves its time forward.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *stepClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	return ctx.Err()
}

// TestClockDrivesRetries: the retry deadline and every backoff read the
// context's clock, so a retry loop against a store that stays unreachable
// spends the whole budget of the fake clock and no real time.
func TestClockDrivesRetries(t *testing.T) {
	clk := &stepClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	ctx := WithClock(context.Background(), clk)
	ctx = WithRetryDeadline(ctx, time.Hour)
	at, _ := RetryDeadline(ctx)
	if want := clk.Now().Add(time.Hour); !at.Equal(want) {
		t.Fatalf("deadline %v, want %v (from the context's clock)", at, want)
	}
	start := time.Now()
	tries := 0
	err := Retry(ctx, 30*time.Second, func() error { tries++; return ErrUnreachable })
	if !errors.Is(err, ErrDeadline) {
		t.Fatalf("Retry = %v, want the retry deadline", err)
	}
	if clk.Now().Before(at.Add(-30 * time.Second)) {
		t.Fatalf("fake clock at %v: the loop gave up long before the deadline %v", clk.Now(), at)
	}
	if tries < 100 {
		t.Fatalf("%d tries in an hour of 30s-capped backoff: want more than 100", tries)
	}
	if real := time.Since(start); real > 5*time.Second {
		t.Fatalf("an hour of fake waiting took %v of real time", real)
	}
	if _, ok := ClockOf(context.Background()).(RealClock); !ok {
		t.Fatal("a context without a clock must use the real one")
	}
}
