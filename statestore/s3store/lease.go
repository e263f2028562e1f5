package s3store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/wait"
)

// An intent's lease.
//
// A write names its intent in the workload's record (withPending) before it
// uploads or deletes anything, and its intent carries a lease: which write
// named it (s3Writer) and until when (s3Until, on the writer's clock). S3
// cannot fence what a write still sends once another write of the same
// workload has taken its intent over: a late upload would land owned by no
// record, and a late delete (S3 has no conditional DELETE) would remove a
// file the other write had just committed (the simulated campaign's s3 seed
// 1085: a starved drain deleted a render's committed file). So:
//
//   - the writer sends an upload or a delete only while its lease has more
//     than leaseMargin left, on its own clock, and each such request runs on
//     a context that ends then (a request is never sent past its context's
//     deadline);
//   - it renews the lease as it goes, once the lease is leaseRenew old, by
//     writing the intent again with a later s3Until, conditioned on the ETag
//     of its last write of the record (so its commit, and any renewal,
//     follows its own chain of ETags, and fails if anyone else wrote the
//     record meanwhile);
//   - a writer that cannot renew (the record changed, the server does not
//     answer in time) or whose lease ran out (it was starved, or a request
//     stalled) sends nothing more on that intent: the attempt is a lost race,
//     and the write plans again on a fresh listing, under a new intent and
//     lease, or gives up at its retry deadline, leaving its intent for the
//     workload's next write to settle, as any write cut off does;
//   - another write of the workload does not write over an intent whose lease
//     holds: it waits (polling the record) until the lease ended leaseSkew
//     ago by its own clock, or the record changed, and then plans again; a
//     write that ends without committing lets go of its lease (release).
//
// A writer thus sends its last request of an intent at least leaseMargin +
// leaseSkew - (the clocks' disagreement) before anyone else takes the intent
// over: that is the time a request sent just in time has to land. And a
// writer that died (SIGKILL, a crash) holds up the workload's next write for
// at most leaseTerm + leaseSkew after its last renewal, whatever its retry
// deadline.
const (
	// leaseTerm is how long a lease lasts from its writing: long enough that
	// a request sent just after a renewal (leaseTerm - leaseRenew -
	// leaseMargin = 10 s before the writer must stop) lands on a loaded
	// machine, short enough that a dead writer's intent holds up the next
	// render (whose own retry deadline is 2 minutes by default) by a small
	// part of its budget.
	leaseTerm = 20 * time.Second
	// leaseRenew is the age at which a writer renews its lease before its
	// next upload or delete: one conditional PUT of the record every 5 s
	// of a long write.
	leaseRenew = 5 * time.Second
	// leaseMargin is the end of a lease in which its writer sends nothing:
	// time for a request sent just before to reach the server.
	leaseMargin = 5 * time.Second
	// leaseSkew is how far the clocks of two writers of one store may
	// disagree: a lease holds for the others this long after its end.
	leaseSkew = 5 * time.Second
	// leasePoll is how often a write waiting for another's lease looks at
	// the record again.
	leasePoll = 2 * time.Second
)

// lease is who named an intent, and until when (the zero lease: nobody; an
// intent let go of, or written by an older render).
type lease struct {
	Writer string
	Until  time.Time
}

// heldFor reports whether l still holds its intent at now against writer
// id, a write other than l's.
func (l lease) heldFor(id string, now time.Time) bool {
	return l.Writer != "" && l.Writer != id && now.Before(l.Until.Add(leaseSkew))
}

// storedLease returns the lease of a stored record's intent.
func storedLease(stored []byte) lease {
	var probe struct {
		Writer string    `json:"s3Writer"`
		Until  time.Time `json:"s3Until"`
	}
	if json.Unmarshal(stored, &probe) != nil {
		return lease{}
	}
	return lease{Writer: probe.Writer, Until: probe.Until}
}

// errLapsed is a write's lease that ran out or could not be renewed: the
// write sends nothing more on its intent (a lost race: it plans again).
var errLapsed = fmt.Errorf("%w: the write's lease on its intent ran out", errChanged)

// holder is a write's hold on the intent it named: the record as it wrote
// it, the ETag of its last write of it and its lease's end.
type holder struct {
	s       *Store
	recPath string
	id      string
	sealed  []byte
	pending []string

	mu      sync.Mutex
	etag    string
	until   time.Time
	renewed time.Time
	lost    error // once set, the write sends nothing more on this intent
	cut     bool  // a request was cut off by the lease's end (see release)
}

// acquire names the intent (pending, on the sealed record) under a fresh
// lease of write id, conditioned on c (the record as listed).
func (s *Store) acquire(ctx context.Context, recPath, id string, sealed []byte, pending []string, c cond) (*holder, error) {
	h := &holder{s: s, recPath: recPath, id: id, sealed: sealed, pending: pending}
	now := wait.Now(ctx)
	etag, err := s.put(ctx, recPath, withPending(sealed, pending, lease{Writer: id, Until: now.Add(leaseTerm)}), c)
	if err != nil {
		return nil, err
	}
	h.etag, h.until, h.renewed = etag, now.Add(leaseTerm), now
	return h, nil
}

// cond is the precondition of the writer's next write of the record.
func (h *holder) cond() cond {
	h.mu.Lock()
	defer h.mu.Unlock()
	return cond{exists: true, etag: h.etag}
}

// act sends one upload or delete of the write (req) within its lease: it
// renews the lease when due and refuses once the lease has leaseMargin or
// less left; req's context ends then. A request cut off by that end may
// have reached the server (maybeSentError).
func (h *holder) act(ctx context.Context, req func(context.Context) error) error {
	if h == nil {
		return req(ctx)
	}
	by, err := h.keep(ctx)
	if err != nil {
		return err
	}
	rctx, cancel := wait.WithDeadline(ctx, by)
	defer cancel()
	err = req(rctx)
	if err != nil && rctx.Err() != nil && ctx.Err() == nil {
		h.mu.Lock()
		h.lost, h.cut = errLapsed, true
		h.mu.Unlock()
		return &maybeSentError{fmt.Errorf("%w (%v)", errLapsed, err)}
	}
	return err
}

// keep renews the lease when it is leaseRenew old and returns the time
// until which the writer may send; an error once the lease ran out or
// could not be renewed.
func (h *holder) keep(ctx context.Context) (time.Time, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost != nil {
		return time.Time{}, h.lost
	}
	now := wait.Now(ctx)
	by := h.until.Add(-leaseMargin)
	if now.Before(by) && !now.Before(h.renewed.Add(leaseRenew)) {
		rctx, cancel := wait.WithDeadline(ctx, by)
		until := now.Add(leaseTerm)
		etag, err := h.s.put(rctx, h.recPath, withPending(h.sealed, h.pending, lease{Writer: h.id, Until: until}), cond{exists: true, etag: h.etag})
		cancel()
		if err != nil {
			// Its answer may be lost with the renewal landed: the ETag
			// chain is broken either way, and the commit will find it.
			h.lost = fmt.Errorf("%w (renewal: %v)", errLapsed, err)
			if ctx.Err() != nil || errors.Is(err, statestore.ErrAuth) {
				h.lost = err
			}
			return time.Time{}, h.lost
		}
		h.etag, h.until, h.renewed = etag, until, now
		by = until.Add(-leaseMargin)
	}
	if !wait.Now(ctx).Before(by) {
		h.lost = errLapsed
		return time.Time{}, h.lost
	}
	return by, nil
}

// release lets go of the lease when the write ends without committing:
// the intent stays, for the workload's next write to settle, which then
// need not wait. Conditioned on the writer's last ETag: a record moved
// since is left as it is, and a failure leaves the lease to run out. A
// lease that cut a request off is left to run out too: the server may
// still carry that request out, until the lease's margin has passed.
func (h *holder) release(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cut {
		return
	}
	ctx, cancel := wait.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	etag, err := h.s.put(ctx, h.recPath, withPending(h.sealed, h.pending, lease{}), cond{exists: true, etag: h.etag})
	if err != nil {
		if h.s.cfg.Debug != nil {
			h.s.cfg.Debug("could not let go of a write's lease; it runs out by itself", "record", h.recPath, "error", err.Error())
		}
		return
	}
	h.etag, h.lost = etag, errLapsed
}

// awaitLease waits while l, another write's lease on the workload's intent,
// holds against write id: until it ended leaseSkew ago (renewals extend
// it), or the record no longer names that write's lease (it committed or
// let go, or another write took the intent over: the caller plans again
// on what the record says then). It does not wait past the render's retry
// deadline, which each renewal of l moves on (wait.Progress).
func (s *Store) awaitLease(ctx context.Context, recPath, id string, l lease) error {
	for {
		now := wait.Now(ctx)
		if !l.heldFor(id, now) {
			return nil
		}
		err := wait.For(ctx, min(leasePoll, l.Until.Add(leaseSkew).Sub(now)), 0, nil)
		if errors.Is(err, statestore.ErrDeadline) {
			return nil // the write loop gives up after this lost race
		}
		if err != nil {
			return err
		}
		raw, err := s.get(ctx, recPath, "")
		if err != nil {
			return nil // planned again, the listing says what happened
		}
		next := storedLease(raw)
		if next.Writer != l.Writer {
			return nil // committed, let go of or taken over: plan again
		}
		if next.Until.After(l.Until) {
			// Renewed: the write that holds it is alive and working, so
			// the store is busy, not down.
			wait.Progress(ctx)
		}
		l = next
	}
}
