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

// pruneOptions are the flags of `render prune-misscheduled`.
type pruneOptions struct {
	commonOptions
	Destination string
}

func newPruneCommand(io IO) *cobra.Command {
	o := &pruneOptions{}
	cmd := &cobra.Command{
		Use:   "prune-misscheduled",
		Short: "Remove the placements kept on destinations that no longer match them",
		Long: `A render never deletes a workload from a destination just because its selector stopped
matching there (a relabelled destination, a typo in destination-selectors.yaml): as Kratix
does, it keeps the placement, misscheduled, and says so. prune-misscheduled removes such
placements on purpose: on --destination, or on every destination of the platform. For each
workload placed there whose group's selector no longer matches the destination, it deletes the
group's files on that destination and updates the workload's record; everything else of the
workload stays as it is. The mass-deletion breaker judges it like any other write.

` + exitCodesHelp(ExitOK, ExitStoreFailed, ExitBadInput, ExitUnscheduled, ExitMassDeletion, ExitSIGINT, ExitSIGTERM),
		Example: `  # what is kept where it no longer matches, and what would go
  render prune-misscheduled --platform platform/ --dry-run

  # remove what is misscheduled on prod only
  render prune-misscheduled --destination prod --platform platform/`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 0 {
				return usageError("prune-misscheduled takes no arguments (got %d); name a destination with --destination", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			// An unset shell variable ("--destination $DEST") must not
			// widen a prune to every destination: that is what leaving
			// the flag out says.
			if cmd.Flags().Changed("destination") && strings.TrimSpace(o.Destination) == "" {
				return usageError("--destination is empty: name a destination, or leave the flag out to prune every destination")
			}
			return runPrune(cmd.Context(), o, io)
		},
	}
	o.AddFlags(cmd.Flags(), "write nothing; print what would be removed")
	cmd.Flags().StringVar(&o.Destination, "destination", "", "prune on this destination only (default: every destination)")
	return cmd
}

func runPrune(ctx context.Context, o *pruneOptions, io IO) error {
	return runOperation(ctx, &o.commonOptions, io, func(ctx context.Context, eng *engine.Engine) (*engine.PruneReport, error) {
		return eng.PruneMisscheduled(ctx, o.Destination)
	}, func(rep *engine.PruneReport, sig os.Signal) error {
		return interruptedPublish(sig, rep.Stopped, rep.Stores, rep.DryRun, pruneReport(rep, o, io))
	})
}

// pruneReport prints a finished prune's report and returns its exit error.
func pruneReport(rep *engine.PruneReport, o *pruneOptions, io IO) error {
	if o.Format == "json" {
		if err := writeJSON(io.Out, pruneJSON(rep)); err != nil {
			return &ExitError{Code: ExitStoreFailed, Err: err}
		}
	} else {
		writePrune(io.Out, rep)
		writeBreaker(io.Out, rep.MassDeletion)
	}
	if err := failedStores(rep.Failed()); err != nil {
		return err
	}
	if ee := massDeletionExit(nil, rep.MassDeletion); ee != nil {
		return ee
	}
	var blocked []string
	for _, s := range rep.Stuck {
		blocked = append(blocked, fmt.Sprintf("%s group %s could not be pruned: %s", s.Workload, s.Group, s.Reason))
	}
	return unscheduled(blocked)
}

func writePrune(w io.Writer, rep *engine.PruneReport) {
	verb := "pruned"
	if rep.DryRun {
		verb = "would prune"
	}
	fmt.Fprintf(w, "prune-misscheduled (%s): %d placements %s\n", strings.Join(rep.Destinations, ", "), len(rep.Pruned), verb)
	for _, p := range rep.Pruned {
		fmt.Fprintf(w, "  %s %s group %s from %s (%d files): %s\n", verb, p.Workload, p.Group, p.Destination, p.Files, p.Reason)
	}
	for _, s := range rep.Stuck {
		fmt.Fprintf(w, "  stays: %s group %s: %s\n", s.Workload, s.Group, s.Reason)
	}
	for _, s := range rep.Stores {
		switch {
		case s.Err != nil:
			fmt.Fprintf(w, "%s: FAILED\n", s.Store)
		case rep.DryRun:
			fmt.Fprintf(w, "%s: would write %d changed, %d deleted\n", s.Store, len(s.Result.Changed), len(s.Result.Deleted))
		case s.Result.Updated:
			fmt.Fprintf(w, "%s: wrote %s (%d changed, %d deleted)\n", s.Store, short(s.Result.Revision), len(s.Result.Changed), len(s.Result.Deleted))
		default:
			fmt.Fprintf(w, "%s: up to date\n", s.Store)
		}
		if rep.DryRun {
			for _, d := range s.Destinations {
				fmt.Fprintf(w, "  destination %s (%s):\n", d.Destination, d.Path)
				for _, f := range d.Changed {
					fmt.Fprintf(w, "    ~ %s\n", f)
				}
				for _, f := range d.Deleted {
					fmt.Fprintf(w, "    - %s\n", f)
				}
			}
		}
	}
}

type prunedJSON struct {
	Workload    string `json:"workload"`
	Group       string `json:"group"`
	Destination string `json:"destination"`
	Files       int    `json:"files"`
	Reason      string `json:"reason"`
}

func pruneJSON(rep *engine.PruneReport) any {
	out := struct {
		Destinations []string         `json:"destinations"`
		DryRun       bool             `json:"dryRun"`
		Pruned       []prunedJSON     `json:"pruned"`
		Stuck        []drainStuckJSON `json:"stuck"`
		Stores       []jsonStore      `json:"stores"`
		// MassDeletion is the breaker's verdict, when some write passes a limit.
		MassDeletion *bookkeeping.MassDeletionError `json:"massDeletion,omitempty"`
	}{Destinations: nonNil(rep.Destinations), DryRun: rep.DryRun, Pruned: []prunedJSON{}, Stuck: []drainStuckJSON{}, Stores: []jsonStore{}, MassDeletion: rep.MassDeletion}
	for _, p := range rep.Pruned {
		out.Pruned = append(out.Pruned, prunedJSON{p.Workload, p.Group, p.Destination, p.Files, p.Reason})
	}
	for _, s := range rep.Stuck {
		out.Stuck = append(out.Stuck, drainStuckJSON{s.Workload, s.Group, s.Reason, s.Blocked})
	}
	for _, s := range rep.Stores {
		out.Stores = append(out.Stores, storeJSON(s, rep.DryRun))
	}
	return out
}
