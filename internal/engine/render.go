package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/render-dev/render/internal/fluxcheck"
	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/internal/secrets"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/wait"
)

// Render runs one whole render: the steps that read what the render is
// about, once (its inputs, its stores' clients, a first plan from the
// inputs alone: see prepare), then, through the operation driver (see
// operation), a pass of steps that read every store once, plan and
// publish, again while a store refuses an update as stale. Each step
// takes what it reads and returns what it makes: what the render is
// about is a rendering, made once; a pass's read is a passRead, made
// anew by each pass, and its plan is made from it alone. A returned
// error is an InputError (nothing was written), a *StoppedError (ctx,
// from WithStop, was stopped before publishing; nothing was written) or
// ctx's error; store failures are in the Report.
func (e *Engine) Render(ctx context.Context) (*Report, error) {
	start := time.Now()
	ctx = wait.WithRetryDeadline(ctx, e.opts.RetryDeadline)
	ctx = fluxcheck.WithWarn(ctx, e.kustomizeWarnings())
	op := e.newOperation(ctx, "render")
	r, skipped, err := e.prepare(ctx, op.ph)
	if err != nil {
		return nil, op.ph.check(err)
	}
	if skipped != nil {
		skipped.Duration = time.Since(start)
		return skipped, nil
	}
	rep := &Report{Workflow: r.wf, DryRun: e.opts.DryRun, Files: len(r.ld.Input.Output)}
	// rd is the read of the pass under way: each pass's read replaces it,
	// so a plan sees what its own pass read, never an earlier pass's.
	var rd *passRead
	stores, _, err := op.run(pass{
		read: func(ctx context.Context) (map[renderer.StoreRef]*storeView, error) {
			var err error
			if rd, err = r.read(ctx); err != nil { // what each store remembers of the workload
				return nil, err
			}
			return rd.views, nil
		},
		plan: func(ctx context.Context, _ map[renderer.StoreRef]*storeView) (storeUpdates, error) {
			return r.plan(ctx, rd, rep) // place, seal, plan the writes, guard them
		},
		publish: func(ctx context.Context, _ map[renderer.StoreRef]*storeView, updates storeUpdates) ([]StoreReport, error) {
			return e.publish(ctx, op.ph, r.ld.Platform, r.stores, updates, r.prs, r.key) // every store, in parallel
		},
	})
	if err != nil {
		return nil, err
	}
	rep.Stores = stores
	if r.wf.Action == renderer.Delete && rep.Plan != nil && deletedNothing(rep) {
		rep.Plan.Warnings = append(rep.Plan.Warnings, fmt.Sprintf("nothing to remove: no store holds a file of %s", objectName(r.wf)))
	}
	rep.Duration = time.Since(start)
	rep.Stopped = stopAsked(op.soft)
	op.ph.done()
	return rep, nil
}

// rendering is what one render is about, as the steps before its passes
// found it: nothing changes it once they are done, so every pass starts
// from the same rendering (see prepare).
type rendering struct {
	e  *Engine
	ph *phaseTracker
	// ld is every input (ld.Input the renderer's, which each pass's read
	// completes with what the stores remember, in a copy of its own);
	// wf its workflow, key the workload it renders.
	ld  *Inputs
	wf  renderer.Workflow
	key string
	// stores is a client per store any destination uses, prs the stores
	// in pull-request mode.
	stores map[renderer.StoreRef]statestore.Store
	prs    map[renderer.StoreRef]*prSetup
	// early is the plan the inputs alone give (see preflight).
	early *earlyPlan
}

// earlyPlan is what preflight planned from the inputs alone: the plan,
// the objects Flux would build of it, and every destination's policy for
// Secrets (nil for a delete, which writes none).
type earlyPlan struct {
	plan    *renderer.Plan
	objects []fluxcheck.Object
	dests   secrets.Destinations
}

// passRead is what one pass of a render read (see rendering.read): each
// store's view, the records read there, the stores that hold the
// workload, and the renderer's input completed with what they remember
// (the load of the destinations a spread choice weighs is read during
// the pass's render: see schedule). A redo reads again into a new passRead: it keeps
// the rendering (inputs, clients, the early plan) and the report, whose
// plan fields its plan overwrites, and drops everything the stale pass
// read and planned.
type passRead struct {
	views   map[renderer.StoreRef]*storeView
	recs    map[renderer.StoreRef][]statestore.Record
	holders map[renderer.StoreRef]bool
	in      renderer.Input
}

// prepare runs the steps before the passes, once: it reads and validates
// every input (loadInputs), opens a client per store and resolves each
// one's pull-request mode (openStores), and plans once, before any
// store is contacted (preflight). skipped is the report of a render
// workflow-control.yaml skips: nothing else runs then.
func (e *Engine) prepare(ctx context.Context, ph *phaseTracker) (r *rendering, skipped *Report, err error) {
	ld, skipped, err := e.loadInputs(ctx, ph)
	if err != nil || skipped != nil {
		return nil, skipped, err
	}
	stores, prs, err := e.openStores(ph, ld.Platform)
	if err != nil {
		return nil, nil, err
	}
	wf := ld.Input.Workflow
	key := workloadKey(wf)
	early, err := e.preflight(ctx, ld, key)
	if err != nil {
		return nil, nil, err
	}
	return &rendering{e: e, ph: ph, ld: ld, wf: wf, key: key, stores: stores, prs: prs, early: early}, nil, nil
}

// loadInputs reads and validates every input: the platform, secrets,
// metadata, output and object.yaml. A workflow-control.yaml that skips
// the render ends it here, with the report skipped: Kratix creates no
// Work then, so nothing is scheduled or written.
func (e *Engine) loadInputs(ctx context.Context, ph *phaseTracker) (ld *Inputs, skipped *Report, err error) {
	if err := ph.enter(PhaseReading); err != nil {
		return nil, nil, err
	}
	if ld, err = e.Load(ctx); err != nil {
		return nil, nil, err
	}
	if skip := ld.Control.Skip(); skip != "" {
		ph.done()
		wf := ld.Input.Workflow
		return ld, &Report{Workflow: wf, DryRun: e.opts.DryRun,
			Plan: &renderer.Plan{Workflow: wf, Warnings: []string{"nothing written: " + skip}}}, nil
	}
	return ld, nil, nil
}

// openStores opens a client for every store any destination of p
// uses (records are read from all of them; kept clients are reused), and
// resolves each store's pull-request mode. A store's configuration that
// is wrong (a missing secret, a forge that cannot be known) is bad input,
// before any store is contacted.
func (e *Engine) openStores(ph *phaseTracker, p *inputs.Platform) (map[renderer.StoreRef]statestore.Store, map[renderer.StoreRef]*prSetup, error) {
	if err := ph.enter(PhasePlanning); err != nil {
		return nil, nil, err
	}
	refs := storeRefs(p)
	prs, err := e.pullRequests(p, refs)
	if err != nil {
		return nil, nil, err
	}
	stores, err := e.open(p, refs)
	return stores, prs, err
}

// preflight plans with what the inputs alone say, before any store is
// contacted, so that selector, layout and path errors, what Flux would
// fail to build, and what a destination's policy forbids of the Secrets,
// never cost a network round trip. The plan also names what the render
// will most likely look at in each store (the hints of a pass's read),
// and when the stores remember nothing that changes it, it is the plan
// (see schedule).
func (e *Engine) preflight(ctx context.Context, ld *Inputs, key string) (*earlyPlan, error) {
	plan, err := renderer.RenderContext(ctx, ld.Input)
	if err != nil {
		return nil, err
	}
	if err := checkStorePaths(ld.Platform, plan, key); err != nil {
		return nil, err
	}
	early := &earlyPlan{plan: plan}
	if early.objects, err = fluxcheck.CheckPlan(ctx, plan, e.fluxSource); err != nil {
		return nil, err
	}
	wf := ld.Input.Workflow
	if wf.Action == renderer.Delete {
		return early, nil // nothing is written: no policy to apply, no key to read
	}
	if early.dests, err = secretDestinations(ld.Platform); err != nil {
		return nil, err
	}
	if err := checkSecrets(ctx, wf, early.dests, plan, ld.Input.Output, ""); err != nil {
		return nil, err
	}
	return early, nil
}

// read takes a snapshot of every store, in parallel, and reads what the
// render needs there (see readViews): the workload's record, its
// promise's, and from a store that predates the placement index every
// record. If a store cannot be read, the pass ends with nothing written:
// without every store's records, placements could be duplicated or files
// orphaned. What the records say (earlier placements, the promise
// workflow's selector, the load in stores without the index) goes into
// a copy of the renderer's input; a workload no store remembers is
// looked for where Kratix would have placed it.
func (r *rendering) read(ctx context.Context) (*passRead, error) {
	rd := &passRead{in: r.ld.Input}
	hints := earlyHints(rd.in, r.early.plan, r.early.objects, r.ld.Platform, r.key)
	views, failed := r.e.readViews(ctx, r.stores, r.key, r.wf.Promise, hints)
	if err := r.ph.check(nil); err != nil {
		return nil, err
	}
	if len(failed) > 0 {
		return nil, &storesFailed{failedReports(r.e, r.stores, failed)}
	}
	rd.views = views
	rd.holders = applyFacts(&rd.in, views, r.key)
	// The records this render can see: its own, its promise's and its
	// resource's (every pipeline), and all of them from a store that
	// predates the placement index.
	rd.recs = viewRecords(views)
	if r.e.opts.NoInheritedSelector {
		rd.in.PromiseWorkflowSelector = nil
	}
	if r.wf.Action == renderer.Configure && rd.in.Previous == nil && len(rd.holders) == 0 {
		// No store remembers this workload: Kratix may have placed it, and
		// where it did, the workload stays (a resource is not placed twice,
		// a dependency on a destination that no longer matches is kept).
		prev, err := kratixPlacements(ctx, r.ld.Platform, viewSnaps(views), rd.in, false)
		if err != nil {
			return nil, r.placementFailed(err)
		}
		if len(prev) > 0 {
			rd.in.Previous, rd.in.PreviousByKratix = prev, true
		}
	}
	return rd, nil
}

// placementFailed ends the pass when a store could not say where Kratix
// placed a workload: without it a resource could be placed twice, so
// nothing is written, and the report names the store. Other errors are
// returned.
// A read that met a file changed since the store was listed (another
// writer rewrote it: an S3 object whose version moved) is a lost race,
// retried like a stale basis: the stores are read again (see operation).
func (r *rendering) placementFailed(err error) error {
	var se *placementError
	if !errors.As(err, &se) {
		return err
	}
	serr := r.e.annotate(se.ref, se.err)
	if errors.Is(se.err, statestore.ErrConflict) {
		serr = &readRace{serr}
	}
	return &storesFailed{[]StoreReport{{Store: se.ref, Name: r.stores[se.ref].String(), Err: serr}}}
}

// plan is a pass's plan, from what the pass read (rd) alone: the
// placement, on what the stores remember, its Secrets sealed, one update
// per store, checked, guarded and given its commit message. It fills
// rep's Plan, Secrets, Static and MassDeletion as each becomes known (a
// pass cut short because a store could not say where Kratix placed the
// static dependencies reports the plan it made).
func (r *rendering) plan(ctx context.Context, rd *passRead, rep *Report) (storeUpdates, error) {
	plan, err := r.schedule(ctx, rd) // place every group with what the stores remember, in one render
	if err != nil {
		return nil, err
	}
	// Encrypt the Secrets of destinations that encrypt them.
	sealed, err := r.sealSecrets(ctx, rd, plan)
	if err != nil {
		return nil, err
	}
	rep.Plan, rep.Secrets = sealed.Plan, sealed.Notes
	objects, err := r.checkPlan(ctx, rd, sealed.Plan) // what Flux builds, and whose it is
	if err != nil {
		return nil, err
	}
	w, err := r.planWrites(ctx, rd, sealed, objects) // one update per store
	if err != nil {
		return nil, err
	}
	if r.wf.Type == renderer.PromiseWorkflow {
		rep.Static, rep.Secrets = w.static, append(rep.Secrets, w.staticNotes...)
	}
	// Other workloads' claims, and the mass-deletion breaker.
	if rep.MassDeletion, err = r.e.guard(writeSet{platform: r.ld.Platform, views: rd.views, recs: rd.recs,
		updates: w.updates, claims: w.claims, deleteAction: r.wf.Action == renderer.Delete}); err != nil {
		return nil, err
	}
	if err := r.composeMessages(w.updates); err != nil { // each update's commit message
		return nil, err
	}
	return w.updates, nil
}

// readRace is a store read that lost a race with another writer. It is
// an ErrStale, so that the render reads the stores again.
type readRace struct{ err error }

func (e *readRace) Error() string   { return e.err.Error() }
func (e *readRace) Unwrap() []error { return []error{e.err, statestore.ErrStale} }

// schedule places every group with what the stores remember (rd.in, as
// the pass's read completed it), in one render, which asks the pass's
// views for the load of the destinations a spread choice weighs, those
// only and when it weighs them (renderer.Input.Weigh: a group that keeps
// its placement weighs none).
func (r *rendering) schedule(ctx context.Context, rd *passRead) (*renderer.Plan, error) {
	return schedule(ctx, rd.in, r.early.plan, func(dests []string) (renderer.Load, bool, error) {
		w := renderer.Input{Load: renderer.Load{Total: map[string]int{}, ByFlavour: map[string]map[string]int{}}}
		found, err := r.e.readLoad(ctx, r.ld.Platform, rd.views, dests, r.key, &w)
		return w.Load, found, err
	})
}

// schedule is the render of a pass (see rendering.schedule), weigh
// reading the load of the destinations a spread choice weighs (found:
// one of them holds something, as readLoad says). The renderer is pure:
// when the stores remember nothing it reads (no earlier placement, no inherited selector, no load counted from
// records) and the destinations a choice weighs hold nothing (or no
// choice weighs any), the input is the one preflight planned with, and
// so is its plan (early), which is taken as it is: a render that made it
// again would make the same plan, and its objects are known already.
func schedule(ctx context.Context, in renderer.Input, early *renderer.Plan, weigh func(dests []string) (l renderer.Load, found bool, err error)) (*renderer.Plan, error) {
	remembered := in.Previous != nil || in.PromiseWorkflowSelector != nil || len(in.Load.Total) > 0 || len(in.Load.ByFlavour) > 0
	if !remembered && len(renderer.LoadCandidates(in, early)) == 0 {
		return early, nil
	}
	weighed := false // a destination weighed holds something
	in.Weigh = func(dests []string) (renderer.Load, error) {
		l, found, err := weigh(dests)
		weighed = weighed || found
		return l, err
	}
	plan, err := renderer.RenderContext(ctx, in)
	if err == nil && !remembered && !weighed {
		return early, nil
	}
	return plan, err
}

// passWrites is what planWrites planned: the updates per store, and the
// claims the guard checks against other workloads' claims; for a promise
// workflow the plan of its static dependencies too, and what became of
// their Secrets.
type passWrites struct {
	updates, claims storeUpdates
	static          *renderer.Plan
	staticNotes     []secrets.Note
}

// checkPlan checks plan (the placement, its Secrets sealed) before any
// store is written, and returns the objects Flux will build of it: what
// Flux will build, no object that another workload's record lists
// (stores that predate the index), no group folder another workload
// fills.
func (r *rendering) checkPlan(ctx context.Context, rd *passRead, plan *renderer.Plan) ([]fluxcheck.Object, error) {
	objects := r.early.objects
	if plan != r.early.plan {
		var err error
		if objects, err = fluxcheck.CheckPlan(ctx, plan, r.e.fluxSource); err != nil {
			return nil, err
		}
	}
	if err := fluxcheck.Duplicates(objects, otherObjects(rd.recs, r.key)); err != nil {
		return nil, err
	}
	if err := folderTaken(r.ld.Platform, plan, rd.views, r.key); err != nil {
		return nil, err
	}
	return objects, nil
}

// planWrites turns the placement (sealed: the plan with its Secrets
// sealed, and objects, what Flux builds of it) into one update per
// store. A delete removes every pipeline's workload of its object, and
// what Kratix wrote for it; a promise workflow's static dependencies are
// a workload of their own. Last come the records a promise workflow
// leaves in every store and Kratix's canaries.
func (r *rendering) planWrites(ctx context.Context, rd *passRead, sealed *secrets.Sealed, objects []fluxcheck.Object) (*passWrites, error) {
	p, wf, key, plan := r.ld.Platform, r.wf, r.key, sealed.Plan
	w := &passWrites{updates: storeUpdates{}}
	record := r.e.record(wf, rd.in, plan, r.ld.Selectors)
	if wf.Action == renderer.Delete {
		// A delete pipeline has a name of its own: the delete removes every
		// workload of the resource (or promise), whatever its pipeline.
		for _, ref := range sortedRefs(rd.recs) {
			for _, rec := range rd.recs[ref] {
				if sameObject(rec, wf) {
					w.updates.add(ref, statestore.Update{Workload: rec.Workload})
				}
			}
		}
		// And what Kratix wrote for it, where no record says otherwise.
		w.updates.kratixDeletes(p, rd.in, rd.recs)
	} else {
		w.updates.addPlan(plan, record, objects, key, rd.holders)
		w.updates.setSealed(key, sealed.Files)
		w.updates.adoptInto(p, key, workOf(wf, wf.Pipeline, false), false, rd.holders)
	}
	if wf.Type == renderer.PromiseWorkflow {
		var err error
		if w.static, w.staticNotes, err = r.planStatic(ctx, rd, w.updates); err != nil {
			return nil, err
		}
	}
	// The guard checks the claims of what the workloads write; the records
	// added below claim nothing.
	w.claims = w.updates.clone()
	// Promise workflows leave their record in every store, so that resource
	// workflows inherit their root selector even when they wrote no files.
	if wf.Type == renderer.PromiseWorkflow && wf.Action == renderer.Configure && len(record.DefaultSelector) > 0 {
		for ref := range r.stores {
			if !w.updates.has(ref, key) {
				w.updates.add(ref, statestore.Update{Workload: key, Record: record})
			}
		}
	}
	// Kratix's canaries for every destination of a store go with whatever
	// is written there (only where they are missing).
	for ref, us := range w.updates {
		if len(plan.Canaries[ref]) > 0 && len(us[0].Shared) == 0 {
			us[0].Shared = plan.Canaries[ref]
		}
	}
	// Each update holds only on the record it was computed from.
	w.updates.setBases(rd.recs)
	return w, nil
}

// planStatic plans a Promise's static dependencies, a workload of their
// own, with placements of their own, from what the pass read: it adds
// their updates to updates, and returns their plan and what became of
// their Secrets.
func (r *rendering) planStatic(ctx context.Context, rd *passRead, updates storeUpdates) (*renderer.Plan, []secrets.Note, error) {
	p, wf := r.ld.Platform, r.wf
	skey := statestore.StaticWorkloadKey(wf.Promise)
	sin := rd.in
	sin.Previous, sin.PreviousByKratix = staticPrevious(rd.recs, skey), false
	if len(holdersOf(rd.recs, skey)) == 0 && wf.Action == renderer.Configure && rd.in.Promise != nil && len(rd.in.Promise.Dependencies) > 0 {
		sin.Output = []renderer.File{{Path: renderer.StaticDependenciesFile(wf.Promise), Data: rd.in.Promise.Dependencies}}
		prev, err := kratixPlacements(ctx, p, viewSnaps(rd.views), sin, true)
		if err != nil {
			return nil, nil, r.placementFailed(err)
		}
		if len(prev) > 0 {
			sin.Previous, sin.PreviousByKratix = prev, true
		}
	}
	static, err := renderer.RenderStatic(ctx, sin)
	if err != nil {
		return nil, nil, err
	}
	sobjects, err := fluxcheck.CheckPlan(ctx, static, r.e.fluxSource)
	if err != nil {
		return nil, nil, err
	}
	if err := fluxcheck.Duplicates(sobjects, otherObjects(rd.recs, skey)); err != nil {
		return nil, nil, err
	}
	if wf.Action == renderer.Delete {
		return static, nil, nil
	}
	srec := &statestore.Record{Type: string(renderer.PromiseWorkflow), Promise: wf.Promise, Placements: placements(static)}
	sholders := holdersOf(rd.recs, skey)
	sealed, err := r.sealStatic(ctx, rd, static, skey)
	if err != nil {
		return nil, nil, err
	}
	updates.addPlan(sealed.Plan, srec, sobjects, skey, sholders)
	updates.setSealed(skey, sealed.Files)
	updates.adoptInto(p, skey, workOf(wf, "", true), true, sholders)
	return static, sealed.Notes, nil
}

// composeMessages gives each update its commit message: render's subject
// and trailers, or a git store's spec.commit template (--commit-template),
// checked here on the planned diff.
func (r *rendering) composeMessages(updates storeUpdates) error {
	msg := message(r.wf, r.e.opts.Version)
	for ref, us := range updates {
		for i := range us {
			us[i].Message = msg
			if err := r.e.commitSettings(r.ld.Platform, ref, r.wf, r.ld.Object, &us[i]); err != nil {
				return err
			}
		}
	}
	return nil
}
