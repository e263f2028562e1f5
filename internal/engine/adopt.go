package engine

import (
	"context"
	"errors"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/planner"
)

// Taking over a store Kratix wrote (see statestore.Adoption): the engine
// names, from the platform's destinations and the workflow's identity,
// where Kratix kept a workload's files, and where it placed a resource.

// kratixWork is what Kratix's names for one workload derive from.
type kratixWork struct {
	// namespace is the Work's namespace; identifier its name before the
	// random suffix.
	namespace, identifier string
	// nested is the workload's folder in a nestedByMetadata destination,
	// without the group id.
	nested string
}

// workOf is Kratix's Work of a workflow (pipeline may differ from wf's:
// a delete looks for every configure pipeline); static is the Promise's
// static dependencies.
func workOf(wf renderer.Workflow, pipeline string, static bool) kratixWork {
	switch {
	case static:
		return kratixWork{renderer.ClusterScopedNamespace, wf.Promise + "-static-deps", path.Join("dependencies", wf.Promise)}
	case wf.Type == renderer.PromiseWorkflow:
		ns := renderer.ClusterScopedNamespace
		if wf.FolderNamespace != "" {
			ns = wf.FolderNamespace
		}
		return kratixWork{ns, wf.Promise + "-" + pipeline, path.Join("dependencies", wf.Promise, pipeline)}
	}
	ns, id := wf.Namespace, wf.Promise+"-"+wf.Name+"-"+pipeline
	if wf.FolderNamespace != "" {
		ns, id = wf.FolderNamespace, wf.Promise+"-"+wf.Name+"-"+wf.Namespace+"-"+pipeline
	}
	return kratixWork{ns, id, path.Join("resources", ns, wf.Promise, wf.Name, pipeline)}
}

// workName is Kratix's Work name before its random five characters: the
// identifier cut to 55 characters when longer than 56, without trailing
// characters that are not letters or digits.
func (k kratixWork) workName() string { return statestore.KratixWorkName(k.identifier) }

// ledgers finds the .kratix ledgers of the work's placements on
// destination d: <namespace>-<work>-<5>.<dest>-<group id>.yaml.
func (k kratixWork) ledgers(d renderer.Destination) statestore.LedgerMatch {
	return statestore.LedgerMatch{Dir: path.Join(d.Path, layout.KratixDir), Namespace: k.namespace, Work: k.workName(), Destination: d.Name}
}

// adoption is where Kratix kept work k's files in store ref: its folder in
// every nestedByMetadata destination of the store, and its ledgers in
// every none one. Static dependencies share dependencies/<promise>/ with
// the promise's pipelines: only their 5058f folder is theirs.
func adoption(p *inputs.Platform, ref renderer.StoreRef, k kratixWork, static bool) *statestore.Adoption {
	a := &statestore.Adoption{}
	for _, d := range p.Destinations {
		if d.Store != ref {
			continue
		}
		switch d.Mode {
		case renderer.NestedByMetadata:
			folder := path.Join(d.Path, k.nested)
			if static {
				folder = path.Join(folder, renderer.GroupID(renderer.DefaultGroup))
			}
			a.Folders = append(a.Folders, folder)
		case renderer.NoNesting:
			a.Ledgers = append(a.Ledgers, k.ledgers(d))
		}
	}
	if len(a.Folders)+len(a.Ledgers) == 0 {
		return nil
	}
	return a
}

// adoptInto gives every update of workload key, in a store without its
// record, the adoption of work k.
func (s storeUpdates) adoptInto(p *inputs.Platform, key string, k kratixWork, static bool, holders map[renderer.StoreRef]bool) {
	for ref, us := range s {
		if holders[ref] {
			continue
		}
		for i := range us {
			if us[i].Workload == key {
				us[i].Adopt = adoption(p, ref, k, static)
			}
		}
	}
}

// kratixDeletes adds, for a delete, an update per configure pipeline of
// the Promise (and its static dependencies) in every store without a
// record of it: it removes what Kratix wrote for them.
func (s storeUpdates) kratixDeletes(p *inputs.Platform, in renderer.Input, recs map[renderer.StoreRef][]statestore.Record) {
	wf := in.Workflow
	var pipelines []string
	if in.Promise != nil {
		pipelines = in.Promise.ConfigurePipelines[wf.Type]
	}
	type work struct {
		key    string
		k      kratixWork
		static bool
	}
	var works []work
	for _, pl := range pipelines {
		works = append(works, work{statestore.WorkloadKey(string(wf.Type), wf.Promise, wf.Namespace, wf.Name, pl), workOf(wf, pl, false), false})
	}
	if wf.Type == renderer.PromiseWorkflow {
		works = append(works, work{statestore.StaticWorkloadKey(wf.Promise), workOf(wf, "", true), true})
	}
	for _, ref := range storeRefs(p) {
		for _, w := range works {
			if s.has(ref, w.key) || holdersOf(recs, w.key)[ref] {
				continue
			}
			if a := adoption(p, ref, w.k, w.static); a != nil {
				s.add(ref, statestore.Update{Workload: w.key, Adopt: a})
			}
		}
	}
}

// kratixPlacements finds where Kratix placed a workload that no store has
// a record of, so that it stays there: a destination holding the work's
// folder for a group's id (nestedByMetadata), a ledger for it (none), or
// one of the group's objects in its aggregated file (aggregatedYAML). A
// resource's group keeps the first such destination, a promise's (static
// dependencies included: static) every one. It reads only those folders
// and files.
func kratixPlacements(ctx context.Context, p *inputs.Platform, snaps map[renderer.StoreRef]statestore.Snapshot, in renderer.Input, static bool) (map[string][]string, error) {
	wf := in.Workflow
	k := workOf(wf, wf.Pipeline, static)
	groups := map[string]string{renderer.GroupID(renderer.DefaultGroup): renderer.DefaultGroup} // id -> directory
	if !static {
		for _, s := range in.Selectors {
			if d := strings.TrimSuffix(s.Directory, "/"); d != "" && path.Clean(d) != "." {
				groups[renderer.GroupID(d)] = d
			}
		}
	}
	objects := groupObjects(in, groups)
	out := map[string][]string{}
	place := func(dir, dest string) {
		switch {
		case dir == "":
		case wf.Type == renderer.PromiseWorkflow:
			if !slices.Contains(out[dir], dest) {
				out[dir] = append(out[dir], dest)
			}
		case len(out[dir]) == 0:
			out[dir] = []string{dest}
		}
	}
	// folder is the work's folder in a nestedByMetadata destination: its
	// group folders below it (static dependencies: the default group's).
	folder := func(d renderer.Destination) string {
		if static {
			return path.Join(d.Path, k.nested, renderer.GroupID(renderer.DefaultGroup))
		}
		return path.Join(d.Path, k.nested)
	}
	for _, ref := range storeRefs(p) {
		snap := snaps[ref]
		if snap == nil {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// Every folder and file looked at below, in one go (a lazy
		// snapshot fetches them a folder level per request).
		var h statestore.Hint
		for _, d := range p.Destinations {
			if d.Store != ref {
				continue
			}
			switch d.Mode {
			case renderer.NestedByMetadata:
				h.Dirs = append(h.Dirs, folder(d))
			case renderer.NoNesting:
				h.Dirs = append(h.Dirs, path.Join(d.Path, layout.KratixDir))
			case renderer.AggregatedYAML:
				h.Reads = append(h.Reads, path.Join(d.Path, d.Filename))
			}
		}
		statestore.Prefetch(snap, h)
		for _, d := range p.Destinations {
			if d.Store != ref {
				continue
			}
			switch d.Mode {
			case renderer.NestedByMetadata:
				dir := folder(d)
				files, err := snap.List(dir)
				if err != nil {
					return nil, &placementError{ref, err}
				}
				for _, f := range files {
					if static {
						place(renderer.DefaultGroup, d.Name)
						continue
					}
					id, _, _ := strings.Cut(strings.TrimPrefix(f, dir+"/"), "/")
					place(groups[id], d.Name)
				}
			case renderer.NoNesting:
				re := regexp.MustCompile(k.ledgers(d).Pattern())
				files, err := snap.List(path.Join(d.Path, layout.KratixDir))
				if err != nil {
					return nil, &placementError{ref, err}
				}
				for _, f := range files {
					if m := re.FindStringSubmatch(path.Base(f)); m != nil {
						place(groups[m[1]], d.Name)
					}
				}
			case renderer.AggregatedYAML:
				data, err := snap.ReadFile(path.Join(d.Path, d.Filename))
				if errors.Is(err, statestore.ErrNotFound) {
					continue
				}
				if err != nil {
					return nil, &placementError{ref, err}
				}
				for _, id := range planner.Identities(data) {
					place(objects[id], d.Name)
				}
			}
		}
	}
	return out, nil
}

// groupObjects maps the identity of every object in the output to its
// group's directory.
func groupObjects(in renderer.Input, groups map[string]string) map[string]string {
	dirs := map[string]bool{}
	for _, d := range groups {
		dirs[d] = true
	}
	out := map[string]string{}
	for _, f := range in.Output {
		dir := renderer.DefaultGroup
		if top, _, ok := strings.Cut(f.Path, "/"); ok && dirs[top] {
			dir = top
		}
		for _, id := range planner.Identities(f.Data) {
			out[id] = dir
		}
	}
	return out
}

// deletedNothing reports whether a delete's stores removed no file.
func deletedNothing(r *Report) bool {
	for _, s := range r.Stores {
		if s.Err != nil || len(s.Result.Deleted) > 0 {
			return false
		}
	}
	return true
}

// placementError is a store that could not be read while looking for
// Kratix's placement of a resource.
type placementError struct {
	ref renderer.StoreRef
	err error
}

func (e *placementError) Error() string { return e.err.Error() }
func (e *placementError) Unwrap() error { return e.err }
