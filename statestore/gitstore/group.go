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
	"github.com/render-dev/render/statestore/planner"
	"github.com/render-dev/render/statestore/wait"
)

// How waiting writers take turns to lead (await). The writer whose
// request sorts first leads as soon as the line of requests stops growing
// between two polls, so that writers who lost the same race are carried by
// one push. Every other waiter leads itself only once the branch stood
// still for patience plus one turn per request ahead of its own: a leader
// that died or stalls (a process the scheduler has not run for seconds)
// holds the others up once, never for a time that grows with the number of
// writers; and when the second in line takes over, it carries every
// request it sees, the stalled leader's too.
//
// A turn is what a leader's push may take on this server now: at least
// stagger, and turnPushes times what the leader's push costs, counted from
// the slowest push this writer has timed itself (its own first push, or
// the push of its request). A leader's push carries the deletion of every
// request it folds, and a server such as Gitea runs a hook process for
// each ref a push changes (its own push changed one, with a hook run before
// and after it): so a push that carries n requests counts as 1 + n/turnRefs
// of this writer's own. On a loaded server a push takes seconds or
// minutes, and a waiter that took over while the leader's push was still on
// its way would only race it and double the server's work: at a load
// average of 40-60, with turns capped by an eighth of the retry budget and
// counted from a one-ref push, a leader's push carrying 12 requests took
// 4.5 minutes while its waiters took over at 75s, 150s, ... A turn is at
// most the render's retry budget, so that a request whose writer is gone
// (killed, or it gave up while the server could not be reached to
// withdraw it) at the head of the line costs the others one turn, not
// their deadline: every answered poll moves a waiter's deadline one budget
// on (wait.Progress, up to four budgets), and the next in line leads after
// that turn and carries every request, the dead writer's too. (With turns
// of at most a quarter of the budget, 64 writers at once on Gitea, each of
// whose one-ref pushes took 75s, had six waiters take over at 30s a turn
// while the leader's push of 63 refs, which took 3m24s, was on its way:
// each pushed the same 63 refs again, 64 more hook runs each.)
//
// A waiter never leads only because its own deadline is near: writers of a
// burst share one deadline, and leading together they would all race the
// leader's push with pushes as big as its own (at a load average of 50,
// eight did, and each push then took four minutes). At its deadline a
// waiter gives up and withdraws its request (see Abandon); if a leader
// carried it meanwhile, its update landed and it says so.
//
// Polls read the server's refs only (no objects), from about 80ms after a
// lost race, backing off to pollLimit (and to twice the time the last
// listing took, on a loaded server: pollPause): a writer carried by
// another's push sees its request gone within one poll, and N waiters
// poll the server about N / pollLimit times a second at most.
const (
	patience    = 3 * time.Second
	stagger     = time.Second
	turnPushes  = 3
	turnRefs    = 3
	pollFirst   = 80 * time.Millisecond
	pollLimit   = 800 * time.Millisecond
	pollSpacing = 2
)

// turnTime is how long a waiter gives each leader ahead of it, when the
// slowest push it timed took slowest, waiting requests are in the line
// (what the leader's push may carry) and its retry budget is budget.
func turnTime(slowest time.Duration, waiting int, budget time.Duration) time.Duration {
	push := slowest + slowest*time.Duration(max(waiting, 0))/turnRefs
	return max(stagger, min(turnPushes*push, budget))
}

// awaited is how a wait in line ended.
type awaited int

const (
	// awaitLead: it is this writer's turn to lead.
	awaitLead awaited = iota
	// awaitGone: this writer's request is gone (carried by another
	// writer's push, which deletes it in the push that lands it, or
	// deleted as stale); the commits the branch gained say which.
	awaitGone
	// awaitCarried: the branch holds this writer's update already, its
	// request still listed (see await).
	awaitCarried
)

// await waits, with cheap reads of the server's refs only, until this
// writer's request is gone, or its update is seen on the branch, or it
// is this writer's turn to lead. tip is the branch's tip the last listing
// showed. slowest is the slowest push this writer has timed (see
// turnTime).
//
// A leader's push moves the branch and deletes the requests it carries in
// one atomic update, but a server commits that update ref by ref (git's
// files backend does), so a listing made meanwhile can show the new tip
// with some of the carried requests still there: on a loaded Gitea, the
// deletions followed the branch's move by seconds, and a carried writer
// polled on, its update landed, until its ref went. So when a poll finds
// the branch moved since the poll before, with this writer's request
// still listed, carried (the commits the branch gained, confirm.go) says
// whether the update is on the branch; if it is, the wait is over. That
// is one small request per move of the branch during the wait: a waiter
// polls far more often than the branch moves.
func (s *Store) await(ctx context.Context, r *remoteRepo, workload string, mine plumbing.ReferenceName, h plumbing.Hash, slowest time.Duration, lost error, carried func(tip plumbing.Hash) bool) (how awaited, tip plumbing.Hash, err error) {
	began := wait.Now(ctx)
	var seen plumbing.Hash
	moved := began
	waiting := -1 // requests seen at the previous poll
	_, budget := wait.RetryDeadline(ctx)
	turn := turnTime(slowest, 0, budget)
	done := func(why string, polls int) {
		s.debug("wait", "workload", workload, "for", "its request to be carried, or its turn to lead",
			"outcome", why, "polls", polls, "turn", turn.Round(time.Millisecond).String(),
			"took", wait.Since(ctx, began).Round(time.Millisecond).String())
	}
	var listed time.Duration // how long the last listing took
	for poll := 1; ; poll++ {
		if err := pollPause(ctx, poll, listed, lost); err != nil {
			done("gave up", poll-1)
			return awaitLead, tip, err
		}
		t0 := wait.Now(ctx)
		refs, err := r.list(ctx)
		listed = wait.Since(ctx, t0)
		if err != nil {
			done("error", poll)
			return awaitLead, tip, err
		}
		// The server answered: it is up. A writer waiting in line waits
		// on a leader's push, which on a loaded server (Gitea runs a hook
		// process per ref the push changes) can take longer than a whole
		// budget without any ref moving; the turns below bound how long
		// it waits for any one leader, so the retry deadline is left to
		// bound a server that stops answering (up to wait.Extended).
		wait.Progress(ctx)
		tip = refs[r.branch]
		ahead, all := rank(refs, r.space, mine)
		s.debug("poll", "workload", workload, "poll", poll, "tip", tip.String(), "request_present", refs[mine] == h,
			"ahead", ahead, "waiting", all)
		if refs[mine] != h {
			done("request gone", poll)
			return awaitGone, tip, nil
		}
		if tip != seen {
			if !seen.IsZero() && carried != nil && carried(tip) {
				done("carried: its update is on the branch, its request not yet deleted", poll)
				return awaitCarried, tip, nil
			}
			seen, moved = tip, wait.Now(ctx)
		}
		settled := all == waiting || poll >= 4
		waiting = all
		turn = turnTime(slowest, all, budget)
		switch {
		case ahead == 0 && settled:
			done("first in line: leads", poll)
			return awaitLead, tip, nil
		case ahead > 0 && wait.Since(ctx, moved) >= patience+time.Duration(ahead)*turn:
			done(fmt.Sprintf("the branch stood still with %d requests ahead: leads", ahead), poll)
			return awaitLead, tip, nil
		}
	}
}

// pollPause waits before poll number poll of a waiter whose last listing
// of the server's refs took listed: the backoff (see await), and at least
// pollSpacing times listed, so that a waiter on a loaded server has a
// listing on its way at most a third of the time (at a load average of 50
// a listing took 3s, and 14 waiters polling every 800ms kept 14 of them
// on the server's two cores beside the leader's push). It fails, wrapping
// cause, when the retry deadline would pass meanwhile.
func pollPause(ctx context.Context, poll int, listed time.Duration, cause error) error {
	return wait.For(ctx, max(pollBackoff.Next(poll), pollSpacing*listed), poll-1, cause)
}

// pollBackoff is how a waiter's polls back off (see await).
var pollBackoff = wait.Policy{First: pollFirst, Limit: pollLimit, Jitter: 0.5}

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
		hint = hint.Merge(planner.UpdateHint(fu))
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
		plan, err := planner.PlanUpdate(snap, fu)
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
			c, err := s.commit(ov, head, next.rootOrEmpty(ov), foldedMessage(fu.Message, q.commit), author)
			if err != nil {
				continue
			}
			snap, head = next, c
		}
		folded = append(folded, &packp.Command{Name: q.ref, Old: q.commit})
	}
	if len(reqs) > 0 {
		s.debug("fold", "workload", workload, "requests", len(reqs), "folded", len(folded), "stale", len(stale),
			"left", len(reqs)-len(folded)-len(stale))
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
	wctx, cancel := wait.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	wctx = wait.WithRetryDeadline(wctx, 10*time.Second)
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
