package engine

import (
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/render-dev/render/internal/fluxcheck"
	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/internal/storekind"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
)

// openStore builds the client for one store from the platform
// configuration, through the store's kind (package storekind). Problems
// with the configuration (a missing secret or key) are InputErrors: they
// are known before anything is written.
func (e *Engine) openStore(p *inputs.Platform, ref renderer.StoreRef) (statestore.Store, string, error) {
	return e.opts.Kinds.Open(p, ref, e.storeOptions())
}

// storeOptions are what every store client gets from the engine's options.
// fluxSource is the kind of Flux source that reads a store, as its kind
// declares.
func (e *Engine) fluxSource(ref renderer.StoreRef) fluxcheck.Source {
	return fluxcheck.Source(e.opts.Kinds.Capabilities(ref.Kind).FluxSource)
}

func (e *Engine) storeOptions() storekind.Options {
	return storekind.Options{SecretsDir: e.opts.SecretsDir, RetryDeadline: e.opts.RetryDeadline, Log: e.log, Transport: e.opts.Transport}
}

// checkStorePaths refuses a path the plan would write that a store could
// not hold once joined to the store's own path (too long, or a name too
// long): the renderer checks paths inside a store, and only the platform
// knows the store's path. Render's own files for the workload (its record,
// its aggregate parts) are checked too. S3's limits hold for every store,
// so the same output is accepted or refused whatever the backend.
func checkStorePaths(p *inputs.Platform, plan *renderer.Plan, key string) error {
	for _, w := range plan.Writes {
		var prefix string
		if s := p.Store(w.Store); s != nil {
			prefix = strings.Trim(s.Meta().Path, "/")
		}
		check := func(rel string) error {
			if err := layout.ValidPath(path.Join(prefix, rel)); err != nil {
				msg := fmt.Sprintf("cannot be written with the store's path %q: %v", prefix, err)
				if layout.IsMeta(rel) {
					// render's own file for the workload: its names
					// come from the workload's identity.
					if _, ok := err.(*layout.TooLongError); ok {
						msg += "; shorten the store's spec.path"
					}
				} else {
					dest, below := renderer.DestinationOf(rel, w.Destinations)
					if advice := renderer.TooLongAdvice(err, prefix, dest, below); advice != "" {
						msg += "; " + advice
					}
				}
				return &renderer.InputError{Where: w.Store.String(), Msg: msg}
			}
			return nil
		}
		paths := []string{statestore.RecordPath(key)}
		for rel := range w.Files {
			paths = append(paths, rel)
		}
		for _, a := range w.Aggregates {
			paths = append(paths, a.Target, statestore.AggregatePath(a.Target, key))
		}
		sort.Strings(paths)
		for _, rel := range paths {
			if err := check(rel); err != nil {
				return err
			}
		}
	}
	return nil
}
