package cli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/render-dev/render/internal/bootstrap"
	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/internal/storekind"
	"github.com/render-dev/render/renderer"
)

// newBootstrapCommand is `render bootstrap flux|argocd DESTINATION`: it
// prints what a worker applies to reconcile its destination. It reads the
// platform configuration only (no secrets, no stores) and prints no
// credentials.
func newBootstrapCommand(io IO) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bootstrap",
		Short: "Print what a worker cluster applies so that Flux or Argo CD reconciles its destination",
		Long: `bootstrap prints, for one destination, the objects a worker cluster applies:

  render bootstrap flux DESTINATION --platform PATH     a GitRepository or Bucket, and two Kustomizations
  render bootstrap argocd DESTINATION --platform PATH   two Argo CD Applications (git stores only)

Pipe the output to kubectl apply -f - on the worker. Secrets are referenced by name, never printed.`,
		Example: `  render bootstrap flux dev-eu --platform fixtures/platform | kubectl apply -f -
  render bootstrap argocd dev-eu --platform fixtures/platform | kubectl apply -f -`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// A mistyped consumer ("fluxx dev --platform P") reaches this
		// command with the sub-command's flags: they are not what is
		// wrong, the consumer is, and Args says so.
		FParseErrWhitelist: cobra.FParseErrWhitelist{UnknownFlags: true},
		Args:               unknownConsumer,
		// Without a target there is nothing to print: a usage error, not help.
		RunE: func(*cobra.Command, []string) error {
			return usageError("bootstrap needs a target: flux or argocd (render bootstrap flux DESTINATION --platform PATH)")
		},
	}
	cmd.AddCommand(newBootstrapFluxCommand(io), newBootstrapArgoCDCommand(io))
	return cmd
}

// unknownConsumer refuses any argument of `render bootstrap` itself: the
// first one names a consumer that is not flux or argocd.
func unknownConsumer(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown consumer %q for render bootstrap: use flux or argocd", args[0])
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %s?)", s[0])
	}
	return usageError("%s", msg)
}

// oneDestination is the positional argument check of both sub-commands.
func oneDestination(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usageError("%s takes one argument, the destination's name (got %d)", strings.TrimPrefix(cmd.CommandPath(), "render "), len(args))
	}
	return nil
}

func newBootstrapFluxCommand(io IO) *cobra.Command {
	var platform []string
	var o bootstrap.FluxOptions
	cmd := &cobra.Command{
		Use:   "flux DESTINATION",
		Short: "Print the Flux source (GitRepository or Bucket) and the dependencies and resources Kustomizations of a destination",
		Example: `  render bootstrap flux dev-eu --platform fixtures/platform | kubectl apply -f -
  render bootstrap flux dev-eu --platform platform/ --namespace flux-system --interval 30s`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          oneDestination,
		RunE: func(_ *cobra.Command, args []string) error {
			if o.Interval <= 0 {
				return &ExitError{Code: ExitBadInput, Err: errors.New("--interval must be positive")}
			}
			if err := o.Validate(); err != nil {
				return optionExit(err)
			}
			return runBootstrap(io, platform, func(p *inputs.Platform) (*bootstrap.Output, error) {
				o.Kinds = storekind.Default
				return bootstrap.Flux(p, args[0], o)
			})
		},
	}
	cmd.Flags().StringArrayVar(&platform, "platform", nil, "platform configuration: a YAML file or a folder of them (repeatable)")
	cmd.Flags().StringVar(&o.Namespace, "namespace", "flux-system", "namespace of the Flux objects (and of the Secret they reference)")
	cmd.Flags().DurationVar(&o.Interval, "interval", time.Minute, "how often Flux checks the source and reconciles")
	return cmd
}

func newBootstrapArgoCDCommand(io IO) *cobra.Command {
	var platform []string
	var o bootstrap.ArgoCDOptions
	cmd := &cobra.Command{
		Use:           "argocd DESTINATION",
		Aliases:       []string{"argo"},
		Short:         "Print two Argo CD Applications (dependencies, then resources) for a destination in a git store",
		Example:       `  render bootstrap argocd dev-eu --platform fixtures/platform | kubectl apply -f -`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          oneDestination,
		RunE: func(_ *cobra.Command, args []string) error {
			if err := o.Validate(); err != nil {
				return optionExit(err)
			}
			return runBootstrap(io, platform, func(p *inputs.Platform) (*bootstrap.Output, error) {
				o.Kinds = storekind.Default
				return bootstrap.ArgoCD(p, args[0], o)
			})
		},
	}
	cmd.Flags().StringArrayVar(&platform, "platform", nil, "platform configuration: a YAML file or a folder of them (repeatable)")
	cmd.Flags().StringVar(&o.Namespace, "namespace", "argocd", "namespace Argo CD runs in")
	cmd.Flags().StringVar(&o.Project, "project", "default", "Argo CD project of the Applications")
	cmd.Flags().StringVar(&o.Server, "server", "https://kubernetes.default.svc", "cluster the Applications deploy to")
	cmd.Flags().StringVar(&o.SOPSPlugin, "sops-plugin", "", "for a destination whose Secrets render encrypts with SOPS: the Argo CD config management plugin that decrypts them (refused without it)")
	return cmd
}

func runBootstrap(io IO, platform []string, build func(*inputs.Platform) (*bootstrap.Output, error)) error {
	p, err := inputs.LoadPlatform(storekind.Default, platform, "")
	if err == nil {
		var out *bootstrap.Output
		if out, err = build(p); err == nil {
			for _, w := range out.Warnings {
				fmt.Fprintf(io.Err, "render: warning: %s\n", w)
			}
			// The documents as they are: they name Secrets and hold none,
			// so redaction could only break them (a repository named like
			// a user).
			if _, err := io.documents().Write(out.YAML); err != nil {
				return &ExitError{Code: ExitStoreFailed, Err: err}
			}
			return nil
		}
	}
	var ie *renderer.InputError
	if errors.As(err, &ie) {
		return &ExitError{Code: ExitBadInput, Err: ie}
	}
	if ee := optionExit(err); ee != nil {
		return ee
	}
	return &ExitError{Code: ExitStoreFailed, Err: err}
}

// optionExit is exit code 2 naming the flag for an option the worker's
// API server would refuse, nil for any other error.
func optionExit(err error) *ExitError {
	var oe *bootstrap.OptionError
	if !errors.As(err, &oe) {
		return nil
	}
	return badFlag("--%s %q: %s; nothing was printed", oe.Option, oe.Value, oe.Problem)
}
