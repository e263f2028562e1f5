package renderer

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/render-dev/render/internal/layout"
)

// DefaultGroup is the directory of the group holding everything no
// directory entry claims.
const DefaultGroup = "."

// Canary files Kratix writes into every destination, so that Flux's
// paths exist from the start and never build empty: in a nestedByMetadata
// destination under dependencies/ and resources/, in an aggregatedYAML or
// none destination at its root.
const (
	CanaryDependencies = layout.CanaryDependencies
	CanaryResources    = layout.CanaryResources
)

// The canaries' bytes are Kratix's own (its destination controller
// marshals a Namespace and a ConfigMap with sigs.k8s.io/yaml), so a store
// Kratix wrote and one render writes hold the same files.
var (
	canaryNamespace = []byte("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kratix-worker-system\nspec: {}\nstatus: {}\n")
	canaryConfigMap = []byte("apiVersion: v1\ndata:\n  canary: this confirms your infrastructure is reading from Kratix state stores\nkind: ConfigMap\nmetadata:\n  name: kratix-info\n  namespace: kratix-worker-system\n")
)

// CanaryNamespace is the content of the Namespace canary.
func CanaryNamespace() []byte { return append([]byte(nil), canaryNamespace...) }

// CanaryConfigMap is the content of the ConfigMap canary.
func CanaryConfigMap() []byte { return append([]byte(nil), canaryConfigMap...) }

// CanaryFiles returns the canary files of destination d, by path relative
// to its store, as Kratix lays them out for d's filepath mode; none when
// d sets spec.initWorkloads.enabled: false.
func CanaryFiles(d Destination) map[string][]byte {
	if d.NoInitWorkloads {
		return nil
	}
	ns, cm := layout.CanaryNamespaceFile, layout.CanaryConfigMapFile
	if d.Mode == NestedByMetadata || d.Mode == "" {
		ns, cm = CanaryDependencies, CanaryResources
	}
	return map[string][]byte{
		path.Join(d.Path, ns): CanaryNamespace(),
		path.Join(d.Path, cm): CanaryConfigMap(),
	}
}

// canaries returns every destination's canary files, per store.
func canaries(dests []Destination) map[StoreRef]map[string][]byte {
	out := map[StoreRef]map[string][]byte{}
	for _, d := range dests {
		for p, data := range CanaryFiles(d) {
			if out[d.Store] == nil {
				out[d.Store] = map[string][]byte{}
			}
			out[d.Store][p] = data
		}
	}
	return out
}

// Plan is the outcome of a render: where each group goes, and what each
// store must hold for this workload.
type Plan struct {
	Workflow Workflow
	Groups   []Group
	// Writes holds one entry per store that receives files, sorted by store.
	Writes []StoreWrite
	// Warnings are worth telling the user but do not stop the render.
	Warnings []string
	// Canaries are the canary files of every destination of the platform,
	// per store: whatever a render writes to a store, it writes them there
	// too (where they are missing), as Kratix does for every Destination.
	Canaries map[StoreRef]map[string][]byte
}

// Group is one workload group and its scheduling outcome.
type Group struct {
	Directory string // DefaultGroup or a top-level folder of the output
	ID        string // first five hex digits of md5(Directory)
	Files     []string
	Selector  Selector // the effective selector
	// Verdicts explain every destination: filtered out (and why), or a candidate and its score.
	Verdicts     []Verdict
	Destinations []string // chosen destinations, sorted
	// Sticky is set when a resource kept an earlier placement.
	Sticky bool
	// Misscheduled are the destinations among Destinations that the group
	// stays on although they no longer match (Kratix labels such a
	// WorkPlacement kratix.io/misscheduled): an earlier render (or Kratix)
	// placed it there, and only a delete, `render drain` or `render
	// prune-misscheduled` takes it away. Sorted.
	Misscheduled []string
	// KeptFrom says who made the earlier placements the group keeps:
	// PlacedByRender or PlacedByKratix ("" when it keeps none).
	KeptFrom string
}

// Who made an earlier placement a group keeps.
const (
	PlacedByRender = "render"
	PlacedByKratix = "kratix"
)

// Unscheduled reports whether no destination that matches the group's
// selector can take it: every verdict has a reason (labels, strict
// matching, a cordon), whether or not the group stays where an earlier
// placement left it (misscheduled). A resource kept on a destination that
// no longer matches while another one matches is not unscheduled: it has
// a place, as Kratix keeps it, and one it could have (Matching); the
// misscheduled report says so.
func (g Group) Unscheduled() bool {
	if len(g.Destinations) > len(g.Misscheduled) {
		return false // on a destination that matches
	}
	for _, v := range g.Verdicts {
		if v.Reason == "" {
			return false
		}
	}
	return true
}

// Matching returns the destinations that match the group now and could
// take it, but do not hold it: where a resource kept on a destination that
// no longer matches would go, if it were placed again. Sorted.
func (g Group) Matching() []string {
	var out []string
	for _, v := range g.Verdicts {
		if v.Reason == "" && !v.Chosen {
			out = append(out, v.Destination)
		}
	}
	sort.Strings(out)
	return out
}

// Placed reports whether the group has any destination, a misscheduled one
// included: its files are written there.
func (g Group) Placed() bool { return len(g.Destinations) > 0 }

// Verdict is what scheduling thought of one destination for one group.
type Verdict struct {
	Destination string
	// Reasons are every reason the destination was filtered out (each
	// label, expression, strict matching, a cordon); empty for a candidate.
	Reasons []string
	// Reason is Reasons in one line ("; "-separated); empty for a candidate.
	Reason string
	// Score is a candidate's load (lower is better) under the spread strategy.
	Score  int
	Chosen bool
	// Misscheduled marks a chosen destination the group stays on although
	// Reasons say it no longer matches.
	Misscheduled bool
	// TiedWith, on the chosen destination of a resource group, names the
	// other candidates with the same lowest score: the stable hash of the
	// workload's identity broke the tie.
	TiedWith []string
}

// StoreWrite is what one store must hold for the workload.
type StoreWrite struct {
	Store        StoreRef
	Files        map[string][]byte
	Shared       map[string][]byte
	Aggregates   []Aggregate
	Destinations []string // destination paths written
}

// Placements lists every group's destinations, for the store records.
func (p *Plan) Placements() []Placement {
	var out []Placement
	for _, g := range p.Groups {
		if g.Placed() {
			pl := Placement{Group: g.Directory, Destinations: g.Destinations, MatchLabels: g.Selector.MatchLabels}
			for _, e := range g.Selector.MatchExpressions {
				pl.MatchExpressions = append(pl.MatchExpressions, e)
			}
			out = append(out, pl)
		}
	}
	return out
}

// Misscheduled returns the groups that stay on a destination that no
// longer matches.
func (p *Plan) Misscheduled() []Group {
	var out []Group
	for _, g := range p.Groups {
		if len(g.Misscheduled) > 0 {
			out = append(out, g)
		}
	}
	return out
}

// Unscheduled returns the groups no matching destination took (see
// Group.Unscheduled).
func (p *Plan) Unscheduled() []Group {
	var out []Group
	for _, g := range p.Groups {
		if g.Unscheduled() {
			out = append(out, g)
		}
	}
	return out
}

// MisscheduledLine says, in one line, where g stays although it no longer
// matches, and why.
func MisscheduledLine(g Group) string {
	var why []string
	for _, v := range g.Verdicts {
		if v.Misscheduled {
			why = append(why, v.Destination+": "+v.Reason)
		}
	}
	who := "an earlier render"
	if g.KeptFrom == PlacedByKratix {
		who = "Kratix"
	}
	on := strings.Join(g.Misscheduled, ", ")
	line := fmt.Sprintf("group %s is kept on %s, where %s placed it, as Kratix keeps a misscheduled placement: selector %s no longer matches there (%s)",
		g.Directory, on, who, g.Selector, strings.Join(why, "; "))
	prune := fmt.Sprintf("`render prune-misscheduled --destination %s` removes it there", g.Misscheduled[0])
	if len(g.Misscheduled) > 1 {
		prune = "`render prune-misscheduled` removes it there"
	}
	match := g.Matching()
	switch {
	case !g.Sticky:
		// Dependencies go to every destination that matches, kept or not.
		return line + "; " + prune
	case len(match) == 0:
		return line + "; no destination matches it now; " + prune
	default:
		return fmt.Sprintf("%s; %s matches it now: `render drain %s` moves it there (with every resource on %s), or %s and its next render places it anew",
			line, strings.Join(match, ", "), g.Misscheduled[0], g.Misscheduled[0], prune)
	}
}

// GroupID is Kratix's short id of a group's directory.
func GroupID(dir string) string {
	sum := md5.Sum([]byte(dir))
	return hex.EncodeToString(sum[:])[:5]
}

// Render schedules the workflow's output and lays it out per store. It is
// pure: the same Input always gives the same Plan (the random strategy
// included, for a given Seed).
func Render(in Input) (*Plan, error) { return RenderContext(context.Background(), in) }

// RenderContext is Render that gives up with ctx's error once ctx is done;
// it checks between its steps and between groups.
func RenderContext(ctx context.Context, in Input) (*Plan, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ValidateWorkflow(in.Workflow); err != nil {
		return nil, err
	}
	plan := &Plan{Workflow: in.Workflow, Canaries: canaries(in.Destinations)}
	if in.Workflow.Action == Delete {
		return plan, nil
	}
	groups, err := splitGroups(in)
	if err != nil {
		return nil, err
	}
	return renderGroups(ctx, in, plan, groups)
}

// StaticDependenciesFile is where Kratix puts a Promise's spec.dependencies,
// relative to the group's folder.
func StaticDependenciesFile(promise string) string {
	return "static/" + promise + "-dependencies.yaml"
}

// RenderStatic lays out the Promise's static dependencies (spec.dependencies)
// as Kratix does: one file, StaticDependenciesFile, in the default group of
// a promise workload without a pipeline (so in nestedByMetadata
// destinations under dependencies/<promise>/5058f/), scheduled to every
// destination the Promise's destinationSelectors match. Its plan has no
// groups when the Promise has no dependencies, or for a delete: every
// file of it goes. in.Previous is where the static dependencies were
// placed before (their own record's placements, not the workflow's).
func RenderStatic(ctx context.Context, in Input) (*Plan, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	wf := Workflow{Type: PromiseWorkflow, Action: in.Workflow.Action, Promise: in.Workflow.Promise}
	plan := &Plan{Workflow: wf, Canaries: canaries(in.Destinations)}
	if in.Promise == nil || len(in.Promise.Dependencies) == 0 || wf.Action == Delete {
		return plan, nil
	}
	st := Input{
		Workflow: wf, Destinations: in.Destinations, Promise: in.Promise,
		Output:   []File{{Path: StaticDependenciesFile(in.Promise.Name), Data: in.Promise.Dependencies}},
		Previous: in.Previous, PreviousByKratix: in.PreviousByKratix,
	}
	g := Group{Directory: DefaultGroup, ID: GroupID(DefaultGroup), Files: []string{st.Output[0].Path}, Selector: defaultSelector(st, Selector{})}
	return renderGroups(ctx, st, plan, []Group{g})
}

// renderGroups schedules groups and lays their files out in plan.
func renderGroups(ctx context.Context, in Input, plan *Plan, groups []Group) (*Plan, error) {
	if in.Weigh != nil {
		in.Load = in.Load.clone() // what Weigh adds is this render's, not the caller's
	}
	byName := map[string]*Destination{}
	dests := append([]Destination(nil), in.Destinations...)
	sort.Slice(dests, func(i, j int) bool { return dests[i].Name < dests[j].Name })
	for i := range dests {
		byName[dests[i].Name] = &dests[i]
	}
	weigh := in.weigher()
	for i := range groups {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		g := &groups[i]
		if err := schedule(in, dests, byName, g, plan, weigh); err != nil {
			return nil, err
		}
		if len(g.Misscheduled) > 0 {
			plan.Warnings = append(plan.Warnings, MisscheduledLine(*g))
		}
		plan.Groups = append(plan.Groups, *g)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkAggregated(in, byName, plan.Groups); err != nil {
		return nil, err
	}
	plan.Writes = placeFiles(in, byName, plan.Groups, plan.Canaries)
	if err := checkPaths(in, plan); err != nil {
		return nil, err
	}
	return plan, nil
}

// checkAggregated refuses, as bad input naming the file, an output file
// that is not text (not UTF-8, or holding a NUL byte, as an image is) in a
// group placed on an aggregatedYAML destination: its bytes would go into
// the destination's one YAML file, and the error would name that file
// instead of the one at fault.
func checkAggregated(in Input, byName map[string]*Destination, groups []Group) error {
	data := map[string][]byte{}
	for _, f := range in.Output {
		data[f.Path] = f.Data
	}
	for _, g := range groups {
		for _, name := range g.Destinations {
			d := byName[name]
			if d == nil || d.Mode != AggregatedYAML {
				continue
			}
			for _, f := range g.Files {
				if b := data[f]; !utf8.Valid(b) || bytes.IndexByte(b, 0) >= 0 {
					return &InputError{File: f, Msg: fmt.Sprintf("is binary, not YAML, and goes to destination %s, whose filepath.mode aggregatedYAML puts every document into one file, %s: leave the file out of that group's output, or give the destination filepath.mode nestedByMetadata or none",
						d.Name, layout.Quote(path.Join(d.Path, d.Filename)))}
				}
			}
		}
	}
	return nil
}

// checkPaths refuses, as bad input, an output file whose place in a store
// would not be a valid path or would take a name render reserves (the one
// rule in package layout, the same in every filepath mode), and any path
// of the plan that a store could not hold: a file where another path needs
// a folder, or a name a store refuses. So no store is written when another
// would refuse its part.
func checkPaths(in Input, plan *Plan) error {
	for _, f := range in.Output {
		if err := layout.CheckWorkloadPath(f.Path); err != nil {
			msg := "cannot be written to a state store: " + err.Error()
			if advice := TooLongAdvice(err, "", "", f.Path); advice != "" {
				msg += "; " + advice
			}
			return &InputError{File: f.Path, Msg: msg}
		}
	}
	for _, w := range plan.Writes {
		kinds := map[string]string{}
		for p := range w.Files {
			kinds[p] = "file"
		}
		for p := range w.Shared {
			kinds[p] = "canary file"
		}
		for _, a := range w.Aggregates {
			kinds[a.Target] = "aggregated file"
		}
		for _, p := range slices.Sorted(maps.Keys(kinds)) {
			if err := layout.ValidPath(p); err != nil {
				msg := fmt.Sprintf("the %s %s cannot be written: %v", kinds[p], layout.Quote(p), err)
				dest, rel := DestinationOf(p, w.Destinations)
				if advice := TooLongAdvice(err, "", dest, rel); advice != "" {
					msg += "; " + advice
				}
				return &InputError{Where: w.Store.String(), Msg: msg}
			}
			for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
				if k, ok := kinds[dir]; ok {
					return &InputError{Where: w.Store.String(), Msg: fmt.Sprintf("the %s %s needs a folder where the %s %s would be: one path cannot be both", kinds[p], layout.Quote(p), k, layout.Quote(dir))}
				}
			}
		}
	}
	return nil
}

// splitGroups validates destination-selectors.yaml and partitions the output.
func splitGroups(in Input) ([]Group, error) {
	file := in.SelectorsFile
	if file == "" {
		file = "destination-selectors.yaml"
	}
	dirs := map[string]bool{}
	for _, d := range in.OutputDirs {
		dirs[d] = true
	}
	for _, f := range in.Output {
		if i := strings.IndexByte(f.Path, '/'); i > 0 {
			dirs[f.Path[:i]] = true
		}
	}
	var root Selector
	byDir := map[string]*Group{}
	var order []string
	for i, e := range in.Selectors {
		if path.Clean(e.Directory) == "." {
			e.Directory = "" // Kratix reads "directory: ." as the root entry
		}
		where := fmt.Sprintf("entry %d", i+1)
		if e.Directory != "" {
			where = fmt.Sprintf("entry %d (directory %q)", i+1, e.Directory)
		}
		if e.Empty() {
			return nil, &InputError{File: file, Where: where, Msg: "matchLabels is empty: an entry must select something"}
		}
		if err := validateSelector(e.Selector); err != nil {
			return nil, &InputError{File: file, Where: where, Msg: err.Error()}
		}
		if e.Directory == "" {
			for k, v := range e.MatchLabels {
				if old, ok := root.MatchLabels[k]; ok && old != v {
					return nil, &InputError{File: file, Where: where, Msg: fmt.Sprintf("label %s is %q here and %q in an earlier entry without a directory", k, v, old)}
				}
			}
			root = mergeSelectors(root, e.Selector)
			continue
		}
		d := e.Directory
		clean := strings.TrimSuffix(d, "/")
		switch {
		case clean == "." || clean == ".." || strings.HasPrefix(clean, "../") || strings.HasPrefix(clean, "/") || strings.Contains(clean, "/..") || strings.HasPrefix(clean, "./"):
			return nil, &InputError{File: file, Where: where, Msg: "directory must be a top-level folder of the output, without . or .."}
		case strings.Contains(clean, "/"):
			return nil, &InputError{File: file, Where: where, Msg: "nested directories are not supported: only top-level folders of the output can be scheduled"}
		case byDir[clean] != nil:
			return nil, &InputError{File: file, Where: where, Msg: "directory is listed twice"}
		case !dirs[clean]:
			return nil, &InputError{File: file, Where: where, Msg: fmt.Sprintf("directory %q does not exist in the output", clean)}
		}
		byDir[clean] = &Group{Directory: clean, ID: GroupID(clean), Selector: e.Selector}
		order = append(order, clean)
	}
	def := &Group{Directory: DefaultGroup, ID: GroupID(DefaultGroup)}
	def.Selector = defaultSelector(in, root)
	for _, f := range in.Output {
		top := f.Path
		if i := strings.IndexByte(f.Path, '/'); i > 0 {
			top = f.Path[:i]
		}
		if g := byDir[top]; g != nil && top != f.Path {
			g.Files = append(g.Files, f.Path)
		} else {
			def.Files = append(def.Files, f.Path)
		}
	}
	var out []Group
	if len(def.Files) > 0 {
		out = append(out, *def)
	}
	sort.Strings(order)
	for _, d := range order {
		g := byDir[d]
		if len(g.Files) > 0 {
			out = append(out, *g)
		}
	}
	for i := range out {
		sort.Strings(out[i].Files)
	}
	return out, nil
}

// defaultSelector combines, for the default group, the Promise's
// destinationSelectors, the promise workflow's root entry (for resource
// workflows) and this workflow's root entry. On a key conflict the earlier
// wins: Promise, then promise workflow, then resource workflow.
func defaultSelector(in Input, workflowRoot Selector) Selector {
	var s Selector
	if in.Promise != nil {
		for _, ps := range in.Promise.DestinationSelectors {
			s = mergeSelectors(s, ps)
		}
	}
	if in.Workflow.Type == ResourceWorkflow && len(in.PromiseWorkflowSelector) > 0 {
		s = mergeSelectors(s, Selector{MatchLabels: in.PromiseWorkflowSelector})
	}
	return mergeSelectors(s, workflowRoot)
}

// mergeSelectors adds b's constraints to a; a's labels win a conflict.
func mergeSelectors(a, b Selector) Selector {
	out := Selector{}
	if len(a.MatchLabels)+len(b.MatchLabels) > 0 {
		out.MatchLabels = map[string]string{}
	}
	for k, v := range b.MatchLabels {
		out.MatchLabels[k] = v
	}
	for k, v := range a.MatchLabels {
		out.MatchLabels[k] = v
	}
	out.MatchExpressions = append(append(out.MatchExpressions, a.MatchExpressions...), b.MatchExpressions...)
	return out
}

// placeFiles turns placements into per-store files.
func placeFiles(in Input, byName map[string]*Destination, groups []Group, canaries map[StoreRef]map[string][]byte) []StoreWrite {
	data := map[string][]byte{}
	for _, f := range in.Output {
		data[f.Path] = f.Data
	}
	writes := map[StoreRef]*StoreWrite{}
	type aggFile struct{ id, path string }
	aggregates := map[string][]aggFile{} // target -> the files it holds, per store below
	aggStore := map[string]StoreRef{}
	for _, g := range groups {
		for _, name := range g.Destinations {
			d := byName[name]
			w := writes[d.Store]
			if w == nil {
				w = &StoreWrite{Store: d.Store, Files: map[string][]byte{}, Shared: maps.Clone(canaries[d.Store])}
				if w.Shared == nil {
					w.Shared = map[string][]byte{}
				}
				writes[d.Store] = w
			}
			if !slices.Contains(w.Destinations, d.Path) {
				w.Destinations = append(w.Destinations, d.Path)
			}
			for _, f := range g.Files {
				switch d.Mode {
				case AggregatedYAML:
					target := path.Join(d.Path, d.Filename)
					aggregates[target] = append(aggregates[target], aggFile{g.ID, f})
					aggStore[target] = d.Store
				case NoNesting:
					w.Files[path.Join(d.Path, f)] = data[f]
				default:
					w.Files[path.Join(d.Path, NestedPrefix(in.Workflow, g.ID), f)] = data[f]
				}
			}
		}
	}
	targets := make([]string, 0, len(aggregates))
	for t := range aggregates {
		targets = append(targets, t)
	}
	sort.Strings(targets)
	for _, t := range targets {
		// Kratix's bytes: each file's content as it is, joined by
		// "\n---\n", its WorkPlacements (one per group) in the order of
		// their names (which end with the group's id), each one's files in
		// the order Kratix read them (each folder's entries sorted by name).
		files := aggregates[t]
		sort.Slice(files, func(i, j int) bool {
			if files[i].id != files[j].id {
				return files[i].id < files[j].id
			}
			return slices.Compare(strings.Split(files[i].path, "/"), strings.Split(files[j].path, "/")) < 0
		})
		var buf bytes.Buffer
		for i, f := range files {
			if i > 0 {
				buf.WriteString("\n---\n")
			}
			buf.Write(data[f.path])
		}
		if buf.Len() == 0 {
			continue // nothing to contribute: no part
		}
		w := writes[aggStore[t]]
		w.Aggregates = append(w.Aggregates, Aggregate{Target: t, Contribution: buf.Bytes()})
	}
	out := make([]StoreWrite, 0, len(writes))
	for _, w := range writes {
		sort.Strings(w.Destinations)
		out = append(out, *w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Store.String() < out[j].Store.String() })
	return out
}

// clone is a copy of l that shares no map with it, every map made.
func (l Load) clone() Load {
	c := Load{Total: maps.Clone(l.Total), ByFlavour: map[string]map[string]int{}}
	if c.Total == nil {
		c.Total = map[string]int{}
	}
	for f, m := range l.ByFlavour {
		c.ByFlavour[f] = maps.Clone(m)
	}
	return c
}

// add adds o's counts to l, whose maps are made (see clone).
func (l Load) add(o Load) {
	for d, n := range o.Total {
		l.Total[d] += n
	}
	for f, m := range o.ByFlavour {
		if l.ByFlavour[f] == nil {
			l.ByFlavour[f] = map[string]int{}
		}
		for d, n := range m {
			l.ByFlavour[f][d] += n
		}
	}
}

// weigher is how a render asks in.Weigh for the load of a spread
// choice's candidates: each destination once, added to in.Load (a clone:
// see renderGroups). nil without in.Weigh.
func (in Input) weigher() func(dests []string) error {
	if in.Weigh == nil {
		return nil
	}
	asked := map[string]bool{}
	return func(dests []string) error {
		var need []string
		for _, d := range dests {
			if !asked[d] {
				asked[d] = true
				need = append(need, d)
			}
		}
		if len(need) == 0 {
			return nil
		}
		l, err := in.Weigh(need)
		if err != nil {
			return err
		}
		in.Load.add(l)
		return nil
	}
}
