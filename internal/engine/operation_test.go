package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/wait"
)

// The operation driver's one redo rule, on passes of its own: a pass whose
// publish a store refused as stale is done again (read, plan, publish),
// on the publish context; a store an earlier pass wrote and a later one
// found up to date reports the earlier write; every update goes to its
// store with the view its pass read; a stop asked before the redo, or a
// pass with nothing left to publish, ends the operation.
func TestOperationRedoesAStalePass(t *testing.T) {
	a, b := renderer.StoreRef{Kind: "GitStateStore", Name: "a"}, renderer.StoreRef{Kind: "GitStateStore", Name: "b"}
	stale := &statestore.StaleError{Workload: "w"}
	type outcome struct {
		reports []StoreReport
		nothing bool // plan has nothing to publish
	}
	// run runs passes on a context from WithStop; stopWhile stops it
	// while the first pass publishes.
	run := func(stopWhile bool, passes []outcome) (*operation, []StoreReport, bool, error, []map[renderer.StoreRef]statestore.Snapshot) {
		ctx, stop := WithStop(context.Background())
		defer stop()
		e := New(Options{})
		op := e.newOperation(wait.WithRetryDeadline(ctx, time.Minute), "test")
		var seen []map[renderer.StoreRef]statestore.Snapshot
		n := 0
		reps, published, err := op.run(pass{
			read: func(context.Context) (map[renderer.StoreRef]*storeView, error) {
				return map[renderer.StoreRef]*storeView{a: {snap: memSnap{"pass": []byte{byte(n)}}}, b: {snap: memSnap{}}}, nil
			},
			plan: func(context.Context, map[renderer.StoreRef]*storeView) (storeUpdates, error) {
				if passes[n].nothing {
					n++
					return nil, nil
				}
				return storeUpdates{a: {{Workload: "w"}}, b: {{Workload: "w"}}}, nil
			},
			publish: func(_ context.Context, _ map[renderer.StoreRef]*storeView, us storeUpdates) ([]StoreReport, error) {
				views := map[renderer.StoreRef]statestore.Snapshot{}
				for ref, u := range us {
					views[ref] = u[0].View
				}
				seen = append(seen, views)
				if stopWhile {
					stop()
				}
				n++
				return passes[n-1].reports, nil
			},
		})
		return op, reps, published, err, seen
	}
	wrote := func(ref renderer.StoreRef, rev string) StoreReport {
		return StoreReport{Store: ref, Result: statestore.Result{Updated: true, Revision: rev}}
	}

	op, reps, published, err, seen := run(false, []outcome{
		{reports: []StoreReport{{Store: a, Err: stale}, wrote(b, "b1")}},
		{reports: []StoreReport{wrote(a, "a2"), {Store: b}}},
	})
	if err != nil || !published || op.redos != 1 {
		t.Fatalf("a stale pass: %v, published %v, %d redos; want one redo", err, published, op.redos)
	}
	if len(reps) != 2 || reps[0].Result.Revision != "a2" || reps[1].Result.Revision != "b1" {
		t.Fatalf("reports %+v: want a's second write and b's first", reps)
	}
	if len(seen) != 2 || seen[0][a] == nil || seen[0][b] == nil || string(seen[1][a].(memSnap)["pass"]) != "\x01" {
		t.Fatalf("the views the updates carried: %v; want each pass's own", seen)
	}
	if op.release == nil || op.ph.ctx == op.soft {
		t.Fatal("the redo did not run on the publish context")
	}

	// A pass that finds nothing left to publish ends the operation with
	// the last publish's reports.
	_, reps, published, err, _ = run(false, []outcome{
		{reports: []StoreReport{{Store: a, Err: stale}, wrote(b, "b1")}},
		{nothing: true},
	})
	if err != nil || !published || len(reps) != 2 || !errors.Is(reps[0].Err, statestore.ErrStale) {
		t.Fatalf("nothing left to publish: %+v, %v", reps, err)
	}

	// A stop asked while the first pass published ends the operation
	// there: the stores' errors are reported.
	op, reps, _, err, _ = run(true, []outcome{{reports: []StoreReport{{Store: a, Err: stale}}}})
	if err != nil || op.redos != 0 || len(reps) != 1 || !errors.Is(reps[0].Err, statestore.ErrStale) {
		t.Fatalf("stopped: %d redos, %+v, %v; want none, the stale report", op.redos, reps, err)
	}
}
