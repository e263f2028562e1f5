package fluxcheck

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/renderer"
)

// CheckPlan checks every destination a plan writes, as Flux will build it
// (see CheckDestination), with the files this workload writes there and the
// canary files. A Bucket store's destinations keep Flux's default-ignored
// files; a git store's leave them out, as source-controller does.
//
// It returns the workload's objects, with Store, Destination and Source set,
// for the store record and Duplicates; canary objects are left out, since
// every workload writes them. A failure is a *renderer.InputError naming the
// output file at fault (the destination path when the file has no single
// source, as in an aggregated file), the document, and the reason.
//
// It gives up with ctx's error once ctx is done, checking before each file
// and each kustomize build.
//
// sourceOf says which kind of Flux source reads each store of the plan
// (nil: a GitRepository for every store).
func CheckPlan(ctx context.Context, plan *renderer.Plan, sourceOf func(renderer.StoreRef) Source) ([]Object, error) {
	if plan == nil {
		return nil, nil
	}
	sources := outputSources(plan)
	var all []Object
	for _, w := range plan.Writes {
		src := GitRepository
		if sourceOf != nil {
			src = sourceOf(w.Store)
		}
		opt := options{keepIgnored: src.keepsIgnored(), ctx: ctx}
		dests := append([]string(nil), w.Destinations...)
		sort.Strings(dests)
		for _, d := range dests {
			files := map[string][]byte{}
			shared := map[string]bool{}
			add := func(p string, data []byte) bool {
				rel, ok := strings.CutPrefix(p, d+"/")
				if ok {
					files[rel] = data
				}
				return ok
			}
			for p, data := range w.Files {
				add(p, data)
			}
			for p, data := range w.Shared {
				if add(p, data) {
					shared[strings.TrimPrefix(p, d+"/")] = true
				}
			}
			for _, a := range w.Aggregates {
				add(a.Target, a.Contribution)
			}
			objs, err := check(files, opt)
			if err != nil && err.cancelled != nil {
				return nil, err.cancelled
			}
			if err != nil {
				ie := err.inputError(func(rel string) string {
					if src := sources[rel]; src != "" {
						return src
					}
					return path.Join(d, rel)
				})
				at := fmt.Sprintf("in %s of %s", layout.Quote(path.Join(d, sectionDir(sectionOf(err.file)))), w.Store)
				if sources[err.file] != "" {
					at = fmt.Sprintf("written to %s in %s", layout.Quote(path.Join(d, err.file)), w.Store)
				}
				if ie.Where != "" {
					at = ie.Where + ", " + at
				}
				ie.Where = at
				return nil, ie
			}
			for _, o := range objs {
				if shared[o.File] {
					continue
				}
				o.Store, o.Destination, o.Source = w.Store.String(), d, sources[o.File]
				all = append(all, o)
			}
		}
	}
	return all, nil
}

// outputSources maps destination-relative paths back to the output files
// they come from, for every layout that keeps files whole: nestedByMetadata
// (<prefix>/<file>) and none (<file>).
func outputSources(plan *renderer.Plan) map[string]string {
	m := map[string]string{}
	for _, g := range plan.Groups {
		prefix := renderer.NestedPrefix(plan.Workflow, g.ID)
		for _, f := range g.Files {
			m[path.Join(prefix, f)] = f
			if _, taken := m[f]; !taken {
				m[f] = f
			}
		}
	}
	return m
}
