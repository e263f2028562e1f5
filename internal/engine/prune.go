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

// PruneReport is what `render prune-misscheduled` did.
type PruneReport struct {
	// Destinations are the destinations looked at.
	Destinations []string
	DryRun       bool
	Pruned       []Pruned
	Stuck        []Stuck
	Stores       []StoreReport
	Duration     time.Duration
	// Stopped is set when a stop was asked while the prune was publishing.
	Stopped bool
	// MassDeletion is the breaker's verdict on a dry run that a real
	// prune would refuse.
	MassDeletion *bookkeeping.MassDeletionError
}

// Pruned is one misscheduled placement that was removed: the group's files
// on the destination are deleted and its record forgets the destination.
type Pruned struct {
	Workload, Group, Destination string
	// Files is how many of the workload's files were deleted there.
	Files int
	// Reason says why the destination no longer matches the group.
	Reason string
}

// Failed returns the stores that failed.
func (r *PruneReport) Failed() []StoreReport { return failedStores(r.Stores) }

// PruneMisscheduled removes, on purpose, the placements that renders keep
// on a destination that no longer matches their group (misscheduled): on
// dest, or on every destination of the platform when dest is "". It reads
// the workloads the placement index puts on each destination, deletes
// each misscheduled group's files there, and keeps everything else of the
// workload as it is. The mass-deletion breaker judges it like any write.
//
// A prune is computed from the records and files it read: a store
// refuses it (stale) when another writer changed a workload's record, or
// a file the prune keeps, meanwhile, and the prune then reads the stores
// again and prunes what is misscheduled now (see operation), so that it
// never deletes what another writer just placed, nor writes back a file
// another writer just rewrote.
func (e *Engine) PruneMisscheduled(ctx context.Context, dest string) (*PruneReport, error) {
	ctx = wait.WithRetryDeadline(ctx, e.opts.RetryDeadline)
	start := time.Now()
	op := e.newOperation(ctx, "prune")
	plat, err := e.loadPlatform(op.ph)
	if err != nil {
		return nil, err
	}
	byName := map[string]renderer.Destination{}
	var targets []string
	for _, d := range plat.Destinations {
		byName[d.Name] = d
		targets = append(targets, d.Name)
	}
	if dest != "" {
		if err := definedDestination(plat, dest); err != nil {
			return nil, err
		}
		targets = []string{dest}
	}
	slices.Sort(targets)
	stores, err := e.openAll(op.ph, plat)
	if err != nil {
		return nil, err
	}
	// rep is the report of the last pass that planned a prune (a pass that
	// finds nothing left to prune keeps it); earlier is what the passes
	// before it pruned where their writes landed, and landed what the
	// last pass that published pruned there.
	rep := &PruneReport{Destinations: targets, DryRun: e.opts.DryRun}
	var earlier, landed []Pruned
	planned := false
	op.redoFailed = func(reps []StoreReport, err error) ([]StoreReport, error) {
		return failStale(reps, "prune", err), nil
	}
	reports, published, err := op.run(pass{
		read: func(ctx context.Context) (map[renderer.StoreRef]*storeView, error) {
			return e.readStores(ctx, stores)
		},
		plan: func(ctx context.Context, views map[renderer.StoreRef]*storeView) (storeUpdates, error) {
			cur := &PruneReport{Destinations: targets, DryRun: e.opts.DryRun}
			pr := &prune{e: e, ctx: ctx, plat: plat, dest: dest, targets: targets, byName: byName, stores: stores, views: views, rep: cur}
			for _, step := range []func() error{
				pr.placed, // the records of the workloads placed on the targets
				pr.cut,    // each misscheduled placement's files, and its records
			} {
				if err := step(); err != nil {
					return nil, err
				}
			}
			if len(pr.all) == 0 {
				if !planned {
					rep = cur // nothing to prune: what is stuck
				}
				return nil, nil
			}
			var err error
			if cur.MassDeletion, err = e.guard(writeSet{platform: plat, views: views, recs: recordsByStore(pr.byWorkload), updates: pr.all}); err != nil {
				return nil, err
			}
			rep, planned = cur, true
			earlier, landed = append(earlier, landed...), nil
			return pr.all, nil
		},
		publish: func(ctx context.Context, _ map[renderer.StoreRef]*storeView, all storeUpdates) ([]StoreReport, error) {
			reps, err := e.publish(ctx, op.ph, plat, stores, all, nil, "")
			if err != nil {
				return nil, err
			}
			for _, p := range rep.Pruned {
				if wroteTo(reps, byName[p.Destination].Store) {
					landed = append(landed, p)
				}
			}
			return reps, nil
		},
	})
	if err != nil {
		return nil, err
	}
	rep.Stores = reports
	rep.Pruned = withEarlier(rep.Pruned, earlier)
	switch {
	case published:
		rep.Duration, rep.Stopped = time.Since(start), stopAsked(op.soft)
		op.ph.done()
	case reports == nil: // nothing to prune
		rep.Duration = time.Since(start)
		op.ph.done()
	}
	return rep, nil
}

// failStale is reps with each store that refused its write as stale
// failed with err, the reason the operation (what) could not be computed
// again: what the other stores' writes did stays reported.
func failStale(reps []StoreReport, what string, err error) []StoreReport {
	out := slices.Clone(reps)
	for i, r := range out {
		if errors.Is(r.Err, statestore.ErrStale) {
			out[i].Err = &statestore.StoreError{Store: r.Name, Op: what, Err: fmt.Errorf("not written: a write was stale, and computing the %s again failed: %w", what, err)}
		}
	}
	return out
}

// wroteTo reports whether store ref's write landed (or found nothing to
// do) in reps.
func wroteTo(reps []StoreReport, ref renderer.StoreRef) bool {
	for _, r := range reps {
		if r.Store == ref {
			return r.Err == nil
		}
	}
	return false
}

// withEarlier is the last pass's pruned placements, and those an earlier
// pass pruned that it does not list (they were gone when it read), in
// workload order.
func withEarlier(last, earlier []Pruned) []Pruned {
	out := slices.Clone(last)
	for _, p := range earlier {
		if !slices.ContainsFunc(out, func(q Pruned) bool {
			return q.Workload == p.Workload && q.Group == p.Group && q.Destination == p.Destination
		}) {
			out = append(out, p)
		}
	}
	slices.SortStableFunc(out, func(a, b Pruned) int { return strings.Compare(a.Workload, b.Workload) })
	return out
}

// prune is one prune-misscheduled under way: its steps fill it in order.
type prune struct {
	e       *Engine
	ctx     context.Context
	plat    *inputs.Platform
	dest    string // "" for every destination
	targets []string
	byName  map[string]renderer.Destination
	stores  map[renderer.StoreRef]statestore.Store
	views   map[renderer.StoreRef]*storeView
	rep     *PruneReport

	// byWorkload holds the records of every workload placed on a target,
	// by store; all the updates, by store.
	byWorkload map[string]map[renderer.StoreRef]statestore.Record
	all        storeUpdates
}

// placed reads the records of every workload placed on a target, by
// store.
func (pr *prune) placed() error {
	pr.byWorkload = map[string]map[renderer.StoreRef]statestore.Record{}
	for _, name := range pr.targets {
		if err := pr.ctx.Err(); err != nil {
			return err
		}
		d := pr.byName[name]
		recs, err := drainRecords(pr.views, d.Store, name)
		if err != nil {
			return pr.e.storeErr(d.Store, pr.stores, err)
		}
		for k, byRef := range recs {
			if pr.byWorkload[k] == nil {
				pr.byWorkload[k] = map[renderer.StoreRef]statestore.Record{}
			}
			maps.Copy(pr.byWorkload[k], byRef)
		}
	}
	return nil
}

// cut plans, workload by workload, the removal of each placement whose
// destination no longer matches its group: one update per store holding
// the workload, which keeps everything else of it.
func (pr *prune) cut() error {
	pr.all = storeUpdates{}
	msg := statestore.Message{Subject: "render: prune misscheduled placements", Trailers: []statestore.Trailer{
		{Key: "Render-Prune-Misscheduled", Value: pruneScope(pr.dest)}, {Key: "Render-Version", Value: pr.e.opts.Version}}}
	for _, key := range slices.Sorted(maps.Keys(pr.byWorkload)) {
		if err := pr.ctx.Err(); err != nil {
			return err
		}
		var rec statestore.Record
		for _, ref := range sortedRefs(pr.byWorkload[key]) {
			rec = pr.byWorkload[key][ref]
			break
		}
		cuts, stuck := misscheduledCuts(rec, pr.targets, pr.byName)
		pr.rep.Stuck = append(pr.rep.Stuck, stuck...)
		if len(cuts) == 0 {
			continue
		}
		placements := prunePlacements(rec.Placements, cuts)
		for _, ref := range sortedRefs(pr.byWorkload[key]) {
			v := pr.views[ref]
			u, gone, err := pruneUpdate(v.snap, pr.byWorkload[key][ref], placements, cuts, pr.byName, pr.plat, ref)
			if err != nil {
				return pr.e.storeErr(ref, pr.stores, err)
			}
			u.Message, u.DryRun = msg, pr.e.opts.DryRun
			pr.all.add(ref, u)
			for i := range cuts {
				if pr.byName[cuts[i].dest].Store == ref {
					cuts[i].files += gone[i]
				}
			}
		}
		for _, c := range cuts {
			pr.rep.Pruned = append(pr.rep.Pruned, Pruned{Workload: key, Group: c.group, Destination: c.dest, Files: c.files, Reason: c.reason})
		}
	}
	return nil
}

func pruneScope(dest string) string {
	if dest == "" {
		return "every destination"
	}
	return dest
}

// cut is one misscheduled placement to remove: group off dest.
type cut struct {
	group, dest, reason string
	files               int
}

// misscheduledCuts returns the placements of rec on targets whose
// destination no longer matches the group's selector, and the groups that
// cannot be pruned: a group whose part of an aggregated file it shares
// with a group that stays there (one contribution holds both).
func misscheduledCuts(rec statestore.Record, targets []string, byName map[string]renderer.Destination) ([]cut, []Stuck) {
	var cuts []cut
	var stuck []Stuck
	for _, p := range rec.Placements {
		sel := drainGroup(p).Selector
		for _, name := range p.Destinations {
			d, ok := byName[name]
			if !ok || !slices.Contains(targets, name) {
				continue
			}
			why := renderer.Mismatch(sel, d)
			if len(why) == 0 {
				continue
			}
			cuts = append(cuts, cut{group: p.Group, dest: name, reason: strings.Join(why, "; ")})
		}
	}
	// An aggregated destination keeps one contribution per workload: it can
	// lose all of the workload's groups, not some.
	var out []cut
	for _, c := range cuts {
		if byName[c.dest].Mode != renderer.AggregatedYAML {
			out = append(out, c)
			continue
		}
		stays := false
		for _, p := range rec.Placements {
			if p.Group == c.group || !slices.Contains(p.Destinations, c.dest) {
				continue
			}
			if !slices.ContainsFunc(cuts, func(o cut) bool { return o.group == p.Group && o.dest == c.dest }) {
				stays = true
			}
		}
		if stays {
			stuck = append(stuck, Stuck{Workload: rec.Workload, Group: c.group, Blocked: true, Reason: fmt.Sprintf(
				"misscheduled on %s (%s), but its documents share %s's aggregated file part with a group that stays there: re-run the workflow to rewrite it", c.dest, c.reason, c.dest)})
			continue
		}
		out = append(out, c)
	}
	return out, stuck
}

// prunePlacements is ps without the cut destinations; a placement left
// with none is dropped.
func prunePlacements(ps []statestore.Placement, cuts []cut) []statestore.Placement {
	var out []statestore.Placement
	for _, p := range ps {
		q := p
		q.Destinations = slices.DeleteFunc(slices.Clone(p.Destinations), func(d string) bool {
			return slices.ContainsFunc(cuts, func(c cut) bool { return c.group == p.Group && c.dest == d })
		})
		if len(q.Destinations) > 0 {
			out = append(out, q)
		}
	}
	return out
}

// pruneUpdate is the update that leaves workload rec in store ref as it
// is, less the cut groups' files: every other file (read from snap) and
// aggregated part stays, and the record forgets the cut placements. gone
// counts, per cut, the files it deletes.
func pruneUpdate(snap statestore.Snapshot, rec statestore.Record, placements []statestore.Placement, cuts []cut, byName map[string]renderer.Destination, p *inputs.Platform, ref renderer.StoreRef) (statestore.Update, []int, error) {
	// The cut holds only on the record it was computed from: a render of
	// the workload that lands first makes the store refuse it (stale).
	basis := rec
	u := statestore.Update{Workload: rec.Workload, Files: map[string][]byte{}, Shared: map[string][]byte{}, Basis: &statestore.Basis{Record: &basis}}
	gone := make([]int, len(cuts))
	groups := map[string]bool{}
	for _, pl := range rec.Placements {
		groups[pl.Group] = true
	}
	isCut := func(f string) int {
		for i, c := range cuts {
			d := byName[c.dest]
			if d.Store != ref || !strings.HasPrefix(f, d.Path+"/") {
				continue
			}
			if groupOfFile(rec, d, strings.TrimPrefix(f, d.Path+"/"), groups) == c.group {
				return i
			}
		}
		return -1
	}
	cutObject := map[[2]string]bool{}
	for _, f := range rec.Files {
		if t, ok := statestore.AggregateTarget(f, rec.Workload); ok {
			data, err := snap.ReadFile(f)
			if err != nil && !errors.Is(err, statestore.ErrNotFound) {
				return u, nil, fmt.Errorf("read %s: %w", f, err)
			}
			withdrawn := false
			for i, c := range cuts {
				if d := byName[c.dest]; d.Store == ref && d.Mode == renderer.AggregatedYAML && path.Join(d.Path, d.Filename) == t {
					withdrawn = true
					gone[i]++
				}
			}
			if withdrawn {
				data = nil
			}
			u.Aggregates = append(u.Aggregates, statestore.Aggregate{Target: t, Contribution: data})
			continue
		}
		if layout.IsMeta(f) {
			continue
		}
		if i := isCut(f); i >= 0 {
			gone[i]++
			d := byName[cuts[i].dest]
			cutObject[[2]string{d.Path, strings.TrimPrefix(f, d.Path+"/")}] = true
			continue
		}
		data, err := snap.ReadFile(f)
		if err != nil {
			return u, nil, fmt.Errorf("read %s: %w", f, err)
		}
		u.Files[f] = data
	}
	// And on the files it keeps, as it read them: a render that rewrote
	// one meanwhile, keeping its record, makes the store refuse the prune
	// (stale) rather than have it write the old bytes back.
	u.Basis.Files = maps.Clone(u.Files)
	r := rec
	r.Placements = placements
	r.Objects = slices.DeleteFunc(slices.Clone(rec.Objects), func(o statestore.Object) bool {
		return cutObject[[2]string{o.Destination, o.File}]
	})
	r.Files = nil
	u.Record = &r
	for _, pl := range placements {
		for _, name := range pl.Destinations {
			if d, ok := byName[name]; ok && d.Store == ref && !slices.Contains(u.Destinations, d.Path) {
				u.Destinations = append(u.Destinations, d.Path)
			}
		}
	}
	slices.Sort(u.Destinations)
	for _, d := range p.Destinations {
		if d.Store == ref {
			maps.Copy(u.Shared, renderer.CanaryFiles(d))
		}
	}
	return u, gone, nil
}

// groupOfFile is the group of rec that file rel (relative to destination
// d) belongs to: in a nestedByMetadata destination the group whose id
// names its folder, in a flat one the group whose directory is its first
// folder, else the default group.
func groupOfFile(rec statestore.Record, d renderer.Destination, rel string, groups map[string]bool) string {
	parts := strings.Split(rel, "/")
	if d.Mode == renderer.NestedByMetadata {
		// dependencies/<promise>/<pipeline>/<id>/..., static dependencies
		// dependencies/<promise>/<id>/..., and
		// resources/<namespace>/<promise>/<name>/<pipeline>/<id>/...
		i := 5
		switch {
		case parts[0] == "dependencies" && rec.Pipeline == "":
			i = 2
		case parts[0] == "dependencies":
			i = 3
		}
		if i < len(parts)-1 {
			for g := range groups {
				if renderer.GroupID(g) == parts[i] {
					return g
				}
			}
		}
		return ""
	}
	if len(parts) > 1 && parts[0] != renderer.DefaultGroup && groups[parts[0]] {
		return parts[0]
	}
	return renderer.DefaultGroup
}

// failedStores returns the reports of the stores that failed.
func failedStores(rs []StoreReport) []StoreReport {
	var out []StoreReport
	for _, s := range rs {
		if s.Err != nil {
			out = append(out, s)
		}
	}
	return out
}

// failedReports turns stores that could not be read into reports, in
// store order.
func failedReports(e *Engine, stores map[renderer.StoreRef]statestore.Store, failed map[renderer.StoreRef]error) []StoreReport {
	var out []StoreReport
	for _, ref := range sortedRefs(failed) {
		out = append(out, StoreReport{Store: ref, Name: stores[ref].String(), Err: e.annotate(ref, failed[ref])})
	}
	return out
}
