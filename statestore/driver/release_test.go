package driver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/render-dev/render/statestore"
)

// releasing is a backend whose committer holds something until the write
// ends (Committer.Release), and whose commit fails with commitErr.
type releasing struct {
	commitErr error
	released  []error // what each Release was given
}

func (r *releasing) String() string { return "releasing store" }

func (r *releasing) Begin(ctx context.Context, us []statestore.Update) (Committer, error) {
	return Committer{Snapshot: r.Snapshot, Commit: r.Commit, Release: r.Release}, nil
}

func (r *releasing) Snapshot(ctx context.Context, attempt int, _ statestore.Snapshot) (statestore.Snapshot, error) {
	return noFiles{}, nil
}

func (r *releasing) Commit(ctx context.Context, c *Change) (Outcome, error) {
	return Outcome{}, r.commitErr
}

func (r *releasing) Release(ctx context.Context, err error) error {
	r.released = append(r.released, err)
	if err != nil {
		return fmt.Errorf("%w; and the lock stays", err)
	}
	return nil
}

// Write lets a Committer.Release go once, when the write ends, with the error it
// ends with, and returns what Release makes of it.
func TestWriteReleases(t *testing.T) {
	u := statestore.Update{Workload: "w/a", Files: map[string][]byte{"d/a.yaml": []byte("a\n")}, Record: &statestore.Record{}}
	ok := &releasing{}
	if res, err := Write(context.Background(), ok, RetryPolicy{}, []statestore.Update{u}); err != nil || !res.Updated {
		t.Fatalf("a write that landed: %+v, %v", res, err)
	}
	if len(ok.released) != 1 || ok.released[0] != nil {
		t.Fatalf("a write that landed was released with %v, want once with no error", ok.released)
	}
	failing := &releasing{commitErr: statestore.ErrRejected}
	_, err := Write(context.Background(), failing, RetryPolicy{}, []statestore.Update{u})
	var se *statestore.StoreError
	if len(failing.released) != 1 || !errors.Is(failing.released[0], statestore.ErrRejected) {
		t.Fatalf("a failed write was released with %v, want once with its error", failing.released)
	}
	if !errors.As(err, &se) || !errors.Is(err, statestore.ErrRejected) || !strings.HasSuffix(err.Error(), "; and the lock stays") {
		t.Fatalf("a failed write returned %v, want its StoreError with what Release added", err)
	}
}
