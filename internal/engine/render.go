package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/render-dev/render/internal/fluxcheck"
	"github.com/render-dev/render/internal/secrets"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/wait"
)

// Render runs one whole render: the steps that read what the render is
// about, once (its inputs, its stores' clients, a first plan from the
// inputs alone), then, through the operation driver (see operation), a
// pass of steps that read every store once, plan and publish, again
// while a store refuses an update as stale. Each step reads what the
// steps before it left in the rendering. A returned error is an
// InputError (nothing was written), a *StoppedError (ctx, from WithStop,
// was stopped before publishing; nothing was written) or ctx's error;
// store failures are in the Report.
func (e *Engine) Render(ctx context.Context) (*Report, error) {
	start := time.Now()
	ctx = wait.WithRetryDeadline(ctx, e.opts.RetryDeadline)
	ctx = fluxcheck.WithWarn(ctx, e.kustomizeWarnings())
	op := e.newOperation(ctx, "render")
	r := &rendering{e: e, ctx: ctx, ph: op.ph}
	for _, step := range []func() error{
		r.loadInputs, // read and validate every input
		r.openStores, // a client per store, and each one's pull-request mode
		r.preflight,  // plan once, before any store is contacted
	} {
		if err := step(); err != nil {
			return nil, op.ph.check(err)
		}
		if r.skipped != nil {
			r.skipped.Duration = time.Since(start)
			return r.skipped, nil
		}
	}
	stores, _, err := op.run(pass{
		read:    r.read,     // what each store remembers of the workload
		plan:    r.planPass, // place, seal, plan the writes, guard them
		publish: r.publish,  // write every store, in parallel
	})
	if err != nil {
		return nil, err
	}
	if r.report == nil {
		r.report = r.newReport()
	}
	r.report.Stores = stores
	if r.wf.Action == renderer.Delete && r.report.Plan != nil && deletedNothing(r.report) {
		r.report.Plan.Warnings = append(r.report.Plan.Warnings, fmt.Sprintf("nothing to remove: no store holds a file of %s", objectName(r.wf)))
	}
	r.report.Duration = time.Since(start)
	r.report.Stopped = stopAsked(op.soft)
	op.ph.done()
	return r.report, nil
}

// rendering is one render under way. The steps before the passes fill
// the fields above report; each pass's read and plan the others, anew.
type rendering struct {
	e   *Engine
	ph  *phaseTracker
	ctx context.Context // the current step's: the render's, or its pass's

	// loadInputs: every input. in is the renderer's input, which each
	// pass's read completes with what the stores remember and weighLoad
	// with the load of the destinations a spread choice weighs. skipped
	// is the report of a render workflow-control.yaml skips.
	ld      *Inputs
	in      renderer.Input
	wf      renderer.Workflow
	key     string
	skipped *Report
	// openStores: a client per store any destination uses.
	stores map[renderer.StoreRef]statestore.Store
	prs    map[renderer.StoreRef]*prSetup
	// preflight: the plan the inputs alone give, and its objects, and
	// every destination's policy for Secrets.
	early        *renderer.Plan
	earlyObjects []fluxcheck.Object
	secretDests  secrets.Destinations

	// A pass's read: each store's view, the records read there, and the
	// stores that hold the workload.
	views   map[renderer.StoreRef]*storeView
	recs    map[renderer.StoreRef][]statestore.Record
	holders map[renderer.StoreRef]bool
	// A pass's plan. schedule, weighLoad: the placement; sealSecrets:
	// with its Secrets encrypted where the destinations say so, and the
	// record's entries for the files it encrypted, per store.
	plan   *renderer.Plan
	sealed map[renderer.StoreRef]map[string]statestore.SealedFile
	// planWrites: the workload's record, and the updates per store;
	// claims are those the guard checks against other workloads' claims.
	record  *statestore.Record
	updates storeUpdates
	claims  storeUpdates

	// report is the render's report, made by the first pass's read and
	// filled in by each plan.
	report *Report
}

// newReport is the report of a render that read its stores.
func (r *rendering) newReport() *Report {
	return &Report{Workflow: r.wf, DryRun: r.e.opts.DryRun, Files: len(r.in.Output)}
}

// loadInputs reads and validates every input: the platform, secrets,
// metadata, output and object.yaml. A workflow-control.yaml that skips
// the render ends it here: Kratix creates no Work then, so nothing is
// scheduled or written.
func (r *rendering) loadInputs() error {
	if err := r.ph.enter(PhaseReading); err != nil {
		return err
	}
	ld, err := r.e.Load(r.ctx)
	if err != nil {
		return err
	}
	r.ld, r.in, r.wf = ld, ld.Input, ld.Input.Workflow
	r.key = workloadKey(r.wf)
	if skip := ld.Control.Skip(); skip != "" {
		r.ph.done()
		r.skipped = &Report{Workflow: r.wf, DryRun: r.e.opts.DryRun,
			Plan: &renderer.Plan{Workflow: r.wf, Warnings: []string{"nothing written: " + skip}}}
	}
	return nil
}

// openStores opens a client for every store any destination uses
// (records are read from all of them; kept clients are reused), and
// resolves each store's pull-request mode. A store's configuration that
// is wrong (a missing secret, a forge that cannot be known) is bad input,
// before any store is contacted.
func (r *rendering) openStores() error {
	if err := r.ph.enter(PhasePlanning); err != nil {
		return err
	}
	refs := storeRefs(r.ld.Platform)
	var err error
	if r.prs, err = r.e.pullRequests(r.ld.Platform, refs); err != nil {
		return err
	}
	r.stores, err = r.e.open(r.ld.Platform, refs)
	return err
}

// preflight plans with what the inputs alone say, before any store is
// contacted, so that selector, layout and path errors, and what Flux
// would fail to build, never cost a network round trip. The plan also
// names what the render will most likely look at in each store (the
// hints of a pass's read), and when the stores remember nothing that
// changes it, it is the plan (see schedule).
func (r *rendering) preflight() error {
	var err error
	if r.early, err = renderer.RenderContext(r.ctx, r.in); err != nil {
		return err
	}
	if err := checkStorePaths(r.ld.Platform, r.early, r.key); err != nil {
		return err
	}
	if r.earlyObjects, err = fluxcheck.CheckPlan(r.ctx, r.early, r.e.fluxSource); err != nil {
		return err
	}
	return r.checkSecrets(r.early)
}

// read takes a snapshot of every store, in parallel, and reads what the
// render needs there (see readViews): the workload's record, its
// promise's, and from a store that predates the placement index every
// record. If a store cannot be read, the pass ends with nothing written:
// without every store's records, placements could be duplicated or files
// orphaned. What the records say (earlier placements, the promise
// workflow's selector, the load in stores without the index) goes into
// the renderer's input; a workload no store remembers is looked for where
// Kratix would have placed it.
func (r *rendering) read(ctx context.Context) (map[renderer.StoreRef]*storeView, error) {
	r.ctx, r.in = ctx, r.ld.Input
	hints := earlyHints(r.in, r.early, r.earlyObjects, r.ld.Platform, r.key)
	views, failed := r.e.readViews(ctx, r.stores, r.key, r.wf.Promise, hints)
	if err := r.ph.check(nil); err != nil {
		return nil, err
	}
	if len(failed) > 0 {
		return nil, &storesFailed{failedReports(r.e, r.stores, failed)}
	}
	r.views = views
	r.holders = applyFacts(&r.in, views, r.key)
	// The records this render can see: its own, its promise's and its
	// resource's (every pipeline), and all of them from a store that
	// predates the placement index.
	r.recs = viewRecords(views)
	if r.e.opts.NoInheritedSelector {
		r.in.PromiseWorkflowSelector = nil
	}
	if r.wf.Action == renderer.Configure && r.in.Previous == nil && len(r.holders) == 0 {
		// No store remembers this workload: Kratix may have placed it, and
		// where it did, the workload stays (a resource is not placed twice,
		// a dependency on a destination that no longer matches is kept).
		prev, err := kratixPlacements(ctx, r.ld.Platform, viewSnaps(views), r.in, false)
		if err != nil {
			return nil, r.placementFailed(err)
		}
		if len(prev) > 0 {
			r.in.Previous, r.in.PreviousByKratix = prev, true
		}
	}
	return views, nil
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

// planPass is a pass's plan: the placement, on what the stores remember,
// its Secrets sealed, one update per store, checked, guarded and given
// its commit message.
func (r *rendering) planPass(ctx context.Context, _ map[renderer.StoreRef]*storeView) (storeUpdates, error) {
	r.ctx = ctx
	if r.report == nil {
		r.report = r.newReport()
	}
	for _, step := range []func() error{
		r.schedule,        // place every group with it (pure)
		r.weighLoad,       // a spread choice: read its candidates' load, place again
		r.sealSecrets,     // encrypt the Secrets of destinations that encrypt them
		r.planWrites,      // one update per store, checked
		r.guard,           // other workloads' claims, and the mass-deletion breaker
		r.composeMessages, // each update's commit message
	} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return r.updates, nil
}

// readRace is a store read that lost a race with another writer. It is
// an ErrStale, so that the render reads the stores again.
type readRace struct{ err error }

func (e *readRace) Error() string   { return e.err.Error() }
func (e *readRace) Unwrap() []error { return []error{e.err, statestore.ErrStale} }

// schedule places every group with what the stores remember. The
// renderer is pure: when the stores remember nothing it reads (no earlier
// placement, no inherited selector, no load counted from records), its
// input is the one preflight planned with, and so is its plan, which is
// taken as it is instead of being made again.
func (r *rendering) schedule() error {
	if r.in.Previous == nil && r.in.PromiseWorkflowSelector == nil && len(r.in.Load.Total) == 0 && len(r.in.Load.ByFlavour) == 0 {
		r.plan = r.early
		return nil
	}
	var err error
	r.plan, err = renderer.RenderContext(r.ctx, r.in)
	return err
}

// weighLoad: spreading needs the load on the destinations a group could
// go to. It is read for those only, once the placement says which they
// are (a group that keeps its placement weighs none), and the groups are
// placed again with it. The renderer is pure: when the candidates hold
// nothing (a new store, empty destinations), its input is the one
// schedule placed with, and so is its plan, which stays.
func (r *rendering) weighLoad() error {
	cands := renderer.LoadCandidates(r.in, r.plan)
	if len(cands) == 0 {
		return nil
	}
	added, err := r.e.readLoad(r.ctx, r.ld.Platform, r.views, cands, r.key, &r.in)
	if err != nil || !added {
		return err
	}
	r.plan, err = renderer.RenderContext(r.ctx, r.in)
	return err
}

// planWrites turns the placement into one update per store, and checks
// it before any store is written: what Flux will build, no object that
// another workload's record lists (stores that predate the index), no
// group folder another workload fills. A delete removes every pipeline's
// workload of its object, and what Kratix wrote for it; a promise
// workflow's static dependencies are a workload of their own. Last come
// the records a promise workflow leaves in every store and Kratix's
// canaries.
func (r *rendering) planWrites() error {
	p, wf, key := r.ld.Platform, r.wf, r.key
	r.report.Plan = r.plan
	objects := r.earlyObjects
	if r.plan != r.early {
		var err error
		if objects, err = fluxcheck.CheckPlan(r.ctx, r.plan, r.e.fluxSource); err != nil {
			return err
		}
	}
	if err := fluxcheck.Duplicates(objects, otherObjects(r.recs, key)); err != nil {
		return err
	}
	if err := folderTaken(p, r.plan, r.views, key); err != nil {
		return err
	}
	r.updates = storeUpdates{}
	r.record = r.e.record(wf, r.in, r.plan, r.ld.Selectors)
	if wf.Action == renderer.Delete {
		// A delete pipeline has a name of its own: the delete removes every
		// workload of the resource (or promise), whatever its pipeline.
		for _, ref := range sortedRefs(r.recs) {
			for _, rec := range r.recs[ref] {
				if sameObject(rec, wf) {
					r.updates.add(ref, statestore.Update{Workload: rec.Workload})
				}
			}
		}
		// And what Kratix wrote for it, where no record says otherwise.
		r.updates.kratixDeletes(p, r.in, r.recs)
	} else {
		r.updates.addPlan(r.plan, r.record, objects, key, r.holders)
		r.updates.setSealed(key, r.sealed)
		r.updates.adoptInto(p, key, workOf(wf, wf.Pipeline, false), false, r.holders)
	}
	if wf.Type == renderer.PromiseWorkflow {
		if err := r.planStatic(); err != nil {
			return err
		}
	}
	// The guard checks the claims of what the workloads write; the records
	// added below claim nothing.
	r.claims = r.updates.clone()
	// Promise workflows leave their record in every store, so that resource
	// workflows inherit their root selector even when they wrote no files.
	if wf.Type == renderer.PromiseWorkflow && wf.Action == renderer.Configure && len(r.record.DefaultSelector) > 0 {
		for ref := range r.stores {
			if !r.updates.has(ref, key) {
				r.updates.add(ref, statestore.Update{Workload: key, Record: r.record})
			}
		}
	}
	// Kratix's canaries for every destination of a store go with whatever
	// is written there (only where they are missing).
	for ref, us := range r.updates {
		if len(r.plan.Canaries[ref]) > 0 && len(us[0].Shared) == 0 {
			us[0].Shared = r.plan.Canaries[ref]
		}
	}
	// Each update holds only on the record it was computed from.
	r.updates.setBases(r.recs)
	return nil
}

// planStatic plans a Promise's static dependencies, a workload of their
// own, with placements of their own.
func (r *rendering) planStatic() error {
	p, wf := r.ld.Platform, r.wf
	skey := statestore.StaticWorkloadKey(wf.Promise)
	sin := r.in
	sin.Previous, sin.PreviousByKratix = staticPrevious(r.recs, skey), false
	if len(holdersOf(r.recs, skey)) == 0 && wf.Action == renderer.Configure && r.in.Promise != nil && len(r.in.Promise.Dependencies) > 0 {
		sin.Output = []renderer.File{{Path: renderer.StaticDependenciesFile(wf.Promise), Data: r.in.Promise.Dependencies}}
		prev, err := kratixPlacements(r.ctx, p, viewSnaps(r.views), sin, true)
		if err != nil {
			return r.placementFailed(err)
		}
		if len(prev) > 0 {
			sin.Previous, sin.PreviousByKratix = prev, true
		}
	}
	static, err := renderer.RenderStatic(r.ctx, sin)
	if err != nil {
		return err
	}
	sobjects, err := fluxcheck.CheckPlan(r.ctx, static, r.e.fluxSource)
	if err != nil {
		return err
	}
	if err := fluxcheck.Duplicates(sobjects, otherObjects(r.recs, skey)); err != nil {
		return err
	}
	if wf.Action != renderer.Delete {
		srec := &statestore.Record{Type: string(renderer.PromiseWorkflow), Promise: wf.Promise, Placements: placements(static)}
		sholders := holdersOf(r.recs, skey)
		sealedStatic, sealed, err := r.sealStatic(static, skey)
		if err != nil {
			return err
		}
		r.updates.addPlan(sealedStatic, srec, sobjects, skey, sholders)
		r.updates.setSealed(skey, sealed)
		r.updates.adoptInto(p, skey, workOf(wf, "", true), true, sholders)
	}
	r.report.Static = static
	return nil
}

// guard refuses, before any store is written, an object another workload
// holds and a mass deletion (see Engine.guard).
func (r *rendering) guard() error {
	var err error
	r.report.MassDeletion, err = r.e.guard(writeSet{platform: r.ld.Platform, views: r.views, recs: r.recs,
		updates: r.updates, claims: r.claims, deleteAction: r.wf.Action == renderer.Delete})
	return err
}

// composeMessages gives each update its commit message: render's subject
// and trailers, or a git store's spec.commit template (--commit-template),
// checked here on the planned diff.
func (r *rendering) composeMessages() error {
	msg := message(r.wf, r.e.opts.Version)
	for ref, us := range r.updates {
		for i := range us {
			us[i].Message = msg
			if err := r.e.commitSettings(r.ld.Platform, ref, r.wf, r.ld.Object, &us[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// publish writes every store's updates (see Engine.publish).
func (r *rendering) publish(ctx context.Context, _ map[renderer.StoreRef]*storeView, updates storeUpdates) ([]StoreReport, error) {
	return r.e.publish(ctx, r.ph, r.ld.Platform, r.stores, updates, r.prs, r.key)
}
