package renderer

import (
	"maps"
	"slices"
	"testing"
)

// Kratix's canary bytes, exactly as its destination controller's tests pin
// them (sigs.k8s.io/yaml's rendering of a Namespace and a ConfigMap).
const (
	kratixCanaryNamespace = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kratix-worker-system\nspec: {}\nstatus: {}\n"
	kratixCanaryConfigMap = "apiVersion: v1\ndata:\n  canary: this confirms your infrastructure is reading from Kratix state stores\nkind: ConfigMap\nmetadata:\n  name: kratix-info\n  namespace: kratix-worker-system\n"
)

// TestCanariesAreKratixs: every destination of a store a render writes
// gets Kratix's canaries, at Kratix's paths for its filepath mode, with
// Kratix's bytes — also destinations the workload does not go to — and a
// destination with initWorkloads disabled gets none.
func TestCanariesAreKratixs(t *testing.T) {
	nested := dest("nested", map[string]string{"env": "dev"})
	agg := dest("agg", map[string]string{"env": "prod"})
	agg.Mode, agg.Filename = AggregatedYAML, "aggregated.yaml"
	flat := dest("flat", map[string]string{"env": "prod"})
	flat.Mode = NoNesting
	quiet := dest("quiet", map[string]string{"env": "prod"})
	quiet.NoInitWorkloads = true
	other := dest("other", map[string]string{"env": "prod"})
	other.Store = StoreRef{Kind: "BucketStateStore", Name: "b"}

	p := mustRender(t, Input{
		Workflow: promiseWF(), Output: files("a.yaml"),
		Selectors:    []SelectorEntry{{Selector: Selector{MatchLabels: map[string]string{"env": "dev"}}}},
		Destinations: []Destination{nested, agg, flat, quiet, other},
	})
	if len(p.Writes) != 1 || p.Writes[0].Store != store {
		t.Fatalf("writes = %+v, want the git store only", p.Writes)
	}
	want := map[string]string{
		"nested/dependencies/kratix-canary-namespace.yaml": kratixCanaryNamespace,
		"nested/resources/kratix-canary-configmap.yaml":    kratixCanaryConfigMap,
		"agg/kratix-canary-namespace.yaml":                 kratixCanaryNamespace,
		"agg/kratix-canary-configmap.yaml":                 kratixCanaryConfigMap,
		"flat/kratix-canary-namespace.yaml":                kratixCanaryNamespace,
		"flat/kratix-canary-configmap.yaml":                kratixCanaryConfigMap,
	}
	got := map[string]string{}
	for k, v := range p.Writes[0].Shared {
		got[k] = string(v)
	}
	if !maps.Equal(got, want) {
		t.Errorf("canaries of the written store:\n got  %v\n want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
		for k, v := range got {
			if want[k] != "" && v != want[k] {
				t.Errorf("%s = %q, want %q", k, v, want[k])
			}
		}
	}
	// The bucket store is not written by this render, but its canaries are
	// known for whatever else writes it.
	if c := p.Canaries[other.Store]; len(c) != 2 || string(c["other/dependencies/kratix-canary-namespace.yaml"]) != kratixCanaryNamespace {
		t.Errorf("canaries of the other store = %v", slices.Sorted(maps.Keys(c)))
	}
	// A delete writes none of the workload's files, but still knows them.
	wf := promiseWF()
	wf.Action = Delete
	dp := mustRender(t, Input{Workflow: wf, Destinations: []Destination{nested}})
	if len(dp.Canaries[store]) != 2 {
		t.Errorf("delete plan canaries = %v", dp.Canaries)
	}
}

// TestDryRunDestinationTakesNothing: Kratix never schedules an ordinary
// workload to a destination labelled kratix.io/dry-run: "true".
func TestDryRunDestinationTakesNothing(t *testing.T) {
	dry := dest("dry", map[string]string{DryRunLabel: "true", "env": "dev"})
	for _, wf := range []Workflow{promiseWF(), resourceWF("a")} {
		p := mustRender(t, Input{Workflow: wf, Output: files("a.yaml"), Destinations: []Destination{dry}})
		g := group(t, p, DefaultGroup)
		if !g.Unscheduled() {
			t.Errorf("%s: placed on %v, want unscheduled", wf.Type, g.Destinations)
		}
		if len(g.Verdicts) != 1 || g.Verdicts[0].Reason == "" {
			t.Errorf("%s: verdicts %+v, want the dry-run label named", wf.Type, g.Verdicts)
		}
	}
	// A destination labelled "false" is ordinary.
	p := mustRender(t, Input{Workflow: promiseWF(), Output: files("a.yaml"), Destinations: []Destination{dest("d", map[string]string{DryRunLabel: "false"})}})
	if group(t, p, DefaultGroup).Unscheduled() {
		t.Error(`kratix.io/dry-run: "false" refused`)
	}
}

// "directory: ." (and "./") in destination-selectors.yaml is Kratix's root
// entry: it selects for the default group.
func TestDirectoryDotIsTheRootEntry(t *testing.T) {
	for _, dir := range []string{".", "./"} {
		p := mustRender(t, Input{
			Workflow: promiseWF(), Output: files("a.yaml"),
			Selectors:    []SelectorEntry{{Directory: dir, Selector: Selector{MatchLabels: map[string]string{"env": "prod"}}}},
			Destinations: []Destination{dest("dev", map[string]string{"env": "dev"}), dest("prod", map[string]string{"env": "prod"})},
		})
		if g := group(t, p, DefaultGroup); g.Selector.String() != "env=prod" || len(g.Destinations) != 1 || g.Destinations[0] != "prod" {
			t.Errorf("directory %q: group %+v", dir, g)
		}
	}
}
