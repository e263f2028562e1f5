package s3store

import (
	"context"
	"fmt"
	"maps"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
	"github.com/render-dev/render/statestore/driver"
	"github.com/render-dev/render/statestore/planner"
)

// Seed writes workloads into the store exactly as Apply would leave them
// in a store that holds none of their paths (files, claims, shared files,
// sealed records naming their markers, markers), but without reading
// anything and without preconditions, with Concurrency PUTs in flight. It
// exists to build large stores quickly for tests and benchmarks, and must
// never be pointed at a real store: it overwrites whatever is there and
// checks no ownership. Updates with aggregated files are refused (their
// targets depend on other workloads). The load summaries of the
// destinations it places resources on get its entries (a missing one is
// made from a listing of the destination's entries, after the PUTs).
func (s *Store) Seed(ctx context.Context, us []statestore.Update) error {
	ctx = s.Policy.Context(ctx)
	files := map[string][]byte{bookkeeping.IndexMarker: bookkeeping.IndexMarkerData()} // shared files (canaries, the index marker) once
	entries := map[string]map[string]string{}                                          // resource index entries, by destination
	put := func(p string, data []byte) { files[p] = data }
	for _, u := range us {
		err := planner.ValidateUpdate(u)
		var dests []string
		if err == nil {
			dests, err = destinations(u)
		}
		if err != nil {
			return driver.Wrap(s.String(), "seed", err)
		}
		if len(u.Aggregates) > 0 || u.Record == nil {
			return driver.Wrap(s.String(), "seed", fmt.Errorf("workload %s: Seed takes no aggregated files and no removals", u.Workload))
		}
		plan, err := planner.PlanUpdate(s.emptySnapshot(ctx), u)
		if err != nil {
			return driver.Wrap(s.String(), "seed", err)
		}
		recPath := statestore.RecordPath(u.Workload)
		for d, names := range bookkeeping.ResourceEntries(plan.Record) {
			if entries[d] == nil {
				entries[d] = map[string]string{}
			}
			maps.Copy(entries[d], names)
		}
		for _, op := range plan.Ops {
			if op.Path != recPath {
				put(op.Path, op.Data)
			}
		}
		put(recPath, sealRecord(plan.Record.Encode(), dests))
		for _, d := range dests {
			files, aggs, shared := markerContent(s.emptySnapshot(ctx), u, d, nil)
			for p := range files {
				files[p] = md5hex(u.Files[d+"/"+p])
			}
			put(MarkerPath(d, u.Workload), encodeMarker(newMarker(d, files, aggs, shared, u)))
		}
	}
	jobs := make([]func(context.Context) error, 0, len(files))
	for p, data := range files {
		jobs = append(jobs, func(ctx context.Context) error {
			_, err := s.put(ctx, p, data, cond{unconditional: true})
			return err
		})
	}
	if err := writeAll(ctx, s.cfg.Concurrency, jobs); err != nil {
		return driver.Wrap(s.String(), "seed", err)
	}
	if err := s.ledgers().Seed(ctx, entries); err != nil {
		return driver.Wrap(s.String(), "seed", err)
	}
	return nil
}
