package gitstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/driver"
	"github.com/render-dev/render/statestore/wait"
)

// Proposal is what Propose did (statestore.Proposal: a Store is a
// statestore.Proposer).
type Proposal = statestore.Proposal

var _ statestore.Proposer = (*Store)(nil)

// ProposalBranch is the branch a workload's pull requests come from:
// "render/" and the workload key, each of its components with every
// character other than a letter, a digit, ".", "_" or "-" replaced by "_",
// and what git refuses of the rest too ("..", a leading or trailing dot, a
// ".lock" ending). Workload keys are made of Kubernetes names, so
// the key usually reads as it is: render/resource/team-a/postgres/orders/configure.
func ProposalBranch(workload string) string {
	parts := strings.Split(workload, "/")
	for i, p := range parts {
		p = refUnsafe.ReplaceAllString(p, "_")
		p = strings.ReplaceAll(p, "..", "__")
		if strings.HasPrefix(p, ".") {
			p = "_" + p[1:]
		}
		if strings.HasSuffix(p, ".lock") {
			p = strings.TrimSuffix(p, ".lock") + "_lock"
		}
		if strings.HasSuffix(p, ".") {
			p = p[:len(p)-1] + "_"
		}
		if p == "" {
			p = "_"
		}
		parts[i] = p
	}
	return "render/" + strings.Join(parts, "/")
}

// ProposalBranch implements statestore.Proposer: the package's
// ProposalBranch.
func (s *Store) ProposalBranch(workload string) string { return ProposalBranch(workload) }

var refUnsafe = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// Propose plans us on the newest tip of the store's branch, commits the
// result as a child of that tip (signed and with the message a direct
// write would have), and force-pushes it to branch, a branch render keeps
// for one workload's pull request: its earlier commit there is replaced.
// The store's branch does not move. With nothing to change, nothing is
// pushed and Result.Updated is false. Only remote repositories have
// branches to propose from.
func (s *Store) Propose(ctx context.Context, branch string, us []statestore.Update) (Proposal, error) {
	var out Proposal
	out.Branch = branch
	r := s.repo.server()
	if r == nil {
		return out, s.wrap("propose", errors.New("a repository on this machine has no pull requests"))
	}
	if len(us) == 0 {
		return out, nil
	}
	ref := plumbing.NewBranchReferenceName(branch)
	if err := ref.Validate(); err != nil || ref == r.branch {
		return out, s.wrap("propose", fmt.Errorf("%q cannot be the proposal branch", branch))
	}
	ctx = s.Policy.Context(ctx)
	if err := s.startBranch(ctx, r); err != nil {
		return out, err
	}
	pc := &proposer{s: s, r: r, ref: ref}
	res, err := driver.Write(ctx, proposeBackend{pc}, s.Policy, us)
	out.Result, out.Base, out.Unchanged = res, pc.base.String(), pc.unchanged
	return out, err
}

// proposeBackend writes a pull request's branch through driver.Write.
type proposeBackend struct{ p *proposer }

func (b proposeBackend) String() string { return b.p.s.String() }

func (b proposeBackend) Begin(context.Context, []statestore.Update) (driver.Committer, error) {
	return driver.Committer{Snapshot: b.p.Snapshot, Commit: b.p.Commit, Revision: tipOf}, nil
}

// proposer commits a change as a child of the store branch's newest tip
// and pushes it to the proposal branch, replacing whatever that holds.
type proposer struct {
	s   *Store
	r   *remoteRepo
	ref plumbing.ReferenceName
	// base is the tip the last attempt planned on; unchanged is set when
	// the branch already held the proposal.
	base      plumbing.Hash
	unchanged bool
}

// Snapshot is the store branch's newest tip, whatever view the caller
// read: a proposal is based on the newest.
func (p *proposer) Snapshot(ctx context.Context, attempt int, _ statestore.Snapshot) (statestore.Snapshot, error) {
	a, err := p.s.readTip(ctx, true)
	if err == nil {
		p.base = a.tip
	}
	return a, err
}

func (p *proposer) Commit(ctx context.Context, c *driver.Change) (driver.Outcome, error) {
	if !c.Plan.Changed() || c.DryRun {
		return driver.Outcome{}, nil
	}
	commit, after, err := p.s.commitChange(c)
	if err != nil {
		return driver.Outcome{}, err
	}
	// The branch is render's own: whatever it holds is replaced.
	refs, err := p.r.list(ctx)
	if err != nil {
		return driver.Outcome{}, driver.InOp("read", err)
	}
	if old := refs[p.ref]; !old.IsZero() && p.r.sameProposal(ctx, after.ov, old, commit) {
		p.unchanged = true
		return driver.Outcome{Revision: old.String()}, nil
	}
	err = p.r.publishCommands(ctx, after.ov, []*packp.Command{{Name: p.ref, Old: refs[p.ref], New: commit}})
	switch {
	case errors.Is(err, errStale):
		// Another render of the same workload pushed meanwhile: plan again.
		return driver.Outcome{}, &driver.ConflictError{Op: "push", What: p.ref.Short() + " kept moving"}
	case err != nil:
		return driver.Outcome{}, driver.InOp("push", err)
	}
	return driver.Outcome{Revision: commit.String()}, nil
}

// sameProposal reports whether commit old (the proposal branch's) has the
// tree and the parents of commit fresh (in ov): then the branch already
// holds this proposal, whatever its time stamp says. The old commit is
// fetched alone when the clone lacks it (without its tree: only its
// header is compared); when it cannot be read, the answer is no and the
// branch is pushed as before.
func (r *remoteRepo) sameProposal(ctx context.Context, ov *overlay, old, fresh plumbing.Hash) bool {
	newC, err := object.GetCommit(ov, fresh)
	if err != nil {
		return false
	}
	oldC, err := object.GetCommit(r.st, old)
	if err != nil {
		if !partialAllowed(r.caps) || r.fetchObjects(ctx, []plumbing.Hash{old}) != nil {
			return false
		}
		if oldC, err = object.GetCommit(r.st, old); err != nil {
			return false
		}
	}
	return oldC.TreeHash == newC.TreeHash && slices.Equal(oldC.ParentHashes, newC.ParentHashes)
}

// DeleteBranch removes branch from the server, if it is there.
func (s *Store) DeleteBranch(ctx context.Context, branch string) error {
	r := s.repo.server()
	if r == nil {
		return nil
	}
	ctx = wait.EnsureRetryDeadline(ctx, s.cfg.RetryDeadline)
	ref := plumbing.NewBranchReferenceName(branch)
	refs, err := r.list(ctx)
	if err != nil {
		return s.wrap("read", err)
	}
	old, ok := refs[ref]
	if !ok {
		return nil
	}
	err = r.publishCommands(ctx, newOverlay(r.st), []*packp.Command{{Name: ref, Old: old, New: plumbing.ZeroHash}})
	if err != nil && !errors.Is(err, errStale) {
		return s.wrap("delete "+branch, err)
	}
	return nil
}

// startBranch gives a store with no branch yet one commit of git's empty
// tree, for pull requests to have a base to go into.
func (s *Store) startBranch(ctx context.Context, r *remoteRepo) error {
	tip, objs, err := r.head(ctx, true)
	if err != nil {
		return s.wrap("read", err)
	}
	if !tip.IsZero() {
		return nil
	}
	ov := newOverlay(objs)
	tree, err := writeObject(ov, plumbing.TreeObject, nil)
	if err != nil {
		return s.wrap("write", err)
	}
	commit, err := s.commit(ov, plumbing.ZeroHash, tree, statestore.Message{Subject: "render: start branch " + s.cfg.Branch + " for pull requests"}, s.signature())
	if err != nil {
		return s.wrap("commit", err)
	}
	if err := r.publish(ctx, ov, plumbing.ZeroHash, commit); err != nil && !errors.Is(err, errStale) {
		return s.wrap("push", err)
	}
	return nil
}
