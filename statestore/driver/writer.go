package driver

import (
	"context"

	"github.com/render-dev/render/statestore"
)

// Writer gives a Backend the Store methods that are the same for every
// store kind: Apply and ApplyAll through Write. Backends embed it.
type Writer struct {
	Backend Backend
	Policy  RetryPolicy
	// Batch is set when the backend commits several updates as one change
	// (one git commit, one OCI state); otherwise ApplyAll writes them one
	// after the other.
	Batch bool
}

// Capabilities declares what the Writer's ApplyAll does: a batch as one
// change (all of it or none of it) when Batch is set. A backend that
// declares more sets it on top.
func (w Writer) Capabilities() statestore.Capabilities {
	return statestore.Capabilities{AtomicBatches: w.Batch}
}

// Apply writes one workload's update.
func (w Writer) Apply(ctx context.Context, u statestore.Update) (statestore.Result, error) {
	return Write(ctx, w.Backend, w.Policy, []statestore.Update{u})
}

// ApplyAll writes several workloads' updates, in the order given: as one
// change where the backend can (planned one on top of the other, with the
// first update's message), one after the other otherwise (stopping at the
// first that fails). The result sums them.
func (w Writer) ApplyAll(ctx context.Context, us []statestore.Update) (statestore.Result, error) {
	if w.Batch || len(us) <= 1 {
		return Write(ctx, w.Backend, w.Policy, us)
	}
	var res statestore.Result
	for _, u := range us {
		r, err := Write(ctx, w.Backend, w.Policy, []statestore.Update{u})
		res.Updated = res.Updated || r.Updated
		res.Added = append(res.Added, r.Added...)
		res.Changed = append(res.Changed, r.Changed...)
		res.Deleted = append(res.Deleted, r.Deleted...)
		res.Attempts += r.Attempts
		if r.Revision != "" {
			res.Revision = r.Revision
		}
		if err != nil {
			return res, err
		}
	}
	return res, nil
}
