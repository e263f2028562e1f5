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
	"github.com/render-dev/render/internal/redact"
	"github.com/render-dev/render/renderer"
)

// Version is set at build time (-ldflags "-X .../internal/cli.Version=...").
var Version = "dev"

// Exit codes, as the design fixes them.
const (
	ExitOK          = 0
	ExitStoreFailed = 1
	ExitBadInput    = 2
	ExitUnscheduled = 3
)

// ExitError carries an exit code and the one line to print.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// IO is where a command reads and writes; tests give buffers.
type IO struct {
	Out, Err io.Writer
	Getenv   func(string) string
}

// renderOptions are the flags of the main command.
type renderOptions struct {
	Output, Metadata, Input string
	Platform                []string
	SecretsDir              string
	identity                map[string]*string
	DryRun                  bool
	Format                  string
	Strategy                string
	FlavourKey              string
	RetryDeadline           time.Duration
	LogFormat               string
	LogLevel                string
	Explain                 bool
	Hydrate                 bool
	// Watch mode (see watch.go).
	Watch       bool
	QuietPeriod time.Duration
	MaxWait     time.Duration
	MetricsAddr string
	flags       *pflag.FlagSet
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
	fs.StringArrayVar(&o.Platform, "platform", nil, "platform configuration: a YAML file or a folder of them (repeatable)")
	fs.StringVar(&o.SecretsDir, "secrets-dir", "", "folder of mounted secrets, as <dir>/<secret name>/<key>")
	o.identity = map[string]*string{}
	for _, f := range identityFlags {
		o.identity[f.name] = fs.String(f.name, "", f.help+" (overrides $"+f.env+")")
	}
	fs.BoolVar(&o.DryRun, "dry-run", false, "write nothing; print per destination what would be added, changed and deleted")
	fs.StringVarP(&o.Format, "format", "o", "text", "report format: text or json")
	fs.StringVar(&o.Strategy, "strategy", string(renderer.Spread), "how a resource picks among matching destinations: spread (fewest of its flavour, then a stable hash) or random (Kratix)")
	fs.StringVar(&o.FlavourKey, "flavour-key", "flavour", "label on the resource request that names its flavour, for spreading")
	fs.DurationVar(&o.RetryDeadline, "retry-deadline", 2*time.Minute, "the render's one retry budget: how long unreachable or busy stores are retried, in total, before render gives up with exit code 1")
	fs.StringVar(&o.LogFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.BoolVar(&o.Explain, "explain", false, "print, per group, every destination with why it was filtered out or its score")
	fs.BoolVar(&o.Hydrate, "hydrate", false, "build output folders that hold a kustomization.yaml into plain manifests before scheduling")
	fs.BoolVar(&o.Watch, "watch", false, "keep running: render whenever the output, metadata or platform folders settle; on SIGTERM render once more and exit 0")
	fs.DurationVar(&o.QuietPeriod, "quiet-period", 150*time.Millisecond, "with --watch: how long the inputs must be quiet before a render")
	fs.DurationVar(&o.MaxWait, "max-wait", 5*time.Second, "with --watch: the longest a render waits for quiet while changes keep coming")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", "", "serve Prometheus /metrics and /healthz on this address (e.g. :9090)")
}

// Validate checks the flags' values.
func (o *renderOptions) Validate() error {
	bad := func(format string, args ...any) error {
		return &ExitError{Code: ExitBadInput, Err: fmt.Errorf(format, args...)}
	}
	switch o.Format {
	case "text", "json":
	default:
		return bad("--format %q: use text or json", o.Format)
	}
	switch renderer.Strategy(o.Strategy) {
	case renderer.Spread, renderer.Random:
	default:
		return bad("--strategy %q: use spread or random", o.Strategy)
	}
	switch o.LogFormat {
	case "text", "json":
	default:
		return bad("--log-format %q: use text or json", o.LogFormat)
	}
	if o.RetryDeadline <= 0 {
		return bad("--retry-deadline must be positive")
	}
	if o.Watch && (o.QuietPeriod <= 0 || o.MaxWait < o.QuietPeriod) {
		return bad("--quiet-period must be positive and --max-wait at least as long")
	}
	if o.Watch && o.DryRun {
		return bad("--watch and --dry-run do not go together")
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
		RetryDeadline: o.RetryDeadline, Version: Version, Log: log,
	}
}

func newLogger(w io.Writer, format, level string) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level))
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

Exit codes: 0 written, 1 a store failed, 2 bad input or usage, 3 written but some group unscheduled.`,
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
	root.SetOut(io.Out)
	root.SetErr(io.Err)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &ExitError{Code: ExitBadInput, Err: err}
	})
	root.Version = Version
	return root
}

// Main runs the command line and returns the exit code.
func Main(ctx context.Context, args []string, io IO) int {
	if io.Getenv == nil {
		io.Getenv = os.Getenv
	}
	// Every secret value the inputs load is masked in all render prints.
	io.Out, io.Err = redact.Writer(io.Out), redact.Writer(io.Err)
	cmd := NewCommand(io)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Err != nil && ee.Err.Error() != "" {
			fmt.Fprintf(io.Err, "render: %v\n", ee.Err)
		}
		return ee.Code
	}
	// cobra's own usage errors (unknown command, bad arguments).
	fmt.Fprintf(io.Err, "render: %v\nRun 'render --help' for usage.\n", err)
	if strings.Contains(err.Error(), "unknown") || strings.Contains(err.Error(), "arg") {
		return ExitBadInput
	}
	return ExitStoreFailed
}

// runRender is one render, or a watch loop with --watch.
func runRender(ctx context.Context, o *renderOptions, io IO) error {
	log := newLogger(io.Err, o.LogFormat, o.LogLevel)
	if o.Watch {
		return runWatch(ctx, o, io, log)
	}
	eng := engine.New(o.engineOptions(io, log))
	defer eng.Close()
	rep, err := eng.Render(ctx)
	return finish(rep, err, o, io)
}

// finish prints a render's report and turns it into an exit code.
func finish(rep *engine.Report, err error, o *renderOptions, io IO) error {
	var ie *renderer.InputError
	if errors.As(err, &ie) {
		return &ExitError{Code: ExitBadInput, Err: fmt.Errorf("%v (nothing was written)", ie)}
	}
	if err != nil {
		return &ExitError{Code: ExitStoreFailed, Err: err}
	}
	if o.Format == "json" {
		if err := writeJSON(io.Out, rep); err != nil {
			return &ExitError{Code: ExitStoreFailed, Err: err}
		}
	} else {
		writeText(io.Out, rep, o.Explain || o.DryRun)
	}
	if failed := rep.Failed(); len(failed) > 0 {
		var lines []string
		for _, f := range failed {
			lines = append(lines, f.Err.Error())
		}
		code := ExitStoreFailed
		if len(rep.BadInput()) > 0 { // another workload has that object or path
			code = ExitBadInput
		}
		return &ExitError{Code: code, Err: errors.New(strings.Join(lines, "\nrender: "))}
	}
	if rep.Plan != nil {
		if un := rep.Plan.Unscheduled(); len(un) > 0 {
			var lines []string
			for _, g := range un {
				lines = append(lines, unscheduledLine(g))
			}
			return &ExitError{Code: ExitUnscheduled, Err: errors.New(strings.Join(lines, "\nrender: "))}
		}
	}
	return nil
}
