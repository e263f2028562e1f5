package gitstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/render-dev/render/statestore"
)

// patience is how long a waiting writer lets the branch stand still, per
// request ahead of its own, before it stops waiting for the writers ahead
// and leads itself: the first request's writer leads at once, the second
// after one patience without progress (the first died), and so on, so a
// dead writer delays the others once and never sets them all racing.
const patience = 10 * time.Second

// await waits, with cheap reads of the server's refs only, until this
// writer's request was folded by another writer's push (true), or until it
// is this writer's turn to lead (false). Leading one at a time keeps N
// waiting writers from racing N pushes.
func (s *Store) await(ctx context.Context, r *remoteRepo, mine plumbing.ReferenceName, h plumbing.Hash, lost error) (bool, plumbing.Hash, error) {
	var seen plumbing.Hash
	moved := statestore.Now(ctx)
	waiting := -1 // requests seen at the previous poll
	for poll := 1; ; poll++ {
		refs, err := r.list(ctx)
		if err != nil {
			return false, plumbing.ZeroHash, err
		}
		tip := refs[r.branch]
		if refs[mine] != h {
			return true, tip, nil
		}
		if tip != seen {
			seen, moved = tip, statestore.Now(ctx)
		}
		ahead, all := rank(refs, r.space, mine)
		// The first in line leads once the line stopped growing between
		// two polls (or after a few), so that writers who lost the same
		// race are carried by one push rather than one push each.
		settled := all == waiting || poll >= 4
		waiting = all
		if ahead == 0 && settled || ahead > 0 && statestore.Since(ctx, moved) >= time.Duration(ahead)*patience {
			return false, tip, nil
		}
		// Polls back off to about two seconds: N waiters must not keep
		// the server busier than the leader's push.
		if err := statestore.Pause(ctx, min(poll+2, 7), 2*time.Second, lost); err != nil {
			return false, plumbing.ZeroHash, err
		}
	}
}

// rank is how many requests in space sort before mine, and how many there
// are in all.
func rank(refs map[plumbing.ReferenceName]plumbing.Hash, space string, mine plumbing.ReferenceName) (ahead, all int) {
	for name := range refs {
		if strings.HasPrefix(name.String(), space) {
			all++
			if name < mine {
				ahead++
			}
		}
	}
	return ahead, all
}

// fold plans every request waiting in space (as refs, the last fetch's,
// lists them) on top of snap, after head, skipping this writer's own
// workload. It returns the new head, the commands that delete the folded
// requests (safe only with the branch's move, in one atomic push), and
// those that delete requests overtaken already (safe in any push). A
// request that cannot be read or may not be applied (requestcheck.go) is
// deleted with them, with a warning. One that cannot be planned (it
// conflicts with another workload) or committed is left for its owner,
// who will meet the same error on its own. A stale request (its workload's state
// moved since the request was planned, or its record since the update was
// computed: statestore.Basis) is deleted without being applied: its owner
// may have died, and applied later it would write an older update over a
// newer one; an owner still waiting finds it gone, plans again and meets
// the staleness itself. Refs that cannot be listed are an error: the push
// would carry a guess.
func (s *Store) fold(ov *overlay, snap *treeSnap, head plumbing.Hash, workload string, refs storer.ReferenceStorer, space string) (plumbing.Hash, []*packp.Command, []*packp.Command, error) {
	if space == "" {
		return head, nil, nil, nil
	}
	mine := pendingRef(space, workload)
	reqs, err := requests(refs, space)
	if err != nil {
		return head, nil, nil, fmt.Errorf("list pending updates: %w", err)
	}
	type waiting struct {
		ref    plumbing.ReferenceName
		commit plumbing.Hash
		u      statestore.Update
		author object.Signature
		base   string
	}
	var folds []waiting
	var hint statestore.Hint
	var folded, stale []*packp.Command
	for _, q := range reqs {
		if q.ref == mine {
			continue
		}
		fu, author, base, err := readRequestBase(ov, q.commit)
		if err == nil && fu.Workload == workload {
			continue
		}
		if s.checkRequest(q.ref, space, fu, base, err) != nil { // requestcheck.go
			stale = append(stale, &packp.Command{Name: q.ref, Old: q.commit})
			continue
		}
		folds = append(folds, waiting{q.ref, q.commit, fu, author, base})
		hint = hint.Merge(statestore.UpdateHint(fu))
	}
	// One prefetch for every request's paths: a folder level per request
	// to the server, not a few per folded update.
	statestore.Prefetch(snap, hint)
	for _, f := range folds {
		q, fu, author := f, f.u, f.author
		if f.base != "" {
			// A request is planned on one state of its workload: in any
			// other, a newer render of the workload has landed since (or
			// this very request has, with its writer's own push), and
			// folding it would bring the older render back. It goes.
			now, err := workloadState(snap, fu.Workload)
			if err != nil {
				continue
			}
			if now != f.base {
				stale = append(stale, &packp.Command{Name: q.ref, Old: q.commit})
				continue
			}
		}
		plan, err := statestore.PlanUpdate(snap, fu)
		if errors.Is(err, statestore.ErrStale) {
			stale = append(stale, &packp.Command{Name: q.ref, Old: q.commit})
			continue
		}
		if err != nil {
			continue
		}
		if plan.Changed() {
			next, err := snap.apply(plan.Ops)
			if err != nil {
				continue
			}
			c, err := s.commit(ov, head, next.rootOrEmpty(ov), fu.Message, author)
			if err != nil {
				continue
			}
			snap, head = next, c
		}
		folded = append(folded, &packp.Command{Name: q.ref, Old: q.commit})
	}
	return head, folded, stale, nil
}

// replaceable is the request of the workload at ref that the last fetch
// saw, when it was planned on a state other than base, the state a new
// request of the workload is planned on: an earlier render's, which landed
// or was overtaken, and which the new request replaces. It is zero
// otherwise: none waits, or one planned on this same state, another render
// of the workload waiting, which stays.
func replaceable(objs storer.EncodedObjectStorer, refs storer.ReferenceStorer, ref plumbing.ReferenceName, base string) plumbing.Hash {
	cur, err := refs.Reference(ref)
	if err != nil {
		return plumbing.ZeroHash
	}
	if _, _, was, err := readRequestBase(objs, cur.Hash()); err == nil && was != "" && was != base {
		return cur.Hash()
	}
	return plumbing.ZeroHash
}

// request publishes u, planned on the workload's state base, as this
// writer's request. errStale means a request for this workload already
// waits (another render of it).
func (s *Store) request(ctx context.Context, r *remoteRepo, u statestore.Update, ref plumbing.ReferenceName, base string) (plumbing.Hash, error) {
	ov := newOverlay(r.st)
	h, err := writeRequest(ov, u, s.author(u), base)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if err := r.publishCommands(ctx, ov, []*packp.Command{{Name: ref, Old: replaceable(ov, r.st, ref, base), New: h}}); err != nil {
		return plumbing.ZeroHash, err
	}
	return h, nil
}

// withdraw deletes this writer's request before it gives up, even when ctx
// was cancelled. It reports true when the request had already been folded
// (the update landed).
func (s *Store) withdraw(ctx context.Context, r *remoteRepo, ref plumbing.ReferenceName, h plumbing.Hash) bool {
	wctx, cancel := statestore.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	wctx = statestore.WithRetryDeadline(wctx, 10*time.Second)
	err := r.publishCommands(wctx, newOverlay(r.st), []*packp.Command{{Name: ref, Old: h}})
	if errors.Is(err, errStale) {
		if ferr := r.fetch(wctx); ferr == nil && !r.holds(ref, h) {
			return true
		}
	}
	if err != nil && !errors.Is(err, errStale) && s.cfg.Warn != nil {
		s.cfg.Warn("could not withdraw this render's pending update; the next writer may still apply it",
			"ref", ref.String(), "error", err.Error())
	}
	return false
}

// noGroup turns group commit off for this store after the server showed it
// cannot take part, and says so once.
func (s *Store) noGroup(r *remoteRepo, err error) {
	if r.space == "" {
		return
	}
	r.space = ""
	if s.cfg.Warn != nil {
		s.cfg.Warn("group commit is off for this store: concurrent writers will take turns",
			"reason", err.Error())
	}
}

// holds reports whether the last fetch saw ref at h.
func (r *remoteRepo) holds(ref plumbing.ReferenceName, h plumbing.Hash) bool {
	got, err := r.st.Reference(ref)
	return err == nil && got.Hash() == h
}
