package statestore

import "context"

// Proposer is a store that can propose a change instead of making it: it
// writes the change, planned on the store's tip, to a branch of its own
// for one workload, from which a forge's pull request merges it (a git
// store, statestore/gitstore). The engine writes through it the stores
// whose kind declares pull requests (storekind.Capabilities), and names
// no backend to do so.
//
// A store's being a Proposer is declared, not discovered: the engine
// converts a store to a Proposer only where its kind declared pull
// requests (storekind.Capabilities.PullRequests), whose stores are
// Proposers by that declaration; the conversion names the interface the
// kind promised, and a failed one is a kind that broke its promise.
type Proposer interface {
	Store
	// ProposalBranch is the branch a workload's proposals go to.
	ProposalBranch(workload string) string
	// Propose plans us on the newest tip of the store and pushes the
	// result to branch, replacing what the branch held; the store's own
	// tip does not move. With nothing to change, Result.Updated is false.
	Propose(ctx context.Context, branch string, us []Update) (Proposal, error)
	// DeleteBranch removes branch, if it is there.
	DeleteBranch(ctx context.Context, branch string) error
}

// Proposal is what Proposer.Propose did.
type Proposal struct {
	Result
	// Base is the store's tip the change was planned on and is a child
	// of.
	Base string
	// Branch is the branch the change was pushed to.
	Branch string
	// Unchanged is set when the branch already held this very proposal
	// (the same tree on the same base): nothing was pushed, so a forge's
	// checks on the pull request do not start again.
	Unchanged bool
}

// FetchStats says what a store fetched from its server since it was
// opened, for a debug line (a git store declares it:
// Capabilities.FetchStats): requests for packs, objects asked for one by
// one, objects whole fetches brought, and the bytes received.
type FetchStats struct {
	Requests int
	Objects  int
	Whole    int
	Bytes    int64
	// Partial is whether the store was read as a partial clone.
	Partial bool
}
