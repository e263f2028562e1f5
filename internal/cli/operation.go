package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/render-dev/render/internal/engine"
	"github.com/render-dev/render/renderer"
)

// runOperation runs one of the operator's commands that rewrite what
// renders placed (drain, prune-misscheduled) as a render runs: on an
// engine of the shared flags, stopped by a first SIGINT or SIGTERM before
// it publishes, abandoned by a second (see runInterruptible). An
// operation that ended without a report exits as failedExit says; a
// finished one's report is printed, and its exit error chosen, by
// report, which learns the signal that came while it published, if one
// did.
func runOperation[R any](ctx context.Context, o *commonOptions, io IO, work func(context.Context, *engine.Engine) (R, error), report func(rep R, sig os.Signal) error) error {
	log := o.logger(io.Err)
	var phase phaseWatch
	eng := engine.New(engine.Options{Platform: o.Platform, SecretsDir: o.SecretsDir, DryRun: o.DryRun,
		Strategy: renderer.Strategy(o.Strategy), RetryDeadline: o.RetryDeadline, Version: Version,
		AllowMassDeletion: o.AllowMassDeletion,
		Log:               log, Getenv: io.Getenv, OnPhase: phase.set})
	rep, err, sig, exit := runInterruptible(ctx, io, log, &phase, func(ctx context.Context) (R, error) {
		return work(ctx, eng)
	})
	if exit != nil {
		return exit // a second signal: the operation is abandoned, eng with it
	}
	eng.Close()
	if err != nil {
		return failedExit(sig, err)
	}
	return report(rep, sig)
}

// failedExit is the exit error of a render, drain or prune that ended
// with err and no report: stopped by sig before it published (nothing
// written), bad input (exit 2, nothing written), refused by the
// mass-deletion breaker, or a store that failed.
func failedExit(sig os.Signal, err error) error {
	if sig != nil && (errors.Is(err, engine.ErrStopped) || errors.Is(err, context.Canceled)) {
		return stoppedExit(sig, err)
	}
	var ie *renderer.InputError
	if errors.As(err, &ie) {
		return &ExitError{Code: ExitBadInput, Err: fmt.Errorf("%v (nothing was written)", ie)}
	}
	if ee := massDeletionExit(err, nil); ee != nil {
		return ee
	}
	return &ExitError{Code: ExitStoreFailed, Err: err}
}

// writeJSON writes v to w as indented JSON, the -o json report.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// failedStores is the exit error of an operation whose stores failed
// (exit 1): one line per store, then more, if any. It is nil when no
// store failed.
func failedStores(failed []engine.StoreReport, more ...string) error {
	if len(failed) == 0 {
		return nil
	}
	var lines []string
	for _, f := range failed {
		lines = append(lines, f.Err.Error())
	}
	return &ExitError{Code: ExitStoreFailed, Err: errors.New(strings.Join(append(lines, more...), "\nrender: "))}
}

// unscheduled is the exit error of an operation that left groups where
// they were (exit 3), one line each; nil when it left none.
func unscheduled(lines []string) error {
	if len(lines) == 0 {
		return nil
	}
	return &ExitError{Code: ExitUnscheduled, Err: errors.New(strings.Join(lines, "\nrender: "))}
}
