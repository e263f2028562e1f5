package s3store

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
	"github.com/render-dev/render/statestore/driver"
	"github.com/render-dev/render/statestore/planner"
)

// batch is what the writes of one ApplyAll share: their announcement in
// the load summaries, and the view their first attempts start from.
type batch struct {
	load *loadState
	view *snapshot
	// after holds the workloads whose update waits for an earlier one
	// (see ApplyAll): their writes list afresh, since the view does not
	// show what the earlier ones wrote.
	after map[string]bool
	// dirty is set once any write of the batch wrote anything.
	dirty atomic.Bool
}

// ApplyAll writes several workloads' updates. S3 has no transaction over
// several objects, so each update is its own write (driver.Write, as
// Apply), but writes of different workloads do not wait for each other:
// each conditions its objects on what it read, and the record of each
// workload is its own lock (see docs/design.md, "S3"). So they run side by
// side, Config.Concurrency of them at a time, and share what would
// otherwise make them take turns:
//
//   - the load summaries: the batch announces the changes of every update
//     that carries its Basis before any write begins, one change object
//     per destination, and settles them once the last write ended, one
//     more; a write whose plan changes more than its update said widens
//     the announcement (render drain moves 1,000 workloads off one
//     destination with a few objects beside its summary, not 2,000);
//   - the view: every write's first attempt starts from what the view
//     the first update carries (Update.View: a drain's reads) looked up,
//     and lists only what that did not cover.
//
// An update that names a path an earlier one names (the same workload, a
// file one wants and another had) is written after it. The first write
// that fails stops the writes not yet started (those already under way
// finish); the result sums those that ran, and the error is the first
// one, by the updates' order.
func (s *Store) ApplyAll(ctx context.Context, us []statestore.Update) (statestore.Result, error) {
	if len(us) <= 1 {
		return s.Writer.ApplyAll(ctx, us)
	}
	ctx = s.Policy.Context(ctx)
	b := &batch{load: newLoadState()}
	b.view = s.viewOf(ctx, us[0].View)
	if b.view != nil {
		prefetchBatch(b.view, us)
	}
	dry := us[0].DryRun
	if !dry {
		if err := s.announce(ctx, b.load, batchChanges(us)); err != nil {
			s.settle(ctx, b.load)
			return statestore.Result{}, driver.Wrap(s.String(), "write load summary", err)
		}
		defer s.settleBatch(ctx, b)
	}
	deps := batchDeps(us)
	b.after = map[string]bool{}
	for i, u := range us {
		if len(deps[i]) > 0 {
			b.after[u.Workload] = true
		}
	}
	return sumRuns(s.runBatch(ctx, b, us, deps))
}

// prefetchBatch looks up in view, in one go, what every write of us will
// look at first: a folder that several updates name (a destination's
// index, its canaries, a shard of the claims) is listed once for all of
// them.
func prefetchBatch(view *snapshot, us []statestore.Update) {
	var h statestore.Hint
	for _, u := range us {
		h = h.Merge(planner.UpdateHint(u))
		for _, d := range u.Destinations {
			h.Paths = append(h.Paths, MarkerPath(strings.Trim(d, "/"), u.Workload))
		}
	}
	statestore.Prefetch(view, h)
}

// batchChanges returns the changes the batch announces in the load
// summaries before any write begins, by destination and workload: those
// of every update that carries its Basis, from its basis's record to the
// record it asks for. An update without a Basis is left out: its write
// announces what its plan changes.
func batchChanges(us []statestore.Update) map[string]map[string][]string {
	changes := map[string]map[string][]string{}
	for _, u := range us {
		if u.Basis == nil {
			continue // its write announces what its plan changes
		}
		var rec *statestore.Record
		if u.Record != nil {
			r := *u.Record
			r.Workload = u.Workload
			rec = &r
		}
		for d, byW := range loadChanges(u.Workload, u.Basis.Record, planner.Plan{Record: rec}) {
			if changes[d] == nil {
				changes[d] = map[string][]string{}
			}
			for w, names := range byW {
				changes[d][w] = sortedSet(setOf(append(slices.Clone(changes[d][w]), names...)))
			}
		}
	}
	return changes
}

// settleBatch settles the load summaries the batch b announced changes
// in, once its last write ended, and creates the summaries its reads
// lacked when any write wrote anything. It is not cut off by a
// cancellation: a change left pending costs every later reader.
func (s *Store) settleBatch(ctx context.Context, b *batch) {
	fctx, cancel := driver.Finishing(ctx)
	defer cancel()
	s.settle(fctx, b.load)
	if b.dirty.Load() {
		s.createSummaries(fctx)
	}
}

// batchDeps returns, for each of us, the earlier updates it waits for:
// those that name a path it names (the same workload's, one that wants a
// file or an object another had or wants). It is planned after them, as
// a batch planned one update on top of the other would be.
func batchDeps(us []statestore.Update) [][]int {
	deps := make([][]int, len(us))
	lastOf := map[string]int{}
	for i, u := range us {
		seen := map[int]bool{}
		for _, k := range batchKeys(u) {
			if j, ok := lastOf[k]; ok && j != i && !seen[j] {
				seen[j] = true
				deps[i] = append(deps[i], j)
			}
			lastOf[k] = i
		}
	}
	return deps
}

// batchRun is how one update's write in a batch went: ran is set when
// the write was started at all.
type batchRun struct {
	res statestore.Result
	err error
	ran bool
}

// runBatch writes each of us (driver.Write, as Apply) once the writes it
// waits for (deps, see batchDeps) ended, Config.Concurrency at a time.
// The first write that fails stops the writes not yet started; those
// already under way finish. It returns how each went, by the updates'
// order.
func (s *Store) runBatch(ctx context.Context, b *batch, us []statestore.Update, deps [][]int) []batchRun {
	runs := make([]batchRun, len(us))
	done := make([]chan struct{}, len(us))
	for i := range done {
		done[i] = make(chan struct{})
	}
	be := backend{s: s, batch: b}
	var stop atomic.Bool
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(s.cfg.Concurrency, 1))
	for i := range us {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done[i])
			for _, j := range deps[i] {
				<-done[j]
			}
			sem <- struct{}{}
			defer func() { <-sem }()
			if stop.Load() || ctx.Err() != nil {
				return
			}
			runs[i].ran = true
			runs[i].res, runs[i].err = driver.Write(ctx, be, s.Policy, []statestore.Update{us[i]})
			if runs[i].err != nil {
				stop.Store(true)
			}
		}()
	}
	wg.Wait()
	return runs
}

// sumRuns sums the results of the writes that ran, and returns the first
// error, by the updates' order.
func sumRuns(runs []batchRun) (statestore.Result, error) {
	var res statestore.Result
	var first error
	for _, run := range runs {
		if first == nil {
			first = run.err
		}
		if !run.ran {
			continue
		}
		r := run.res
		res.Updated = res.Updated || r.Updated
		res.Added = append(res.Added, r.Added...)
		res.Changed = append(res.Changed, r.Changed...)
		res.Deleted = append(res.Deleted, r.Deleted...)
		res.Attempts += r.Attempts
		if r.Revision != "" {
			res.Revision = r.Revision
		}
	}
	return res, first
}

// batchKeys are the paths and names an update's write may depend on
// another's for: its workload, its files and aggregated files, the claims
// of its objects, and what its basis says it had.
func batchKeys(u statestore.Update) []string {
	keys := []string{"workload:" + u.Workload}
	for p := range u.Files {
		keys = append(keys, p)
	}
	for _, a := range u.Aggregates {
		keys = append(keys, a.Target)
	}
	for _, r := range []*statestore.Record{u.Record, basisRecord(u)} {
		if r == nil {
			continue
		}
		for _, o := range r.Objects {
			keys = append(keys, bookkeeping.ClaimPath(o))
		}
		keys = append(keys, r.Files...)
	}
	return keys
}

func basisRecord(u statestore.Update) *statestore.Record {
	if u.Basis == nil {
		return nil
	}
	return u.Basis.Record
}
