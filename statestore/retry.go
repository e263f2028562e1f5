package statestore

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is the wait before retry number attempt (1, 2, ...): it doubles
// from 20ms up to limit, with jitter, so writers that collided once do not
// collide again in lockstep. Both backends use it for lost races and
// unreachable servers.
func Backoff(attempt int, limit time.Duration) time.Duration {
	d := 20 * time.Millisecond << min(max(attempt, 0), 16)
	d = min(d, limit)
	return d/2 + rand.N(d/2+1)
}

// Sleep waits d or until ctx is done, whichever is first.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
