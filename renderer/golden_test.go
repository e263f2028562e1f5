package renderer

import (
	"bytes"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

var update = flag.Bool("update", false, "rewrite the golden want/ folders under testdata")

// goldenCase is testdata/<case>/case.yaml: everything of the Input except
// the output files, which live in testdata/<case>/output/.
type goldenCase struct {
	Workflow struct {
		Type, Action, Promise, Pipeline, Name, Namespace string
	} `yaml:"workflow"`
	Promise      *Promise        `yaml:"promise"`
	Selectors    []SelectorEntry `yaml:"selectors"`
	Destinations []struct {
		Name     string            `yaml:"name"`
		Labels   map[string]string `yaml:"labels"`
		Path     string            `yaml:"path"`
		Strict   bool              `yaml:"strictMatchLabels"`
		Mode     string            `yaml:"mode"`
		Filename string            `yaml:"filename"`
		Store    string            `yaml:"store"`
	} `yaml:"destinations"`
	Previous map[string][]string `yaml:"previous"`
}

// TestGolden renders each testdata case and compares every file of every
// store with testdata/<case>/want/<store kind>/<store name>/<path>, plus
// want/PLAN, a summary of the groups. Run with -update to rewrite them.
func TestGolden(t *testing.T) {
	cases, _ := filepath.Glob("testdata/*/case.yaml")
	if len(cases) == 0 {
		t.Fatal("no golden cases found")
	}
	for _, c := range cases {
		dir := filepath.Dir(c)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			in := loadGolden(t, dir)
			p, err := Render(in)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			got := map[string][]byte{"PLAN": planSummary(p)}
			for _, w := range p.Writes {
				for path, data := range w.Files {
					got[filepath.Join(w.Store.Kind, w.Store.Name, path)] = data
				}
				for path, data := range w.Shared {
					got[filepath.Join(w.Store.Kind, w.Store.Name, path)] = data
				}
				for _, a := range w.Aggregates {
					got[filepath.Join(w.Store.Kind, w.Store.Name, a.Target)] = a.Contribution
				}
			}
			want := filepath.Join(dir, "want")
			if *update {
				os.RemoveAll(want)
				for p, data := range got {
					full := filepath.Join(want, p)
					os.MkdirAll(filepath.Dir(full), 0o755)
					if err := os.WriteFile(full, data, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			wantFiles := readTree(t, want)
			for p, data := range got {
				if w, ok := wantFiles[p]; !ok {
					t.Errorf("unexpected file %s", p)
				} else if !bytes.Equal(w, data) {
					t.Errorf("%s differs:\n got  %q\n want %q", p, data, w)
				}
			}
			for p := range wantFiles {
				if _, ok := got[p]; !ok {
					t.Errorf("missing file %s", p)
				}
			}
		})
	}
}

func loadGolden(t *testing.T, dir string) Input {
	data, err := os.ReadFile(filepath.Join(dir, "case.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c goldenCase
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	in := Input{
		Workflow: Workflow{Type: WorkflowType(c.Workflow.Type), Action: Action(c.Workflow.Action), Promise: c.Workflow.Promise,
			Pipeline: c.Workflow.Pipeline, Name: c.Workflow.Name, Namespace: c.Workflow.Namespace},
		Promise: c.Promise, Selectors: c.Selectors, Previous: c.Previous,
	}
	if in.Workflow.Action == "" {
		in.Workflow.Action = Configure
	}
	for _, d := range c.Destinations {
		kind, name, _ := strings.Cut(d.Store, "/")
		dd := Destination{Name: d.Name, Labels: d.Labels, Path: d.Path, StrictMatchLabels: d.Strict,
			Mode: FilepathMode(d.Mode), Filename: d.Filename, Store: StoreRef{Kind: kind, Name: name}}
		if dd.Path == "" {
			dd.Path = dd.Name
		}
		if dd.Mode == "" {
			dd.Mode = NestedByMetadata
		}
		in.Destinations = append(in.Destinations, dd)
	}
	for p, data := range readTree(t, filepath.Join(dir, "output")) {
		in.Output = append(in.Output, File{Path: filepath.ToSlash(p), Data: data})
	}
	sort.Slice(in.Output, func(i, j int) bool { return in.Output[i].Path < in.Output[j].Path })
	return in
}

func readTree(t *testing.T, root string) map[string][]byte {
	out := map[string][]byte{}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, p)
		out[rel] = data
		return nil
	})
	return out
}

func planSummary(p *Plan) []byte {
	var b strings.Builder
	for _, g := range p.Groups {
		dest := strings.Join(g.Destinations, ",")
		if g.Unscheduled() {
			dest = "UNSCHEDULED"
		}
		b.WriteString("group " + g.Directory + " " + g.ID + " selector " + g.Selector.String() + " -> " + dest + "\n")
		for _, v := range g.Verdicts {
			if v.Reason != "" {
				b.WriteString("  " + v.Destination + ": " + v.Reason + "\n")
			}
		}
	}
	for _, w := range p.Warnings {
		b.WriteString("warning: " + w + "\n")
	}
	return []byte(b.String())
}
