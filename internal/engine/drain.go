package engine

import (
	"context"
	"fmt"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
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
	MassDeletion *statestore.MassDeletionError
}

// Move is one resource group that moved.
type Move struct {
	Workload, Group, From, To string
	Files                     int
	// Verdicts explain the choice of To.
	Verdicts []renderer.Verdict
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
	aggregates []layout.Aggregate
	dests      map[string]bool
}

// Drain moves every resource placed on the destination named dest to
// another matching destination (kcp's "move between sync targets"): it
// copies the files from the store, updates the placement records, and
// writes one commit per store. The destination itself is treated as
// cordoned for the choice; cordon it in the platform (spec.unschedulable)
// so later renders of new resources skip it too. Promise dependencies stay:
// they go to every matching destination by design.
//
// A stop asked with WithStop ends a drain that has not begun publishing
// with a *StoppedError, as it does a render.
func (e *Engine) Drain(ctx context.Context, dest string) (*DrainReport, error) {
	ctx = statestore.WithRetryDeadline(ctx, e.opts.RetryDeadline)
	start := time.Now()
	ph := &phaseTracker{e: e, ctx: ctx}
	if err := ph.enter(PhaseReading); err != nil {
		return nil, err
	}
	plat, err := inputs.LoadPlatform(e.opts.Platform, e.opts.SecretsDir)
	if err != nil {
		return nil, ph.check(err)
	}
	var from *renderer.Destination
	var names []string
	byName := map[string]*renderer.Destination{}
	for i := range plat.Destinations {
		d := &plat.Destinations[i]
		byName[d.Name] = d
		names = append(names, d.Name)
	}
	if from = byName[dest]; from == nil {
		return nil, &renderer.InputError{Msg: fmt.Sprintf("destination %q is not defined in the platform configuration; known destinations: %s", dest, strings.Join(names, ", "))}
	}
	if err := ph.enter(PhasePlanning); err != nil {
		return nil, err
	}
	stores, err := e.open(plat, storeRefs(plat))
	if err != nil {
		return nil, ph.check(err)
	}
	rep := &DrainReport{Destination: dest, DryRun: e.opts.DryRun}
	views, failed := e.readViews(ctx, stores, "", "", nil)
	if err := ph.check(nil); err != nil {
		return nil, err
	}
	if len(failed) > 0 {
		rep.Stores = failedReports(e, stores, failed)
		return rep, nil
	}
	cordoned := append([]renderer.Destination(nil), plat.Destinations...)
	for i := range cordoned {
		if cordoned[i].Name == dest {
			cordoned[i].Unschedulable = true
		}
	}

	// Each workload's records, by store: of the workloads the index places
	// on dest, or of every workload in a store that predates the index.
	byWorkload, err := drainRecords(views, from.Store, dest)
	if err != nil {
		return nil, ph.check(e.storeErr(from.Store, stores, err))
	}
	keys := make([]string, 0, len(byWorkload))
	for k := range byWorkload {
		keys = append(keys, k)
	}
	sort.Strings(keys)

	// The load every choice starts from, updated as groups move: read for
	// the destinations the moving groups could go to.
	base := renderer.Input{Workflow: renderer.Workflow{Type: renderer.ResourceWorkflow}}
	applyFacts(&base, views, "")
	var cands []string
	for _, key := range keys {
		for _, r := range byWorkload[key] {
			for _, p := range r.Placements {
				if r.Type != string(renderer.ResourceWorkflow) || !slices.Contains(p.Destinations, dest) {
					continue
				}
				g := renderer.Place(renderer.Input{Workflow: renderer.Workflow{Type: renderer.ResourceWorkflow}, Destinations: cordoned, Strategy: e.opts.Strategy}, drainGroup(p))
				for _, v := range g.Verdicts {
					if v.Reason == "" {
						cands = append(cands, v.Destination)
					}
				}
			}
			break
		}
	}
	if len(cands) > 0 {
		slices.Sort(cands)
		if err := e.readLoad(ctx, plat, views, slices.Compact(cands), "", &base); err != nil {
			return nil, ph.check(err)
		}
	}

	snaps := map[renderer.StoreRef]statestore.Snapshot{}
	snapshot := func(ref renderer.StoreRef) (statestore.Snapshot, error) {
		if s, ok := snaps[ref]; ok {
			return s, nil
		}
		if v := views[ref]; v != nil {
			return v.snap, nil
		}
		s, err := stores[ref].Snapshot(ctx)
		if err == nil {
			snaps[ref] = s
		}
		return s, err
	}
	pending := map[renderer.StoreRef]map[string]*pendingWrite{}
	pend := func(ref renderer.StoreRef, key string, rec statestore.Record) (*pendingWrite, error) {
		if pending[ref] == nil {
			pending[ref] = map[string]*pendingWrite{}
		}
		if pw := pending[ref][key]; pw != nil {
			return pw, nil
		}
		pw := &pendingWrite{rec: rec, files: map[string][]byte{}, dests: map[string]bool{}}
		if old, ok := byWorkload[key][ref]; ok {
			pw.rec = old
			// Records may be shared with the store's cache: copy what changes.
			pw.rec.Objects = append([]layout.Object(nil), old.Objects...)
			pw.rec.Placements = append([]layout.Placement(nil), old.Placements...)
			snap, err := snapshot(ref)
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
					pw.aggregates = append(pw.aggregates, layout.Aggregate{Target: t, Contribution: data})
					continue
				}
				if layout.IsMeta(f) {
					continue
				}
				data, err := snap.ReadFile(f)
				if err != nil {
					return nil, fmt.Errorf("read %s: %w", f, err)
				}
				pw.files[f] = data
			}
		}
		pending[ref][key] = pw
		return pw, nil
	}

	for _, key := range keys {
		var rec statestore.Record
		for _, r := range byWorkload[key] {
			rec = r
			break
		}
		for pi, p := range rec.Placements {
			if !slices.Contains(p.Destinations, dest) {
				continue
			}
			if rec.Type != string(renderer.ResourceWorkflow) {
				rep.Stuck = append(rep.Stuck, Stuck{key, p.Group, "promise dependencies go to every matching destination; they stay", false})
				continue
			}
			if from.Mode != renderer.NestedByMetadata {
				rep.Stuck = append(rep.Stuck, Stuck{key, p.Group, fmt.Sprintf("destination %s uses filepath mode %s; only nestedByMetadata folders can be moved: re-run the workflow instead", dest, from.Mode), true})
				continue
			}
			wf := renderer.Workflow{Type: renderer.ResourceWorkflow, Action: renderer.Configure, Promise: rec.Promise, Pipeline: rec.Pipeline, Name: rec.Name, Namespace: rec.Namespace}
			g := drainGroup(p)
			in := renderer.Input{Workflow: wf, Destinations: cordoned, Load: base.Load, Flavour: rec.Flavour, Strategy: e.opts.Strategy, Seed: e.opts.Seed}
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
				continue
			}
			to := byName[g.Destinations[0]]
			if to.Mode != renderer.NestedByMetadata {
				rep.Stuck = append(rep.Stuck, Stuck{key, p.Group, fmt.Sprintf("the chosen destination %s uses filepath mode %s; only nestedByMetadata folders can be moved", to.Name, to.Mode), true})
				continue
			}
			rel := path.Join("resources", rec.Namespace, rec.Promise, rec.Name, rec.Pipeline, g.ID)
			oldPrefix := path.Join(from.Path, rel) + "/"
			newPrefix := path.Join(to.Path, rel) + "/"
			src, err := pend(from.Store, key, rec)
			if err != nil {
				return nil, ph.check(e.storeErr(from.Store, stores, err))
			}
			dst, err := pend(to.Store, key, rec)
			if err != nil {
				return nil, ph.check(e.storeErr(to.Store, stores, err))
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
			// Every copy of the record learns the new placement.
			copies := []*pendingWrite{src, dst}
			for ref := range byWorkload[key] {
				pw, err := pend(ref, key, rec)
				if err != nil {
					return nil, ph.check(e.storeErr(ref, stores, err))
				}
				copies = append(copies, pw)
			}
			for _, pw := range uniqueWrites(copies) {
				pw.rec.Placements = replacePlacement(pw.rec.Placements, pi, dest, to.Name)
				for i, o := range pw.rec.Objects {
					if o.Destination == from.Path && strings.HasPrefix(o.File, rel+"/") {
						pw.rec.Objects[i].Destination, pw.rec.Objects[i].Store = to.Path, to.Store.String()
					}
				}
			}
			base.Load.Total[dest]--
			base.Load.Total[to.Name]++
			if rec.Flavour != "" {
				if base.Load.ByFlavour[rec.Flavour] == nil {
					base.Load.ByFlavour[rec.Flavour] = map[string]int{}
				}
				base.Load.ByFlavour[rec.Flavour][dest]--
				base.Load.ByFlavour[rec.Flavour][to.Name]++
			}
			rep.Moves = append(rep.Moves, Move{Workload: key, Group: p.Group, From: dest, To: to.Name, Files: moved, Verdicts: g.Verdicts})
		}
	}

	msg := statestore.Message{Subject: fmt.Sprintf("render: drain destination %s (%d groups moved)", dest, len(rep.Moves)),
		Trailers: []statestore.Trailer{{Key: "Render-Drain", Value: dest}, {Key: "Render-Version", Value: e.opts.Version}}}
	refs := make([]renderer.StoreRef, 0, len(pending))
	for ref := range pending {
		refs = append(refs, ref)
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].String() < refs[j].String() })
	all := map[renderer.StoreRef][]statestore.Update{}
	for _, ref := range refs {
		var us []statestore.Update
		wkeys := make([]string, 0, len(pending[ref]))
		for k := range pending[ref] {
			wkeys = append(wkeys, k)
		}
		sort.Strings(wkeys)
		for _, k := range wkeys {
			pw := pending[ref][k]
			u := statestore.Update{Workload: k, Files: pw.files, Aggregates: pw.aggregates, Message: msg, DryRun: e.opts.DryRun, Shared: map[string][]byte{}}
			for d := range pw.dests {
				u.Destinations = append(u.Destinations, d)
			}
			for _, d := range plat.Destinations {
				if d.Store == ref {
					maps.Copy(u.Shared, renderer.CanaryFiles(d))
				}
			}
			if len(pw.files) > 0 {
				r := pw.rec
				u.Record = &r
			}
			us = append(us, u)
		}
		all[ref] = us
	}
	// The mass-deletion breaker: a drain that empties a destination of
	// workload files (its resources moved, no dependencies left) is refused
	// unless allowed.
	recs := map[renderer.StoreRef][]statestore.Record{}
	for _, byRef := range byWorkload {
		for ref, r := range byRef {
			recs[ref] = append(recs[ref], r)
		}
	}
	md, err := e.breaker(plat, views, recs, all, false)
	if err != nil {
		return nil, ph.check(err)
	}
	if rep.MassDeletion, err = e.checkBreaker(md); err != nil {
		return nil, ph.check(err)
	}
	// The last point where a stop ends the drain with nothing written.
	if err := ph.enter(PhasePublishing); err != nil {
		return nil, err
	}
	pub, release := publishContext(ctx)
	defer release()
	rep.Stores = e.publishStores(pub, plat, stores, all)
	rep.Duration = time.Since(start)
	rep.Stopped = stopAsked(ctx)
	ph.done()
	return rep, nil
}

func (e *Engine) storeErr(ref renderer.StoreRef, stores map[renderer.StoreRef]statestore.Store, err error) error {
	return &statestore.StoreError{Store: stores[ref].String(), Op: "read", Err: err}
}

// replacePlacement moves placement i from one destination to another.
func replacePlacement(ps []layout.Placement, i int, from, to string) []layout.Placement {
	out := append([]layout.Placement(nil), ps...)
	if i >= len(out) {
		return out
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
func drainGroup(p layout.Placement) renderer.Group {
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
		k, err := statestore.PlacedOn(v.snap, dest)
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
		for _, k := range keys {
			f, err := statestore.ReadFacts(v.snap, k, "")
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
