package engine

import (
	"context"
	"reflect"
	"testing"

	"github.com/render-dev/render/renderer"
)

// noLoad is a store where every destination is empty.
func noLoad([]string) (renderer.Load, bool, error) { return renderer.Load{}, false, nil }

// When the stores remember nothing the renderer reads, the plan made
// before reading them is the placement, taken as it is; anything they
// remember (an earlier placement, an inherited selector, a load counted
// from records) places the groups again.
func TestScheduleReusesThePreflightPlan(t *testing.T) {
	store := renderer.StoreRef{Kind: "GitStateStore", Name: "default"}
	var dests []renderer.Destination
	for _, n := range []string{"d1", "d2"} {
		dests = append(dests, renderer.Destination{Name: n, Path: n, Store: store, Mode: renderer.NestedByMetadata})
	}
	in := renderer.Input{
		Workflow:     renderer.Workflow{Type: renderer.ResourceWorkflow, Action: renderer.Configure, Promise: "pg", Pipeline: "x", Name: "r", Namespace: "ns"},
		Output:       []renderer.File{{Path: "db.yaml", Data: []byte("apiVersion: v1\nkind: DB\nmetadata: {name: db}\n")}},
		Destinations: dests, Strategy: renderer.Spread,
	}
	early, err := renderer.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		stores func(*renderer.Input)
		reuse  bool
	}{
		{"nothing remembered", func(*renderer.Input) {}, true},
		{"an earlier placement", func(in *renderer.Input) { in.Previous = map[string][]string{".": {"d2"}} }, false},
		{"an inherited selector", func(in *renderer.Input) { in.PromiseWorkflowSelector = map[string]string{"a": "b"} }, false},
		{"a load counted from records", func(in *renderer.Input) { in.Load.Total["d1"] = 1 }, false},
	} {
		rin := in
		applyFacts(&rin, nil, "")
		c.stores(&rin)
		plan, err := schedule(context.Background(), rin, early, noLoad)
		if err != nil {
			t.Fatal(err)
		}
		if (plan == early) != c.reuse {
			t.Errorf("%s: plan reused = %v, want %v", c.name, plan == early, c.reuse)
		}
		if c.reuse {
			again, err := renderer.Render(rin)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(again.Groups, early.Groups) || !reflect.DeepEqual(again.Writes, early.Writes) {
				t.Errorf("%s: placing again gives another plan than the one reused", c.name)
			}
		}
	}
}

// A pass renders once: the spread choice asks for the load of its
// candidates during that render, and of those only; a group that keeps
// its placement asks for none. Load found places the group where there
// is least.
func TestScheduleWeighsTheCandidatesInOneRender(t *testing.T) {
	store := renderer.StoreRef{Kind: "GitStateStore", Name: "default"}
	var dests []renderer.Destination
	for _, n := range []string{"d1", "d2", "d3"} {
		dests = append(dests, renderer.Destination{Name: n, Path: n, Store: store, Mode: renderer.NestedByMetadata,
			Labels: map[string]string{"zone": map[string]string{"d1": "a", "d2": "a", "d3": "b"}[n]}})
	}
	in := renderer.Input{
		Workflow:     renderer.Workflow{Type: renderer.ResourceWorkflow, Action: renderer.Configure, Promise: "pg", Pipeline: "x", Name: "r", Namespace: "ns"},
		Output:       []renderer.File{{Path: "db.yaml", Data: []byte("apiVersion: v1\nkind: DB\nmetadata: {name: db}\n")}},
		Destinations: dests, Strategy: renderer.Spread,
		Selectors: []renderer.SelectorEntry{{Selector: renderer.Selector{MatchLabels: map[string]string{"zone": "a"}}}},
	}
	early, err := renderer.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	var asked [][]string
	full := func(ds []string) (renderer.Load, bool, error) {
		asked = append(asked, ds)
		l := renderer.Load{Total: map[string]int{}}
		for _, d := range ds {
			l.Total[d] = map[string]int{"d1": 5, "d2": 1, "d3": 0}[d]
		}
		return l, true, nil
	}
	rin := in
	applyFacts(&rin, nil, "")
	plan, err := schedule(context.Background(), rin, early, full)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(asked, [][]string{{"d1", "d2"}}) {
		t.Errorf("asked for the load of %v, want [[d1 d2]] once (the candidates only)", asked)
	}
	if plan == early || len(plan.Groups) != 1 || !reflect.DeepEqual(plan.Groups[0].Destinations, []string{"d2"}) {
		t.Errorf("placed on %v, want [d2] (the least loaded candidate)", plan.Groups[0].Destinations)
	}
	// Kept where it was: no load asked for.
	asked = nil
	rin.Previous = map[string][]string{".": {"d1"}}
	if _, err := schedule(context.Background(), rin, early, full); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 0 {
		t.Errorf("a group that keeps its placement asked for the load of %v", asked)
	}
}
