package renderer

import (
	"errors"
	"slices"
	"testing"
)

// Input.Weigh is asked during the render for the load of a spread
// choice's candidates, each destination once across groups, and what it
// returns decides the choice; the caller's Load is left as it was, and
// Weigh's error ends the render.
func TestWeighIsAskedForTheCandidatesOnce(t *testing.T) {
	in := Input{
		Workflow: Workflow{Type: ResourceWorkflow, Action: Configure, Promise: "pg", Pipeline: "x", Name: "r", Namespace: "ns"},
		Output: []File{
			{Path: "a/db.yaml", Data: []byte("apiVersion: v1\nkind: DB\nmetadata: {name: a}\n")},
			{Path: "b/db.yaml", Data: []byte("apiVersion: v1\nkind: DB\nmetadata: {name: b}\n")},
		},
		Selectors: []SelectorEntry{{Directory: "a", Selector: Selector{MatchLabels: map[string]string{"env": "dev"}}},
			{Directory: "b", Selector: Selector{MatchLabels: map[string]string{"env": "dev"}}}},
		Strategy: Spread,
		Load:     Load{Total: map[string]int{"d1": 1}},
	}
	for _, n := range []string{"d1", "d2", "d3"} {
		in.Destinations = append(in.Destinations, Destination{Name: n, Path: n, Store: StoreRef{Kind: "GitStateStore", Name: "s"}, Mode: NestedByMetadata, Labels: map[string]string{"env": "dev"}})
	}
	var asked []string
	in.Weigh = func(ds []string) (Load, error) {
		asked = append(asked, ds...)
		return Load{Total: map[string]int{"d2": 4}}, nil
	}
	plan, err := Render(in)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(asked)
	if !slices.Equal(asked, []string{"d1", "d2", "d3"}) {
		t.Errorf("Weigh asked for %v, want each of d1, d2, d3 once", asked)
	}
	for _, g := range plan.Groups {
		if !slices.Equal(g.Destinations, []string{"d3"}) {
			t.Errorf("group %s on %v, want [d3] (d1 holds 1, d2 4 by Weigh)", g.Directory, g.Destinations)
		}
	}
	if len(in.Load.Total) != 1 || in.Load.Total["d1"] != 1 {
		t.Errorf("the caller's Load changed: %v", in.Load.Total)
	}
	in.Weigh = func([]string) (Load, error) { return Load{}, errors.New("bucket unreachable") }
	if _, err := Render(in); err == nil || err.Error() != "bucket unreachable" {
		t.Errorf("Render with a failing Weigh: %v, want its error", err)
	}
}
