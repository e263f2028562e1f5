package engine

import (
	"context"
	"reflect"
	"testing"

	"github.com/render-dev/render/renderer"
)

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
		plan, err := schedule(context.Background(), rin, early)
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
