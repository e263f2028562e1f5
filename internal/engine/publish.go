package engine

import (
	"context"
	"sync"
	"time"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
)

// publish is the last step of a render, a drain and a prune. Entering the
// publishing phase is the last point where a stop ends them with nothing
// written. From there every store's updates are written (publishStores)
// on the publish context, which a stop does not cancel: each publish
// finishes, and the caller's report says a stop came meanwhile
// (stopAsked). prs are the stores in pull-request mode (renders only),
// key the workload whose pull requests they are.
func (e *Engine) publish(ctx context.Context, ph *phaseTracker, p *inputs.Platform, stores map[renderer.StoreRef]statestore.Store, all storeUpdates, prs map[renderer.StoreRef]*prSetup, key string) ([]StoreReport, error) {
	if err := ph.enter(PhasePublishing); err != nil {
		return nil, err
	}
	pub, release := publishContext(ctx)
	defer release()
	return e.publishStores(ctx, pub, p, stores, all, prs, key), nil
}

// publishStores writes each store's updates, the stores in parallel, and
// reports each store's outcome in store order. wait is the caller's own
// context (a stop ends a pull request's wait for its merge); pub the
// publish's.
func (e *Engine) publishStores(wait, pub context.Context, p *inputs.Platform, stores map[renderer.StoreRef]statestore.Store, all storeUpdates, prs map[renderer.StoreRef]*prSetup, key string) []StoreReport {
	out := make([]StoreReport, len(all))
	var wg sync.WaitGroup
	for i, ref := range sortedRefs(all) {
		wg.Go(func() { out[i] = e.publishStore(wait, pub, p, ref, stores[ref], all[ref], prs[ref], key) })
	}
	wg.Wait()
	return out
}

// publishStore writes one store's updates: as one change where the store
// can, through a pull request where the store asks for one (pr).
func (e *Engine) publishStore(wait, pub context.Context, p *inputs.Platform, ref renderer.StoreRef, st statestore.Store, us []statestore.Update, pr *prSetup, key string) StoreReport {
	for i := range us {
		us[i].DryRun = e.opts.DryRun
	}
	if pr != nil && !e.opts.DryRun {
		sr := e.publishPR(wait, pub, p, ref, st, us, key, pr)
		logFetched(e.log, st)
		return sr
	}
	t0 := time.Now()
	res, err := applyAll(pub, st, us)
	logFetched(e.log, st)
	sr := StoreReport{Store: ref, Name: st.String(), Result: res, Err: e.annotate(ref, err), Duration: time.Since(t0), Uploads: e.opts.Kinds.Capabilities(ref.Kind).Uploads}
	sr.Destinations = splitByDestination(p, ref, res.Diff)
	if pr != nil && err == nil && res.Updated {
		// A dry run of a store in pull-request mode: the diff is what the
		// pull request would propose, planned on the base.
		sr.PullRequest = &PullRequestReport{Action: PRDirect, Base: pr.base}
		// The store's kind declared pull requests (pr is set): its
		// store is a Proposer by that declaration (statestore.Proposer).
		if gs, ok := st.(statestore.Proposer); ok {
			sr.PullRequest.Branch = gs.ProposalBranch(key)
		}
		if pr.selects(splitByDestination(p, ref, ownDiff(res.Diff, us))) {
			sr.PullRequest.Action = PRWould
		}
	}
	return sr
}
