package gitstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/driver"
	"github.com/render-dev/render/statestore/planner"
	"github.com/render-dev/render/statestore/wait"
)

// git's side of driver.Write: a snapshot is the branch's tip read into
// an overlay of new objects, a commit is a push (or, for a repository on
// this machine, a ref moved under git's lock file) conditioned on that tip.

// backend is a Store's driver.Backend.
type backend struct{ s *Store }

func (b backend) String() string { return b.s.String() }

// Debug makes the write loop's own lines (each attempt's plan) go to the
// store's debug log.
func (b backend) Debug(msg string, args ...any) { b.s.debug(msg, args...) }

// Begin picks how the write publishes: through the writers' group commit
// for one update to a server that takes part in it, by moving the branch
// otherwise.
func (b backend) Begin(ctx context.Context, us []statestore.Update) (driver.Committer, error) {
	if r := b.s.repo.server(); r != nil && len(us) == 1 && !us[0].DryRun && r.space != "" {
		g := &groupCommitter{s: b.s, r: r, u: us[0], mine: pendingRef(r.space, us[0].Workload)}
		return driver.Committer{Snapshot: g.Snapshot, Commit: g.Commit, Revision: tipOf,
			Lost: g.Lost, Abandon: g.Abandon, Debug: b.Debug}, nil
	}
	bc := &branchCommitter{s: b.s}
	return driver.Committer{Snapshot: bc.Snapshot, Commit: bc.Commit, Revision: tipOf, Debug: b.Debug}, nil
}

// attemptSnap is what one attempt plans on: the tip and a view of its tree
// through an overlay that collects the objects the commit will write.
type attemptSnap struct {
	*treeSnap
	tip plumbing.Hash
	ov  *overlay
	// from is the Store that read it: a view of another store is not
	// planned on (see writeSnap).
	from *Store
}

// Revision is the tip the attempt read.
func (a *attemptSnap) Revision() string { return a.tip.String() }

// tipOf is the tip a snapshot of a write (an *attemptSnap) read: its
// Committer's Revision.
func tipOf(s statestore.Snapshot) string { return s.(*attemptSnap).Revision() }

// readTip reads the branch's tip, the newest one when fresh is set.
func (s *Store) readTip(ctx context.Context, fresh bool) (*attemptSnap, error) {
	tip, objs, err := s.repo.head(ctx, fresh)
	if err != nil {
		return nil, driver.InOp("read", err)
	}
	root, err := rootTree(objs, tip)
	if err != nil {
		return nil, driver.InOp("read", err)
	}
	ov := newOverlay(objs)
	return &attemptSnap{treeSnap: s.newSnap(ov, root), tip: tip, ov: ov, from: s}, nil
}

// writeSnap is what a write's attempt plans on. On a server, its first
// attempt plans on the tip of the caller's view when it passed one of
// this Store's (Update.View: the render's own read, so the write fetches
// nothing more), else on the clone's tip (what it fetched or pushed
// last); a later attempt on the newest tip. The view's objects are in the
// clone already; the attempt gets an overlay of its own for what its
// commit writes. A repository on this machine is read as it is now, view
// or not, as the memory store is: reading it costs no request, and the
// newest tip spares the write a lost race.
func (s *Store) writeSnap(ctx context.Context, attempt int, view statestore.Snapshot) (*attemptSnap, error) {
	v, ok := view.(*attemptSnap)
	if r := s.repo.server(); r == nil || attempt > 1 || !ok || v.from != s || !r.fetched {
		// (A clone that must fetch anyway, its tip gone stale after a
		// write landed by another writer's push, plans on what it fetches.)
		return s.readTip(ctx, attempt > 1)
	}
	_, objs, err := s.repo.head(ctx, false)
	if err != nil {
		return nil, driver.InOp("read", err)
	}
	root, err := rootTree(objs, v.tip)
	if err != nil {
		return nil, driver.InOp("read", err)
	}
	ov := newOverlay(objs)
	return &attemptSnap{treeSnap: s.newSnap(ov, root), tip: v.tip, ov: ov, from: s}, nil
}

// commitChange writes c's plans on top of its snapshot, one after the
// other, and commits the result as the tip's child.
func (s *Store) commitChange(c *driver.Change) (plumbing.Hash, *attemptSnap, error) {
	a := c.Snapshot.(*attemptSnap)
	snap := a.treeSnap
	// Every plan's operations at once: each plan was made on top of the
	// ones before it, so the last operation on a path is the one that
	// stands, and each folder is written once, not once per plan (a
	// drain's 1,000 plans would each rewrite the same large folders).
	var ops []planner.Op
	for _, p := range c.Plans {
		ops = append(ops, p.Ops...)
	}
	if len(ops) > 0 {
		next, err := snap.apply(ops)
		if err != nil {
			return plumbing.ZeroHash, nil, driver.InOp("write", err)
		}
		snap = next
	}
	commit, err := s.commit(a.ov, a.tip, snap.rootOrEmpty(a.ov), c.Message, s.author(c.Updates[0]))
	if err != nil {
		return plumbing.ZeroHash, nil, driver.InOp("commit", err)
	}
	return commit, &attemptSnap{treeSnap: snap, tip: a.tip, ov: a.ov, from: s}, nil
}

// branchCommitter moves the branch from the tip it planned on to its
// commit, or loses the race.
type branchCommitter struct{ s *Store }

func (b *branchCommitter) Snapshot(ctx context.Context, attempt int, view statestore.Snapshot) (statestore.Snapshot, error) {
	return b.s.writeSnap(ctx, attempt, view)
}

func (b *branchCommitter) Commit(ctx context.Context, c *driver.Change) (driver.Outcome, error) {
	if !c.Plan.Changed() || c.DryRun {
		return driver.Outcome{}, nil
	}
	commit, after, err := b.s.commitChange(c)
	if err != nil {
		return driver.Outcome{}, err
	}
	t0 := wait.Now(ctx)
	err = b.s.repo.publish(ctx, after.ov, after.tip, commit)
	b.s.debug("push", "attempt", c.Attempt, "refs", "branch "+after.tip.String()[:7]+".."+commit.String()[:7],
		"outcome", pushOutcome(err), "took", wait.Since(ctx, t0).Round(time.Millisecond).String())
	switch {
	case errors.Is(err, errStale):
		return driver.Outcome{}, &driver.ConflictError{Op: "push", What: "the branch kept moving"}
	case err != nil:
		return driver.Outcome{}, driver.InOp("push", err)
	}
	return driver.Outcome{Revision: commit.String()}, nil
}

// groupCommitter writes one workload's update to a remote branch that many
// writers share (see pending.go for the protocol). Each attempt:
//
//  1. plans the update on the newest tip and folds every request waiting on
//     the server into the same change (one commit each, after this
//     writer's own);
//  2. pushes its turn (see turn): the branch's move with the deletion of
//     every request it carries, and of its own, atomically, so that a
//     request is gone exactly when its update has landed. A writer whose
//     push finds the branch moved already hands its update over in that
//     same push instead: its request;
//  3. after a lost race, with its request on the server, waits (await)
//     until the request is gone (carried by another writer's push, which
//     a commit since its fetch names: done; or deleted as stale) or until
//     it is its turn to lead, and plans again;
//     without one (it lost in the moment between its push's advertisement
//     and the update, or another render of its workload waits already),
//     it plans again after a short pause.
//
// A writer whose update has landed returns at once: its own push says so,
// or the poll that finds its request gone and the commits the branch
// gained (carried), or else its next plan, which finds its workload past
// the state the request was planned on. It never waits for a ref another writer may
// or may not delete. A writer with no competitor pushes its branch alone,
// as a plain writer would.
//
// A write that gives up (deadline, a plan error, a cancelled context)
// withdraws its request first, so nothing it reported as failed lands
// later; if the request was already carried, the update landed and the
// write is a success.
type groupCommitter struct {
	s    *Store
	r    *remoteRepo
	u    statestore.Update
	mine plumbing.ReferenceName
	// published is this writer's request, once the server has it, and
	// pubBase the workload's state it was planned on; alone is set when
	// another render of this workload has one waiting (then this writer
	// publishes none, and plans again after a pause).
	published plumbing.Hash
	pubBase   string
	alone     bool
	// last is the change as last planned: what landed, if it lands by
	// another writer's push.
	last statestore.Diff
	// regroup is set when the server turned group commit down: plan again
	// at once, as a plain writer.
	regroup bool
	// base is the workload's state the last plan was made on: a request
	// published after a lost race is planned on it.
	base string
	// slowest is the slowest push this writer has timed: how long a
	// leader's turn may take on this server now (see turnTime).
	slowest time.Duration
}

func (g *groupCommitter) Snapshot(ctx context.Context, attempt int, view statestore.Snapshot) (statestore.Snapshot, error) {
	return g.s.writeSnap(ctx, attempt, view)
}

func (g *groupCommitter) landed(tip plumbing.Hash) driver.Outcome {
	d := g.last
	return driver.Outcome{Landed: true, Revision: tip.String(), Diff: &d}
}

func (g *groupCommitter) Commit(ctx context.Context, c *driver.Change) (driver.Outcome, error) {
	a := c.Snapshot.(*attemptSnap)
	// The workload's state in the tree planned on: what a request
	// published now is planned on, and what tells a waiting writer that
	// it was carried. A writer that never hands over never needs it.
	var base string
	baseOf := func() (string, error) {
		if base != "" {
			return base, nil
		}
		b, err := workloadState(a.treeSnap, g.u.Workload)
		base = b
		return b, err
	}
	if !g.published.IsZero() {
		now, err := baseOf()
		if err != nil {
			return driver.Outcome{}, driver.InOp("read", err)
		}
		held := g.r.holds(g.mine, g.published)
		if now != g.pubBase || !c.Plan.Changed() {
			// The workload moved past the state this writer's request
			// was planned on: another writer carried the request (and
			// deleted it in the same push), or a newer render of the
			// workload overtook it. Done; a request still there is
			// stale and goes now, so that none is left behind.
			g.s.debug("landed by another writer's push", "workload", g.u.Workload, "attempt", c.Attempt, "tip", a.tip.String(), "request_left", held)
			if held {
				g.sweepOwn(ctx, a)
			}
			return g.landed(a.tip), nil
		}
		if !held {
			// Gone, and the workload as it was: not carried. Hand the
			// update over again.
			g.published, g.pubBase = plumbing.ZeroHash, ""
		}
	}
	if c.Plan.Changed() {
		g.last = c.Plan.Diff
	}
	out := driver.Outcome{}
	head, after := a.tip, a
	if c.Plan.Changed() {
		// The message as this plan makes it; a request published later
		// carries it too.
		g.u.Message = c.Message
		commit, next, err := g.s.commitChange(c)
		if err != nil {
			return out, err
		}
		head, after = commit, next
		out.Revision = commit.String()
	}
	head, folded, stale, err := g.s.fold(a.ov, after.treeSnap, head, g.u.Workload, g.r.st, g.r.space)
	if err != nil {
		return driver.Outcome{}, driver.InOp("read", err)
	}
	var t turn
	if head != a.tip {
		out.Revision = head.String()
		t.main = append(t.main, &packp.Command{Name: g.r.branch, Old: a.tip, New: head})
		if !g.published.IsZero() {
			t.main = append(t.main, &packp.Command{Name: g.mine, Old: g.published})
		}
		t.main = append(t.main, folded...)
		t.sweep = append(stale, g.overtaken(a, after)...)
	} else if !g.published.IsZero() {
		t.main = append(t.main, &packp.Command{Name: g.mine, Old: g.published})
	}
	if len(t.main) == 0 {
		return out, nil // the branch already holds this update
	}
	if head != a.tip && g.published.IsZero() && !g.alone && g.r.space != "" {
		t.request = func() (*packp.Command, error) {
			base, err := baseOf()
			if err != nil {
				return nil, err
			}
			req, err := writeRequest(a.ov, g.u, g.s.author(g.u), base)
			if err != nil {
				return nil, err
			}
			return &packp.Command{Name: g.mine, Old: replaceable(a.ov, g.r.st, g.mine, base), New: req}, nil
		}
	}
	t0 := wait.Now(ctx)
	res, err := g.r.pushTurn(ctx, a.ov, t)
	g.slowest = max(g.slowest, wait.Since(ctx, t0))
	g.s.debug("push", "workload", g.u.Workload, "attempt", c.Attempt, "refs", describeTurn(t, res), "outcome", outcomeOf(res, err), "took", wait.Since(ctx, t0).Round(time.Millisecond).String())
	switch {
	case errors.Is(err, errNoGroup):
		g.s.noGroup(g.r, err)
		g.regroup = true
		return driver.Outcome{}, &driver.ConflictError{Op: "push", What: "the branch kept moving", Err: err}
	case err != nil:
		return driver.Outcome{}, driver.InOp("push", err)
	}
	switch res.outcome {
	case turnLanded:
		g.published, g.pubBase = plumbing.ZeroHash, ""
		return out, nil
	case turnPublished:
		g.published, g.pubBase = res.request.New, base // base: set by the request's builder
		g.s.debug("request published", "workload", g.u.Workload, "attempt", c.Attempt, "ref", g.mine.String(), "request", g.published.String())
	case turnLost:
		g.alone = g.alone || res.taken
		if g.base, err = baseOf(); err != nil {
			return driver.Outcome{}, driver.InOp("read", err)
		}
	}
	return driver.Outcome{}, &driver.ConflictError{Op: "push", What: "the branch kept moving"}
}

// overtaken is the deletion of another render's request of this workload
// (one that died, or waits) when this write makes it stale: planned on
// a state of the workload other than the one this write leaves (after),
// folded later it would bring the older render back, so no writer folds
// it; its writer, if alive, finds it gone and its workload overtaken.
// Deleting it here leaves nothing behind for a later write.
func (g *groupCommitter) overtaken(a, after *attemptSnap) []*packp.Command {
	ref, err := g.r.st.Reference(g.mine)
	if err != nil || ref.Hash() == g.published {
		return nil
	}
	_, _, was, err := readRequestBase(a.ov, ref.Hash())
	if err != nil || was == "" {
		return nil
	}
	now, err := workloadState(after.treeSnap, g.u.Workload)
	if err != nil || now == was {
		return nil
	}
	return []*packp.Command{{Name: g.mine, Old: ref.Hash()}}
}

// sweepOwn deletes this writer's request, which its workload has moved
// past (the update landed, or was overtaken), if the server still holds
// it. Failing that, the next write deletes it as stale.
func (g *groupCommitter) sweepOwn(ctx context.Context, a *attemptSnap) {
	own := &packp.Command{Name: g.mine, Old: g.published}
	if _, err := g.r.pushTurn(ctx, a.ov, turn{sweep: []*packp.Command{own}}); err != nil && g.s.cfg.Warn != nil {
		g.s.cfg.Warn("could not delete this render's pending update, which has landed; the next write will", "ref", g.mine.String(), "error", err.Error())
	}
	g.published, g.pubBase = plumbing.ZeroHash, ""
}

// Lost waits after a lost race: for the request this writer handed over
// to be carried, or for its turn to lead; without a request, the pause
// after a lost race of the store's RetryPolicy.
func (g *groupCommitter) Lost(ctx context.Context, c *driver.Change, attempt int, cause error) (driver.Outcome, error) {
	if g.regroup {
		g.regroup = false
		return driver.Outcome{}, nil
	}
	lost := fmt.Errorf("%w: the branch kept moving", statestore.ErrConflict)
	if max := g.s.cfg.MaxAttempts; max > 0 && attempt >= max {
		return driver.Outcome{}, fmt.Errorf("%w; gave up after %d attempts", lost, attempt)
	}
	if g.published.IsZero() && !g.alone && g.r.space != "" {
		// Lost between the push's advertisement and its update: another
		// writer's push landed while this one was on its way (on a busy
		// server, nearly every push of a burst). Hand the update over
		// now, with a push of the request alone, and wait in line: racing
		// again, the writers who lost together would lose together again.
		t0 := wait.Now(ctx)
		h, err := g.s.request(ctx, g.r, g.u, g.mine, g.base)
		g.slowest = max(g.slowest, wait.Since(ctx, t0))
		g.s.debug("push", "workload", g.u.Workload, "attempt", attempt, "refs", shortRef(g.mine)+" created",
			"outcome", requestOutcome(err), "took", wait.Since(ctx, t0).Round(time.Millisecond).String())
		switch {
		case err == nil:
			// The server took the request: it is busy, not down, and
			// the wait in line starts with a whole budget.
			wait.Progress(ctx)
			g.published, g.pubBase = h, g.base
			g.s.debug("request published", "workload", g.u.Workload, "attempt", attempt, "ref", g.mine.String(), "request", h.String())
		case errors.Is(err, errStale):
			g.alone = true // another render of this workload is waiting
		case errors.Is(err, errNoGroup), errors.Is(err, statestore.ErrRejected):
			g.s.noGroup(g.r, err)
		default:
			return driver.Outcome{}, err
		}
	}
	if g.published.IsZero() {
		// Behind another render of this workload, which is waiting, or
		// with group commit off: plan again after a pause.
		t0 := wait.Now(ctx)
		err := g.s.Writer.Policy.Wait(ctx, attempt, "the branch kept moving", lost)
		g.s.debug("wait", "workload", g.u.Workload, "attempt", attempt, "for", "a pause before planning again", "alone", g.alone, "took", wait.Since(ctx, t0).Round(time.Millisecond).String())
		return driver.Outcome{}, err
	}
	// The request gone means it was carried by another writer's push, or
	// deleted as stale (see fold). The commits the branch gained say
	// which (carried, confirm.go): carried, the write is done; otherwise
	// (or when the server cannot say) plan again, which finds the update
	// landed (Commit reports it) or the staleness. await asks the same of
	// a branch that moved while the request is still listed (a leader's
	// push seen half-way, see await).
	confirm := func(tip plumbing.Hash) bool {
		t0 := wait.Now(ctx)
		ok, cerr := g.carried(ctx, tip)
		outcome := "not found: plans again"
		switch {
		case cerr != nil:
			outcome = "could not tell (" + cerr.Error() + "): plans again"
		case ok:
			outcome = "landed"
		}
		g.s.debug("confirm", "workload", g.u.Workload, "attempt", attempt, "tip", tip.String(), "outcome", outcome,
			"took", wait.Since(ctx, t0).Round(time.Millisecond).String())
		return ok
	}
	how, tip, err := g.s.await(ctx, g.r, g.u.Workload, g.mine, g.published, g.slowest, lost, confirm)
	switch {
	case err != nil || how == awaitLead || tip.IsZero():
		return driver.Outcome{}, err
	case how == awaitGone && !confirm(tip):
		return driver.Outcome{}, nil
	}
	// The clone's refs as the listing showed them, or as the leader's
	// push leaves them: the request is gone, and the branch is past the
	// tip the clone holds, which a later write of this store fetches anew.
	_ = g.r.st.RemoveReference(g.mine)
	g.r.fetched = false
	g.published, g.pubBase = plumbing.ZeroHash, ""
	return g.landed(tip), nil
}

// Abandon withdraws this writer's request before the write gives up. A
// request that is gone already was carried (the update landed) or deleted
// as stale; the branch's newest tip says which: it holds the update when
// a fresh plan finds nothing left to do.
func (g *groupCommitter) Abandon(ctx context.Context, c *driver.Change, err error) driver.Outcome {
	if g.published.IsZero() {
		return driver.Outcome{}
	}
	withdrawn := !g.s.withdraw(ctx, g.r, g.mine, g.published)
	g.s.debug("request withdrawn", "workload", g.u.Workload, "ref", g.mine.String(), "gone_already", !withdrawn, "cause", err.Error())
	if withdrawn || errors.Is(err, statestore.ErrStale) {
		return driver.Outcome{}
	}
	vctx, cancel := wait.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	vctx = wait.WithRetryDeadline(vctx, 10*time.Second)
	snap, rerr := g.s.readTip(vctx, true)
	if rerr != nil {
		return driver.Outcome{}
	}
	if p, perr := planner.PlanUpdate(snap, g.u); perr == nil && !p.Changed() {
		return g.landed(snap.tip)
	}
	return driver.Outcome{}
}

// describeTurn names, for the debug log, the refs a turn's push sent.
func describeTurn(t turn, res turnResult) string {
	var parts []string
	if res.outcome == turnPublished && res.request != nil {
		return shortRef(res.request.Name) + " created"
	}
	for _, c := range t.main {
		parts = append(parts, describeCommand(c))
	}
	if len(t.sweep) > 0 {
		parts = append(parts, fmt.Sprintf("%d stale requests deleted", len(t.sweep)))
	}
	return strings.Join(parts, ", ")
}

func describeCommand(c *packp.Command) string {
	name := shortRef(c.Name)
	switch {
	case c.New.IsZero():
		return name + " deleted"
	case c.Old.IsZero():
		return name + " created"
	}
	return name + " " + c.Old.String()[:7] + ".." + c.New.String()[:7]
}

// shortRef is a ref's name without the request folder's prefix.
func shortRef(n plumbing.ReferenceName) string {
	s := n.String()
	if rest, ok := strings.CutPrefix(s, pendingRoot); ok {
		return "request " + rest[strings.LastIndex(rest, "/")+1:]
	}
	return strings.TrimPrefix(s, "refs/heads/")
}

func requestOutcome(err error) string {
	switch {
	case err == nil:
		return "published"
	case errors.Is(err, errStale):
		return "taken: another render of the workload is waiting"
	}
	return "error: " + err.Error()
}

func outcomeOf(res turnResult, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	if res.outcome == turnLost && res.taken {
		return "lost; another render of the workload is waiting"
	}
	return res.outcome.String()
}

func pushOutcome(err error) string {
	switch {
	case err == nil:
		return "landed"
	case errors.Is(err, errStale):
		return "lost"
	}
	return "error: " + err.Error()
}
