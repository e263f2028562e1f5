package ocistore

import "context"

// SpillAbove lets the tests of package ocistore_test spill every layer.
var SpillAbove = &spillAbove

// AcquireLock takes the writers' lock of s, as a write does, and returns
// what lets it go: for the tests of package ocistore_test.
func AcquireLock(ctx context.Context, s *Store) (func(context.Context) error, error) {
	l, err := s.acquire(ctx)
	if err != nil {
		return nil, err
	}
	return l.release, nil
}
