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
	g.last = c.Plan.Diff
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
	var deletes []*packp.Command
	if !g.published.IsZero() {
		deletes = append(deletes, &packp.Command{Name: g.mine, Old: g.published})
	}
	head, folded, err := g.s.fold(a.ov, after.treeSnap, head, g.u.Workload, g.r.st, g.r.space)
	if err != nil {
		return statestore.Outcome{}, statestore.InOp("read", err)
	}
	deletes = append(deletes, folded...)
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

// Lost hands the update over (a request on the server, once) and waits
// for its turn to lead, or for another writer to carry it.
func (g *groupCommitter) Lost(ctx context.Context, c *statestore.Change, attempt int, cause error) (statestore.Outcome, error) {
	if g.regroup {
		g.regroup = false
		return statestore.Outcome{}, nil
	}
	if g.published.IsZero() && !g.alone && g.r.space != "" {
		switch h, err := g.s.request(ctx, g.r, g.u, g.mine); {
		case err == nil:
			g.published = h
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
	done, tip, err := g.s.await(ctx, g.r, g.mine, g.published, lost)
	if err != nil || !done {
		return statestore.Outcome{}, err
	}
	return g.landed(tip), nil
}

// Abandon withdraws this writer's request before the write gives up; a
// request already folded means the update landed.
func (g *groupCommitter) Abandon(ctx context.Context, c *statestore.Change, err error) statestore.Outcome {
	if g.published.IsZero() {
		return statestore.Outcome{}
	}
	if g.s.withdraw(ctx, g.r, g.mine, g.published) {
		return g.landed(g.r.tip())
	}
	return statestore.Outcome{}
}
