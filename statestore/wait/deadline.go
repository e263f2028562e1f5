package wait

import (
	"context"
	"fmt"
	"sync"
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
// The deadline is a limit for a store that is down, not for one that is
// busy: each time the render sees the store up and busy (a race it lost to
// another writer, a request the server took, a poll it answered while the
// render waited in line, a lock that changed hands), Progress moves the
// deadline to one budget from then. Contention alone so never makes a
// render give up while the group it waits on makes progress, however slow
// the server. So that no render runs unbounded, the deadline never moves
// past Extended(budget) from the start: four budgets (8 minutes by
// default).
//
// What is retried is decided by type, never by an error's text: an error is
// retried when it wraps statestore.ErrUnreachable, and backends wrap a raw
// error in it only when driver.Transient says so (or when their protocol
// says so: an HTTP 503, S3's SlowDown).

// DefaultRetryDeadline is the retry budget of a render that sets none.
const DefaultRetryDeadline = 2 * time.Minute

// extendedBudgets is how many budgets, from its start, progress may move a
// retry deadline to (see Extended).
const extendedBudgets = 4

// Extended is the latest a retry deadline of budget may be moved to by
// progress, counted from the render's start: the longest a render's waits
// may last, however busy the store.
func Extended(budget time.Duration) time.Duration {
	if budget <= 0 {
		budget = DefaultRetryDeadline
	}
	return extendedBudgets * budget
}

type deadlineKey struct{}

// retryDeadline is a render's deadline, shared by every context derived
// from the one WithRetryDeadline returned, so that progress seen anywhere
// in the render moves it for all of its waits.
type retryDeadline struct {
	budget time.Duration
	start  time.Time
	limit  time.Time // the latest at may become

	mu    sync.Mutex
	at    time.Time
	moved int // how many times progress moved at
}

func (d *retryDeadline) get() (time.Time, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.at, d.moved
}

// WithRetryDeadline starts the render's retry clock: from now, every retry of
// every store stops once budget has passed without progress (see Progress).
// A budget of zero or less means DefaultRetryDeadline.
func WithRetryDeadline(ctx context.Context, budget time.Duration) context.Context {
	if budget <= 0 {
		budget = DefaultRetryDeadline
	}
	now := Now(ctx)
	return context.WithValue(ctx, deadlineKey{}, &retryDeadline{
		budget: budget, start: now, at: now.Add(budget), limit: now.Add(Extended(budget)),
	})
}

// EnsureRetryDeadline returns ctx unchanged when it already carries a retry
// deadline, and otherwise starts one of budget from now.
func EnsureRetryDeadline(ctx context.Context, budget time.Duration) context.Context {
	if _, ok := ctx.Value(deadlineKey{}).(*retryDeadline); ok {
		return ctx
	}
	return WithRetryDeadline(ctx, budget)
}

// RetryDeadline returns the render's retry deadline as progress left it,
// and its budget. Without one in ctx it is DefaultRetryDeadline from now.
func RetryDeadline(ctx context.Context) (at time.Time, budget time.Duration) {
	if d, ok := ctx.Value(deadlineKey{}).(*retryDeadline); ok {
		at, _ := d.get()
		return at, d.budget
	}
	return Now(ctx).Add(DefaultRetryDeadline), DefaultRetryDeadline
}

// Progress says that the render saw the store up and busy rather than
// down: another writer's write landed (a race this render lost), the
// server took this render's work, or it answered while the render waited
// in a line whose turns bound the wait (git's group commit).
// It moves the render's retry deadline to one budget from now, never past
// Extended(budget) from the render's start, and never earlier than it was.
// Without a deadline in ctx it does nothing.
func Progress(ctx context.Context) {
	d, ok := ctx.Value(deadlineKey{}).(*retryDeadline)
	if !ok {
		return
	}
	next := Now(ctx).Add(d.budget)
	d.mu.Lock()
	defer d.mu.Unlock()
	if next.After(d.limit) {
		next = d.limit
	}
	if next.After(d.at) {
		d.at = next
		d.moved++
	}
}

// Sent is the deadline of work already sent to the server (a push, a
// commit of several uploads), which must not be cut off half-way: the
// latest the retry deadline may be moved to (Extended from the render's
// start). A server that took the work and is busy with it is not down, and
// cutting off a push it is working on only makes it do the work again (64
// renders' first pushes at once into Gitea, beside a busy loop per core,
// took over two and a half minutes each); a server that stops answering
// mid-push so costs a render at most that. A caller adds its own grace.
func Sent(ctx context.Context) time.Time {
	d, ok := ctx.Value(deadlineKey{}).(*retryDeadline)
	if !ok {
		at, _ := RetryDeadline(ctx)
		return at
	}
	return d.limit
}

// gaveUp says how long the render waited, for the error of a wait that
// would pass its retry deadline.
func gaveUp(ctx context.Context, tries int) string {
	d, ok := ctx.Value(deadlineKey{}).(*retryDeadline)
	if !ok {
		return fmt.Sprintf("gave up after %s, %d tries", DefaultRetryDeadline, tries)
	}
	at, moved := d.get()
	switch {
	case moved == 0:
		return fmt.Sprintf("gave up after %s, %d tries", d.budget, tries)
	case at.Equal(d.limit):
		return fmt.Sprintf("gave up after %s, the longest a render waits on a busy store (%d times its retry deadline), %d tries",
			Since(ctx, d.start).Round(time.Second), extendedBudgets, tries)
	}
	return fmt.Sprintf("gave up after %s, the last %s of it without progress, %d tries",
		Since(ctx, d.start).Round(time.Second), d.budget, tries)
}
