package wait_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/wait"
)

// stepClock is a Clock whose Sleep only moves its time forward.
type stepClock struct {
	mu    sync.Mutex
	now   time.Time
	slept []time.Duration
}

func (c *stepClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *stepClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.slept = append(c.slept, d)
	c.mu.Unlock()
	return ctx.Err()
}

func newStepClock() *stepClock {
	return &stepClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// TestClockDrivesRetries: the retry deadline and every backoff read the
// context's clock, so a retry loop against a store that stays unreachable
// spends the whole budget of the fake clock and no real time.
func TestClockDrivesRetries(t *testing.T) {
	clk := newStepClock()
	ctx := wait.WithClock(context.Background(), clk)
	ctx = wait.WithRetryDeadline(ctx, time.Hour)
	at, _ := wait.RetryDeadline(ctx)
	if want := clk.Now().Add(time.Hour); !at.Equal(want) {
		t.Fatalf("deadline %v, want %v (from the context's clock)", at, want)
	}
	start := time.Now()
	tries := 0
	err := wait.Unreachable(30*time.Second).Retry(ctx, func() error { tries++; return statestore.ErrUnreachable })
	if !errors.Is(err, statestore.ErrDeadline) {
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
	if _, ok := wait.ClockOf(context.Background()).(wait.RealClock); !ok {
		t.Fatal("a context without a clock must use the real one")
	}
}

// TestOneDeadlinePerRender: the retry clock starts once per render, so a
// second operation after the first used up the budget gets one try, not a
// budget of its own.
func TestOneDeadlinePerRender(t *testing.T) {
	ctx := wait.WithRetryDeadline(context.Background(), 150*time.Millisecond)
	down := fmt.Errorf("%w: connection refused", statestore.ErrUnreachable)
	first := 0
	err := wait.Unreachable(20*time.Millisecond).Retry(ctx, func() error { first++; return down })
	if !errors.Is(err, statestore.ErrDeadline) || !errors.Is(err, statestore.ErrUnreachable) {
		t.Fatalf("first operation: err = %v, want it to wrap ErrDeadline and ErrUnreachable", err)
	}
	if first < 2 {
		t.Fatalf("first operation was tried %d times; an unreachable store is retried until the deadline", first)
	}
	// Retry gives up as soon as the next wait would end past the deadline,
	// which can be a moment before it: let the deadline itself pass.
	at, _ := wait.RetryDeadline(ctx)
	time.Sleep(time.Until(at) + time.Millisecond)
	second := 0
	err = wait.Unreachable(20*time.Millisecond).Retry(ctx, func() error { second++; return down })
	if !errors.Is(err, statestore.ErrDeadline) {
		t.Fatalf("second operation: err = %v, want ErrDeadline", err)
	}
	if second != 1 {
		t.Fatalf("second operation of the same render was tried %d times after the render's deadline passed, want 1", second)
	}
	// A conflict is waited on under the same clock.
	if err := wait.LostRace(time.Second).Pause(ctx, 1, statestore.ErrConflict); !errors.Is(err, statestore.ErrDeadline) || !errors.Is(err, statestore.ErrConflict) {
		t.Fatalf("Pause after the deadline = %v, want ErrDeadline wrapping ErrConflict", err)
	}
}

func TestRetryStopsAtOnceOnPermanentErrors(t *testing.T) {
	ctx := wait.WithRetryDeadline(context.Background(), time.Minute)
	n := 0
	err := wait.Unreachable(time.Millisecond).Retry(ctx, func() error { n++; return statestore.ErrAuth })
	if !errors.Is(err, statestore.ErrAuth) || n != 1 {
		t.Fatalf("Retry on ErrAuth: err = %v after %d tries, want ErrAuth after 1", err, n)
	}
}

// TestDelayKeepsEachLoopsNumbers: the waits every loop had before it used
// Policy, try by try.
func TestDelayKeepsEachLoopsNumbers(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name string
		p    wait.Policy
		want []time.Duration // tries 1, 2, ...
	}{
		{"lost race, 1s", wait.LostRace(time.Second), []time.Duration{40 * ms, 80 * ms, 160 * ms, 320 * ms, 640 * ms, time.Second, time.Second}},
		{"unreachable, 2s", wait.Unreachable(2 * time.Second), []time.Duration{320 * ms, 640 * ms, 1280 * ms, 2 * time.Second, 2 * time.Second}},
		{"fixed", wait.Policy{First: 500 * ms, Growth: 1}, []time.Duration{500 * ms, 500 * ms, 500 * ms}},
		{"watch backoff 1s-30s", wait.Policy{First: time.Second, Limit: 30 * time.Second}, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}},
		{"half more each time", wait.Policy{First: 300 * ms, Growth: 1.5, Limit: time.Second}, []time.Duration{300 * ms, 450 * ms, 675 * ms, time.Second}},
		{"no wait", wait.Policy{}, []time.Duration{0, 0}},
	}
	for _, c := range cases {
		for i, want := range c.want {
			if got := c.p.Delay(i + 1); got != want {
				t.Errorf("%s: Delay(%d) = %v, want %v", c.name, i+1, got, want)
			}
		}
	}
	if got := (wait.Policy{First: time.Hour}).Delay(1000); got <= 0 {
		t.Errorf("an uncapped policy overflowed: Delay(1000) = %v", got)
	}
}

func TestJitterStaysWithinItsPart(t *testing.T) {
	p := wait.Policy{First: 40 * time.Millisecond, Limit: time.Second, Jitter: 0.5}
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := p.Next(1)
		if d < 20*time.Millisecond || d > 40*time.Millisecond {
			t.Fatalf("Next(1) = %v, want 20ms to 40ms", d)
		}
		seen[d] = true
	}
	if len(seen) < 100 {
		t.Fatalf("1000 jittered waits took %d values: not drawn at random", len(seen))
	}
	if d := p.Jittered(time.Hour); d > time.Second {
		t.Fatalf("Jittered(1h) = %v, past the limit", d)
	}
	if d := (wait.Policy{First: time.Second}).Next(1); d != time.Second {
		t.Fatalf("without jitter Next(1) = %v, want 1s exactly", d)
	}
}

// TestForIsTheDeadlineRule: a wait that would end past the deadline is
// not begun; one that ends before it is slept on the context's clock.
func TestForIsTheDeadlineRule(t *testing.T) {
	clk := newStepClock()
	ctx := wait.WithRetryDeadline(wait.WithClock(context.Background(), clk), time.Minute)
	cause := fmt.Errorf("%w: the branch kept moving", statestore.ErrConflict)
	if err := wait.For(ctx, time.Minute, 3, cause); err != nil {
		t.Fatalf("a wait that ends at the deadline: %v", err)
	}
	err := wait.For(ctx, time.Nanosecond, 4, cause)
	if !errors.Is(err, statestore.ErrDeadline) || !errors.Is(err, statestore.ErrConflict) {
		t.Fatalf("a wait past the deadline = %v, want ErrDeadline wrapping the cause", err)
	}
	if len(clk.slept) != 1 || clk.slept[0] != time.Minute {
		t.Fatalf("slept %v on the context's clock, want [1m]", clk.slept)
	}
	if err := wait.For(ctx, time.Nanosecond, 4, nil); !errors.Is(err, statestore.ErrDeadline) {
		t.Fatalf("without a cause: %v, want ErrDeadline", err)
	}
	done, cancel := context.WithCancel(wait.WithRetryDeadline(ctx, time.Hour))
	cancel()
	if err := wait.For(done, time.Second, 1, cause); !errors.Is(err, context.Canceled) || !errors.Is(err, statestore.ErrConflict) {
		t.Fatalf("a cancelled wait = %v, want context.Canceled wrapping the cause", err)
	}
}

// TestWithinKeepsTheSoonerDeadline: a loop's own limit never outlasts the
// render's deadline, and shortens it for that loop only.
func TestWithinKeepsTheSoonerDeadline(t *testing.T) {
	clk := newStepClock()
	ctx := wait.WithRetryDeadline(wait.WithClock(context.Background(), clk), time.Minute)
	render, _ := wait.RetryDeadline(ctx)
	if at, _ := wait.RetryDeadline(wait.Within(ctx, time.Hour)); !at.Equal(render) {
		t.Fatalf("Within(1h) of a render with a minute left: deadline %v, want the render's %v", at, render)
	}
	if at, _ := wait.RetryDeadline(wait.Within(ctx, 15*time.Second)); !at.Equal(clk.Now().Add(15 * time.Second)) {
		t.Fatalf("Within(15s): deadline %v, want %v", at, clk.Now().Add(15*time.Second))
	}
}
