package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/render-dev/render/internal/engine"
	"github.com/render-dev/render/statestore/bookkeeping"
)

// drainOptions are the flags of `render drain`: the ones it shares with
// render.
type drainOptions struct {
	commonOptions
}

func newDrainCommand(io IO) *cobra.Command {
	o := &drainOptions{}
	cmd := &cobra.Command{
		Use:   "drain DESTINATION",
		Short: "Move every resource placed on a destination to another matching destination",
		Long: `drain moves every resource placed on DESTINATION to another destination that matches
its group's selector, chosen as a render would (fewest of its flavour, then a stable hash).
It copies the files from the store, updates the placement records, and writes one commit
per store. Promise dependencies stay: they go to every matching destination.

What cannot move stays where it is and is reported (exit 3): a group no other destination
matches, one whose files would not fit in the destination chosen (a path too long for a
store), one on or bound for an aggregatedYAML or none destination (only nestedByMetadata
folders move), one holding a Secret where the two destinations' spec.secrets differ, and
files no render record owns (what Kratix wrote: render that workflow once, then drain
again). Exit 0 means DESTINATION holds no resource any more.

A move into another store writes that store first, and removes the group from
DESTINATION's store only once every copy landed. If a copy or the removal fails, the
copies that landed are taken out again (only what the drain wrote, and only while no
other writer changed it since): nothing moved, exit 1. If taking a copy out fails too, or
DESTINATION's store cannot be read to check that the removal did not land, the copy
stays: the drain says it is unfinished and where the group is (exit 1); run it again,
and it finishes the move.

Cordon the destination first (spec.unschedulable: true) so new resources skip it too.

` + exitCodesHelp(ExitOK, ExitStoreFailed, ExitBadInput, ExitUnscheduled, ExitMassDeletion, ExitSIGINT, ExitSIGTERM),
		Example: `  # where would dev-eu's resources go?
  render drain dev-eu --platform platform/ --dry-run

  # move them, and report as JSON
  render drain dev-eu --platform platform/ -o json`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError("drain takes one argument, the destination's name (got %d)", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			return runDrain(cmd.Context(), o, args[0], io)
		},
	}
	o.AddFlags(cmd.Flags(), "write nothing; print where each resource would move")
	return cmd
}

func runDrain(ctx context.Context, o *drainOptions, dest string, io IO) error {
	return runOperation(ctx, &o.commonOptions, io, func(ctx context.Context, eng *engine.Engine) (*engine.DrainReport, error) {
		return eng.Drain(ctx, dest)
	}, func(rep *engine.DrainReport, sig os.Signal) error {
		return interruptedPublish(sig, rep.Stopped, rep.Stores, rep.DryRun, drainReport(rep, o, io))
	})
}

// drainReport prints a finished drain's report and returns its exit error.
func drainReport(rep *engine.DrainReport, o *drainOptions, io IO) error {
	if o.Format == "json" {
		if err := writeJSON(io.Out, drainJSON(rep)); err != nil {
			return &ExitError{Code: ExitStoreFailed, Err: err}
		}
	} else {
		writeDrain(io.Out, rep)
		writeBreaker(io.Out, rep.MassDeletion)
	}
	if failed := rep.Failed(); len(failed) > 0 {
		var outcome []string
		if !rep.DryRun {
			outcome = drainOutcome(rep)
		}
		return failedStores(failed, outcome...)
	}
	if ee := massDeletionExit(nil, rep.MassDeletion); ee != nil {
		return ee
	}
	var blocked []string
	for _, s := range rep.Stuck {
		if s.Blocked {
			blocked = append(blocked, fmt.Sprintf("%s group %s could not move: %s", s.Workload, s.Group, s.Reason))
		}
	}
	return unscheduled(blocked)
}

// drainOutcome says, for a drain a store failed, where its groups are:
// nothing moved (and which stores the copies were taken out of again), or
// which groups are in two places and the command that finishes the move.
func drainOutcome(rep *engine.DrainReport) []string {
	dest := rep.Destination
	var lines, undone []string
	for _, u := range rep.Undo {
		if u.Err == nil {
			undone = append(undone, u.Store.String())
		}
	}
	moved := 0
	for _, m := range rep.Moves {
		var where string
		switch m.Copy {
		case engine.CopyMoved:
			moved++
		case engine.CopyKept:
			where = fmt.Sprintf("is on %s (%s) and was copied to %s (%s): removing it from %s failed, and %s", m.From, m.FromStore, m.To, m.ToStore, m.From, m.Why)
		case engine.CopyUnchecked:
			where = fmt.Sprintf("is on %s (%s) and may still be on %s (%s): removing it from %s failed, and %s", m.To, m.ToStore, m.From, m.FromStore, m.From, m.Why)
		}
		if where == "" {
			continue
		}
		if len(lines) == 0 {
			lines = append(lines, fmt.Sprintf("drain %s is unfinished: %s group %s %s", dest, m.Workload, m.Group, where))
		} else {
			lines = append(lines, fmt.Sprintf("also %s group %s %s", m.Workload, m.Group, where))
		}
	}
	if rep.Unfinished {
		return append(lines, fmt.Sprintf("run render drain %s again to finish the move (it takes each group where its copy is)", dest))
	}
	line := fmt.Sprintf("nothing was moved off %s", dest)
	if moved > 0 {
		line = fmt.Sprintf("%d of the %d groups to move are off %s all the same (%s's store, read again, no longer places them there); the others were not moved", moved, len(rep.Moves), dest, dest)
	}
	if len(undone) > 0 {
		line += fmt.Sprintf("; the copies written to %s were removed again", strings.Join(undone, " and "))
	}
	return append(lines, line)
}

func writeDrain(w io.Writer, rep *engine.DrainReport) {
	verb := "moved"
	switch {
	case rep.DryRun:
		verb = "would move"
	case len(rep.Failed()) > 0:
		kept, moved := 0, 0
		for _, m := range rep.Moves {
			switch m.Copy {
			case engine.CopyKept, engine.CopyUnchecked:
				kept++
			case engine.CopyMoved:
				moved++
			}
		}
		var parts []string
		if moved > 0 {
			parts = append(parts, fmt.Sprintf("%d moved", moved))
		}
		if kept > 0 {
			parts = append(parts, fmt.Sprintf("%d copied, still on %s", kept, rep.Destination))
		}
		if len(parts) == 0 {
			parts = append(parts, "none moved")
		}
		verb = "to move, " + strings.Join(parts, ", ") + " (a store failed)"
	}
	fmt.Fprintf(w, "drain %s: %d groups %s\n", rep.Destination, len(rep.Moves), verb)
	for _, m := range rep.Moves {
		fmt.Fprintf(w, "  %s %s group %s: %s -> %s (%d files)\n", moveVerb(rep, m), m.Workload, m.Group, m.From, m.To, m.Files)
	}
	for _, s := range rep.Stuck {
		fmt.Fprintf(w, "  stays: %s group %s: %s\n", s.Workload, s.Group, s.Reason)
	}
	for _, s := range rep.Stores {
		switch {
		case s.Err != nil:
			fmt.Fprintf(w, "%s: FAILED\n", s.Store)
		case rep.DryRun:
			fmt.Fprintf(w, "%s: would write %d added, %d deleted\n", s.Store, len(s.Result.Added), len(s.Result.Deleted))
		case s.Result.Updated:
			fmt.Fprintf(w, "%s: wrote %s (%d added, %d deleted)\n", s.Store, short(s.Result.Revision), len(s.Result.Added), len(s.Result.Deleted))
		default:
			fmt.Fprintf(w, "%s: up to date\n", s.Store)
		}
	}
	for _, s := range rep.Undo {
		switch {
		case s.Err != nil:
			fmt.Fprintf(w, "%s: removing the copies FAILED\n", s.Store)
		case s.Result.Updated:
			fmt.Fprintf(w, "%s: copies removed again: wrote %s (%d added, %d deleted)\n", s.Store, short(s.Result.Revision), len(s.Result.Added), len(s.Result.Deleted))
		default:
			fmt.Fprintf(w, "%s: copies removed again (by another writer already)\n", s.Store)
		}
	}
}

// moveVerb is what happened to move m of rep.
func moveVerb(rep *engine.DrainReport, m engine.Move) string {
	switch {
	case rep.DryRun:
		return "would move"
	case len(rep.Failed()) == 0 || m.Copy == engine.CopyMoved:
		return "moved"
	case m.Copy == engine.CopyKept || m.Copy == engine.CopyUnchecked:
		return "copied"
	}
	return "not moved"
}

type drainMoveJSON struct {
	Workload string `json:"workload"`
	Group    string `json:"group"`
	From     string `json:"from"`
	To       string `json:"to"`
	Files    int    `json:"files"`
	// Copy is what became of the copy in To's store when removing the
	// group from From failed: removed (the group is on From only), kept
	// (on both), unchecked (on To, maybe on From too) or moved (on To
	// only); why says why a copy was kept.
	Copy string `json:"copy,omitempty"`
	Why  string `json:"why,omitempty"`
}

type drainStuckJSON struct {
	Workload string `json:"workload"`
	Group    string `json:"group"`
	Reason   string `json:"reason"`
	Blocked  bool   `json:"blocked"`
}

func drainJSON(rep *engine.DrainReport) any {
	out := struct {
		Destination string           `json:"destination"`
		DryRun      bool             `json:"dryRun"`
		Moves       []drainMoveJSON  `json:"moves"`
		Stuck       []drainStuckJSON `json:"stuck"`
		Stores      []jsonStore      `json:"stores"`
		// MassDeletion is the breaker's verdict, when some write passes a limit.
		MassDeletion *bookkeeping.MassDeletionError `json:"massDeletion,omitempty"`
		// Unfinished: some moves were copied and are (or may be) still on
		// the drained destination (its store failed, and the copies could
		// not be taken out again); run the drain again.
		Unfinished bool `json:"unfinished"`
		// Undo are the writes that took the copies out again.
		Undo []jsonStore `json:"undo,omitempty"`
	}{MassDeletion: rep.MassDeletion, Destination: rep.Destination, DryRun: rep.DryRun, Moves: []drainMoveJSON{}, Stuck: []drainStuckJSON{}, Stores: []jsonStore{}, Unfinished: rep.Unfinished}
	for _, m := range rep.Moves {
		out.Moves = append(out.Moves, drainMoveJSON{m.Workload, m.Group, m.From, m.To, m.Files, string(m.Copy), m.Why})
	}
	for _, s := range rep.Undo {
		out.Undo = append(out.Undo, storeJSON(s, rep.DryRun))
	}
	for _, s := range rep.Stuck {
		out.Stuck = append(out.Stuck, drainStuckJSON{s.Workload, s.Group, s.Reason, s.Blocked})
	}
	for _, s := range rep.Stores {
		out.Stores = append(out.Stores, storeJSON(s, rep.DryRun))
	}
	return out
}
