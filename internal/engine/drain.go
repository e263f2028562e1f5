package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
	"github.com/render-dev/render/statestore/wait"
)

// DrainReport is what a drain did.
type DrainReport struct {
	Destination string
	DryRun      bool
	Moves       []Move
	Stuck       []Stuck
	Stores      []StoreReport
	Duration    time.Duration
	// Stopped is set when a stop was asked while the drain was publishing.
	Stopped bool
	// MassDeletion is the breaker's verdict on a dry run that a real drain
	// would refuse.
	MassDeletion *bookkeeping.MassDeletionError
	// Unfinished is set when the drain copied groups to the stores of the
	// destinations they move to, failed to remove them from the drained
	// destination's store, and could not take the copies out again (see
	// Drain): they are in both places (Move.Copy is CopyKept or
	// CopyUnchecked) until a drain runs again.
	Unfinished bool
	// Undo are the writes that took the copies out again after the
	// removal failed, one per store, in store order.
	Undo []StoreReport
}

// Move is one resource group that moved.
type Move struct {
	Workload, Group, From, To string
	Files                     int
	// Verdicts explain the choice of To.
	Verdicts []renderer.Verdict
	// Copy is what became of the group's copy in To's store when removing
	// the group from From failed (see CopyFate); "" otherwise. Why says
	// why a copy was kept.
	Copy CopyFate
	Why  string
	// FromStore and ToStore name the stores of From and To.
	FromStore, ToStore string
}

// Stuck is one group that did not move, and why. Promise dependencies
// stay by design; a resource that could not move is Blocked.
type Stuck struct {
	Workload, Group, Reason string
	Blocked                 bool
}

// Failed returns the stores that failed.
func (r *DrainReport) Failed() []StoreReport { return failedStores(r.Stores) }

// pendingWrite accumulates one workload's new state in one store.
type pendingWrite struct {
	rec        statestore.Record
	files      map[string][]byte
	aggregates []statestore.Aggregate
	dests      map[string]bool
	// read are the workload's files as the drain read them (it copies
	// them): the move holds only while the store still has them.
	read map[string][]byte
}

// Drain moves every resource placed on the destination named dest to
// another matching destination (kcp's "move between sync targets"): it
// copies the files from the store, updates the placement records, and
// writes one commit per store. The destination itself is treated as
// cordoned for the choice; cordon it in the platform (spec.unschedulable)
// so later renders of new resources skip it too. Promise dependencies stay:
// they go to every matching destination by design.
//
// A drain is a few steps, sharing a render's where it can: read the
// platform and every store (as prune-misscheduled does), find the
// workloads the index places on dest, weigh the load of the destinations
// they could go to, move their groups, then the same guard and publish
// step as a render. A stop asked with WithStop ends a drain that has not
// begun publishing with a *StoppedError, as it does a render.
//
// What cannot move is reported (Stuck, Blocked), never half-moved: a
// group whose files would not fit in the destination chosen for it (a
// path too long for a store), and files in the drained destination's
// resources/ folder that no render record owns (what Kratix wrote for a
// workload render has not rendered yet: render cannot tell which selector
// placed it, so it cannot choose where it goes).
//
// A move between two stores is two writes, in an order that never leaves
// a workload nowhere: first every store other than the drained
// destination's (the copies, and the other stores' copies of the moved
// workloads' records), then, once they all landed, the drained
// destination's store (the removal). When a first write fails, the
// drained destination's store is not written, so nothing is removed from
// dest. Either way, when the removal did not land, the copies that did
// are taken out again (undo), so that the workload ends where it was,
// once: each store in one write of what it held before the drain, based
// on exactly what the drain wrote there (a writer that changed it since
// keeps its change). The undo checks first that the drained
// destination's store, read again, still places the groups on dest: one
// that cannot be read may have taken the removal after all (a write
// whose answer was lost), so the copies stay. A copy that stays (that
// check, or the undo, failed) leaves its group in two places
// (Unfinished, Move.Copy): a drain run again finishes the move, since a
// group that another store's record already places on a destination it
// may go to goes there (finishMove), and a store that already holds the
// copy is not written again. Within one store a drain is one write, and
// nothing is copied elsewhere but other stores' copies of the records,
// which the undo puts back the same way.
func (e *Engine) Drain(ctx context.Context, dest string) (*DrainReport, error) {
	ctx = wait.WithRetryDeadline(ctx, e.opts.RetryDeadline)
	start := time.Now()
	op := e.newOperation(ctx, "drain")
	plat, err := e.loadPlatform(op.ph)
	if err != nil {
		return nil, err
	}
	if err := definedDestination(plat, dest); err != nil {
		return nil, err
	}
	stores, err := e.openAll(op.ph, plat)
	if err != nil {
		return nil, err
	}
	// The passes (see operation): a store refuses a move computed from a
	// record that another writer changed meanwhile (statestore.Basis): the
	// drain then reads the stores again and moves what is on dest now.
	// copied is what every pass wrote into the stores other than dest's,
	// to take it out again if removing the groups from dest fails (undo);
	// last is the report of the last pass that published, and home
	// dest's store.
	copied := undoLog{}
	var last, cur *DrainReport
	var home renderer.StoreRef
	op.redoFailed = func(reps []StoreReport, err error) ([]StoreReport, error) {
		return failHome(reps, home, stores[home].String(), err), nil
	}
	var d *drain
	reports, published, err := op.run(pass{
		read: func(ctx context.Context) (map[renderer.StoreRef]*storeView, error) {
			return e.readStores(ctx, stores)
		},
		plan: func(ctx context.Context, views map[renderer.StoreRef]*storeView) (storeUpdates, error) {
			cur = &DrainReport{Destination: dest, DryRun: e.opts.DryRun}
			d = &drain{e: e, ctx: ctx, plat: plat, dest: dest, stores: stores, views: views, rep: cur,
				byName: map[string]*renderer.Destination{}, pending: map[renderer.StoreRef]map[string]*pendingWrite{}}
			for _, step := range []func() error{
				d.placed,     // the records of the workloads placed on dest
				d.weighLoad,  // the load of the destinations they could go to
				d.moveAll,    // each resource group to its new destination
				d.unrecorded, // what no record owns on dest stays, and says so
			} {
				if err := step(); err != nil {
					return nil, err
				}
			}
			home = d.from.Store
			all := d.updates()
			// The mass-deletion breaker: a drain that empties a destination
			// of workload files (its resources moved, no dependencies left)
			// is refused unless allowed.
			var err error
			if cur.MassDeletion, err = e.guard(writeSet{platform: plat, views: views, recs: recordsByStore(d.byWorkload), updates: all}); err != nil {
				return nil, err
			}
			return all, nil
		},
		publish: func(ctx context.Context, _ map[renderer.StoreRef]*storeView, all storeUpdates) ([]StoreReport, error) {
			reps, err := d.publish(op.ph, all)
			if err != nil {
				return nil, err
			}
			copied.note(d, all, reps)
			last = cur
			return reps, nil
		},
	})
	if err != nil {
		return nil, err
	}
	if !published {
		return &DrainReport{Destination: dest, DryRun: e.opts.DryRun, Stores: reports}, nil
	}
	last.Stores = reports
	last.Duration = time.Since(start)
	last.Stopped = stopAsked(op.soft)
	e.undo(op.ctx, plat, stores, home, last, copied)
	op.ph.done()
	return last, nil
}

// publish writes the drain's updates in two steps (see Drain): every
// store but the drained destination's, in parallel, then the drained
// destination's store, only when every other one landed. The reports are
// in store order, as a render's.
func (d *drain) publish(ph *phaseTracker, all storeUpdates) ([]StoreReport, error) {
	if err := ph.enter(PhasePublishing); err != nil {
		return nil, err
	}
	pub, release := publishContext(d.ctx)
	defer release()
	first, last := storeUpdates{}, storeUpdates{}
	for ref, us := range all {
		if ref == d.from.Store {
			last[ref] = us
		} else {
			first[ref] = us
		}
	}
	reps := d.e.publishStores(d.ctx, pub, d.plat, d.stores, first, nil, "")
	if len(last) > 0 {
		if failed := failedStores(reps); len(failed) > 0 {
			var names []string
			for _, f := range failed {
				names = append(names, f.Store.String())
			}
			reps = append(reps, StoreReport{Store: d.from.Store, Name: d.stores[d.from.Store].String(),
				Err: &statestore.StoreError{Store: d.stores[d.from.Store].String(), Op: "drain", Err: &notRemovedError{dest: d.dest, failed: names}}})
		} else {
			reps = append(reps, d.e.publishStores(d.ctx, pub, d.plat, d.stores, last, nil, "")...)
		}
	}
	slices.SortFunc(reps, func(a, b StoreReport) int { return strings.Compare(a.Store.String(), b.Store.String()) })
	return reps, nil
}

// notRemovedError is the drained destination's store left unwritten
// because a store the drain copies into failed first.
type notRemovedError struct {
	dest   string
	failed []string
}

func (e *notRemovedError) Error() string {
	return fmt.Sprintf("not written: the drain writes the stores it moves groups into first, and %s failed, so nothing was removed from %s", strings.Join(e.failed, " and "), e.dest)
}

// loadPlatform is the reading step of a drain or a prune: the platform
// configuration alone.
func (e *Engine) loadPlatform(ph *phaseTracker) (*inputs.Platform, error) {
	if err := ph.enter(PhaseReading); err != nil {
		return nil, err
	}
	plat, err := inputs.LoadPlatform(e.opts.Kinds, e.opts.Platform, e.opts.SecretsDir)
	if err != nil {
		return nil, ph.check(err)
	}
	return plat, nil
}

// definedDestination refuses a destination the platform does not define,
// naming those it does.
func definedDestination(plat *inputs.Platform, dest string) error {
	var names []string
	for _, d := range plat.Destinations {
		if d.Name == dest {
			return nil
		}
		names = append(names, d.Name)
	}
	return &renderer.InputError{Msg: fmt.Sprintf("destination %q is not defined in the platform configuration; known destinations: %s", dest, strings.Join(names, ", "))}
}

// openAll opens every store the platform's destinations use, for a drain
// or a prune.
func (e *Engine) openAll(ph *phaseTracker, plat *inputs.Platform) (map[renderer.StoreRef]statestore.Store, error) {
	if err := ph.enter(PhasePlanning); err != nil {
		return nil, err
	}
	stores, err := e.open(plat, storeRefs(plat))
	if err != nil {
		return nil, ph.check(err)
	}
	return stores, nil
}

// readStores reads a view of every store, in parallel, for a drain or a
// prune: the index, or every record of a store that predates it. A store
// that cannot be read ends the pass with nothing written (a
// *storesFailed).
func (e *Engine) readStores(ctx context.Context, stores map[renderer.StoreRef]statestore.Store) (map[renderer.StoreRef]*storeView, error) {
	views, unread := e.readViews(ctx, stores, "", "", nil)
	if len(unread) > 0 {
		return nil, &storesFailed{failedReports(e, stores, unread)}
	}
	return views, nil
}

// recordsByStore is every record of byWorkload, by store: what the
// breaker counts the files before the write from.
func recordsByStore(byWorkload map[string]map[renderer.StoreRef]statestore.Record) map[renderer.StoreRef][]statestore.Record {
	recs := map[renderer.StoreRef][]statestore.Record{}
	for _, byRef := range byWorkload {
		for ref, r := range byRef {
			recs[ref] = append(recs[ref], r)
		}
	}
	return recs
}

// drain is one drain under way: its steps fill it in order.
type drain struct {
	e      *Engine
	ctx    context.Context
	plat   *inputs.Platform
	dest   string
	stores map[renderer.StoreRef]statestore.Store
	views  map[renderer.StoreRef]*storeView
	rep    *DrainReport

	from     *renderer.Destination
	byName   map[string]*renderer.Destination
	cordoned []renderer.Destination
	// byWorkload holds each workload's records, by store; keys the
	// workloads in order.
	byWorkload map[string]map[renderer.StoreRef]statestore.Record
	keys       []string
	// base is the load every choice starts from, updated as groups move.
	base renderer.Input
	// pending is each workload's new state, by store.
	pending map[renderer.StoreRef]map[string]*pendingWrite
}

// placed finds the workloads placed on the destination: their records,
// by store, of the workloads the index places there, or of every workload
// in a store that predates the index. The destination is cordoned for the
// choices to come.
func (d *drain) placed() error {
	for i := range d.plat.Destinations {
		dd := &d.plat.Destinations[i]
		d.byName[dd.Name] = dd
	}
	d.from = d.byName[d.dest]
	d.cordoned = append([]renderer.Destination(nil), d.plat.Destinations...)
	for i := range d.cordoned {
		if d.cordoned[i].Name == d.dest {
			d.cordoned[i].Unschedulable = true
		}
	}
	byWorkload, err := drainRecords(d.views, d.from.Store, d.dest)
	if err != nil {
		return d.e.storeErr(d.from.Store, d.stores, err)
	}
	d.byWorkload = byWorkload
	d.keys = slices.Sorted(maps.Keys(byWorkload))
	return nil
}

// weighLoad reads the load every choice starts from: for the
// destinations the moving groups could go to.
func (d *drain) weighLoad() error {
	d.base = renderer.Input{Workflow: renderer.Workflow{Type: renderer.ResourceWorkflow}}
	applyFacts(&d.base, d.views, "")
	var cands []string
	for _, key := range d.keys {
		r := d.home(key)
		for _, p := range r.Placements {
			if r.Type != string(renderer.ResourceWorkflow) || !slices.Contains(p.Destinations, d.dest) {
				continue
			}
			g := renderer.Place(renderer.Input{Workflow: renderer.Workflow{Type: renderer.ResourceWorkflow}, Destinations: d.cordoned, Strategy: d.e.opts.Strategy}, drainGroup(p))
			for _, v := range g.Verdicts {
				if v.Reason == "" {
					cands = append(cands, v.Destination)
				}
			}
		}
	}
	if len(cands) == 0 {
		return nil
	}
	slices.Sort(cands)
	_, err := d.e.readLoad(d.ctx, d.plat, d.views, slices.Compact(cands), "", &d.base)
	return err
}

// home is workload key's record in the drained destination's store: the
// one that says what is on dest (another store's copy may already say a
// group moved, when a drain was cut short between its two writes). A
// workload only another store remembers (a store that predates the index
// listed it) gives that store's record, the first in store order.
func (d *drain) home(key string) statestore.Record {
	if r, ok := d.byWorkload[key][d.from.Store]; ok {
		return r
	}
	refs := sortedRefs(d.byWorkload[key])
	return d.byWorkload[key][refs[0]]
}

// cloneRecord is r with its own slices, so that changing one store's
// copy of a record changes no other (nor the records the drain read,
// which are the updates' bases).
func cloneRecord(r statestore.Record) statestore.Record {
	c := r
	c.Objects = slices.Clone(r.Objects)
	c.Files = slices.Clone(r.Files)
	c.Placements = make([]statestore.Placement, len(r.Placements))
	for i, p := range r.Placements {
		p.Destinations = slices.Clone(p.Destinations)
		c.Placements[i] = p
	}
	return c
}

// snapshot is the snapshot the drain reads store ref through: the view
// the pass read (every store the platform's destinations use has one),
// which the store's write then plans on.
func (d *drain) snapshot(ref renderer.StoreRef) (statestore.Snapshot, error) {
	if v := d.views[ref]; v != nil {
		return v.snap, nil
	}
	return nil, fmt.Errorf("store %s was not read", ref)
}

// pend returns the pending write of workload key in store ref, starting
// it from what the store holds of the workload (its record and files).
func (d *drain) pend(ref renderer.StoreRef, key string, rec statestore.Record) (*pendingWrite, error) {
	if d.pending[ref] == nil {
		d.pending[ref] = map[string]*pendingWrite{}
	}
	if pw := d.pending[ref][key]; pw != nil {
		return pw, nil
	}
	// A store that holds no record of the workload gets one: the
	// workload's identity and placements, and only the objects this store
	// will hold (those moving in). A record never lists another store's
	// objects: the planner claims each object a record lists in its store.
	pw := &pendingWrite{rec: cloneRecord(rec), files: map[string][]byte{}, dests: map[string]bool{}, read: map[string][]byte{}}
	pw.rec.Objects, pw.rec.Files = nil, nil
	if old, ok := d.byWorkload[key][ref]; ok {
		// Records may be shared with the store's cache and are the
		// updates' bases: change a copy.
		pw.rec = cloneRecord(old)
		snap, err := d.snapshot(ref)
		if err != nil {
			return nil, err
		}
		for _, f := range old.Files {
			if t, ok := statestore.AggregateTarget(f, key); ok {
				// Aggregated destinations do not drain, but the
				// workload's parts there stay as they are.
				data, err := snap.ReadFile(f)
				if err != nil {
					return nil, fmt.Errorf("read %s: %w", f, err)
				}
				pw.aggregates = append(pw.aggregates, statestore.Aggregate{Target: t, Contribution: data})
				continue
			}
			if layout.IsMeta(f) {
				continue
			}
			data, err := snap.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", f, err)
			}
			pw.files[f], pw.read[f] = data, data
		}
	}
	d.pending[ref][key] = pw
	return pw, nil
}

// moveAll moves every resource group placed on the destination, workload
// by workload; what cannot move is reported as stuck.
func (d *drain) moveAll() error {
	d.prefetchFiles()
	for _, key := range d.keys {
		rec := d.home(key)
		for _, p := range rec.Placements {
			if !slices.Contains(p.Destinations, d.dest) {
				continue
			}
			if err := d.move(key, rec, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// prefetchFiles tells each store's snapshot, in one go, about every file
// of the workloads to move that pend will read there.
func (d *drain) prefetchFiles() {
	hints := map[renderer.StoreRef]*statestore.Hint{}
	for _, key := range d.keys {
		for ref, r := range d.byWorkload[key] {
			h := hints[ref]
			if h == nil {
				h = &statestore.Hint{}
				hints[ref] = h
			}
			for _, f := range r.Files {
				if _, agg := statestore.AggregateTarget(f, key); agg || !layout.IsMeta(f) {
					h.Reads = append(h.Reads, f)
				}
			}
		}
	}
	for _, ref := range sortedRefs(hints) {
		if snap, err := d.snapshot(ref); err == nil {
			statestore.Prefetch(snap, *hints[ref])
		}
	}
}

// move moves group p of workload key off the destination, or says why
// it stays.
func (d *drain) move(key string, rec statestore.Record, p statestore.Placement) error {
	rep, from, dest := d.rep, d.from, d.dest
	if rec.Type != string(renderer.ResourceWorkflow) {
		rep.Stuck = append(rep.Stuck, Stuck{key, p.Group, "promise dependencies go to every matching destination; they stay", false})
		return nil
	}
	if from.Mode != renderer.NestedByMetadata {
		rep.Stuck = append(rep.Stuck, Stuck{key, p.Group, fmt.Sprintf("destination %s uses filepath mode %s; only nestedByMetadata folders can be moved: re-run the workflow instead", dest, from.Mode), true})
		return nil
	}
	wf := renderer.Workflow{Type: renderer.ResourceWorkflow, Action: renderer.Configure, Promise: rec.Promise, Pipeline: rec.Pipeline, Name: rec.Name, Namespace: rec.Namespace}
	g := drainGroup(p)
	in := renderer.Input{Workflow: wf, Destinations: d.cordoned, Load: d.base.Load, Flavour: rec.Flavour, Strategy: d.e.opts.Strategy, Seed: d.e.opts.Seed}
	g = renderer.Place(in, g)
	if g.Unscheduled() {
		var why []string
		for _, v := range g.Verdicts {
			if v.Reason != "" && v.Destination != dest {
				why = append(why, v.Destination+": "+v.Reason)
			}
		}
		if len(why) == 0 {
			why = append(why, "there is no other destination")
		}
		rep.Stuck = append(rep.Stuck, Stuck{key, p.Group, fmt.Sprintf("no other destination matches selector %s (%s)", g.Selector, strings.Join(why, "; ")), true})
		return nil
	}
	d.finishMove(key, &g)
	to := d.byName[g.Destinations[0]]
	if to.Mode != renderer.NestedByMetadata {
		rep.Stuck = append(rep.Stuck, Stuck{key, p.Group, fmt.Sprintf("the chosen destination %s uses filepath mode %s; only nestedByMetadata folders can be moved", to.Name, to.Mode), true})
		return nil
	}
	rel := path.Join("resources", rec.Namespace, rec.Promise, rec.Name, rec.Pipeline, g.ID)
	oldPrefix := path.Join(from.Path, rel) + "/"
	newPrefix := path.Join(to.Path, rel) + "/"
	if why, err := d.secretsBlockMove(from, to, d.byWorkload[key][from.Store], from.Store, oldPrefix); err != nil || why != "" {
		if err != nil {
			return d.e.storeErr(from.Store, d.stores, err)
		}
		rep.Stuck = append(rep.Stuck, Stuck{key, p.Group, why, true})
		return nil
	}
	src, err := d.pend(from.Store, key, rec)
	if err != nil {
		return d.e.storeErr(from.Store, d.stores, err)
	}
	// Every file must fit where it goes before anything moves: a path the
	// store cannot hold would fail the store's write after the others
	// landed.
	for _, f := range slices.Sorted(maps.Keys(src.files)) {
		if !strings.HasPrefix(f, oldPrefix) {
			continue
		}
		if why := d.fits(to, newPrefix+strings.TrimPrefix(f, oldPrefix)); why != "" {
			rep.Stuck = append(rep.Stuck, Stuck{key, p.Group, why, true})
			return nil
		}
	}
	dst, err := d.pend(to.Store, key, rec)
	if err != nil {
		return d.e.storeErr(to.Store, d.stores, err)
	}
	moved := 0
	for f, data := range src.files {
		if strings.HasPrefix(f, oldPrefix) {
			delete(src.files, f)
			dst.files[newPrefix+strings.TrimPrefix(f, oldPrefix)] = data
			moved++
		}
	}
	dst.dests[to.Path] = true
	// The group's objects move with its files: to the destination's store
	// record, out of the drained one's when that is another store.
	var objs []statestore.Object
	src.rec.Objects = slices.DeleteFunc(src.rec.Objects, func(o statestore.Object) bool {
		if o.Destination != from.Path || !strings.HasPrefix(o.File, rel+"/") {
			return false
		}
		o.Destination, o.Store = to.Path, to.Store.String()
		objs = append(objs, o)
		return true
	})
	for _, o := range objs {
		if !slices.Contains(dst.rec.Objects, o) {
			dst.rec.Objects = append(dst.rec.Objects, o)
		}
	}
	// Every copy of the record learns the new placement.
	copies := []*pendingWrite{src, dst}
	for _, ref := range sortedRefs(d.byWorkload[key]) {
		pw, err := d.pend(ref, key, rec)
		if err != nil {
			return d.e.storeErr(ref, d.stores, err)
		}
		copies = append(copies, pw)
	}
	for _, pw := range uniqueWrites(copies) {
		pw.rec.Placements = replacePlacement(pw.rec.Placements, p.Group, dest, to.Name)
	}
	load := d.base.Load
	load.Total[dest]--
	load.Total[to.Name]++
	if rec.Flavour != "" {
		if load.ByFlavour[rec.Flavour] == nil {
			load.ByFlavour[rec.Flavour] = map[string]int{}
		}
		load.ByFlavour[rec.Flavour][dest]--
		load.ByFlavour[rec.Flavour][to.Name]++
	}
	rep.Moves = append(rep.Moves, Move{Workload: key, Group: p.Group, From: dest, To: to.Name, Files: moved, Verdicts: g.Verdicts,
		FromStore: from.Store.String(), ToStore: to.Store.String()})
	return nil
}

// finishMove makes g go where another store's record of workload key
// already places it, when that destination is one g could go to now: a
// drain that copied the group there and then failed to remove it from the
// drained destination (see Drain) is finished, not moved a second time
// (the load a fresh choice weighs has the copy in it already).
func (d *drain) finishMove(key string, g *renderer.Group) {
	for _, ref := range sortedRefs(d.byWorkload[key]) {
		if ref == d.from.Store {
			continue
		}
		for _, p := range d.byWorkload[key][ref].Placements {
			if p.Group != g.Directory || len(p.Destinations) != 1 || p.Destinations[0] == d.dest {
				continue
			}
			there := p.Destinations[0]
			for i := range g.Verdicts {
				v := &g.Verdicts[i]
				if v.Destination == there && v.Reason == "" {
					for j := range g.Verdicts {
						g.Verdicts[j].Chosen = false
					}
					v.Chosen = true
					g.Destinations = []string{there}
					return
				}
			}
		}
	}
}

// fits says why file p (store-relative) cannot be written into
// destination to's store, or "" when it can.
func (d *drain) fits(to *renderer.Destination, p string) string {
	var prefix string
	if s := d.plat.Store(to.Store); s != nil {
		prefix = strings.Trim(s.Meta().Path, "/")
	}
	err := layout.ValidPath(path.Join(prefix, p))
	if err == nil {
		return ""
	}
	why := fmt.Sprintf("its files would not fit in destination %s, chosen for it: %v", to.Name, err)
	if advice := renderer.TooLongAdvice(err, prefix, to.Path, strings.TrimPrefix(p, to.Path+"/")); advice != "" {
		why += "; " + advice
	}
	return why + "; nothing of it was moved"
}

// unrecorded reports, as stuck, what the drained destination holds under
// resources/ that no record the drain read owns: what Kratix wrote for a
// workload render has not rendered yet (or files put there by hand).
// render cannot tell which selector placed such a workload, so it cannot
// choose where it goes; a render of its workflow adopts it (its record
// then places it on dest, with its selector), and a drain after that
// moves it. Only nestedByMetadata destinations have a resources/ folder.
func (d *drain) unrecorded() error {
	if d.from.Mode != renderer.NestedByMetadata {
		return nil
	}
	snap, err := d.snapshot(d.from.Store)
	if err != nil {
		return d.e.storeErr(d.from.Store, d.stores, err)
	}
	dir := path.Join(d.from.Path, "resources")
	files, err := snap.List(dir)
	if err != nil && !errors.Is(err, statestore.ErrNotFound) {
		return d.e.storeErr(d.from.Store, d.stores, err)
	}
	owned := map[string]bool{path.Join(d.from.Path, layout.CanaryResources): true}
	for _, byRef := range d.byWorkload {
		for _, f := range byRef[d.from.Store].Files {
			owned[f] = true
		}
	}
	type folder struct{ key, id string }
	count := map[folder]int{}
	var order []folder
	for _, f := range files {
		if owned[f] {
			continue
		}
		// resources/<namespace>/<promise>/<name>/<pipeline>/<id>/...
		parts := strings.Split(strings.TrimPrefix(f, dir+"/"), "/")
		k := folder{key: path.Join(dir, path.Dir(strings.TrimPrefix(f, dir+"/")))}
		if len(parts) > 5 {
			k = folder{key: statestore.WorkloadKey(string(renderer.ResourceWorkflow), parts[1], parts[0], parts[2], parts[3]), id: parts[4]}
		}
		if count[k] == 0 {
			order = append(order, k)
		}
		count[k]++
	}
	for _, k := range order {
		if k.id == "" {
			d.rep.Stuck = append(d.rep.Stuck, Stuck{k.key, "", fmt.Sprintf("%d files in %s that no render record owns (written by hand, or by another tool): move or delete them yourself", count[k], k.key), true})
			continue
		}
		d.rep.Stuck = append(d.rep.Stuck, Stuck{k.key, k.id, fmt.Sprintf("%d files in its folder %s on %s that no render record owns (Kratix wrote them, or another tool): render cannot tell which selector placed it, so it cannot choose where it goes; render its workflow once (render adopts what Kratix wrote and records it on %s), then drain again", count[k], k.id, d.dest, d.dest), true})
	}
	return nil
}

// updates are the drain's writes: every pending write, by store, with
// its destination's canaries and one message.
func (d *drain) updates() storeUpdates {
	msg := statestore.Message{Subject: fmt.Sprintf("render: drain destination %s (%d groups moved)", d.dest, len(d.rep.Moves)),
		Trailers: []statestore.Trailer{{Key: "Render-Drain", Value: d.dest}, {Key: "Render-Version", Value: d.e.opts.Version}}}
	all := storeUpdates{}
	for _, ref := range sortedRefs(d.pending) {
		var us []statestore.Update
		for _, k := range slices.Sorted(maps.Keys(d.pending[ref])) {
			pw := d.pending[ref][k]
			u := statestore.Update{Workload: k, Files: pw.files, Aggregates: pw.aggregates, Message: msg, DryRun: d.e.opts.DryRun, Shared: map[string][]byte{}}
			for dd := range pw.dests {
				u.Destinations = append(u.Destinations, dd)
			}
			// The canaries of the destinations the update writes to (not
			// of every destination of the store: a drain of 1,000
			// workloads out of a store of 100 destinations made 200,000
			// of them, each looked up by every write).
			for _, dd := range d.plat.Destinations {
				if dd.Store == ref && pw.dests[dd.Path] {
					maps.Copy(u.Shared, renderer.CanaryFiles(dd))
				}
			}
			if len(pw.files) > 0 {
				r := pw.rec
				u.Record = &r
			}
			// The move holds only on the record and the files it was
			// computed from.
			u.Basis = &statestore.Basis{Files: pw.read}
			if old, ok := d.byWorkload[k][ref]; ok {
				u.Basis.Record = &old
			}
			us = append(us, u)
		}
		all[ref] = us
	}
	return all
}

func (e *Engine) storeErr(ref renderer.StoreRef, stores map[renderer.StoreRef]statestore.Store, err error) error {
	return &statestore.StoreError{Store: stores[ref].String(), Op: "read", Err: err}
}

// replacePlacement moves group's placement from one destination to
// another. Records in different stores list their placements in the same
// order, but a group is found by its name, not its place in the list.
func replacePlacement(ps []statestore.Placement, group, from, to string) []statestore.Placement {
	out := append([]statestore.Placement(nil), ps...)
	for i := range out {
		if out[i].Group != group {
			continue
		}
		var ds []string
		for _, d := range out[i].Destinations {
			if d == from {
				d = to
			}
			if !slices.Contains(ds, d) {
				ds = append(ds, d)
			}
		}
		out[i].Destinations = ds
	}
	return out
}

func uniqueWrites(ws []*pendingWrite) []*pendingWrite {
	var out []*pendingWrite
	seen := map[*pendingWrite]bool{}
	for _, w := range ws {
		if !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	return out
}

// drainGroup is the group a placement describes, to be placed again.
func drainGroup(p statestore.Placement) renderer.Group {
	g := renderer.Group{Directory: p.Group, ID: renderer.GroupID(p.Group), Selector: renderer.Selector{MatchLabels: p.MatchLabels}}
	g.Selector.MatchExpressions = append(g.Selector.MatchExpressions, p.MatchExpressions...)
	return g
}

// drainRecords returns, by workload and store, the records of the
// workloads placed on dest. An indexed store names them in its index (the
// store that holds dest does); a store that predates the index gives all
// of its records, as before.
func drainRecords(views map[renderer.StoreRef]*storeView, home renderer.StoreRef, dest string) (map[string]map[renderer.StoreRef]statestore.Record, error) {
	out := map[string]map[renderer.StoreRef]statestore.Record{}
	add := func(ref renderer.StoreRef, r statestore.Record) {
		if out[r.Workload] == nil {
			out[r.Workload] = map[renderer.StoreRef]statestore.Record{}
		}
		out[r.Workload][ref] = r
	}
	var keys []string
	for _, ref := range sortedRefs(views) {
		for _, r := range views[ref].facts.All {
			if placedOn(r, dest) {
				keys = append(keys, r.Workload)
			}
		}
	}
	if v := views[home]; v != nil && v.facts.All == nil {
		k, err := bookkeeping.PlacedOn(v.snap, dest)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k...)
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	for _, ref := range sortedRefs(views) {
		v := views[ref]
		if v.facts.All != nil {
			for _, r := range v.facts.All {
				if _, ok := slices.BinarySearch(keys, r.Workload); ok {
					add(ref, r)
				}
			}
			continue
		}
		// Every record in one go (a lazy snapshot fetches them a folder
		// level per request for all of them at once).
		h := statestore.Hint{}
		for _, k := range keys {
			h.Reads = append(h.Reads, statestore.RecordPath(k))
		}
		statestore.Prefetch(v.snap, h)
		for _, k := range keys {
			f, err := bookkeeping.ReadFacts(v.snap, k, "")
			if err != nil {
				return nil, err
			}
			if f.Own != nil {
				add(ref, *f.Own)
			}
		}
	}
	return out, nil
}

func placedOn(r statestore.Record, dest string) bool {
	for _, p := range r.Placements {
		if slices.Contains(p.Destinations, dest) {
			return true
		}
	}
	return false
}
