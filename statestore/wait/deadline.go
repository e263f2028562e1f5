package wait

import (
	"context"
	"time"
)

// The render's retry deadline.
//
// A render has ONE retry deadline: WithRetryDeadline starts its clock when
// the render starts, and every wait of every store during that render (an
// unreachable server, a lost race for a branch or an object) stops once it
// has passed. A backend asked to work with no deadline in its context starts
// one of its own with EnsureRetryDeadline, so nothing retries forever.
//
// What is retried is decided by type, never by an error's text: an error is
// retried when it wraps statestore.ErrUnreachable, and backends wrap a raw
// error in it only when driver.Transient says so (or when their protocol
// says so: an HTTP 503, S3's SlowDown).

// DefaultRetryDeadline is the retry budget of a render that sets none.
const DefaultRetryDeadline = 2 * time.Minute

type deadlineKey struct{}

type retryDeadline struct {
	at     time.Time
	budget time.Duration
}

// WithRetryDeadline starts the render's retry clock: from now, every retry of
// every store stops once budget has passed. A budget of zero or less means
// DefaultRetryDeadline.
func WithRetryDeadline(ctx context.Context, budget time.Duration) context.Context {
	if budget <= 0 {
		budget = DefaultRetryDeadline
	}
	return context.WithValue(ctx, deadlineKey{}, retryDeadline{at: Now(ctx).Add(budget), budget: budget})
}

// EnsureRetryDeadline returns ctx unchanged when it already carries a retry
// deadline, and otherwise starts one of budget from now.
func EnsureRetryDeadline(ctx context.Context, budget time.Duration) context.Context {
	if _, ok := ctx.Value(deadlineKey{}).(retryDeadline); ok {
		return ctx
	}
	return WithRetryDeadline(ctx, budget)
}

// RetryDeadline returns the render's retry deadline and its budget. Without
// one in ctx it is DefaultRetryDeadline from now.
func RetryDeadline(ctx context.Context) (at time.Time, budget time.Duration) {
	if d, ok := ctx.Value(deadlineKey{}).(retryDeadline); ok {
		return d.at, d.budget
	}
	return Now(ctx).Add(DefaultRetryDeadline), DefaultRetryDeadline
}
