package ocistore

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/driver"
	"github.com/render-dev/render/statestore/planner"
	"github.com/render-dev/render/statestore/wait"
)

// Seed writes files (paths relative to the store, as planner.PlanUpdate
// plans them for each workload on an empty store: files, records, claims,
// index entries) as the store's state in one new generation, with the
// destinations dests, and publishes the destinations. It reads nothing but
// the state manifest, plans nothing and takes no lock: it exists to build
// large stores quickly for tests and benchmarks (internal/testinfra/storegen), and
// must never be pointed at a store in use, whose state it replaces.
func (s *Store) Seed(ctx context.Context, files map[string][]byte, dests []string) error {
	ctx = wait.EnsureRetryDeadline(ctx, s.cfg.RetryDeadline)
	snap, err := s.snapshot(ctx)
	if err != nil {
		return driver.Wrap(s.name, "seed", err)
	}
	if len(snap.st.folders) > 0 {
		return driver.Wrap(s.name, "seed", fmt.Errorf("the store holds a state already (generation %d)", snap.st.generation))
	}
	plan := planner.Plan{Ops: make([]planner.Op, 0, len(files))}
	for _, p := range slices.Sorted(maps.Keys(files)) {
		plan.Ops = append(plan.Ops, planner.Op{Path: p, Data: files[p]})
	}
	u := statestore.Update{Workload: "seed", Destinations: dests}
	st, changed, err := s.commit(ctx, snap, plan, statestore.Message{Subject: fmt.Sprintf("seed: %d files", len(files))}, u)
	if err != nil {
		return driver.Wrap(s.name, "seed", err)
	}
	if err := s.publish(ctx, st, changed); err != nil {
		return driver.Wrap(s.name, "seed", err)
	}
	return nil
}
