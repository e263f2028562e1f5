package fluxcheck

import (
	"context"

	"sort"
	"strings"
	"testing"

	"github.com/render-dev/render/renderer"
)

func outputFiles(m map[string]string) []renderer.File {
	var out []renderer.File
	for p, s := range m {
		out = append(out, renderer.File{Path: p, Data: []byte(s)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func paths(files []renderer.File) string {
	var out []string
	for _, f := range files {
		out = append(out, f.Path)
	}
	return strings.Join(out, " ")
}

func content(files []renderer.File, p string) string {
	for _, f := range files {
		if f.Path == p {
			return string(f.Data)
		}
	}
	return "<missing>"
}

func TestHydrateNothingToDo(t *testing.T) {
	in := outputFiles(map[string]string{"a.yaml": cm("a", ""), "x/deep/kustomization.yaml": "resources: []\n"})
	out, err := Hydrate(context.Background(), in)
	if err != nil || paths(out) != paths(in) {
		t.Errorf("got %s, %v", paths(out), err)
	}
}

func TestHydrateTopLevelFolder(t *testing.T) {
	in := outputFiles(map[string]string{
		"root.yaml":                 cm("root", "n"),
		"app/kustomization.yaml":    "namePrefix: app-\nresources: [deploy.yaml, svc]\n",
		"app/deploy.yaml":           "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n",
		"app/svc/kustomization.yml": "resources: [svc.yaml]\n",
		"app/svc/svc.yaml":          "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n",
		"app/README.md":             "notes",
		"plain/cm.yaml":             cm("plain", "n"),
	})
	out, err := Hydrate(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := paths(out), "app/hydrated.yaml plain/cm.yaml root.yaml"; got != want {
		t.Errorf("files: %s, want %s", got, want)
	}
	h := content(out, "app/hydrated.yaml")
	if !strings.Contains(h, "name: app-web") || strings.Count(h, "kind:") != 2 || strings.Contains(h, "config.kubernetes.io") {
		t.Errorf("app/hydrated.yaml:\n%s", h)
	}
	// The hydrated file is plain objects: it checks as Flux will read it.
	if _, err := CheckDestination(map[string][]byte{"resources/x/app/hydrated.yaml": []byte(h)}); err != nil {
		t.Error(err)
	}
}

func TestHydrateRoot(t *testing.T) {
	in := outputFiles(map[string]string{
		"kustomization.yaml":     "namespace: team\nresources: [a.yaml, used/b.yaml, used/c.yaml]\n",
		"a.yaml":                 cm("a", ""),
		"notes.txt":              "root files go too",
		"used/b.yaml":            cm("b", ""),
		"used/c.yaml":            cm("c", ""),
		"unused/d.yaml":          cm("d", ""),
		"own/kustomization.yaml": "resources: [e.yaml]\n",
		"own/e.yaml":             cm("e", ""),
	})
	out, err := Hydrate(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := paths(out), "hydrated.yaml own/hydrated.yaml unused/d.yaml"; got != want {
		t.Errorf("files: %s, want %s", got, want)
	}
	h := content(out, "hydrated.yaml")
	for _, name := range []string{"name: a", "name: b", "name: c", "namespace: team"} {
		if !strings.Contains(h, name) {
			t.Errorf("hydrated.yaml lacks %q:\n%s", name, h)
		}
	}
	if strings.Contains(h, "config.kubernetes.io/origin") {
		t.Errorf("origin annotations leaked:\n%s", h)
	}

	// Asked for by the user: kept.
	in2 := outputFiles(map[string]string{
		"kustomization.yaml": "buildMetadata: [originAnnotations]\nresources: [a.yaml]\n",
		"a.yaml":             cm("a", ""),
	})
	out, err = Hydrate(context.Background(), in2)
	if err != nil || !strings.Contains(content(out, "hydrated.yaml"), "config.kubernetes.io/origin") {
		t.Errorf("originAnnotations requested: %v\n%s", err, content(out, "hydrated.yaml"))
	}
}

func TestHydrateErrors(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		file  string
		msg   string
	}{
		{"scheduled twice", map[string]string{
			"kustomization.yaml":     "resources: [own]\n",
			"own/kustomization.yaml": "resources: [e.yaml]\n",
			"own/e.yaml":             cm("e", ""),
		}, "kustomization.yaml", "scheduled twice"},
		{"remote base", map[string]string{
			"app/kustomization.yaml": "resources:\n- github.com/example/repo/deploy?ref=v1\n",
		}, "app/kustomization.yaml", "remote base"},
		{"broken build", map[string]string{
			"app/kustomization.yaml": "resources: [nope.yaml]\n",
		}, "app/kustomization.yaml", "nope.yaml"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Hydrate(context.Background(), outputFiles(c.files))
			ie := inputError(t, err)
			if ie.File != c.file || !strings.Contains(ie.Msg, c.msg) {
				t.Errorf("got %v; want file %s, message with %q", ie, c.file, c.msg)
			}
		})
	}
}
