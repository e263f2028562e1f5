package cli_test

import (
	"fmt"
	"strings"
	"testing"
)

// Issue #17: render as a drop-in for Kratix's writer.

const pgPromise = `apiVersion: platform.kratix.io/v1alpha1
kind: Promise
metadata:
  name: pg
spec:
  destinationSelectors:
  - matchLabels: {env: dev}
  workflows:
    resource:
      configure:
      - apiVersion: platform.kratix.io/v1alpha1
        kind: Pipeline
        metadata: {name: instance}
      - apiVersion: platform.kratix.io/v1alpha1
        kind: Pipeline
        metadata: {name: backup}
      delete:
      - apiVersion: platform.kratix.io/v1alpha1
        kind: Pipeline
        metadata: {name: instance-delete}
`

// A delete pipeline has its own name: `render --action delete` run there
// removes every file of the resource, from every configure pipeline, and
// nothing of another resource; a delete with nothing to remove says so.
func TestDeletePipelineRemovesEveryPipeline(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", docs(dest("dev", map[string]string{"env": "dev"})))
	w.file("platform/promise.yaml", pgPromise)
	for _, pipe := range []string{"instance", "backup"} {
		wf := w.workflow("db1-" + pipe).setOutput(map[string]string{"x.yaml": objNamed("ConfigMap", "db1-"+pipe)})
		wf.mustRun(0, resourceEnv("pg", "ns", "db1", pipe))
	}
	other := w.workflow("db2").setOutput(map[string]string{"x.yaml": objNamed("ConfigMap", "db2")})
	other.mustRun(0, resourceEnv("pg", "ns", "db2", "instance"))

	del := w.workflow("delete").setOutput(nil)
	r := del.mustRun(0, with(resourceEnv("pg", "ns", "db1", "instance-delete"), "KRATIX_WORKFLOW_ACTION", "delete"))
	tree := repoTree(t, w.repo)
	if left := underPrefix(tree, "clusters/dev/resources/ns/pg/db1/"); len(left) > 0 {
		t.Errorf("the delete left %v\n%s", left, r)
	}
	if _, ok := tree["clusters/dev/resources/ns/pg/db2/instance/5058f/x.yaml"]; !ok {
		t.Errorf("the delete removed another resource's file: %v", keysOf(tree))
	}
	for p := range tree {
		if strings.HasPrefix(p, "clusters/.render/workloads/resource/ns/pg/db1/") {
			t.Errorf("record %s left behind", p)
		}
	}

	// Again: nothing left to remove, and the report says so.
	r = del.mustRun(0, with(resourceEnv("pg", "ns", "db1", "instance-delete"), "KRATIX_WORKFLOW_ACTION", "delete"))
	if !strings.Contains(r.out, "nothing to remove") {
		t.Errorf("a delete with nothing to remove does not say so:\n%s", r)
	}
}

// A promise delete removes every pipeline's dependencies and the static
// dependencies.
func TestPromiseDeleteRemovesEverything(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", docs(dest("dev", map[string]string{"env": "dev"})))
	w.file("platform/promise.yaml", pgPromise+"  dependencies:\n  - apiVersion: v1\n    kind: Namespace\n    metadata: {name: pg-system}\n")
	for _, pipe := range []string{"install", "crds"} {
		wf := w.workflow(pipe).setOutput(map[string]string{"x.yaml": objNamed("ConfigMap", pipe)})
		wf.mustRun(0, promiseEnv("pg", pipe))
	}
	if left := underPrefix(repoTree(t, w.repo), "clusters/dev/dependencies/pg/"); len(left) != 3 {
		t.Fatalf("before the delete: %v", left)
	}
	del := w.workflow("delete").setOutput(nil)
	r := del.mustRun(0, with(promiseEnv("pg", "promise-delete"), "KRATIX_WORKFLOW_ACTION", "delete"))
	if left := underPrefix(repoTree(t, w.repo), "clusters/dev/dependencies/pg/"); len(left) > 0 {
		t.Errorf("the promise delete left %v\n%s", left, r)
	}
}

// A Promise's spec.dependencies are written as Kratix writes them, to
// dependencies/<promise>/5058f/static/<promise>-dependencies.yaml in every
// destination its destinationSelectors match, with Kratix's bytes; removing
// them from the Promise removes the file.
func TestStaticDependencies(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", docs(
		dest("dev", map[string]string{"env": "dev"}),
		dest("prod", map[string]string{"env": "prod"}),
		dest("flat", map[string]string{"env": "dev"}, "filepath: {mode: none}"),
	))
	deps := "  dependencies:\n" +
		"  - apiVersion: v1\n    kind: Namespace\n    metadata:\n      name: pg-system\n      labels: {team: data}\n" +
		"  - apiVersion: apps/v1\n    kind: Deployment\n    metadata: {name: pg-operator, namespace: pg-system}\n    spec:\n      replicas: 2\n      template:\n        spec:\n          containers:\n          - name: op\n            image: pg:1\n"
	w.file("platform/promise.yaml", pgPromise+deps)
	wf := w.workflow("install").setOutput(map[string]string{"x.yaml": objNamed("ConfigMap", "install")})
	r := wf.mustRun(0, promiseEnv("pg", "install"))
	// What Kratix's promise controller writes: yaml.v2, keys sorted, block
	// sequences not indented, documents separated by ---.
	want := "apiVersion: v1\nkind: Namespace\nmetadata:\n  labels:\n    team: data\n  name: pg-system\n" +
		"---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: pg-operator\n  namespace: pg-system\nspec:\n  replicas: 2\n  template:\n    spec:\n      containers:\n      - image: pg:1\n        name: op\n"
	tree := repoTree(t, w.repo)
	if got := tree["clusters/dev/dependencies/pg/5058f/static/pg-dependencies.yaml"]; got != want {
		t.Errorf("static dependencies in dev:\n got  %q\n want %q\n%s", got, want, r)
	}
	if got := tree["clusters/flat/static/pg-dependencies.yaml"]; got != want {
		t.Errorf("static dependencies in the none destination: %q; tree %v", got, keysOf(tree))
	}
	if left := underPrefix(tree, "clusters/prod/dependencies/pg/"); len(left) > 0 {
		t.Errorf("prod does not match the Promise's selector, got %v", left)
	}
	if !strings.Contains(r.out, "static dependencies") {
		t.Errorf("the report does not mention the static dependencies:\n%s", r)
	}

	// Another pipeline of the promise writes the same file: no conflict.
	w.workflow("crds").setOutput(map[string]string{"y.yaml": objNamed("ConfigMap", "crds")}).mustRun(0, promiseEnv("pg", "crds"))

	// The Promise drops its dependencies: the next promise render removes them.
	w.file("platform/promise.yaml", pgPromise)
	wf.mustRun(0, promiseEnv("pg", "install"))
	tree = repoTree(t, w.repo)
	for _, p := range []string{"clusters/dev/dependencies/pg/5058f/static/pg-dependencies.yaml", "clusters/flat/static/pg-dependencies.yaml"} {
		if _, ok := tree[p]; ok {
			t.Errorf("%s stayed after the Promise dropped spec.dependencies", p)
		}
	}
}

// workflow-control.yaml with suspend or retryAfter: Kratix creates no Work,
// so render writes nothing and says why (exit 0).
func TestWorkflowControlSkipsWriting(t *testing.T) {
	for _, control := range []string{"suspend: true\nmessage: waiting for approval\n", "retryAfter: 5m\n"} {
		w := newWorld(t)
		w.file("platform/destinations.yaml", dest("dev", nil))
		wf := w.workflow("wf").setOutput(map[string]string{"x.yaml": obj("ConfigMap")})
		writeFile(t, wf.metadata+"/workflow-control.yaml", control)
		r := wf.mustRun(0, resourceEnv("pg", "ns", "db", "instance"))
		if branchTip(t, w.repo) != "" {
			t.Errorf("%q: the store was written:\n%s", control, r)
		}
		if !strings.Contains(r.out, "nothing written: workflow-control.yaml asks to") {
			t.Errorf("%q: the report does not say why:\n%s", control, r)
		}
	}
	// suspend: false is an ordinary render.
	w := newWorld(t)
	w.file("platform/destinations.yaml", dest("dev", nil))
	wf := w.workflow("wf").setOutput(map[string]string{"x.yaml": obj("ConfigMap")})
	writeFile(t, wf.metadata+"/workflow-control.yaml", "suspend: false\n")
	wf.mustRun(0, resourceEnv("pg", "ns", "db", "instance"))
	if branchTip(t, w.repo) == "" {
		t.Error("suspend: false wrote nothing")
	}
}

// A Promise with spec.workflows.config.pipelineNamespace: Kratix files its
// resources under that namespace. Two resources of one name in different
// namespaces would share one folder, where Kratix overwrites one with the
// other; render refuses the second (exit 2), naming the first.
func TestPipelineNamespaceFolder(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", dest("dev", nil))
	w.file("platform/promise.yaml", "apiVersion: platform.kratix.io/v1alpha1\nkind: Promise\nmetadata:\n  name: pg\nspec:\n  workflows:\n    config: {pipelineNamespace: pipelines}\n")
	a := w.workflow("a").setOutput(map[string]string{"x.yaml": objNamed("ConfigMap", "a")})
	a.mustRun(0, resourceEnv("pg", "team-a", "db", "instance"))
	if _, ok := repoTree(t, w.repo)["clusters/dev/resources/pipelines/pg/db/instance/5058f/x.yaml"]; !ok {
		t.Fatalf("not under the pipeline namespace: %v", keysOf(repoTree(t, w.repo)))
	}
	b := w.workflow("b").setOutput(map[string]string{"y.yaml": objNamed("ConfigMap", "b")})
	r := b.mustRun(2, resourceEnv("pg", "team-b", "db", "instance"))
	if !strings.Contains(r.errout, "resource/team-a/pg/db/instance") {
		t.Errorf("the refusal does not name the other resource:\n%s", r)
	}
	if _, ok := repoTree(t, w.repo)["clusters/dev/resources/pipelines/pg/db/instance/5058f/y.yaml"]; ok {
		t.Error("the second resource was written into the first's folder")
	}
}

// --inherit-promise-workflow-selector=false is Kratix since v0.67.0: the
// resource workflow ignores the root selector its promise workflow left.
func TestInheritedSelectorSetting(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", docs(dest("gold", map[string]string{"tier": "gold"}), dest("silver", map[string]string{"tier": "silver"})))
	pw := w.workflow("promise").setOutput(nil)
	pw.setSelectors("- matchLabels: {tier: gold}\n")
	pw.mustRun(0, promiseEnv("pg", "install"))
	seen := map[string]bool{}
	for i := range 8 {
		rw := w.workflow(fmt.Sprintf("r%d", i)).setOutput(map[string]string{"db.yaml": objNamed("DB", fmt.Sprintf("db%d", i))})
		r := rw.mustRun(0, resourceEnv("pg", "ns", fmt.Sprintf("db%d", i), "configure"), "-o", "json", "--inherit-promise-workflow-selector=false")
		rep := decodeReport(t, r)
		if rep.Groups[0].Selector != "<none>" {
			t.Fatalf("selector %q, want none inherited", rep.Groups[0].Selector)
		}
		for _, d := range groupDests(t, rep, ".") {
			seen[d] = true
		}
	}
	if !seen["silver"] {
		t.Errorf("without inheritance, eight resources spread over %v: silver never chosen", seen)
	}
}

// Kratix's canaries go to every Destination of the store a render writes,
// even one no workload goes to, at Kratix's paths for its filepath mode;
// spec.initWorkloads.enabled: false means none.
func TestCanariesOnEveryDestination(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", docs(
		dest("dev", map[string]string{"env": "dev"}),
		dest("idle", map[string]string{"env": "prod"}),
		dest("agg", map[string]string{"env": "prod"}, "filepath: {mode: aggregatedYAML}"),
		dest("quiet", map[string]string{"env": "prod"}, "initWorkloads: {enabled: false}"),
	))
	wf := w.workflow("wf").setOutput(map[string]string{"x.yaml": obj("ConfigMap")})
	wf.setSelectors("- matchLabels: {env: dev}\n")
	wf.mustRun(0, promiseEnv("pg", "install"))
	tree := repoTree(t, w.repo)
	for _, p := range []string{
		"clusters/idle/dependencies/kratix-canary-namespace.yaml", "clusters/idle/resources/kratix-canary-configmap.yaml",
		"clusters/agg/kratix-canary-namespace.yaml", "clusters/agg/kratix-canary-configmap.yaml",
	} {
		if _, ok := tree[p]; !ok {
			t.Errorf("missing canary %s", p)
		}
	}
	if left := underPrefix(tree, "clusters/quiet/"); len(left) > 0 {
		t.Errorf("initWorkloads disabled, yet %v", left)
	}
	if left := underPrefix(tree, "clusters/agg/dependencies/"); len(left) > 0 {
		t.Errorf("an aggregatedYAML destination got %v", left)
	}
}
