package renderer

import (
	"path"
	"slices"
	"strings"
	"testing"
)

// A selector that matches nothing (a typo) must not take a workload away
// from where it was placed: Kratix keeps such a WorkPlacement and labels it
// misscheduled, and so does render, for dependencies and resources alike.
func TestMisscheduledPlacementsStay(t *testing.T) {
	dests := []Destination{dest("dev", labelsOf("env=dev")), dest("prod", labelsOf("env=prod")), dest("test", labelsOf("env=test"))}
	typo := []SelectorEntry{{Selector: Selector{MatchLabels: labelsOf("env=nowhere")}}}

	t.Run("promise, nothing matches", func(t *testing.T) {
		in := Input{Workflow: promiseWF(), Output: files("deps.yaml"), Destinations: dests, Selectors: typo,
			Previous: map[string][]string{DefaultGroup: {"dev", "prod"}}}
		p := mustRender(t, in)
		g := group(t, p, DefaultGroup)
		equal(t, g.Destinations, []string{"dev", "prod"})
		equal(t, g.Misscheduled, []string{"dev", "prod"})
		if !g.Unscheduled() || !g.Placed() {
			t.Fatalf("a group kept only where it no longer matches is unscheduled (exit 3) and placed (files kept): %v %v", g.Unscheduled(), g.Placed())
		}
		if g.KeptFrom != PlacedByRender {
			t.Fatalf("KeptFrom = %q", g.KeptFrom)
		}
		for _, d := range []string{"dev", "prod"} {
			v := verdict(g, d)
			if !v.Chosen || !v.Misscheduled || !strings.Contains(v.Reason, "env=nowhere") {
				t.Fatalf("verdict %s = %+v", d, v)
			}
		}
		if v := verdict(g, "test"); v.Chosen || v.Misscheduled {
			t.Fatalf("test was never placed: %+v", v)
		}
		// The files stay where they are, and the record keeps the placements.
		have := map[string]bool{}
		for _, w := range p.Writes {
			for f := range w.Files {
				have[f] = true
			}
		}
		for _, d := range []string{"dev", "prod"} {
			f := path.Join(d, NestedPrefix(in.Workflow, GroupID(DefaultGroup)), "deps.yaml")
			if !have[f] {
				t.Fatalf("%s not written; writes: %v", f, have)
			}
		}
		pl := p.Placements()
		if len(pl) != 1 || !slices.Equal(pl[0].Destinations, []string{"dev", "prod"}) {
			t.Fatalf("placements = %+v", pl)
		}
		if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "misscheduled") || !strings.Contains(p.Warnings[0], "dev, prod") {
			t.Fatalf("warnings = %q", p.Warnings)
		}
		equal(t, len(p.Unscheduled()), 1)
		equal(t, len(p.Misscheduled()), 1)
	})

	t.Run("promise, another destination matches", func(t *testing.T) {
		in := Input{Workflow: promiseWF(), Output: files("deps.yaml"), Destinations: dests,
			Selectors: []SelectorEntry{{Selector: Selector{MatchLabels: labelsOf("env=test")}}},
			Previous:  map[string][]string{DefaultGroup: {"dev", "prod"}}}
		g := group(t, mustRender(t, in), DefaultGroup)
		equal(t, g.Destinations, []string{"dev", "prod", "test"})
		equal(t, g.Misscheduled, []string{"dev", "prod"})
		if g.Unscheduled() {
			t.Fatal("a group that test matches is scheduled")
		}
	})

	t.Run("resource, nothing matches", func(t *testing.T) {
		in := Input{Workflow: resourceWF("r1"), Output: files("app.yaml"), Destinations: dests, Selectors: typo,
			Previous: map[string][]string{DefaultGroup: {"prod"}}, PreviousByKratix: true}
		p := mustRender(t, in)
		g := group(t, p, DefaultGroup)
		equal(t, g.Destinations, []string{"prod"})
		equal(t, g.Misscheduled, []string{"prod"})
		if !g.Unscheduled() || !g.Sticky || g.KeptFrom != PlacedByKratix {
			t.Fatalf("group = %+v", g)
		}
		if !strings.Contains(p.Warnings[0], "where Kratix placed it") {
			t.Fatalf("warning %q does not say Kratix placed it", p.Warnings[0])
		}
	})

	t.Run("a cordon is not a mismatch", func(t *testing.T) {
		c := dests[1]
		c.Unschedulable = true
		in := Input{Workflow: resourceWF("r1"), Output: files("app.yaml"), Destinations: []Destination{dests[0], c},
			Selectors: []SelectorEntry{{Selector: Selector{MatchLabels: labelsOf("env=prod")}}},
			Previous:  map[string][]string{DefaultGroup: {"prod"}}}
		p := mustRender(t, in)
		g := group(t, p, DefaultGroup)
		equal(t, g.Destinations, []string{"prod"})
		if len(g.Misscheduled) > 0 || g.Unscheduled() || len(p.Warnings) > 0 {
			t.Fatalf("a cordoned destination keeps what it has, matched: %+v, warnings %q", g, p.Warnings)
		}
	})

	t.Run("destination gone", func(t *testing.T) {
		in := Input{Workflow: promiseWF(), Output: files("deps.yaml"), Destinations: dests,
			Selectors: []SelectorEntry{{Selector: Selector{MatchLabels: labelsOf("env=dev")}}},
			Previous:  map[string][]string{DefaultGroup: {"dev", "gone"}}}
		p := mustRender(t, in)
		equal(t, group(t, p, DefaultGroup).Destinations, []string{"dev"})
		if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "no longer exists") {
			t.Fatalf("warnings = %q", p.Warnings)
		}
	})

	t.Run("static dependencies", func(t *testing.T) {
		pr := &Promise{Name: "jenkins", DestinationSelectors: []Selector{{MatchLabels: labelsOf("env=nowhere")}}, Dependencies: []byte("kind: Namespace\nmetadata:\n  name: j\n")}
		in := Input{Workflow: promiseWF(), Destinations: dests, Promise: pr, Previous: map[string][]string{DefaultGroup: {"prod"}}}
		p, err := RenderStatic(t.Context(), in)
		if err != nil {
			t.Fatal(err)
		}
		g := group(t, p, DefaultGroup)
		equal(t, g.Misscheduled, []string{"prod"})
	})
}

func TestMismatch(t *testing.T) {
	d := dest("prod", labelsOf("env=prod"))
	if r := Mismatch(Selector{MatchLabels: labelsOf("env=prod")}, d); len(r) != 0 {
		t.Fatalf("matching: %v", r)
	}
	d.Unschedulable = true
	if r := Mismatch(Selector{MatchLabels: labelsOf("env=prod")}, d); len(r) != 0 {
		t.Fatalf("a cordon is no mismatch: %v", r)
	}
	if r := Mismatch(Selector{MatchLabels: labelsOf("env=dev")}, d); len(r) != 1 || !strings.Contains(r[0], "env=prod") {
		t.Fatalf("mismatch: %v", r)
	}
}
