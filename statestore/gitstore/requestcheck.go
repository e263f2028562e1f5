package gitstore

import (
	"errors"
	"fmt"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
	"github.com/render-dev/render/statestore/planner"
)

// What a leader folds is input: a request ref is pushed by whoever can
// push to the repository, not only by render (see "Trust boundary" in
// docs/design.md). A request is applied only when it is well-formed (it
// decodes, its ref is its workload's, every path is one a store can hold
// and none is render's own or a Kratix ledger), carries the state of its
// workload it was planned on (its base, which fold then compares with the
// store's), and asks to take over only its own workload's Kratix files
// (bookkeeping.CheckAdoption). The planner then refuses, as for any
// update, a path or an object another workload owns. Anything else is
// deleted, as a stale request is, with a warning: never folded, and
// never left for every later leader to read again.

// errBadRequest is wrapped by every reason checkRequest gives.
var errBadRequest = errors.New("pending request cannot be applied")

// checkRequest says why the request at ref (in space), read as u planned
// on base (or failing to read with readErr), may not be folded; nil when
// it may. It warns when it refuses.
func (s *Store) checkRequest(ref plumbing.ReferenceName, space string, u statestore.Update, base string, readErr error) error {
	err := requestFault(ref, space, u, base, readErr)
	if err != nil && s.cfg.Warn != nil {
		s.cfg.Warn("deleted a pending request that cannot be applied (not written by render, or damaged)",
			"ref", ref.String(), "reason", err.Error())
	}
	return err
}

func requestFault(ref plumbing.ReferenceName, space string, u statestore.Update, base string, readErr error) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", errBadRequest, fmt.Sprintf(format, args...))
	}
	switch {
	case readErr != nil:
		return bad("%v", readErr)
	case layout.ValidPath(u.Workload) != nil || hasReserved(u.Workload):
		return bad("workload %q is not a workload key", u.Workload)
	case pendingRef(space, u.Workload) != ref:
		return bad("it names workload %s, whose requests are at %s", u.Workload, pendingRef(space, u.Workload))
	case base == "":
		return bad("it does not say which state of workload %s it was planned on", u.Workload)
	case u.Record != nil && u.Record.Workload != "" && u.Record.Workload != u.Workload:
		return bad("its record is workload %s's, not %s's", u.Record.Workload, u.Workload)
	}
	if err := planner.ValidateUpdate(u); err != nil {
		return bad("%v", err)
	}
	paths := make([]string, 0, len(u.Files)+len(u.Shared)+len(u.Aggregates))
	for p := range u.Files {
		paths = append(paths, p)
	}
	for p := range u.Shared {
		paths = append(paths, p)
	}
	for _, a := range u.Aggregates {
		paths = append(paths, a.Target)
	}
	for _, p := range paths {
		if hasReserved(p) {
			return bad("it writes %s, in a folder (%s or %s) no workload writes", p, layout.MetaDir, layout.KratixDir)
		}
	}
	if err := bookkeeping.CheckAdoption(u.Adopt, u.Workload); err != nil {
		return bad("%v", err)
	}
	return nil
}

// hasReserved reports whether a name in slash path p is render's own
// folder or Kratix's ledgers' folder: no workload file, shared file or
// aggregated file render plans lies in one.
func hasReserved(p string) bool {
	for _, c := range strings.Split(p, "/") {
		if c == layout.MetaDir || c == layout.KratixDir {
			return true
		}
	}
	return false
}
