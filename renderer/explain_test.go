package renderer

import (
	"reflect"
	"testing"
)

// TestEveryFilterReasonIsShown: a destination filtered out for several
// reasons lists all of them, so a user who fixes one learns about the next.
func TestEveryFilterReasonIsShown(t *testing.T) {
	a := dest("a", map[string]string{"env": "prod"})
	a.Unschedulable = true
	b := dest("b", map[string]string{"env": "dev", "zone": "eu"})
	in := Input{
		Workflow: resourceWF("r1"), Output: files("x.yaml"), Destinations: []Destination{a, b},
		Selectors: []SelectorEntry{{Selector: Selector{MatchLabels: map[string]string{"env": "dev", "zone": "eu"}}}},
	}
	g := group(t, mustRender(t, in), DefaultGroup)
	want := []string{
		"label env=dev: the destination has env=prod",
		"label zone=eu: the destination has no label zone",
		"cordoned (spec.unschedulable): takes no new placements",
	}
	if got := verdict(g, "a").Reasons; !reflect.DeepEqual(got, want) {
		t.Fatalf("reasons of a = %q, want %q", got, want)
	}
	if got, w := verdict(g, "a").Reason, want[0]+"; "+want[1]+"; "+want[2]; got != w {
		t.Fatalf("reason of a = %q, want %q", got, w)
	}
	equal(t, g.Destinations, []string{"b"})
}

// TestTieBrokenByHashIsShown: the chosen destination names the candidates it
// tied with, so --explain can say that the stable hash decided.
func TestTieBrokenByHashIsShown(t *testing.T) {
	dests := []Destination{dest("a", nil), dest("b", nil), dest("c", nil)}
	in := Input{Workflow: resourceWF("r1"), Output: files("x.yaml"), Destinations: dests,
		Load: Load{Total: map[string]int{"a": 1, "b": 1, "c": 3}}}
	g := group(t, mustRender(t, in), DefaultGroup)
	chosen := verdict(g, g.Destinations[0])
	other := map[string]string{"a": "b", "b": "a"}[chosen.Destination]
	if other == "" || !reflect.DeepEqual(chosen.TiedWith, []string{other}) {
		t.Fatalf("chosen %s tied with %q, want [%s] (a and b both hold 1 resource)", chosen.Destination, chosen.TiedWith, other)
	}
	// No tie: nothing to say.
	in.Load.Total["a"] = 0
	g = group(t, mustRender(t, in), DefaultGroup)
	if v := verdict(g, "a"); !v.Chosen || len(v.TiedWith) != 0 {
		t.Fatalf("least loaded a: chosen %v, tied with %q; want chosen, no tie", v.Chosen, v.TiedWith)
	}
}
