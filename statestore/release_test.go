package statestore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// releasing is a backend whose committer holds something until the write
// ends (a Releaser), and whose commit fails with commitErr.
type releasing struct {
	commitErr error
	released  []error // what each Release was given
}

func (r *releasing) String() string { return "releasing store" }

func (r *releasing) Begin(ctx context.Context, us []Update) (Committer, error) { return r, nil }

func (r *releasing) Snapshot(ctx context.Context, attempt int) (Snapshot, error) {
	return memSnap{}, nil
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

// Write lets a Releaser go once, when the write ends, with the error it
// ends with, and returns what Release makes of it.
func TestWriteReleases(t *testing.T) {
	u := Update{Workload: "w/a", Files: map[string][]byte{"d/a.yaml": []byte("a\n")}, Record: &Record{}}
	ok := &releasing{}
	if res, err := Write(context.Background(), ok, RetryPolicy{}, []Update{u}); err != nil || !res.Updated {
		t.Fatalf("a write that landed: %+v, %v", res, err)
	}
	if len(ok.released) != 1 || ok.released[0] != nil {
		t.Fatalf("a write that landed was released with %v, want once with no error", ok.released)
	}
	failing := &releasing{commitErr: ErrRejected}
	_, err := Write(context.Background(), failing, RetryPolicy{}, []Update{u})
	var se *StoreError
	if len(failing.released) != 1 || !errors.Is(failing.released[0], ErrRejected) {
		t.Fatalf("a failed write was released with %v, want once with its error", failing.released)
	}
	if !errors.As(err, &se) || !errors.Is(err, ErrRejected) || !strings.HasSuffix(err.Error(), "; and the lock stays") {
		t.Fatalf("a failed write returned %v, want its StoreError with what Release added", err)
	}
}
