package driver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/planner"
	"github.com/render-dev/render/statestore/wait"
)

// The write loop, once for every backend.
//
// A backend supplies two things per write: a snapshot to plan on, and a
// conditional commit of what was planned. Write does the rest: it plans
// the updates (one on top of the other: a batch), asks the backend to
// commit, and when another writer moved first (the commit's error wraps
// ErrConflict) it waits as the RetryPolicy says and starts over on a fresh
// snapshot, where "is my desired state already there?" is the planner's own
// question: a plan that changes nothing ends the write. The first attempt
// plans on the view the caller read the store through, when it passes one
// (statestore.Update.View): the view is handed to the write, never kept in
// a backend, so a render reads each store once and its write plans on
// that read. Every wait of every attempt counts against the render's one
// retry deadline, which each lost race moves on (wait.Progress): it bounds
// the time a render goes without progress.
//
// What else a backend's write does is declared, not discovered: the
// Committer a backend begins with names every step it takes, and Write
// calls the steps that are set (Lost: hand the change to the next winner
// and wait, as git's group commit does; Finish and Release: after the last
// attempt), and no other.

// Backend is a store kind's side of Write.
type Backend interface {
	// String names the store for messages, with no credentials.
	String() string
	// Begin starts one write of us, validated by planner.ValidateUpdate.
	// Its Committer lives as long as the write: its steps may keep state
	// from attempt to attempt.
	Begin(ctx context.Context, us []statestore.Update) (Committer, error)
}

// Committer is one write in progress: the two steps every write has,
// Snapshot and Commit, and the optional steps a backend declares by
// setting them. Write calls no step that is nil.
type Committer struct {
	// Snapshot reads the view attempt number attempt plans on; from the
	// second attempt on (after a lost race) it must be the newest state.
	// view is the caller's view (statestore.Update.View) for the first
	// attempt, nil for the others and when the caller gave none: a
	// backend plans on it when it is one of its own (it may read afresh
	// instead), and never keeps it for a later write.
	Snapshot func(ctx context.Context, attempt int, view statestore.Snapshot) (statestore.Snapshot, error)
	// Commit publishes c.Plan, planned on c.Snapshot, only if the store
	// still holds what that snapshot read; otherwise it publishes nothing
	// (or nothing a reader can see) and returns an error wrapping
	// ErrConflict. With c.DryRun it writes nothing and says whether it
	// would. Other errors are classified by wait.Classify.
	Commit func(ctx context.Context, c *Change) (Outcome, error)

	// Revision names the revision a snapshot from Snapshot shows (a
	// commit, a digest): the Result's Revision when the commit writes
	// nothing. Unset, a Result names only what a commit wrote.
	Revision func(statestore.Snapshot) string

	// Lost, set by a backend that hands its change to the writers that
	// win a race (git's group commit) instead of only waiting, is called
	// after attempt lost a race with cause (which wraps ErrConflict), in
	// place of the policy's wait. It may wait; Outcome.Landed reports
	// that another writer published the change meanwhile. A nil error
	// and no landing means: plan again now. Lost must respect the
	// render's retry deadline and the policy's MaxAttempts (see
	// RetryPolicy.Wait).
	Lost func(ctx context.Context, c *Change, attempt int, cause error) (Outcome, error)
	// Abandon, set with Lost, is called when the write gives up with
	// err: it takes back what Lost handed over. Outcome.Landed reports
	// that the change had landed already, which makes the write a
	// success.
	Abandon func(ctx context.Context, c *Change, err error) Outcome

	// Unfinished, set by a backend whose commit is several steps a reader
	// can see one by one (S3's uploads before the record that commits
	// them), reports that the write is half-written. While it says so,
	// Write goes on past a cancellation of its context, until the commit
	// lands or the retry deadline passes, so that a write in flight ends
	// whole or not at all.
	Unfinished func() bool
	// Finish is work to do once the write ended, whatever its outcome
	// (S3 settles the load summaries it announced).
	Finish func(ctx context.Context)
	// Release is set by a backend that may hold the store from one
	// attempt to the next (OCI's writers' lock). It is called once the
	// write ended, whatever its outcome, with the error it ends with (nil
	// when it landed); the write returns what Release returns, so that a
	// lock that could not be let go is never dropped.
	Release func(ctx context.Context, err error) error

	// Debug logs the write loop's own lines (each attempt's plan, each
	// wait) at debug level, naming the store; unset, they are not logged.
	Debug func(msg string, args ...any)
}

// Finishing returns a context for work that must not be cut off half-way
// once it has started (a push, a commit of several uploads): not cancelled
// with ctx, and done a little after wait.Sent: the latest ctx's retry
// deadline may be moved to (a busy server that took the work is not a
// server that is down).
func Finishing(ctx context.Context) (context.Context, context.CancelFunc) {
	return wait.WithDeadline(context.WithoutCancel(ctx), wait.Sent(ctx).Add(finishGrace))
}

// finishGrace is how long finishing work may outlast the retry deadline.
const finishGrace = 30 * time.Second

// Change is what one attempt of a write planned.
type Change struct {
	// Updates are the write's updates, in order.
	Updates []statestore.Update
	// Snapshot is what they were planned on.
	Snapshot statestore.Snapshot
	// Plans are each update's plan, each made on top of the ones before.
	Plans []planner.Plan
	// Plan is every plan's operations and diff, in order.
	Plan planner.Plan
	// Message is the commit message for Plan's diff: the first update's
	// (see Update.MessageFor).
	Message statestore.Message
	// DryRun is the first update's: compute, write nothing.
	DryRun bool
	// Attempt numbers the attempt, from 1.
	Attempt int
}

// Outcome is what a Commit did.
type Outcome struct {
	// Revision identifies what the store holds now (a commit, an ETag, a
	// digest); empty keeps the snapshot's.
	Revision string
	// Wrote is set when the commit wrote (with DryRun: would write)
	// although the plan changes no file: a repair of the backend's own
	// bookkeeping (S3 markers, OCI tags).
	Wrote bool
	// Landed is set when another writer published the change (see
	// Committer.Lost).
	Landed bool
	// View, when set, is the store as the commit left it: the Result's
	// View (see statestore.Result).
	View statestore.Snapshot
	// Diff, when set, replaces the plan's diff in the write's Result:
	// with Landed, the change as it was planned when it was handed over (a
	// fresh plan finds nothing left to do); from a store whose lost
	// attempts may have written already (S3), what every attempt so far
	// changed.
	Diff *statestore.Diff
}

// RetryPolicy is how a store waits for another writer and for an
// unreachable server.
type RetryPolicy struct {
	// Limit caps one wait after a lost race (default 1s): waits grow from
	// 40ms, half of each at random, up to it (wait.LostRace).
	Limit time.Duration
	// MaxAttempts, when positive, also bounds how many times a write is
	// planned. By default only the render's retry deadline bounds it: a busy
	// store is never a failure while there is time left.
	MaxAttempts int
	// Deadline is the retry budget of a call whose context carries no
	// render-wide deadline (WithRetryDeadline).
	Deadline time.Duration
}

func (p RetryPolicy) limit() time.Duration {
	if p.Limit <= 0 {
		return time.Second
	}
	return p.Limit
}

// Context returns ctx with the policy's retry deadline when it has none.
func (p RetryPolicy) Context(ctx context.Context) context.Context {
	return wait.EnsureRetryDeadline(ctx, p.Deadline)
}

// Conflicts runs try(attempt) until it returns an error that does not
// wrap ErrConflict (or nil), waiting after each conflict as the policy
// says. lost describes, for messages, what kept moving. It is the one loop
// every "read, write conditionally, start over when someone was first"
// step uses, the write loop's sub-steps included.
func (p RetryPolicy) Conflicts(ctx context.Context, lost string, try func(attempt int) error) error {
	return wait.Loop(ctx, statestore.ErrConflict, try,
		func(attempt int, err error) error { return p.Wait(ctx, attempt, lost, err) })
}

// Wait is the pause after attempt number attempt lost a race: it fails
// once MaxAttempts attempts were made or when the retry deadline would
// pass, with an error wrapping ErrConflict that says what kept moving.
func (p RetryPolicy) Wait(ctx context.Context, attempt int, lost string, cause error) error {
	err := fmt.Errorf("%w: %s", statestore.ErrConflict, lost)
	if p.MaxAttempts > 0 && attempt >= p.MaxAttempts {
		return fmt.Errorf("%w; gave up after %d attempts", err, attempt)
	}
	return wait.LostRace(p.limit()).Pause(ctx, attempt, err)
}

// Write writes us, a batch planned one on top of the other, through b's
// committers, under policy. It is the whole write loop: see the top of
// this file. Its errors name the store (StoreError) and are classified
// with the sentinel errors.
func Write(ctx context.Context, b Backend, policy RetryPolicy, us []statestore.Update) (res statestore.Result, err error) {
	if len(us) == 0 {
		return res, nil
	}
	for _, u := range us {
		if err := planner.ValidateUpdate(u); err != nil {
			return res, Wrap(b.String(), "plan", err)
		}
	}
	ctx = policy.Context(ctx)
	c, err := b.Begin(ctx, us)
	if err != nil {
		return res, Wrap(b.String(), "write", err)
	}
	if c.Finish != nil {
		defer c.Finish(ctx)
	}
	if c.Release != nil {
		defer func() { err = c.Release(ctx, err) }()
	}
	var last *Change
	fail := func(op string, err error) (statestore.Result, error) {
		if c.Abandon != nil && last != nil {
			if out := c.Abandon(ctx, last, err); out.Landed {
				landed(&res, out)
				return res, nil
			}
		}
		return res, Wrap(b.String(), op, err)
	}
	run := ctx // what the attempts run on: see Committer.Unfinished
	view := us[0].View
	for attempt := 1; ; attempt++ {
		res.Attempts = attempt
		if c.Unfinished != nil && c.Unfinished() && run == ctx {
			var cancel context.CancelFunc
			run, cancel = Finishing(ctx)
			defer cancel()
		}
		if err := run.Err(); err != nil {
			return fail("write", err)
		}
		ch, out, op, err := attemptWrite(run, c, us, attempt, view)
		view = nil // the caller's view is the first attempt's only
		if ch != nil {
			last = ch
			res.Diff, res.Updated = ch.Plan.Diff, ch.Plan.Changed()
			if c.Revision != nil {
				res.Revision = c.Revision(ch.Snapshot)
			}
		}
		if out.Revision != "" {
			res.Revision = out.Revision
		}
		if out.Diff != nil {
			res.Diff = *out.Diff
		}
		res.View = out.View
		res.Updated = res.Updated || out.Wrote || out.Landed
		if err == nil {
			return res, nil
		}
		if wait.Classify(err) != wait.ClassConflict || run.Err() != nil {
			return fail(op, err)
		}
		// A lost race: another writer's write landed, so the store is up
		// and busy, not down.
		wait.Progress(run)
		if c.Lost != nil {
			// The backend waits its own way (and counts attempts).
			out, err := c.Lost(run, ch, attempt, err)
			if err != nil {
				return fail(op, err)
			}
			if out.Landed {
				landed(&res, out)
				return res, nil
			}
			continue
		}
		t0 := wait.Now(run)
		werr := policy.Wait(run, attempt, LostWhat(err), err)
		if c.Debug != nil {
			c.Debug("wait", "workload", us[0].Workload, "attempt", attempt, "for", "a pause after a lost race: "+LostWhat(err),
				"took", wait.Since(run, t0).Round(time.Millisecond).String())
		}
		if werr != nil {
			return fail(op, werr)
		}
	}
}

// LostWhat says, for messages, what kept moving in a lost race err.
func LostWhat(err error) string {
	var ce *ConflictError
	if errors.As(err, &ce) && ce.What != "" {
		return ce.What
	}
	return "other writers kept changing the store"
}

// landed makes res say that another writer published the change: as that
// change was planned (Outcome.Diff), at the revision it landed in.
func landed(res *statestore.Result, out Outcome) {
	res.Updated = true
	if out.Diff != nil {
		res.Diff = *out.Diff
	}
	if out.Revision != "" {
		res.Revision = out.Revision
	}
}

// attemptWrite is one attempt: a snapshot, a plan, a commit. op names
// the step that failed.
func attemptWrite(ctx context.Context, c Committer, us []statestore.Update, attempt int, view statestore.Snapshot) (*Change, Outcome, string, error) {
	snap, err := c.Snapshot(ctx, attempt, view)
	if err != nil {
		return nil, Outcome{}, opOf(err, "read"), err
	}
	t0 := wait.Now(ctx)
	ch := &Change{Updates: us, Snapshot: snap, DryRun: us[0].DryRun, Attempt: attempt}
	ch.Plans, ch.Plan, err = planner.PlanBatch(snap, us)
	if err != nil {
		ch = nil
	}
	if c.Debug != nil {
		c.Debug("plan", planLog(c, us, ch, err, attempt, wait.Since(ctx, t0))...)
	}
	if err != nil {
		return nil, Outcome{}, opOf(err, "plan"), err
	}
	if ch.Plan.Changed() {
		if ch.Message, err = us[0].MessageFor(ch.Plan.Diff); err != nil {
			return ch, Outcome{}, "commit message", err
		}
	}
	out, err := c.Commit(ctx, ch)
	return ch, out, opOf(err, "write"), err
}

// planLog is the debug line of one attempt's plan: what it was planned
// on (the update's basis: the record the render read, or none), whether
// the store's record was another by then (stale), and what it changes.
func planLog(c Committer, us []statestore.Update, ch *Change, err error, attempt int, took time.Duration) []any {
	basis := "unchecked"
	if b := us[0].Basis; b != nil {
		basis = "no record"
		if b.Record != nil {
			basis = "record"
		}
	}
	args := []any{"workload", us[0].Workload, "attempt", attempt, "basis", basis, "stale", errors.Is(err, statestore.ErrStale)}
	if len(us) > 1 {
		args = append(args, "updates", len(us))
	}
	if ch != nil && c.Revision != nil {
		args = append(args, "revision", c.Revision(ch.Snapshot))
	}
	if ch != nil {
		d := ch.Plan.Diff
		args = append(args, "added", len(d.Added), "changed", len(d.Changed), "deleted", len(d.Deleted))
	}
	if err != nil {
		args = append(args, "error", err.Error())
	}
	return append(args, "took", took.Round(time.Millisecond).String())
}

// ConflictError is a lost race that says what moved, and during which
// step (for the StoreError's Op).
type ConflictError struct {
	// Op is the step that lost ("push", "write").
	Op string
	// What kept moving, for messages ("the branch kept moving").
	What string
	// Err is the cause, if any.
	Err error
}

func (e *ConflictError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%v: %s: %v", statestore.ErrConflict, e.What, e.Err)
	}
	return fmt.Sprintf("%v: %s", statestore.ErrConflict, e.What)
}

// Is makes a ConflictError an ErrConflict.
func (e *ConflictError) Is(target error) bool { return target == statestore.ErrConflict }

func (e *ConflictError) Unwrap() error { return e.Err }

// OpError names the step of a write that failed, for the StoreError
// Write wraps it in.
type OpError struct {
	Op  string
	Err error
}

func (e *OpError) Error() string { return e.Err.Error() }
func (e *OpError) Unwrap() error { return e.Err }

// InOp says err happened during step op ("push", "write", "read").
func InOp(op string, err error) error {
	if err == nil {
		return nil
	}
	return &OpError{Op: op, Err: err}
}

func opOf(err error, def string) string {
	var oe *OpError
	if errors.As(err, &oe) && oe.Op != "" {
		return oe.Op
	}
	var ce *ConflictError
	if errors.As(err, &ce) && ce.Op != "" {
		return ce.Op
	}
	return def
}

// Wrap names the store and the step in err, once: an error that already
// names a store is returned as it is.
func Wrap(store, op string, err error) error {
	if err == nil {
		return nil
	}
	var se *statestore.StoreError
	if errors.As(err, &se) {
		return err
	}
	var oe *OpError
	if errors.As(err, &oe) && oe.Op != "" {
		op = oe.Op
	}
	return &statestore.StoreError{Store: store, Op: op, Err: err}
}
