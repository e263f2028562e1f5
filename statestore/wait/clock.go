package wait

import (
	"context"
	"time"
)

// Clock is where render's waits and deadlines read the time: every
// backoff, poll, lease and retry deadline of a write goes through the
// Clock its context carries (WithClock), the real one by default, and so
// does every context deadline a write sets itself (WithTimeout). A test
// or a simulation that controls the clock controls every wait of a write,
// so waiting costs it no real time; network I/O still runs in real time.
type Clock interface {
	// Now is the current time.
	Now() time.Time
	// Sleep waits d, or until ctx is done (then it returns ctx's error).
	Sleep(ctx context.Context, d time.Duration) error
}

// DeadlineClock is a Clock that also ends contexts at its own times: a
// Clock whose time is not the machine's must be one, or a deadline set on
// it (WithDeadline) would fire by the machine's time. RealClock need not.
type DeadlineClock interface {
	Clock
	// WithDeadline is context.WithDeadline on this clock: the returned
	// context's Deadline is at, and it is done with
	// context.DeadlineExceeded once the clock reaches at.
	WithDeadline(ctx context.Context, at time.Time) (context.Context, context.CancelFunc)
}

type clockKey struct{}

// WithClock makes every wait and deadline of what runs on ctx read c.
func WithClock(ctx context.Context, c Clock) context.Context {
	return context.WithValue(ctx, clockKey{}, c)
}

// ClockOf is the Clock ctx carries: the real one unless WithClock said
// otherwise.
func ClockOf(ctx context.Context) Clock {
	if c, ok := ctx.Value(clockKey{}).(Clock); ok && c != nil {
		return c
	}
	return RealClock{}
}

// Now is ClockOf(ctx).Now().
func Now(ctx context.Context) time.Time { return ClockOf(ctx).Now() }

// Since is the time elapsed since t on ctx's clock.
func Since(ctx context.Context, t time.Time) time.Duration { return Now(ctx).Sub(t) }

// Sleep waits d or until ctx is done, whichever is first, on ctx's Clock.
func Sleep(ctx context.Context, d time.Duration) error {
	return ClockOf(ctx).Sleep(ctx, d)
}

// WithDeadline is context.WithDeadline on ctx's clock.
func WithDeadline(ctx context.Context, at time.Time) (context.Context, context.CancelFunc) {
	if c, ok := ClockOf(ctx).(DeadlineClock); ok {
		return c.WithDeadline(ctx, at)
	}
	return context.WithDeadline(ctx, at)
}

// WithTimeout is context.WithTimeout on ctx's clock.
func WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return WithDeadline(ctx, Now(ctx).Add(d))
}

// RealClock is the machine's clock.
type RealClock struct{}

// Now is time.Now.
func (RealClock) Now() time.Time { return time.Now() }

// Sleep waits d or until ctx is done, whichever is first.
func (RealClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
