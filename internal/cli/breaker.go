package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/render-dev/render/statestore/bookkeeping"
)

// massDeletionExit is exit code 4 for a render or drain the breaker
// refused (err), or that it would refuse (a dry run's verdict); nil
// otherwise.
func massDeletionExit(err error, verdict *bookkeeping.MassDeletionError) *ExitError {
	var md *bookkeeping.MassDeletionError
	switch {
	case errors.As(err, &md):
	case verdict != nil && verdict.Refused():
		md = verdict
	default:
		return nil
	}
	return &ExitError{Code: ExitMassDeletion, Err: md}
}

// writeBreaker prints the breaker's verdict under a report: each limit a
// write passes, and whether it is refused or what allowed it.
func writeBreaker(w io.Writer, md *bookkeeping.MassDeletionError) {
	if md == nil {
		return
	}
	for _, s := range md.Stores {
		verdict := "REFUSED"
		if s.AllowedBy != "" {
			verdict = "allowed by " + s.AllowedBy
		}
		for _, t := range s.Trips {
			fmt.Fprintf(w, "mass-deletion breaker: %s: %s: %s\n", s.Store, t, verdict)
		}
	}
}
