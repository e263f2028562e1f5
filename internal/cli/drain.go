package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/render-dev/render/internal/engine"
	"github.com/render-dev/render/renderer"
)

// drainOptions are the flags of `render drain`.
type drainOptions struct {
	Platform      []string
	SecretsDir    string
	DryRun        bool
	Format        string
	Strategy      string
	RetryDeadline time.Duration
	LogFormat     string
}

func (o *drainOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringArrayVar(&o.Platform, "platform", nil, "platform configuration: a YAML file or a folder of them (repeatable)")
	fs.StringVar(&o.SecretsDir, "secrets-dir", "", "folder of mounted secrets, as <dir>/<secret name>/<key>")
	fs.BoolVar(&o.DryRun, "dry-run", false, "write nothing; print where each resource would move")
	fs.StringVarP(&o.Format, "format", "o", "text", "report format: text or json")
	fs.StringVar(&o.Strategy, "strategy", string(renderer.Spread), "how a moved resource picks among matching destinations: spread or random")
	fs.DurationVar(&o.RetryDeadline, "retry-deadline", 2*time.Minute, "how long an unreachable store is retried")
	fs.StringVar(&o.LogFormat, "log-format", "text", "log format: text or json")
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

Cordon the destination first (spec.unschedulable: true) so new resources skip it too.
Exit codes: 0 all moved, 1 a store failed, 2 bad input, 3 some resource could not move.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return &ExitError{Code: ExitBadInput, Err: errors.New("drain takes one argument: the destination's name")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDrain(cmd.Context(), o, args[0], io)
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}

func runDrain(ctx context.Context, o *drainOptions, dest string, io IO) error {
	if o.Format != "text" && o.Format != "json" {
		return &ExitError{Code: ExitBadInput, Err: fmt.Errorf("--format %q: use text or json", o.Format)}
	}
	eng := engine.New(engine.Options{Platform: o.Platform, SecretsDir: o.SecretsDir, DryRun: o.DryRun,
		Strategy: renderer.Strategy(o.Strategy), RetryDeadline: o.RetryDeadline, Version: Version,
		Log: newLogger(io.Err, o.LogFormat, "info"), Getenv: io.Getenv})
	defer eng.Close()
	rep, err := eng.Drain(ctx, dest)
	var ie *renderer.InputError
	if errors.As(err, &ie) {
		return &ExitError{Code: ExitBadInput, Err: fmt.Errorf("%v (nothing was written)", ie)}
	}
	if err != nil {
		return &ExitError{Code: ExitStoreFailed, Err: err}
	}
	if o.Format == "json" {
		enc := json.NewEncoder(io.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(drainJSON(rep)); err != nil {
			return &ExitError{Code: ExitStoreFailed, Err: err}
		}
	} else {
		writeDrain(io.Out, rep)
	}
	if failed := rep.Failed(); len(failed) > 0 {
		var lines []string
		for _, f := range failed {
			lines = append(lines, f.Err.Error())
		}
		return &ExitError{Code: ExitStoreFailed, Err: errors.New(strings.Join(lines, "\nrender: "))}
	}
	var blocked []string
	for _, s := range rep.Stuck {
		if s.Blocked {
			blocked = append(blocked, fmt.Sprintf("%s group %s could not move: %s", s.Workload, s.Group, s.Reason))
		}
	}
	if len(blocked) > 0 {
		return &ExitError{Code: ExitUnscheduled, Err: errors.New(strings.Join(blocked, "\nrender: "))}
	}
	return nil
}

func writeDrain(w io.Writer, rep *engine.DrainReport) {
	verb := "moved"
	if rep.DryRun {
		verb = "would move"
	}
	fmt.Fprintf(w, "drain %s: %d groups %s\n", rep.Destination, len(rep.Moves), verb)
	for _, m := range rep.Moves {
		fmt.Fprintf(w, "  %s %s group %s: %s -> %s (%d files)\n", verb, m.Workload, m.Group, m.From, m.To, m.Files)
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
}

type drainMoveJSON struct {
	Workload string `json:"workload"`
	Group    string `json:"group"`
	From     string `json:"from"`
	To       string `json:"to"`
	Files    int    `json:"files"`
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
	}{Destination: rep.Destination, DryRun: rep.DryRun, Moves: []drainMoveJSON{}, Stuck: []drainStuckJSON{}, Stores: []jsonStore{}}
	for _, m := range rep.Moves {
		out.Moves = append(out.Moves, drainMoveJSON{m.Workload, m.Group, m.From, m.To, m.Files})
	}
	for _, s := range rep.Stuck {
		out.Stuck = append(out.Stuck, drainStuckJSON{s.Workload, s.Group, s.Reason, s.Blocked})
	}
	for _, s := range rep.Stores {
		out.Stores = append(out.Stores, storeJSON(s, rep.DryRun))
	}
	return out
}
