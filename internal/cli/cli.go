// Package cli is the render command line: flags, exit codes and what the
// user reads. Each command has an options struct that registers its own
// flags and a run function that tests call directly; the work itself is in
// internal/engine and the library packages, which know nothing of flags.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/render-dev/render/internal/engine"
	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/internal/redact"
	"github.com/render-dev/render/renderer"
)

// Version is set at build time (-ldflags "-X .../internal/cli.Version=...").
var Version = "dev"

// ExitError carries an exit code and the one line to print.
type ExitError struct {
	Code int
	Err  error
	// Usage adds a line pointing at the command's --help.
	Usage bool
}

// usageError is a mistake in the command line itself: exit code 2, and a
// hint to read the command's help.
func usageError(format string, args ...any) *ExitError {
	return &ExitError{Code: ExitBadInput, Err: fmt.Errorf(format, args...), Usage: true}
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// IO is where a command reads and writes; tests give buffers.
type IO struct {
	Out, Err io.Writer
	Getenv   func(string) string
	// Signals, when set, stands for the process's SIGINT and SIGTERM (tests
	// send on it); when nil, commands that handle signals ask for them.
	Signals <-chan os.Signal
	// phaseHook, when set (tests), is called as a one-shot render or drain
	// enters each phase, with the context a first signal cancels.
	phaseHook func(ctx context.Context, phase string)
	// docs is standard output without redaction, for the documents render
	// prints (render bootstrap): they hold no secret by construction, and
	// must reach the worker byte for byte.
	docs io.Writer
}

// documents is where the documents render prints go: standard output as
// given, never redacted.
func (c IO) documents() io.Writer {
	if c.docs != nil {
		return c.docs
	}
	return c.Out
}

// commonOptions are the flags render and render drain share, registered and
// checked in one place so that they cannot drift apart.
type commonOptions struct {
	Platform      []string
	SecretsDir    string
	DryRun        bool
	Format        string
	Strategy      string
	RetryDeadline time.Duration
	LogFormat     string
	LogLevel      string
	// AllowMassDeletion lets writes through the mass-deletion breaker.
	AllowMassDeletion bool
}

// AddFlags registers the shared flags; dryRun is the --dry-run help.
func (c *commonOptions) AddFlags(fs *pflag.FlagSet, dryRun string) {
	fs.StringArrayVar(&c.Platform, "platform", nil, "platform configuration: a YAML file or a folder of them (repeatable)")
	fs.StringVar(&c.SecretsDir, "secrets-dir", "", "folder of mounted secrets, as <dir>/<secret name>/<key>")
	fs.BoolVar(&c.DryRun, "dry-run", false, dryRun)
	fs.StringVarP(&c.Format, "format", "o", "text", "report format: text or json")
	fs.StringVar(&c.Strategy, "strategy", string(renderer.Spread), "how a resource picks among matching destinations: spread (fewest of its flavour, then a stable hash) or random (Kratix)")
	fs.DurationVar(&c.RetryDeadline, "retry-deadline", 2*time.Minute, "the run's one retry budget: how long unreachable or busy stores are retried, in total, before render gives up with exit code 1")
	fs.StringVar(&c.LogFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.BoolVar(&c.AllowMassDeletion, "allow-mass-deletion", false, "let a write empty a destination of workload files, or delete past a store's spec.massDeletion limits")
}

// badFlag is a flag whose value is wrong: exit code 2 and one line saying
// what to use instead.
func badFlag(format string, args ...any) *ExitError {
	return &ExitError{Code: ExitBadInput, Err: fmt.Errorf(format, args...)}
}

// Validate checks the shared flags' values.
func (c *commonOptions) Validate() error {
	switch c.Format {
	case "text", "json":
	default:
		return badFlag("--format %q: use text or json", c.Format)
	}
	switch renderer.Strategy(c.Strategy) {
	case renderer.Spread, renderer.Random:
	default:
		return badFlag("--strategy %q: use spread or random", c.Strategy)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return badFlag("--log-format %q: use text or json", c.LogFormat)
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return badFlag("--log-level %q: use debug, info, warn or error", c.LogLevel)
	}
	if c.RetryDeadline <= 0 {
		return badFlag("--retry-deadline must be positive")
	}
	return nil
}

// logger is the log the flags ask for, written to w.
func (c *commonOptions) logger(w io.Writer) *slog.Logger {
	return newLogger(w, c.LogFormat, c.LogLevel)
}

// renderOptions are the flags of the main command.
type renderOptions struct {
	commonOptions
	Output, Metadata, Input string
	identity                map[string]*string
	FlavourKey              string
	InheritSelector         bool
	Explain                 bool
	Hydrate                 bool
	// Watch mode (see watch.go).
	Watch       bool
	QuietPeriod time.Duration
	MaxWait     time.Duration
	MetricsAddr string
	// CommitTemplate is a file holding the commit message template.
	CommitTemplate string
	commitTemplate string // its content
	flags          *pflag.FlagSet
}

var identityFlags = []struct{ name, env, help string }{
	{"workflow-type", "KRATIX_WORKFLOW_TYPE", "promise or resource"},
	{"action", "KRATIX_WORKFLOW_ACTION", "configure or delete (default configure)"},
	{"promise", "KRATIX_PROMISE_NAME", "the promise's name"},
	{"pipeline", "KRATIX_PIPELINE_NAME", "the pipeline's name"},
	{"name", "KRATIX_OBJECT_NAME", "the resource's name (default: object.yaml)"},
	{"namespace", "KRATIX_OBJECT_NAMESPACE", "the resource's namespace (default: object.yaml)"},
}

// AddFlags registers the options' flags.
func (o *renderOptions) AddFlags(fs *pflag.FlagSet) {
	o.flags = fs
	fs.StringVar(&o.Output, "output", "/kratix/output", "the workflow's output folder")
	fs.StringVar(&o.Metadata, "metadata", "/kratix/metadata", "the workflow's metadata folder (destination-selectors.yaml)")
	fs.StringVar(&o.Input, "input", "/kratix/input", "the workflow's input folder (object.yaml)")
	o.commonOptions.AddFlags(fs, "write nothing; print per destination what would be added, changed and deleted")
	o.identity = map[string]*string{}
	for _, f := range identityFlags {
		o.identity[f.name] = fs.String(f.name, "", f.help+" (overrides $"+f.env+")")
	}
	fs.StringVar(&o.FlavourKey, "flavour-key", "flavour", "label on the resource request that names its flavour, for spreading")
	fs.BoolVar(&o.InheritSelector, "inherit-promise-workflow-selector", true, "resource workflows inherit the root selector their promise workflow left, as Kratix's documentation says; false is Kratix's code since v0.67.0")
	fs.BoolVar(&o.Explain, "explain", false, "print, per group, every destination with why it was filtered out or its score")
	fs.BoolVar(&o.Hydrate, "hydrate", false, "build output folders that hold a kustomization.yaml into plain manifests before scheduling")
	fs.BoolVar(&o.Watch, "watch", false, "keep running: render whenever the output, metadata or platform folders settle; on SIGTERM render once more and exit 0")
	fs.DurationVar(&o.QuietPeriod, "quiet-period", 150*time.Millisecond, "with --watch: how long the inputs must be quiet before a render")
	fs.DurationVar(&o.MaxWait, "max-wait", 5*time.Second, "with --watch: the longest a render waits for quiet while changes keep coming")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", "", "serve Prometheus /metrics and /healthz on this address (e.g. :9090)")
	fs.StringVar(&o.CommitTemplate, "commit-template", "", "file holding a Go template for git commit messages (subject, then body), in place of each GitStateStore's spec.commit.template")
}

// Validate checks the flags' values.
func (o *renderOptions) Validate() error {
	bad := badFlag
	if err := o.commonOptions.Validate(); err != nil {
		return err
	}
	if o.Watch && (o.QuietPeriod <= 0 || o.MaxWait < o.QuietPeriod) {
		return bad("--quiet-period must be positive and --max-wait at least as long")
	}
	if o.Watch && o.DryRun {
		return bad("--watch and --dry-run do not go together")
	}
	if o.CommitTemplate != "" {
		text, err := inputs.ReadCommitTemplate(o.CommitTemplate)
		if err != nil {
			return bad("--commit-template %s: %v", o.CommitTemplate, err)
		}
		o.commitTemplate = text
	}
	return nil
}

func (o *renderOptions) engineOptions(io IO, log *slog.Logger) engine.Options {
	ids := map[string]string{}
	for name, v := range o.identity {
		if o.flags.Changed(name) {
			ids[name] = *v
		}
	}
	return engine.Options{
		OutputDir: o.Output, MetadataDir: o.Metadata, InputDir: o.Input,
		Platform: o.Platform, SecretsDir: o.SecretsDir,
		Identity: ids, Getenv: io.Getenv,
		DryRun: o.DryRun, Hydrate: o.Hydrate, Strategy: renderer.Strategy(o.Strategy), FlavourKey: o.FlavourKey,
		NoInheritedSelector: !o.InheritSelector,
		RetryDeadline:       o.RetryDeadline, Version: Version, Log: log,
		AllowMassDeletion: o.AllowMassDeletion,
		CommitTemplate:    o.commitTemplate, CommitTemplateFile: o.CommitTemplate,
	}
}

// parseLevel reads a --log-level value.
func parseLevel(level string) (slog.Level, error) {
	var lv slog.Level
	err := lv.UnmarshalText([]byte(level))
	return lv, err
}

// newLogger is a logger with the given format and level (already checked).
func newLogger(w io.Writer, format, level string) *slog.Logger {
	lv, _ := parseLevel(level)
	opts := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// NewCommand builds the command tree.
func NewCommand(io IO) *cobra.Command {
	o := &renderOptions{}
	root := &cobra.Command{
		Use:   "render",
		Short: "Schedule a platform workflow's output to destinations and commit it to GitOps state stores",
		Long: `render reads what a Kratix-style workflow left in its output folder, schedules each
workload group to destinations by label, and writes every destination's folder to its
git repository or S3 bucket, where Flux or Argo CD on the worker reconciles it.

` + exitCodesHelp(),
		Example: `  # render once, as a pipeline's last container does (KRATIX_* variables set by Kratix)
  render --platform /platform

  # what would change, and why each destination was or was not chosen
  render --dry-run --explain --platform fixtures/platform \
    --output fixtures/resource-workflow/output --metadata fixtures/resource-workflow/metadata \
    --input fixtures/resource-workflow/input

  # a pipeline sidecar: render whenever the workflow's files settle, once more on SIGTERM
  render --watch --platform /platform --metrics-addr :9090`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			return runRender(cmd.Context(), o, io)
		},
	}
	o.AddFlags(root.Flags())
	root.AddCommand(newBootstrapCommand(io))
	root.AddCommand(newDrainCommand(io))
	root.AddCommand(newPruneCommand(io))
	root.SetOut(io.Out)
	root.SetErr(io.Err)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &ExitError{Code: ExitBadInput, Err: err, Usage: true}
	})
	root.Version = Version
	return root
}

// Main runs the command line and returns the exit code.
func Main(ctx context.Context, args []string, io IO) int {
	if io.Getenv == nil {
		io.Getenv = os.Getenv
	}
	// Every secret value the inputs load is masked in all render prints,
	// except the documents it prints (see IO.docs).
	io.docs = io.Out
	io.Out, io.Err = redact.Writer(io.Out), redact.Writer(io.Err)
	return execute(ctx, NewCommand(io), args, io)
}

// execute runs root with args and turns what it returns into an exit
// code, printing the error's line.
func execute(ctx context.Context, root *cobra.Command, args []string, io IO) int {
	// Cobra checks the command, its flags and its arguments before it runs
	// one: an error from before that is the command line's.
	ran := false
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	markRuns(root, &ran)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	switch {
	case errors.As(err, &ee):
	case !ran:
		// Cobra's own error before the command ran: an unknown command
		// or flag, a flag's value that does not parse, a wrong number of
		// arguments. A mistake in the command line.
		ee = &ExitError{Code: ExitBadInput, Err: err, Usage: true}
	default:
		// An error no command classified is not the user's input: it is
		// never exit 2, and no usage hint goes with it.
		ee = &ExitError{Code: ExitStoreFailed, Err: err}
	}
	if ee.Err != nil && ee.Err.Error() != "" {
		fmt.Fprintf(io.Err, "render: %v\n", ee.Err)
	}
	if ee.Usage {
		if cmd == nil {
			cmd = root
		}
		fmt.Fprintf(io.Err, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return ee.Code
}

// markRuns sets *ran when any command of the tree below c starts to run.
func markRuns(c *cobra.Command, ran *bool) {
	if run := c.RunE; run != nil {
		c.RunE = func(cmd *cobra.Command, args []string) error { *ran = true; return run(cmd, args) }
	} else if run := c.Run; run != nil {
		c.Run = func(cmd *cobra.Command, args []string) { *ran = true; run(cmd, args) }
	}
	for _, sub := range c.Commands() {
		markRuns(sub, ran)
	}
}

// runRender is one render, or a watch loop with --watch.
func runRender(ctx context.Context, o *renderOptions, io IO) error {
	log := o.logger(io.Err)
	if o.Watch {
		return runWatch(ctx, o, io, log)
	}
	var phase phaseWatch
	opts := o.engineOptions(io, log)
	opts.OnPhase = phase.set
	eng := engine.New(opts)
	rep, err, sig, exit := runInterruptible(ctx, io, log, &phase, eng.Render)
	if exit != nil {
		return exit // a second signal: the render is abandoned, eng with it
	}
	eng.Close()
	return finish(rep, err, o, io, sig)
}

// finish prints a render's report and turns it into an exit code. sig is
// the signal that asked the render to stop while it ran, if one did.
func finish(rep *engine.Report, err error, o *renderOptions, io IO, sig os.Signal) error {
	if err != nil {
		return failedExit(sig, err)
	}
	// The report first; a signal that came while publishing adds its line.
	return interruptedPublish(sig, rep.Stopped, rep.Stores, rep.DryRun, report(rep, o, io))
}

// report prints a finished render's report and returns its exit error.
func report(rep *engine.Report, o *renderOptions, io IO) error {
	failed := rep.Failed()
	// Bad input found by a store (another workload has the path or the
	// object) is one line, like any bad input, when nothing was written.
	badOnly := len(failed) > 0 && len(rep.BadInput()) == len(failed) && rep.WroteNothing()
	switch {
	case o.Format == "json":
		if err := writeReportJSON(io.Out, rep); err != nil {
			return &ExitError{Code: ExitStoreFailed, Err: err}
		}
	case !badOnly:
		writeText(io.Out, rep, o.Explain || o.DryRun)
	}
	if len(failed) > 0 {
		var lines []string
		for _, f := range failed {
			lines = append(lines, f.Err.Error())
		}
		code := ExitStoreFailed
		if len(rep.BadInput()) > 0 { // another workload has that object or path
			code = ExitBadInput
		}
		msg := strings.Join(lines, "\nrender: ")
		if badOnly {
			msg += " (nothing was written)"
		}
		return &ExitError{Code: code, Err: errors.New(msg)}
	}
	if ee := massDeletionExit(nil, rep.MassDeletion); ee != nil {
		return ee
	}
	if err := pullRequestExit(rep); err != nil {
		return err
	}
	if rep.Plan != nil {
		if un := rep.Unscheduled(); len(un) > 0 {
			var lines []string
			for _, g := range un {
				lines = append(lines, unscheduledLine(g))
			}
			return &ExitError{Code: ExitUnscheduled, Err: errors.New(strings.Join(lines, "\nrender: "))}
		}
	}
	return nil
}
