package renderer

import (
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var store = StoreRef{Kind: "GitStateStore", Name: "default"}

func dest(name string, labels map[string]string) Destination {
	return Destination{Name: name, Labels: labels, Path: name, Store: store, Mode: NestedByMetadata}
}

func files(paths ...string) []File {
	var out []File
	for _, p := range paths {
		out = append(out, File{Path: p, Data: []byte("kind: ConfigMap\nmetadata:\n  name: x\n")})
	}
	return out
}

func promiseWF() Workflow {
	return Workflow{Type: PromiseWorkflow, Action: Configure, Promise: "jenkins", Pipeline: "install"}
}

func resourceWF(name string) Workflow {
	return Workflow{Type: ResourceWorkflow, Action: Configure, Promise: "jenkins", Pipeline: "instance", Name: name, Namespace: "default"}
}

func labelsOf(s string) map[string]string {
	if s == "" {
		return nil
	}
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	return out
}

func mustRender(t *testing.T, in Input) *Plan {
	t.Helper()
	p, err := Render(in)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	return p
}

func group(t *testing.T, p *Plan, dir string) Group {
	t.Helper()
	for _, g := range p.Groups {
		if g.Directory == dir {
			return g
		}
	}
	t.Fatalf("no group %q in %+v", dir, p.Groups)
	return Group{}
}

// TestLabelTable is the table from Kratix's "Scheduling Promises" page,
// row by row: destination labels, promise selector, match.
func TestLabelTable(t *testing.T) {
	rows := []struct {
		destLabels, selector string
		match                bool
	}{
		{"", "", true},
		{"env=dev", "", true},
		{"env=dev", "env=dev", true},
		{"env=dev,zone=eu", "env=dev", true},
		{"env=dev,zone=eu", "env=dev,zone=eu", true},
		{"env=dev", "env=prod", false},
		{"env=dev", "env=dev,zone=eu", false},
		{"", "env=dev", false},
	}
	for _, r := range rows {
		t.Run(r.destLabels+" vs "+r.selector, func(t *testing.T) {
			in := Input{
				Workflow:     promiseWF(),
				Output:       files("a.yaml"),
				Destinations: []Destination{dest("worker", labelsOf(r.destLabels))},
			}
			if r.selector != "" {
				in.Promise = &Promise{Name: "jenkins", DestinationSelectors: []Selector{{MatchLabels: labelsOf(r.selector)}}}
			}
			g := group(t, mustRender(t, in), DefaultGroup)
			if got := !g.Unscheduled(); got != r.match {
				t.Fatalf("match = %v, want %v (verdicts %+v)", got, r.match, g.Verdicts)
			}
		})
	}
}

func TestStrictMatchLabels(t *testing.T) {
	strict := dest("strict", map[string]string{"env": "dev"})
	strict.StrictMatchLabels = true
	strictNoLabels := dest("strict-bare", nil)
	strictNoLabels.StrictMatchLabels = true
	in := Input{Workflow: promiseWF(), Output: files("a.yaml"), Destinations: []Destination{strict, strictNoLabels, dest("plain", map[string]string{"env": "dev"})}}
	// No selector: strict destinations with labels are skipped.
	g := group(t, mustRender(t, in), DefaultGroup)
	equal(t, g.Destinations, []string{"plain", "strict-bare"})
	if !strings.Contains(verdict(g, "strict").Reason, "strictMatchLabels") {
		t.Fatalf("strict destination's reason does not say why: %q", verdict(g, "strict").Reason)
	}
	// A selector that matches: strict destinations take it.
	in.Promise = &Promise{Name: "jenkins", DestinationSelectors: []Selector{{MatchLabels: map[string]string{"env": "dev"}}}}
	g = group(t, mustRender(t, in), DefaultGroup)
	equal(t, g.Destinations, []string{"plain", "strict"})
}

func verdict(g Group, d string) Verdict {
	for _, v := range g.Verdicts {
		if v.Destination == d {
			return v
		}
	}
	return Verdict{}
}

func equal(t *testing.T, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// TestDirectoryBasedExample is the reference's directory-based scheduling
// example: scheduled-dir follows its own selector and ignores the
// Promise's; document-0.yaml and some-dir/ follow the Promise.
func TestDirectoryBasedExample(t *testing.T) {
	in := Input{
		Workflow:  promiseWF(),
		Output:    files("document-0.yaml", "some-dir/document-1.yaml", "scheduled-dir/document-2.yaml", "scheduled-dir/document-3.yaml"),
		Selectors: []SelectorEntry{{Directory: "scheduled-dir", Selector: Selector{MatchLabels: map[string]string{"workflow": "subdir"}}}},
		Promise:   &Promise{Name: "jenkins", DestinationSelectors: []Selector{{MatchLabels: map[string]string{"promise": "label"}}}},
		Destinations: []Destination{
			dest("promise-dest", map[string]string{"promise": "label"}),
			dest("subdir-dest", map[string]string{"workflow": "subdir"}),
			dest("both", map[string]string{"promise": "label", "workflow": "subdir"}),
		},
	}
	p := mustRender(t, in)
	sched := group(t, p, "scheduled-dir")
	equal(t, sched.Files, []string{"scheduled-dir/document-2.yaml", "scheduled-dir/document-3.yaml"})
	equal(t, sched.Destinations, []string{"both", "subdir-dest"})
	def := group(t, p, DefaultGroup)
	equal(t, def.Files, []string{"document-0.yaml", "some-dir/document-1.yaml"})
	equal(t, def.Destinations, []string{"both", "promise-dest"})
	// Layout: <dest>/dependencies/<promise>/<pipeline>/<id>/<path>.
	w := p.Writes[0]
	for _, want := range []string{
		"subdir-dest/dependencies/jenkins/install/" + GroupID("scheduled-dir") + "/scheduled-dir/document-2.yaml",
		"promise-dest/dependencies/jenkins/install/5058f/some-dir/document-1.yaml",
		"promise-dest/dependencies/jenkins/install/5058f/document-0.yaml",
	} {
		if _, ok := w.Files[want]; !ok {
			t.Errorf("missing %s in %v", want, keys(w.Files))
		}
	}
	if _, ok := w.Files["subdir-dest/dependencies/jenkins/install/5058f/document-0.yaml"]; ok {
		t.Error("default group leaked to a destination without the promise label")
	}
}

// TestDefaultSchedulingExample is the reference's default-scheduling
// example: the workflow's root selector is ANDed with the Promise's.
func TestDefaultSchedulingExample(t *testing.T) {
	in := Input{
		Workflow:  promiseWF(),
		Output:    files("a.yaml"),
		Selectors: []SelectorEntry{{Selector: Selector{MatchLabels: map[string]string{"workflow": "another-label"}}}},
		Promise:   &Promise{Name: "jenkins", DestinationSelectors: []Selector{{MatchLabels: map[string]string{"promise": "label"}}}},
		Destinations: []Destination{
			dest("only-promise", map[string]string{"promise": "label"}),
			dest("only-workflow", map[string]string{"workflow": "another-label"}),
			dest("both", map[string]string{"promise": "label", "workflow": "another-label"}),
		},
	}
	g := group(t, mustRender(t, in), DefaultGroup)
	equal(t, g.Destinations, []string{"both"})
	equal(t, g.Selector.MatchLabels, map[string]string{"promise": "label", "workflow": "another-label"})
}

// TestPrecedence: on a key conflict the Promise wins over the promise
// workflow, which wins over the resource workflow.
func TestPrecedence(t *testing.T) {
	dests := []Destination{
		dest("a", map[string]string{"env": "prod", "tier": "gold", "zone": "eu"}),
		dest("b", map[string]string{"env": "dev", "tier": "silver", "zone": "us"}),
	}
	in := Input{
		Workflow:                resourceWF("r1"),
		Output:                  files("a.yaml"),
		Promise:                 &Promise{Name: "jenkins", DestinationSelectors: []Selector{{MatchLabels: map[string]string{"env": "prod"}}}},
		PromiseWorkflowSelector: map[string]string{"env": "dev", "tier": "gold"},
		Selectors:               []SelectorEntry{{Selector: Selector{MatchLabels: map[string]string{"env": "dev", "tier": "silver", "zone": "eu"}}}},
		Destinations:            dests,
	}
	g := group(t, mustRender(t, in), DefaultGroup)
	equal(t, g.Selector.MatchLabels, map[string]string{"env": "prod", "tier": "gold", "zone": "eu"})
	equal(t, g.Destinations, []string{"a"})
	// The promise workflow's selector does not apply to promise workflows.
	in.Workflow = promiseWF()
	g = group(t, mustRender(t, in), DefaultGroup)
	equal(t, g.Selector.MatchLabels, map[string]string{"env": "prod", "tier": "silver", "zone": "eu"})
}

func TestPromiseGoesEverywhereResourceToOne(t *testing.T) {
	dests := []Destination{dest("a", nil), dest("b", nil), dest("c", nil)}
	p := mustRender(t, Input{Workflow: promiseWF(), Output: files("x.yaml"), Destinations: dests})
	equal(t, group(t, p, DefaultGroup).Destinations, []string{"a", "b", "c"})
	dests[2].Labels = map[string]string{"disk": "ssd"}
	p = mustRender(t, Input{Workflow: resourceWF("r1"), Output: files("x.yaml", "dir/y.yaml"),
		Selectors: []SelectorEntry{{Directory: "dir", Selector: Selector{MatchLabels: map[string]string{"disk": "ssd"}}}}, Destinations: dests})
	if d := group(t, p, DefaultGroup).Destinations; len(d) != 1 {
		t.Fatalf("resource default group went to %v, want one destination", d)
	}
	equal(t, group(t, p, "dir").Destinations, []string{"c"})
}

func TestResourceChoiceIsDeterministicAndSticky(t *testing.T) {
	dests := []Destination{dest("a", nil), dest("b", nil), dest("c", nil)}
	in := Input{Workflow: resourceWF("r1"), Output: files("x.yaml"), Destinations: dests}
	first := group(t, mustRender(t, in), DefaultGroup).Destinations
	if len(first) != 1 {
		t.Fatalf("a resource group went to %v, want exactly one destination", first)
	}
	for range 20 {
		equal(t, group(t, mustRender(t, in), DefaultGroup).Destinations, first)
	}
	// Different resources spread over the destinations (stable hash ties).
	seen := map[string]bool{}
	for _, n := range []string{"r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8"} {
		in.Workflow = resourceWF(n)
		seen[group(t, mustRender(t, in), DefaultGroup).Destinations[0]] = true
	}
	if len(seen) < 2 {
		t.Fatalf("8 resources all went to %v: ties are not broken by identity", seen)
	}
	// Sticky: an earlier placement wins over a fresh choice and a lower load.
	in.Workflow = resourceWF("r1")
	in.Previous = map[string][]string{DefaultGroup: {"c"}}
	in.Load = Load{Total: map[string]int{"c": 10}}
	g := group(t, mustRender(t, in), DefaultGroup)
	equal(t, g.Destinations, []string{"c"})
	if !g.Sticky {
		t.Fatal("kept placement not marked sticky")
	}
	// Sticky even when the destination no longer matches, with a warning.
	in.Destinations = []Destination{dest("a", nil), dest("b", nil), dest("c", map[string]string{"env": "prod"})}
	in.Selectors = []SelectorEntry{{Selector: Selector{MatchLabels: map[string]string{"env": "dev"}}}}
	in.Destinations[0].Labels = map[string]string{"env": "dev"}
	p := mustRender(t, in)
	equal(t, group(t, p, DefaultGroup).Destinations, []string{"c"})
	if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "no longer matches") {
		t.Fatalf("warnings = %v", p.Warnings)
	}
	// A destination that is gone is replaced.
	in.Previous = map[string][]string{DefaultGroup: {"gone"}}
	p = mustRender(t, in)
	equal(t, group(t, p, DefaultGroup).Destinations, []string{"a"})
}

func TestSpreadByLoadAndFlavour(t *testing.T) {
	dests := []Destination{dest("a", nil), dest("b", nil), dest("c", nil)}
	in := Input{Workflow: resourceWF("r1"), Output: files("x.yaml"), Destinations: dests,
		Load: Load{Total: map[string]int{"a": 2, "b": 0, "c": 1}}}
	equal(t, group(t, mustRender(t, in), DefaultGroup).Destinations, []string{"b"})
	in.Flavour = "gold"
	in.Load.ByFlavour = map[string]map[string]int{"gold": {"a": 0, "b": 1, "c": 1}}
	equal(t, group(t, mustRender(t, in), DefaultGroup).Destinations, []string{"a"})
}

func TestCordonedTakesNoNewResources(t *testing.T) {
	a, b := dest("a", nil), dest("b", nil)
	a.Unschedulable = true
	in := Input{Workflow: resourceWF("r1"), Output: files("x.yaml"), Destinations: []Destination{a, b}, Load: Load{Total: map[string]int{"b": 5}}}
	g := group(t, mustRender(t, in), DefaultGroup)
	equal(t, g.Destinations, []string{"b"})
	if !strings.Contains(verdict(g, "a").Reason, "cordoned") {
		t.Fatalf("reason %q", verdict(g, "a").Reason)
	}
	// What is already there stays.
	in.Previous = map[string][]string{DefaultGroup: {"a"}}
	equal(t, group(t, mustRender(t, in), DefaultGroup).Destinations, []string{"a"})
}

func TestUnscheduledGroupIsReportedOthersPlaced(t *testing.T) {
	in := Input{
		Workflow:     promiseWF(),
		Output:       files("a.yaml", "gpu/b.yaml"),
		Selectors:    []SelectorEntry{{Directory: "gpu", Selector: Selector{MatchLabels: map[string]string{"gpu": "true"}}}},
		Destinations: []Destination{dest("cpu", map[string]string{"gpu": "false"})},
	}
	p := mustRender(t, in)
	un := p.Unscheduled()
	if len(un) != 1 || un[0].Directory != "gpu" {
		t.Fatalf("unscheduled = %+v", un)
	}
	if got := verdict(un[0], "cpu").Reason; got != "label gpu=true: the destination has gpu=false" {
		t.Fatalf("reason = %q", got)
	}
	equal(t, group(t, p, DefaultGroup).Destinations, []string{"cpu"})
	if len(p.Writes) != 1 || len(p.Writes[0].Files) != 1 {
		t.Fatalf("writes = %+v", p.Writes)
	}
}

func TestSelectorEntryValidation(t *testing.T) {
	out := files("a.yaml", "dir/b.yaml", "other/c.yaml")
	cases := []struct {
		name, yaml, want string
	}{
		{"nested", "- directory: dir/sub\n  matchLabels: {a: b}\n", "nested directories"},
		{"duplicate", "- directory: dir\n  matchLabels: {a: b}\n- directory: dir\n  matchLabels: {a: c}\n", "listed twice"},
		{"missing", "- directory: nope\n  matchLabels: {a: b}\n", "does not exist"},
		{"dotdot", "- directory: ../etc\n  matchLabels: {a: b}\n", "without . or .."},
		{"dot and a root entry disagree", "- matchLabels: {a: b}\n- directory: .\n  matchLabels: {a: c}\n", "label a is \"c\" here"},
		{"empty labels", "- directory: dir\n  matchLabels: {}\n", "matchLabels is empty"},
		{"empty root", "- matchLabels: {}\n", "matchLabels is empty"},
		{"bad key", "- matchLabels: {'bad key!': x}\n", "invalid selector"},
		{"bad operator", "- matchExpressions: [{key: a, operator: Maybe}]\n", "operator \"Maybe\""},
		{"root conflict", "- matchLabels: {a: b}\n- matchLabels: {a: c}\n", "label a is \"c\" here"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var entries []SelectorEntry
			if err := yaml.Unmarshal([]byte(c.yaml), &entries); err != nil {
				t.Fatal(err)
			}
			_, err := Render(Input{Workflow: promiseWF(), Output: out, Selectors: entries, SelectorsFile: "meta/destination-selectors.yaml"})
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("err = %v, want an InputError", err)
			}
			if ie.File != "meta/destination-selectors.yaml" || !strings.Contains(ie.Msg, c.want) || !strings.HasPrefix(ie.Where, "entry ") {
				t.Fatalf("err = %q (file %q, where %q), want it to name the file, the entry and %q", err, ie.File, ie.Where, c.want)
			}
		})
	}
	// An empty top-level folder exists, though it holds no files.
	_, err := Render(Input{Workflow: promiseWF(), Output: out, OutputDirs: []string{"empty"},
		Selectors: []SelectorEntry{{Directory: "empty", Selector: Selector{MatchLabels: map[string]string{"a": "b"}}}}})
	if err != nil {
		t.Fatalf("empty existing folder refused: %v", err)
	}
}

func TestMatchExpressions(t *testing.T) {
	dests := []Destination{dest("eu", map[string]string{"zone": "eu"}), dest("us", map[string]string{"zone": "us"}), dest("none", nil)}
	cases := []struct {
		expr metav1.LabelSelectorRequirement
		want []string
	}{
		{metav1.LabelSelectorRequirement{Key: "zone", Operator: "In", Values: []string{"eu", "ap"}}, []string{"eu"}},
		{metav1.LabelSelectorRequirement{Key: "zone", Operator: "NotIn", Values: []string{"eu"}}, []string{"none", "us"}},
		{metav1.LabelSelectorRequirement{Key: "zone", Operator: "Exists"}, []string{"eu", "us"}},
		{metav1.LabelSelectorRequirement{Key: "zone", Operator: "DoesNotExist"}, []string{"none"}},
	}
	for _, c := range cases {
		in := Input{Workflow: promiseWF(), Output: files("a.yaml"), Destinations: dests,
			Selectors: []SelectorEntry{{Selector: Selector{MatchExpressions: []metav1.LabelSelectorRequirement{c.expr}}}}}
		g := group(t, mustRender(t, in), DefaultGroup)
		equal(t, g.Destinations, c.want)
	}
}

func TestWorkflowIdentityValidation(t *testing.T) {
	cases := []struct {
		w    Workflow
		want string
	}{
		{Workflow{Action: Configure, Promise: "p", Pipeline: "x"}, "workflow type: missing"},
		{Workflow{Type: "job", Action: Configure, Promise: "p", Pipeline: "x"}, "neither promise nor resource"},
		{Workflow{Type: PromiseWorkflow, Action: Configure, Pipeline: "x"}, "promise: missing"},
		{Workflow{Type: PromiseWorkflow, Action: Configure, Promise: "p"}, "pipeline: missing"},
		{Workflow{Type: ResourceWorkflow, Action: Configure, Promise: "p", Pipeline: "x", Namespace: "ns"}, "name: missing"},
		{Workflow{Type: ResourceWorkflow, Action: Configure, Promise: "p", Pipeline: "x", Name: "n"}, "namespace: missing"},
		{Workflow{Type: PromiseWorkflow, Action: Configure, Promise: "../etc", Pipeline: "x"}, "not a valid Kubernetes name"},
		{Workflow{Type: PromiseWorkflow, Action: "restart", Promise: "p", Pipeline: "x"}, "neither configure nor delete"},
	}
	for _, c := range cases {
		err := ValidateWorkflow(c.w)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", c.w, err, c.want)
		}
	}
}

func TestFilepathModes(t *testing.T) {
	nested := dest("nested", nil)
	flat := dest("flat", nil)
	flat.Mode = NoNesting
	agg := dest("agg", nil)
	agg.Mode, agg.Filename = AggregatedYAML, "all.yaml"
	in := Input{Workflow: resourceWF("r1"), Destinations: []Destination{nested},
		Output: []File{{Path: "a.yaml", Data: []byte("kind: A\n")}, {Path: "sub/b.yaml", Data: []byte("---\nkind: B\n")}}}
	w := mustRender(t, in).Writes[0]
	equal(t, keys(w.Files), []string{
		"nested/resources/default/jenkins/r1/instance/5058f/a.yaml",
		"nested/resources/default/jenkins/r1/instance/5058f/sub/b.yaml",
	})
	equal(t, keys(w.Shared), []string{"nested/" + CanaryDependencies, "nested/" + CanaryResources})

	in.Destinations = []Destination{flat}
	equal(t, keys(mustRender(t, in).Writes[0].Files), []string{"flat/a.yaml", "flat/sub/b.yaml"})

	in.Destinations = []Destination{agg}
	w = mustRender(t, in).Writes[0]
	if len(w.Files) != 0 || len(w.Aggregates) != 1 {
		t.Fatalf("aggregated write = %+v", w)
	}
	equal(t, w.Aggregates[0].Target, "agg/all.yaml")
	// Kratix's bytes: every file as it is, joined by "\n---\n".
	equal(t, string(w.Aggregates[0].Contribution), "kind: A\n\n---\n---\nkind: B\n")
}

// A binary file in a group placed on an aggregatedYAML destination is
// refused naming the file, not the aggregated file it would have broken;
// the same file goes to a nestedByMetadata destination as it is.
func TestBinaryFileInAggregatedDestination(t *testing.T) {
	agg := dest("dev", nil)
	agg.Mode, agg.Filename = AggregatedYAML, "aggregated.yaml"
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
	in := Input{Workflow: resourceWF("r1"), Destinations: []Destination{agg},
		Output: []File{{Path: "a.yaml", Data: []byte("kind: A\n")}, {Path: "docs/diagram.png", Data: png}}}
	_, err := Render(in)
	var ie *InputError
	if !errors.As(err, &ie) || ie.File != "docs/diagram.png" || !strings.Contains(ie.Msg, "is binary") || !strings.Contains(ie.Msg, "dev/aggregated.yaml") {
		t.Fatalf("err = %v, want an InputError on docs/diagram.png saying it is binary and naming dev/aggregated.yaml", err)
	}
	in.Destinations = []Destination{dest("dev", nil)}
	w := mustRender(t, in).Writes[0]
	equal(t, string(w.Files["dev/resources/default/jenkins/r1/instance/5058f/docs/diagram.png"]), string(png))
}

func TestGroupIDs(t *testing.T) {
	equal(t, GroupID("."), "5058f") // Kratix's id of the default group
	equal(t, len(GroupID("scheduled-dir")), 5)
}

func TestDeleteActionHasNoWrites(t *testing.T) {
	w := resourceWF("r1")
	w.Action = Delete
	p := mustRender(t, Input{Workflow: w, Destinations: []Destination{dest("a", nil)}})
	if len(p.Writes) != 0 || len(p.Groups) != 0 {
		t.Fatalf("delete plan = %+v", p)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestReservedAndRefusedPaths: an output file whose place in a store is a
// name git refuses or render reserves is bad input in every filepath mode,
// before any store is written; so is a plan path one store could not hold.
func TestReservedAndRefusedPaths(t *testing.T) {
	modes := []FilepathMode{NestedByMetadata, AggregatedYAML, NoNesting}
	for _, p := range []string{
		".git/config", "sub/.git/config", "sub/.GIT/HEAD", "git~1/config", ".git./x", ".gitmodules",
		"sub/.render-complete.json", ".render-complete.json", ".render/workloads/x.json",
		"dependencies/kratix-canary-namespace.yaml", "resources/kratix-canary-configmap.yaml", "dependencies", "resources",
		"kratix-canary-namespace.yaml", "kratix-canary-configmap.yaml",
		"a\nb.yaml", "bad\xff.yaml",
	} {
		for _, mode := range modes {
			d := dest("dev", nil)
			d.Mode, d.Filename = mode, "aggregated.yaml"
			_, err := Render(Input{Workflow: promiseWF(), Output: files("ok.yaml", p), Destinations: []Destination{d}})
			var ie *InputError
			if !errors.As(err, &ie) || ie.File != p {
				t.Errorf("output file %q, mode %s: err = %v, want an InputError naming the file", p, mode, err)
			}
		}
	}
	// Names that merely look like reserved ones are fine.
	for _, p := range []string{"sub/dependencies", "resources/deploy.yaml", ".gitignore", "x.render-complete.json"} {
		for _, mode := range modes {
			d := dest("dev", nil)
			d.Mode, d.Filename = mode, "aggregated.yaml"
			if _, err := Render(Input{Workflow: promiseWF(), Output: files(p), Destinations: []Destination{d}}); err != nil {
				t.Errorf("output file %q, mode %s: %v", p, mode, err)
			}
		}
	}
}

// TestPlanPathConflicts: a file where the plan needs a folder is refused
// before any store is written (git would refuse it when it writes the
// tree; S3 would hold both).
func TestPlanPathConflicts(t *testing.T) {
	flat := dest("dev", nil)
	flat.Mode = NoNesting
	inner := dest("inner", nil)
	inner.Path = "dev/a.yaml"
	_, err := Render(Input{Workflow: promiseWF(), Output: files("a.yaml"), Destinations: []Destination{flat, inner}})
	var ie *InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "both") {
		t.Fatalf("a file where another destination's canaries need a folder: err = %v, want an InputError", err)
	}
}
