package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/wait"
)

// The operation driver: a render, a drain and a prune-misscheduled are
// each, once their inputs are read and their stores opened, one pass or
// more of three steps with explicit inputs and outputs:
//
//	read:    the stores           → one view of each (views)
//	plan:    views                → the updates, per store
//	publish: views, the updates   → each store's report
//
// Every update goes to its store with the view it was planned on
// (statestore.Update.View), so that the write plans on what the pass
// read instead of reading the store again. A pass ends early, with
// nothing written, when a store cannot be read (a *storesFailed from
// read or plan).
//
// One rule for all three redoes a pass: a store refused an update
// because another writer changed a workload's record, or a file the
// update was computed from, after the pass read it (statestore.Basis; or
// a read met a file another writer was rewriting). That is a lost race,
// and it is retried like one: after a jittered pause that grows with each
// redo, the stores are read again and the updates planned again from what
// they hold now, as part of the publish (a stop asked meanwhile lets it
// finish), for as long as the retry deadline allows (and maxRedos): N
// writers of one workload at once each go stale up to N - 1 times, and
// every one of them must land. An operation stopped already, or whose
// deadline would pass during the pause, reports the stores' errors.
//
// A redo never deletes what another writer placed: its plan starts from
// what the stores hold now, and each update is refused again if the
// store moves once more before it lands.

// operation is one render, drain or prune under way, as the driver sees
// it.
type operation struct {
	e  *Engine
	ph *phaseTracker
	// soft is the operation's own context, which a stop cancels; ctx is
	// what the passes run on: soft, then, once the operation publishes
	// again (a redo), its publish context.
	soft, ctx context.Context
	release   context.CancelFunc
	// what names the operation in the log ("render", "drain", "prune").
	what  string
	redos int
	// wrote keeps each store's report of the last pass that wrote there:
	// a later pass that finds nothing left to write there reports that
	// write (see mergeAttempts).
	wrote map[renderer.StoreRef]StoreReport
	// redoFailed, when set, makes the reports of an operation whose redo
	// could not plan (err) from the last pass's reports; unset, the
	// operation returns err.
	redoFailed func(last []StoreReport, err error) ([]StoreReport, error)
}

// newOperation starts an operation on ctx (which carries its retry
// deadline).
func (e *Engine) newOperation(ctx context.Context, what string) *operation {
	return &operation{e: e, ph: &phaseTracker{e: e, ctx: ctx}, soft: ctx, ctx: ctx, what: what, wrote: map[renderer.StoreRef]StoreReport{}}
}

// pass is what an operation does in one pass (see the top of this file).
// plan returns nil updates when there is nothing to publish.
type pass struct {
	read    func(ctx context.Context) (map[renderer.StoreRef]*storeView, error)
	plan    func(ctx context.Context, views map[renderer.StoreRef]*storeView) (storeUpdates, error)
	publish func(ctx context.Context, views map[renderer.StoreRef]*storeView, updates storeUpdates) ([]StoreReport, error)
}

// storesFailed ends a pass with nothing written: stores that could not be
// read, and why, in store order.
type storesFailed struct{ reports []StoreReport }

func (e *storesFailed) Error() string {
	var msgs []string
	for _, r := range e.reports {
		msgs = append(msgs, r.Err.Error())
	}
	return strings.Join(msgs, "; ")
}

// run runs p until a pass ends without a stale store, and returns the
// stores' reports: those of the last pass, where a store the last pass
// found up to date reports an earlier pass's write. published reports
// whether any pass published. A pass that fails before it publishes
// anything returns its error, as the phase tracker says (a stop before
// publishing is a *StoppedError).
func (o *operation) run(p pass) (reports []StoreReport, published bool, err error) {
	defer func() {
		if o.release != nil {
			o.release()
		}
	}()
	for {
		reps, wrote, err := o.onePass(p)
		var sf *storesFailed
		switch {
		case errors.As(err, &sf):
			reps = o.unread(reports, sf.reports)
		case err != nil && !published:
			return nil, false, o.ph.check(err)
		case err != nil && o.redoFailed != nil:
			reps, err = o.redoFailed(reports, err)
			return reps, true, err
		case err != nil:
			return reports, true, err
		case reps == nil && !wrote:
			return reports, published, nil // nothing (left) to publish
		}
		published = published || wrote
		reports = reps
		if !o.redo(reports) {
			return reports, published, nil
		}
	}
}

// onePass is one pass: read, plan, publish. wrote reports whether it
// published.
func (o *operation) onePass(p pass) (reps []StoreReport, wrote bool, err error) {
	views, err := p.read(o.ctx)
	if cerr := o.ph.check(nil); cerr != nil {
		return nil, false, cerr // a stop while reading: nothing is written
	}
	if err != nil {
		return nil, false, err
	}
	updates, err := p.plan(o.ctx, views)
	if err != nil || updates == nil {
		return nil, false, err
	}
	updates.setViews(views)
	reps, err = p.publish(o.ctx, views, updates)
	if err != nil {
		return nil, false, err
	}
	return mergeAttempts(o.wrote, reps), true, nil
}

// unread is the reports of a pass that could not read failed: alone on a
// first pass, the last pass's with the unread stores' in their place on
// a redo.
func (o *operation) unread(last, failed []StoreReport) []StoreReport {
	if last == nil {
		return failed
	}
	out := slices.Clone(last)
	for _, f := range failed {
		out = slices.DeleteFunc(out, func(r StoreReport) bool { return r.Store == f.Store })
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b StoreReport) int { return strings.Compare(a.Store.String(), b.Store.String()) })
	return out
}

// redo reports whether the operation must read and plan again, and
// prepares it (see the top of this file).
func (o *operation) redo(reports []StoreReport) bool {
	if !stale(reports) || stopAsked(o.soft) || o.redos >= maxRedos {
		return false
	}
	// Another writer changed the workload meanwhile: the stores are busy,
	// not down.
	wait.Progress(o.ctx)
	if err := wait.LostRace(redoLimit).Pause(o.ctx, o.redos+1, statestore.ErrStale); err != nil {
		return false
	}
	o.redos++
	o.e.log.Debug("a workload changed in a store while this "+o.what+" wrote it: reading the stores again", "attempt", o.redos+1)
	if o.release == nil {
		o.ctx, o.release = publishContext(o.soft)
		o.ph.ctx = o.ctx
	}
	return true
}

// redoLimit caps the pause before a redo (see redo): pauses grow from
// 20ms, with jitter, so that writers of one workload that went stale
// together do not read and publish again in lockstep.
const redoLimit = time.Second

// maxRedos bounds how many times an operation plans again because a
// workload changed under its publish (see stale). A stale basis is a lost
// race: it is retried for as long as the retry deadline allows, never
// given up after a count, so this bound only keeps the loop finite.
const maxRedos = 1 << 20

// setViews gives every update the view of its store that the pass read
// (statestore.Update.View): its write plans on it.
func (s storeUpdates) setViews(views map[renderer.StoreRef]*storeView) {
	for ref, us := range s {
		v := views[ref]
		if v == nil {
			continue
		}
		for i := range us {
			if us[i].View == nil {
				us[i].View = v.snap
			}
		}
	}
}

// stale reports whether a store refused its updates because a workload
// changed after they were computed (a *statestore.StaleError), or could
// not be read for a race with another writer (see readRace).
func stale(reports []StoreReport) bool {
	for _, sr := range reports {
		if errors.Is(sr.Err, statestore.ErrStale) {
			return true
		}
	}
	return false
}

// mergeAttempts keeps, per store, the report of the last pass that wrote
// it when a later pass found it up to date: an operation that read the
// stores again after a stale write reports the write it made (a drain's
// copy that landed before its removal was refused).
func mergeAttempts(wrote map[renderer.StoreRef]StoreReport, reps []StoreReport) []StoreReport {
	out := slices.Clone(reps)
	for i, r := range out {
		switch {
		case r.Err == nil && r.Result.Updated:
			wrote[r.Store] = r
		case r.Err == nil:
			if w, ok := wrote[r.Store]; ok {
				out[i] = w
			}
		}
	}
	return out
}
