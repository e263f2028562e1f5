package wait

import (
	"context"
	"errors"

	"github.com/render-dev/render/statestore"
)

// What a loop does with an error, decided by its type, never its text:
// the write loop (driver.Write) plans again on a fresh view after
// ClassConflict, tries the same again after ClassTransient (waiting for
// the server, as Policy.Retry does), and gives up on ClassPermanent. It
// is the waiting policy's, beside the waits it chooses between; the
// errors it reads are the contract's (statestore).

// Classify says what the write loop does with err.
func Classify(err error) Class {
	switch {
	case err == nil:
		return ClassDone
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ClassPermanent
	case errors.Is(err, statestore.ErrDeadline):
		return ClassPermanent // a step's own retries spent the render's budget
	case errors.Is(err, statestore.ErrConflict):
		var oe *statestore.OwnedError
		if errors.As(err, &oe) {
			return ClassPermanent // another workload's file or object: bad input
		}
		return ClassConflict
	case errors.Is(err, statestore.ErrUnreachable):
		return ClassTransient
	}
	return ClassPermanent
}

// Class is how the write loop treats an error.
type Class int

// Classes of errors.
const (
	// ClassDone: no error.
	ClassDone Class = iota
	// ClassConflict: another writer was first; plan again on a fresh view.
	ClassConflict
	// ClassTransient: the server could not be reached; try the same again.
	ClassTransient
	// ClassPermanent: trying again does not help.
	ClassPermanent
)
