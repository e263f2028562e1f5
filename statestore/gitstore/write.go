package gitstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"

	"github.com/render-dev/render/statestore"
)

// git's side of statestore.Write: a snapshot is the branch's tip read into
// an overlay of new objects, a commit is a push (or, for a repository on
// this machine, a ref moved under git's lock file) conditioned on that tip.

// backend is a Store's statestore.Backend.
type backend struct{ s *Store }

func (b backend) String() string { return b.s.String() }

// Begin picks how the write publishes: through the writers' group commit
// for one update to a server that takes part in it, by moving the branch
// otherwise.
func (b backend) Begin(ctx context.Context, us []statestore.Update) (statestore.Committer, error) {
	if r := b.s.repo.server(); r != nil && len(us) == 1 && !us[0].DryRun && r.space != "" {
		return &groupCommitter{s: b.s, r: r, u: us[0], mine: pendingRef(r.space, us[0].Workload)}, nil
	}
	return &branchCommitter{s: b.s}, nil
}

// attemptSnap is what one attempt plans on: the tip and a view of its tree
// through an overlay that collects the objects the commit will write.
type attemptSnap struct {
	*treeSnap
	tip plumbing.Hash
	ov  *overlay
}

// Revision is the tip the attempt read.
func (a *attemptSnap) Revision() string { return a.tip.String() }

// readTip reads the branch's tip, the newest one when fresh is set.
func (s *Store) readTip(ctx context.Context, fresh bool) (*attemptSnap, error) {
	tip, objs, err := s.repo.head(ctx, fresh)
	if err != nil {
		return nil, statestore.InOp("read", err)
	}
	root, err := rootTree(objs, tip)
	if err != nil {
		return nil, statestore.InOp("read", err)
	}
	ov := newOverlay(objs)
	return &attemptSnap{treeSnap: s.newSnap(ov, root), tip: tip, ov: ov}, nil
}

// commitChange writes c's plans on top of its snapshot, one after the
// other, and commits the result as the tip's child.
func (s *Store) commitChange(c *statestore.Change) (plumbing.Hash, *attemptSnap, error) {
	a := c.Snapshot.(*attemptSnap)
	snap := a.treeSnap
	// Every plan's operations at once: each plan was made on top of the
	// ones before it, so the last operation on a path is the one that
	// stands, and each folder is written once, not once per plan (a
	// drain's 1,000 plans would each rewrite the same large folders).
	var ops []statestore.Op
	for _, p := range c.Plans {
		ops = append(ops, p.Ops...)
	}
	if len(ops) > 0 {
		next, err := snap.apply(ops)
		if err != nil {
			return plumbing.ZeroHash, nil, statestore.InOp("write", err)
		}
		snap = next
	}
	commit, err := s.commit(a.ov, a.tip, snap.rootOrEmpty(a.ov), c.Message, s.author(c.Updates[0]))
	if err != nil {
		return plumbing.ZeroHash, nil, statestore.InOp("commit", err)
	}
	return commit, &attemptSnap{treeSnap: snap, tip: a.tip, ov: a.ov}, nil
}

// branchCommitter moves the branch from the tip it planned on to its
// commit, or loses the race.
type branchCommitter struct{ s *Store }

func (b *branchCommitter) Snapshot(ctx context.Context, attempt int) (statestore.Snapshot, error) {
	return b.s.readTip(ctx, attempt > 1)
}

func (b *branchCommitter) Commit(ctx context.Context, c *statestore.Change) (statestore.Outcome, error) {
	if !c.Plan.Changed() || c.DryRun {
		return statestore.Outcome{}, nil
	}
	commit, after, err := b.s.commitChange(c)
	if err != nil {
		return statestore.Outcome{}, err
	}
	err = b.s.repo.publish(ctx, after.ov, after.tip, commit)
	switch {
	case errors.Is(err, errStale):
		return statestore.Outcome{}, &statestore.ConflictError{Op: "push", What: "the branch kept moving"}
	case err != nil:
		return statestore.Outcome{}, statestore.InOp("push", err)
	}
	return statestore.Outcome{Revision: commit.String()}, nil
}

// groupCommitter writes one workload's update to a remote branch that many
// writers share (see pending.go for the protocol):
//
//  1. Plan the update on the newest tip, fold every request waiting on the
//     server into the same push (one commit each, chained after this
//     writer's own), and push the branch and the deletion of the folded
//     requests atomically.
//  2. On a lost race, publish the update as a request of its own (once),
//     wait a little, and go back to 1, unless the request is gone by then,
//     which means another writer's push carried it: the update has landed.
//
// A write that gives up (deadline, a plan error, a cancelled context)
// withdraws its request first, so nothing it reported as failed lands
// later; if the request was already folded, the update landed and the
// write is a success.
type groupCommitter struct {
	s    *Store
	r    *remoteRepo
	u    statestore.Update
	mine plumbing.ReferenceName
	// published is this writer's request, once the server has it; alone
	// is set when another render of this workload has one (then this
	// writer publishes none).
	published plumbing.Hash
	alone     bool
	// last is the change as last planned: what landed, if it lands by
	// another writer's push.
	last statestore.Diff
	// regroup is set when the server turned group commit down: plan again
	// at once, as a plain writer.
	regroup bool
	// tried is set once the write's first push went out (with its request,
	// see Commit); base is the workload's state the last plan was made on.
	tried bool
	base  string
	// pubBase is the state the published request was planned on.
	pubBase string
}

func (g *groupCommitter) Snapshot(ctx context.Context, attempt int) (statestore.Snapshot, error) {
	return g.s.readTip(ctx, attempt > 1)
}

// folded reports whether another writer's push carried this writer's
// request (the last fetch no longer shows it).
func (g *groupCommitter) folded() bool {
	return !g.published.IsZero() && !g.r.holds(g.mine, g.published)
}

func (g *groupCommitter) landed(tip plumbing.Hash) statestore.Outcome {
	d := g.last
	return statestore.Outcome{Landed: true, Revision: tip.String(), Diff: &d}
}

func (g *groupCommitter) Commit(ctx context.Context, c *statestore.Change) (statestore.Outcome, error) {
	a := c.Snapshot.(*attemptSnap)
	if g.folded() {
		return g.landed(a.tip), nil
	}
	base, err := workloadState(a.treeSnap, g.u.Workload)
	if err != nil {
		return statestore.Outcome{}, statestore.InOp("read", err)
	}
	if !g.published.IsZero() && base != g.pubBase {
		// The workload moved past the state this writer's request was
		// planned on: another writer carried the request (its ref goes
		// with the next sweep), or a newer render of the workload
		// overtook it.
		return g.landed(a.tip), nil
	}
	g.last = c.Plan.Diff
	g.base = base
	out := statestore.Outcome{}
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
		return statestore.Outcome{}, statestore.InOp("read", err)
	}
	if c.Plan.Changed() && g.published.IsZero() && !g.alone && !g.tried && g.r.space != "" {
		return g.firstPush(ctx, a, head, folded, stale, out)
	}
	var deletes []*packp.Command
	if !g.published.IsZero() {
		deletes = append(deletes, &packp.Command{Name: g.mine, Old: g.published})
	}
	deletes = append(deletes, folded...)
	deletes = append(deletes, stale...)
	if head == a.tip && len(deletes) == 0 {
		return out, nil // the branch already holds this update
	}
	var cmds []*packp.Command
	if head != a.tip {
		cmds = append(cmds, &packp.Command{Name: g.r.branch, Old: a.tip, New: head})
	}
	cmds = append(cmds, deletes...)
	err = g.r.publishCommands(ctx, a.ov, cmds)
	switch {
	case err == nil:
		return out, nil
	case errors.Is(err, errNoGroup):
		g.s.noGroup(g.r, err)
		g.regroup = true
		return statestore.Outcome{}, &statestore.ConflictError{Op: "push", What: "the branch kept moving", Err: err}
	case !errors.Is(err, errStale):
		return statestore.Outcome{}, statestore.InOp("push", err)
	}
	return statestore.Outcome{}, &statestore.ConflictError{Op: "push", What: "the branch kept moving"}
}

// firstPush is a write's first push in group mode: the branch moved to
// head, and this writer's request, in one push that is not atomic, so that
// a writer who loses the branch has handed its update over with the same
// push (N writers racing make N pushes, and the next leader one more).
// When the branch moves, the request lands too and is left over: the next
// write's fold finds the workload's state moved past the request's base
// and deletes it.
func (g *groupCommitter) firstPush(ctx context.Context, a *attemptSnap, head plumbing.Hash, folded, stale []*packp.Command, out statestore.Outcome) (statestore.Outcome, error) {
	g.tried = true
	req, err := writeRequest(a.ov, g.u, g.s.author(g.u), g.base)
	if err != nil {
		return statestore.Outcome{}, statestore.InOp("write", err)
	}
	// An earlier render's request of this workload that landed or was
	// overtaken is replaced; another render's, waiting, stays (and this
	// writer waits its turn without a request).
	cmds := []*packp.Command{
		{Name: g.r.branch, Old: a.tip, New: head},
		{Name: g.mine, Old: replaceable(a.ov, g.r.st, g.mine, g.base), New: req},
	}
	// Requests of other workloads that landed or were overtaken go with
	// the same push (safe whether the branch moves or not: that is a fact
	// of the tree this write read), so that no writer's leftover stays.
	// Those folded into head stay until it lands: see below.
	cmds = append(cmds, stale...)
	applied, err := g.r.publishEach(ctx, a.ov, cmds)
	switch {
	case errors.Is(err, errNoGroup):
		g.s.noGroup(g.r, err)
		g.regroup = true
		return statestore.Outcome{}, &statestore.ConflictError{Op: "push", What: "the branch kept moving", Err: err}
	case err != nil:
		return statestore.Outcome{}, statestore.InOp("push", err)
	case applied[g.r.branch] && len(folded) > 0:
		// The requests this push carried landed with it: their refs,
		// and this writer's own (landed too), go now, so that their
		// writers, waiting for that, are done. (Only a push that
		// carried others' requests makes this second push.)
		done := folded
		if applied[g.mine] {
			done = append(done, &packp.Command{Name: g.mine, Old: req})
		}
		if _, err := g.r.publishEach(ctx, a.ov, done); err != nil && g.s.cfg.Warn != nil {
			g.s.cfg.Warn("could not delete the pending updates this write carried; the next write will", "error", err.Error())
		}
		return out, nil
	case applied[g.r.branch]:
		return out, nil
	}
	// The branch did not move: another writer was first, or the server
	// refused the push for a reason of its own (a hook), which the refs
	// tell apart.
	refs, err := g.r.list(ctx)
	if err != nil {
		return statestore.Outcome{}, statestore.InOp("push", err)
	}
	if refs[g.r.branch] == a.tip {
		// Refused: perhaps for the request (a hook that allows no other
		// refs). The branch alone, then: if it lands, group commit is
		// off for this store; if not, the refusal is the server's word.
		err := g.r.publishCommands(ctx, a.ov, []*packp.Command{{Name: g.r.branch, Old: a.tip, New: head}})
		switch {
		case err == nil:
			g.s.noGroup(g.r, errors.New("the server refused a push with a pending-update ref"))
			return out, nil
		case errors.Is(err, errStale):
			return statestore.Outcome{}, &statestore.ConflictError{Op: "push", What: "the branch kept moving"}
		}
		return statestore.Outcome{}, statestore.InOp("push", err)
	}
	switch {
	case applied[g.mine]:
		g.published, g.pubBase = req, g.base
	case refs[g.mine].IsZero():
		// The server took no request ref, and none waits: it refuses them.
		g.s.noGroup(g.r, errors.New("the server refused the pending-update ref"))
	default:
		g.alone = true // another render of this workload is waiting
	}
	return statestore.Outcome{}, &statestore.ConflictError{Op: "push", What: "the branch kept moving"}
}

// Lost hands the update over (a request on the server, once) and waits
// for its turn to lead, or for another writer to carry it.
func (g *groupCommitter) Lost(ctx context.Context, c *statestore.Change, attempt int, cause error) (statestore.Outcome, error) {
	if g.regroup {
		g.regroup = false
		return statestore.Outcome{}, nil
	}
	if g.published.IsZero() && !g.alone && !g.tried && g.r.space != "" {
		switch h, err := g.s.request(ctx, g.r, g.u, g.mine, g.base); {
		case err == nil:
			g.published, g.pubBase = h, g.base
		case errors.Is(err, errStale):
			g.alone = true // another render of this workload is waiting
		case errors.Is(err, errNoGroup), errors.Is(err, statestore.ErrRejected):
			g.s.noGroup(g.r, err)
		default:
			return statestore.Outcome{}, err
		}
	}
	lost := fmt.Errorf("%w: the branch kept moving", statestore.ErrConflict)
	if max := g.s.cfg.MaxAttempts; max > 0 && attempt >= max {
		return statestore.Outcome{}, fmt.Errorf("%w; gave up after %d attempts", lost, attempt)
	}
	if g.published.IsZero() {
		return statestore.Outcome{}, statestore.Pause(ctx, attempt, 500*time.Millisecond, lost)
	}
	// The request gone means it was folded into another writer's push, or
	// deleted as stale (see fold): either way, plan again, which finds
	// nothing left to do (Commit then reports the landing) or the
	// staleness.
	_, _, err := g.s.await(ctx, g.r, g.mine, g.published, lost)
	return statestore.Outcome{}, err
}

// Abandon withdraws this writer's request before the write gives up. A
// request that is gone already was folded (the update landed) or deleted
// as stale; the branch's newest tip says which: it holds the update when
// a fresh plan finds nothing left to do.
func (g *groupCommitter) Abandon(ctx context.Context, c *statestore.Change, err error) statestore.Outcome {
	if g.published.IsZero() {
		return statestore.Outcome{}
	}
	if !g.s.withdraw(ctx, g.r, g.mine, g.published) || errors.Is(err, statestore.ErrStale) {
		return statestore.Outcome{}
	}
	vctx, cancel := statestore.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	vctx = statestore.WithRetryDeadline(vctx, 10*time.Second)
	snap, rerr := g.s.readTip(vctx, true)
	if rerr != nil {
		return statestore.Outcome{}
	}
	if p, perr := statestore.PlanUpdate(snap, g.u); perr == nil && !p.Changed() {
		return g.landed(snap.tip)
	}
	return statestore.Outcome{}
}
