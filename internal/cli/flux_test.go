package cli_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/render-dev/render/internal/fluxcheck"
)

// buildEveryDestination builds each destination folder of the repository
// the way Flux's kustomize-controller does, and fails on any error. It
// returns the objects per destination.
func buildEveryDestination(t *testing.T, repo string, dests ...string) map[string][]fluxcheck.Object {
	t.Helper()
	tree := repoTree(t, repo)
	out := map[string][]fluxcheck.Object{}
	for _, d := range dests {
		files := map[string][]byte{}
		prefix := "clusters/" + d + "/"
		for p, c := range tree {
			if strings.HasPrefix(p, prefix) {
				files[strings.TrimPrefix(p, prefix)] = []byte(c)
			}
		}
		if len(files) == 0 {
			t.Fatalf("destination %s has no folder", d)
		}
		objs, err := fluxcheck.CheckDestination(files)
		if err != nil {
			t.Fatalf("destination %s does not build: %v", d, err)
		}
		out[d] = objs
	}
	return out
}

func count(objs []fluxcheck.Object, section string) int {
	n := 0
	for _, o := range objs {
		if o.Section == section {
			n++
		}
	}
	return n
}

// Every folder render writes builds the way Flux builds it, through
// renders, changes and deletes, and still builds (with the canaries) once
// every workload is gone.
func TestWrittenFoldersBuildAsFluxBuilds(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", docs(dest("a", map[string]string{"env": "dev"}), dest("b", map[string]string{"env": "dev"})))
	pw := w.workflow("promise").setOutput(map[string]string{
		"crd.yaml":                "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: dbs.example.com\n",
		"operator.yaml":           "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: db-system\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: op\n  namespace: db-system\n",
		"kust/kustomization.yaml": "resources: [cm.yaml]\nnamePrefix: k-\n",
		"kust/cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  namespace: db-system\n",
	})
	pw.mustRun(0, promiseEnv("db", "install"))
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("r%d", i)
		rw := w.workflow(name).setOutput(map[string]string{"db.yaml": objNamed("ConfigMap", "db-"+name)})
		rw.mustRun(0, resourceEnv("db", "team", name, "configure"))
	}
	objs := buildEveryDestination(t, w.repo, "a", "b")
	if got := count(objs["a"], "dependencies") + count(objs["b"], "dependencies"); got != 2*5 {
		t.Errorf("dependencies objects across a and b: %d, want 10 (4 from the promise + the canary, on each)", got)
	}
	if got := count(objs["a"], "resources") + count(objs["b"], "resources"); got != 3+2 {
		t.Errorf("resources objects: %d, want 3 resources + 2 canaries", got)
	}
	// Delete everything: both folders still build, from the canaries alone.
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("r%d", i)
		w.workflow(name).mustRun(0, resourceEnv("db", "team", name, "configure"), "--action", "delete")
	}
	pw.mustRun(0, promiseEnv("db", "install"), "--action", "delete")
	objs = buildEveryDestination(t, w.repo, "a", "b")
	for _, d := range []string{"a", "b"} {
		if count(objs[d], "dependencies") != 1 || count(objs[d], "resources") != 1 {
			t.Errorf("destination %s after deleting everything: %v, want just the two canaries", d, objs[d])
		}
	}
}

// What Flux could not build is refused before anything is written.
func TestRefusesWhatFluxCannotBuild(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", docs(dest("a", nil)))
	cases := []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{"not an object", map[string]string{"values.yaml": "replicas: 3\nimage: nginx\n"}, []string{"values.yaml", "not a Kubernetes object"}},
		{"no name", map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n"}, []string{"cm.yaml", "metadata.name"}},
		{"duplicate in one workload", map[string]string{"one.yaml": objNamed("ConfigMap", "same"), "two.yaml": objNamed("ConfigMap", "same")}, []string{"one.yaml", "two.yaml"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := w.workflow("wf-" + strings.ReplaceAll(c.name, " ", "-")).setOutput(c.files).run(resourceEnv("p", "ns", "r", "pipe"))
			if r.code != 2 {
				t.Fatalf("want exit 2, got %s", r)
			}
			for _, s := range c.want {
				if !strings.Contains(r.errout, s) {
					t.Errorf("message lacks %q: %s", s, r.errout)
				}
			}
		})
	}
	// Across workloads: the second writer of one object is refused, naming
	// the other workload's file, and the first stays as it was.
	w.workflow("first").setOutput(map[string]string{"shared.yaml": objNamed("ConfigMap", "shared")}).mustRun(0, resourceEnv("p", "ns", "first", "pipe"))
	before := commitCount(t, w.repo)
	r := w.workflow("second").setOutput(map[string]string{"mine.yaml": objNamed("ConfigMap", "shared")}).run(resourceEnv("p", "ns", "second", "pipe"))
	if r.code != 2 || !strings.Contains(r.errout, "mine.yaml") || !strings.Contains(r.errout, "resource/ns/p/first/pipe") || !strings.Contains(r.errout, "shared.yaml") {
		t.Fatalf("duplicate across workloads: %s", r)
	}
	if commitCount(t, w.repo) != before {
		t.Fatal("a refused render wrote")
	}
}

// --hydrate builds an output folder that holds a kustomization.yaml into
// plain manifests before scheduling, so the store holds what will be
// applied; without it the kustomization is written as it is.
func TestHydrate(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", docs(dest("a", nil)))
	out := map[string]string{
		"app/kustomization.yaml": "resources: [cm.yaml]\nnamePrefix: prod-\ncommonLabels: {team: a}\n",
		"app/cm.yaml":            objNamed("ConfigMap", "settings"),
		"plain.yaml":             objNamed("ServiceAccount", "plain"),
	}
	wf := w.workflow("wf").setOutput(out)
	wf.mustRun(0, resourceEnv("p", "ns", "r", "pipe"), "--hydrate")
	tree := repoTree(t, w.repo)
	base := "clusters/a/resources/ns/p/r/pipe/5058f/"
	hydrated, ok := tree[base+"app/hydrated.yaml"]
	if !ok {
		t.Fatalf("no hydrated file: %v", keysOf(tree))
	}
	if !strings.Contains(hydrated, "name: prod-settings") || !strings.Contains(hydrated, "team: a") {
		t.Errorf("hydrated manifests were not built by kustomize:\n%s", hydrated)
	}
	if _, ok := tree[base+"app/kustomization.yaml"]; ok {
		t.Error("the recipe was written alongside the hydrated manifests")
	}
	if _, ok := tree[base+"plain.yaml"]; !ok {
		t.Error("a file outside the kustomization was dropped")
	}
	// Without --hydrate the recipe itself is written, and Flux builds it.
	wf.mustRun(0, resourceEnv("p", "ns", "r", "pipe"))
	tree = repoTree(t, w.repo)
	if _, ok := tree[base+"app/kustomization.yaml"]; !ok {
		t.Errorf("without --hydrate the kustomization should be written as it is: %v", keysOf(tree))
	}
	buildEveryDestination(t, w.repo, "a")
}
