// Package wait is how render waits between two tries of anything: one
// Policy (the first wait, how each wait grows, its cap, the part of it
// drawn at random) and one deadline rule (For): a wait that would end
// past the render's one retry deadline (WithRetryDeadline,
// RetryDeadline: deadline.go) is not begun, and every wait is slept on
// the Clock the context carries (WithClock: clock.go), so a test or the
// simulated fault campaign that controls the clock controls every wait.
// Classify (classify.go) says what a loop does with an error: plan again
// after another writer was first, try the same again once the server
// answers, or give up. The errors a caller tests with errors.Is
// (statestore.ErrUnreachable, ErrConflict, ErrDeadline) stay in the
// contract, statestore.
//
// Every waiting loop uses it, each with its own numbers: a lost race in
// the write loop (driver.RetryPolicy, LostRace), a server that cannot be
// reached (Unreachable, Retry), git's group-commit polls, S3's wait for
// another write's lease, OCI's writers' lock queue, the engine's redo of
// a stale render and its pull-request polls, the forge's retries of a new
// repository, and watch mode's backoff after a failed render (Delay
// alone: that wait is a timer of the watch's own clock, and no render's
// deadline bounds it). Loop is the one loop of a retry, whatever error it
// retries (Retry's ErrUnreachable, driver.RetryPolicy.Conflicts's
// ErrConflict).
package wait

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/render-dev/render/statestore"
)

// Policy is how one loop waits between tries. The wait after try n is
// First times Growth^(n-1), at most Limit, of which the part Jitter is
// drawn at random.
type Policy struct {
	// First is the wait after the first try.
	First time.Duration
	// Growth multiplies each wait by the one before; 0 means 2 (the wait
	// doubles), 1 a fixed wait.
	Growth float64
	// Limit caps a wait; 0 means no cap.
	Limit time.Duration
	// Jitter, from 0 to 1, is the part of each wait drawn at random: a
	// wait d lasts from d*(1-Jitter) to d. Writers that collided once then
	// do not collide again in lockstep. 0 waits exactly.
	Jitter float64
}

// LostRace is the wait after another writer was first: from 40ms,
// doubling, up to limit, half of it at random.
func LostRace(limit time.Duration) Policy {
	return Policy{First: 40 * time.Millisecond, Limit: limit, Jitter: 0.5}
}

// Unreachable is the wait for a server that could not be reached: from
// 320ms, doubling, up to limit (1s for git, 2s for S3 and OCI), half of
// it at random.
func Unreachable(limit time.Duration) Policy {
	return Policy{First: 320 * time.Millisecond, Limit: limit, Jitter: 0.5}
}

// Delay is the wait after try n (1, 2, ...) before jitter: First times
// Growth^(n-1), at most Limit.
func (p Policy) Delay(n int) time.Duration {
	g := p.Growth
	if g == 0 {
		g = 2
	}
	d := p.First
	for i := 1; i < n && g > 1 && d > 0; i++ {
		if p.Limit > 0 && d >= p.Limit {
			break
		}
		next := float64(d) * g
		if next >= math.MaxInt64 {
			break
		}
		d = time.Duration(next)
	}
	if p.Limit > 0 {
		d = min(d, p.Limit)
	}
	return max(d, 0)
}

// Jittered is d, at most Limit, with the part Jitter of it drawn at
// random.
func (p Policy) Jittered(d time.Duration) time.Duration {
	if p.Limit > 0 {
		d = min(d, p.Limit)
	}
	if d <= 0 {
		return 0
	}
	j := time.Duration(float64(d) * min(max(p.Jitter, 0), 1))
	return d - j + rand.N(j+1)
}

// Next is the wait after try n: Delay(n), jittered.
func (p Policy) Next(n int) time.Duration { return p.Jittered(p.Delay(n)) }

// Pause waits Next(n) after try n of something that failed with cause,
// under the deadline rule (For).
func (p Policy) Pause(ctx context.Context, n int, cause error) error {
	return For(ctx, p.Next(n), n, cause)
}

// Retry runs op until it succeeds, fails with an error that does not wrap
// statestore.ErrUnreachable, or the render's retry deadline would pass
// during the next wait (Pause). op translates its own errors (see
// driver.Transient).
func (p Policy) Retry(ctx context.Context, op func() error) error {
	return Loop(ctx, statestore.ErrUnreachable, func(int) error { return op() },
		func(n int, err error) error { return p.Pause(ctx, n, err) })
}

// Loop is the loop of every retry, whatever it waits for: it runs try(1),
// try(2), ... while try fails with an error that wraps on and ctx is not
// done, and calls pause(n, err) after try n failed so; an error from
// pause ends it. It returns the last error of try, or pause's.
func Loop(ctx context.Context, on error, try func(n int) error, pause func(n int, err error) error) error {
	for n := 1; ; n++ {
		err := try(n)
		if err == nil || !errors.Is(err, on) || ctx.Err() != nil {
			return err
		}
		if err := pause(n, err); err != nil {
			return err
		}
	}
}

// For is the deadline rule every wait follows: it waits d on ctx's Clock,
// unless the render's retry deadline would pass meanwhile. Then it does
// not wait, and returns an error wrapping cause and
// statestore.ErrDeadline that says how many tries were made; when ctx
// ends during the wait, an error wrapping cause and ctx's error. A nil
// cause returns those errors alone.
func For(ctx context.Context, d time.Duration, tries int, cause error) error {
	at, _ := RetryDeadline(ctx)
	if Now(ctx).Add(d).After(at) {
		return wrap(cause, fmt.Errorf("%w: %s", statestore.ErrDeadline, gaveUp(ctx, tries)))
	}
	if err := Sleep(ctx, d); err != nil {
		return wrap(cause, err)
	}
	return nil
}

// Within is ctx with a retry deadline d from now, or the one it has when
// that one is sooner: for a loop with a limit of its own, within the
// render's.
func Within(ctx context.Context, d time.Duration) context.Context {
	if at, _ := RetryDeadline(ctx); Now(ctx).Add(d).Before(at) {
		return WithRetryDeadline(ctx, d)
	}
	return ctx
}

func wrap(cause, err error) error {
	if cause == nil {
		return err
	}
	return fmt.Errorf("%w (%w)", cause, err)
}
