package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// kratixRepo fills w's repository (store path "clusters") with files laid
// out exactly as Kratix's writers lay them out, as one commit: the paths
// of its workplacement controller (nestedByMetadata:
// <dest>/resources/<ns>/<promise>/<name>/<pipeline>/<id>/<file>; none:
// <dest>/<file> with a .kratix/<ns>-<workplacement>.yaml ledger listing
// them; aggregatedYAML: one <dest>/aggregated.yaml of every workload's
// documents joined by "\n---\n"), its destination controller's canaries
// and its promise controller's static dependencies.
func kratixRepo(t *testing.T, w *world, files map[string]string) {
	t.Helper()
	work := filepath.Join(w.root, "kratix-clone")
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=kratix", "GIT_AUTHOR_EMAIL=kratix@example.com", "GIT_COMMITTER_NAME=kratix", "GIT_COMMITTER_EMAIL=kratix@example.com")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if out, err := exec.Command("git", "init", "--bare", "--quiet", "--initial-branch=main", w.repo).CombinedOutput(); err != nil {
		t.Fatalf("git init --bare: %v\n%s", err, out)
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	git("init", "--quiet", "--initial-branch=main")
	for p, c := range files {
		writeFile(t, filepath.Join(work, "clusters", p), c)
	}
	git("add", "-A")
	git("commit", "--quiet", "-m", "Update from: kratix")
	git("push", "--quiet", w.repo, "main")
}

const (
	kNamespace = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kratix-worker-system\nspec: {}\nstatus: {}\n"
	kConfigMap = "apiVersion: v1\ndata:\n  canary: this confirms your infrastructure is reading from Kratix state stores\nkind: ConfigMap\nmetadata:\n  name: kratix-info\n  namespace: kratix-worker-system\n"
)

// A repository Kratix wrote is adopted: a resource stays where Kratix put
// it, its own <id> folders and ledgered files are its own (stale ones go,
// the ledger is replaced by a record), aggregated.yaml keeps the documents
// of workloads render does not know, nobody else's files are touched, and
// no canary is duplicated.
func TestAdoptsAStoreKratixWrote(t *testing.T) {
	w := newWorld(t)
	dev := map[string]string{"env": "dev"}
	w.file("platform/destinations.yaml", docs(
		// Kratix's placements are on cordoned destinations: a new
		// placement would go to "open".
		dest("nested", dev, "unschedulable: true"),
		dest("agg", dev, "unschedulable: true", "filepath: {mode: aggregatedYAML}"),
		dest("flat", dev, "unschedulable: true", "filepath: {mode: none}"),
		dest("open", dev),
	))
	w.file("platform/promise.yaml", pgPromise+"  dependencies:\n  - apiVersion: v1\n    kind: Namespace\n    metadata: {name: pg-system}\n")
	cm := func(name, data string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n  namespace: ns\ndata:\n  v: " + data + "\n"
	}
	kratixRepo(t, w, map[string]string{
		// Canaries, as the destination controller writes them.
		"nested/dependencies/kratix-canary-namespace.yaml": kNamespace,
		"nested/resources/kratix-canary-configmap.yaml":    kConfigMap,
		"agg/kratix-canary-namespace.yaml":                 kNamespace,
		"agg/kratix-canary-configmap.yaml":                 kConfigMap,
		"flat/kratix-canary-namespace.yaml":                kNamespace,
		"flat/kratix-canary-configmap.yaml":                kConfigMap,
		"open/dependencies/kratix-canary-namespace.yaml":   kNamespace,
		"open/resources/kratix-canary-configmap.yaml":      kConfigMap,
		// Promise pg: its install pipeline (a file since dropped) and its
		// static dependencies, on every destination.
		"nested/dependencies/pg/install/5058f/operator.yaml":       cm("operator", "old"),
		"nested/dependencies/pg/install/5058f/dropped.yaml":        cm("dropped", "old"),
		"nested/dependencies/pg/5058f/static/pg-dependencies.yaml": "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: pg-system\n",
		"open/dependencies/pg/install/5058f/operator.yaml":         cm("operator", "old"),
		"open/dependencies/pg/install/5058f/dropped.yaml":          cm("dropped", "old"),
		"open/dependencies/pg/5058f/static/pg-dependencies.yaml":   "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: pg-system\n",
		// Resource db1 (nested), with a file its pipeline no longer
		// writes, and db9, which render never renders.
		"nested/resources/ns/pg/db1/instance/5058f/db.yaml":    cm("db1", "old"),
		"nested/resources/ns/pg/db1/instance/5058f/stale.yaml": cm("db1-stale", "old"),
		"nested/resources/ns/pg/db9/instance/5058f/db.yaml":    cm("db9", "kratix"),
		// Resource db2 and a workload render does not know, aggregated
		// in workplacement order.
		"agg/aggregated.yaml": cm("db2", "old") + "\n---\n" + cm("db8", "kratix"),
		// Resource db3 (none) and its ledger; db7's file and ledger.
		"flat/db3.yaml":    cm("db3", "old"),
		"flat/stale3.yaml": cm("db3-stale", "old"),
		"flat/.kratix/ns-pg-db3-instance-x7k2q.flat-5058f.yaml": "files:\n- flat/db3.yaml\n- flat/stale3.yaml\n",
		"flat/db7.yaml": cm("db7", "kratix"),
		"flat/.kratix/ns-pg-db7-instance-p0m4z.flat-5058f.yaml": "files:\n- flat/db7.yaml\n",
	})

	for _, name := range []string{"db1", "db2", "db3"} {
		wf := w.workflow(name).setOutput(map[string]string{"db.yaml": cm(name, "new")})
		r := wf.mustRun(0, resourceEnv("pg", "ns", name, "instance"))
		if strings.Contains(r.out, "-> open") {
			t.Errorf("%s was placed again instead of staying where Kratix put it:\n%s", name, r)
		}
	}
	pw := w.workflow("install").setOutput(map[string]string{"operator.yaml": cm("operator", "new")})
	pw.mustRun(0, promiseEnv("pg", "install"))

	tree := repoTree(t, w.repo)
	want := map[string]string{
		"clusters/nested/resources/ns/pg/db1/instance/5058f/db.yaml": cm("db1", "new"),
		"clusters/nested/resources/ns/pg/db9/instance/5058f/db.yaml": cm("db9", "kratix"),
		// Kratix's order (its WorkPlacements' names: pg-db2-instance,
		// pg-db8-instance, pg-install, pg-static-deps) and bytes (each
		// file as it is, joined by "\n---\n"): db8, which render does not
		// know, stays where Kratix had it.
		"clusters/agg/aggregated.yaml": strings.Join([]string{
			cm("db2", "new"), cm("db8", "kratix"), cm("operator", "new"), "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: pg-system\n",
		}, "\n---\n"),
		"clusters/flat/db.yaml":  cm("db3", "new"),
		"clusters/flat/db7.yaml": cm("db7", "kratix"),
		"clusters/flat/.kratix/ns-pg-db7-instance-p0m4z.flat-5058f.yaml": "files:\n- flat/db7.yaml\n",
		"clusters/nested/dependencies/pg/install/5058f/operator.yaml":    cm("operator", "new"),
		"clusters/open/dependencies/pg/install/5058f/operator.yaml":      cm("operator", "new"),
		"clusters/agg/kratix-canary-namespace.yaml":                      kNamespace,
		"clusters/flat/kratix-canary-configmap.yaml":                     kConfigMap,
	}
	for p, c := range want {
		if got, ok := tree[p]; !ok || got != c {
			t.Errorf("%s:\n got  %q (present %v)\n want %q", p, got, ok, c)
		}
	}
	for _, p := range []string{
		"clusters/nested/resources/ns/pg/db1/instance/5058f/stale.yaml",
		"clusters/flat/db3.yaml", "clusters/flat/stale3.yaml",
		"clusters/flat/.kratix/ns-pg-db3-instance-x7k2q.flat-5058f.yaml",
		"clusters/nested/dependencies/pg/install/5058f/dropped.yaml",
		"clusters/open/dependencies/pg/install/5058f/dropped.yaml",
		// No second canary where Kratix keeps them at the root.
		"clusters/agg/dependencies/kratix-canary-namespace.yaml",
		"clusters/flat/resources/kratix-canary-configmap.yaml",
	} {
		if _, ok := tree[p]; ok {
			t.Errorf("%s is still there", p)
		}
	}
	if left := underPrefix(tree, "clusters/open/resources/ns/"); len(left) > 0 {
		t.Errorf("a resource went to open: %v", left)
	}
	if got := tree["clusters/nested/dependencies/pg/5058f/static/pg-dependencies.yaml"]; got != "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: pg-system\n" {
		t.Errorf("static dependencies changed: %q", got)
	}

	// A second render of db2 keeps db8's document, once.
	w.workflow("db2").setOutput(map[string]string{"db.yaml": cm("db2", "newer")}).mustRun(0, resourceEnv("pg", "ns", "db2", "instance"))
	agg := repoTree(t, w.repo)["clusters/agg/aggregated.yaml"]
	if strings.Count(agg, "name: db8") != 1 || strings.Count(agg, "name: db2") != 1 || !strings.Contains(agg, "v: newer") {
		t.Errorf("aggregated.yaml after a second render:\n%s", agg)
	}

	// Deleting db9, which only Kratix wrote, removes its folder.
	del := w.workflow("delete").setOutput(nil)
	r := del.mustRun(0, with(resourceEnv("pg", "ns", "db9", "instance-delete"), "KRATIX_WORKFLOW_ACTION", "delete"))
	if left := underPrefix(repoTree(t, w.repo), "clusters/nested/resources/ns/pg/db9/"); len(left) > 0 {
		t.Errorf("the delete of a Kratix-written resource left %v\n%s", left, r)
	}
	// And db7, ledgered in the none destination: its file and ledger go.
	r = del.mustRun(0, with(resourceEnv("pg", "ns", "db7", "instance-delete"), "KRATIX_WORKFLOW_ACTION", "delete"))
	tree = repoTree(t, w.repo)
	for _, p := range []string{"clusters/flat/db7.yaml", "clusters/flat/.kratix/ns-pg-db7-instance-p0m4z.flat-5058f.yaml"} {
		if _, ok := tree[p]; ok {
			t.Errorf("the delete of db7 left %s\n%s", p, r)
		}
	}
}

// Taking over an aggregatedYAML destination changes nothing Flux would see
// when the output is the same (render writes Kratix's order and bytes), and
// drops the documents of files the adopted workload no longer writes.
func TestAdoptsAggregatedFileAsKratixWroteIt(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.file("platform/destinations.yaml", dest("agg", map[string]string{"env": "dev"}, "filepath: {mode: aggregatedYAML}"))
	w.file("platform/promise.yaml", pgPromise)
	cm := func(name string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n  namespace: ns\n"
	}
	// Kratix's file: WorkPlacements pg-db1-instance-*, pg-db2-instance-*,
	// pg-db3-instance-* in name order, each of db2's three files as read.
	kratixFile := strings.Join([]string{cm("db1"), cm("db2-a"), cm("db2-b"), cm("db2-c"), cm("db3")}, "\n---\n")
	kratixRepo(t, w, map[string]string{
		"agg/kratix-canary-namespace.yaml": kNamespace,
		"agg/kratix-canary-configmap.yaml": kConfigMap,
		"agg/aggregated.yaml":              kratixFile,
	})
	db2 := w.workflow("db2").setOutput(map[string]string{"a.yaml": cm("db2-a"), "b.yaml": cm("db2-b"), "c.yaml": cm("db2-c")})
	r := db2.mustRun(0, resourceEnv("pg", "ns", "db2", "instance"))
	if got := repoTree(t, w.repo)["clusters/agg/aggregated.yaml"]; got != kratixFile {
		t.Fatalf("the takeover rewrote aggregated.yaml:\n got  %q\n want %q\n%s", got, kratixFile, r)
	}
	if !strings.Contains(r.out, "(placed by Kratix, kept)") {
		t.Errorf("the report does not say Kratix placed db2:\n%s", r.out)
	}

	// db2 no longer writes b.yaml: its document goes, the others stay.
	w2 := newWorld(t)
	w2.file("platform/destinations.yaml", dest("agg", map[string]string{"env": "dev"}, "filepath: {mode: aggregatedYAML}"))
	w2.file("platform/promise.yaml", pgPromise)
	kratixRepo(t, w2, map[string]string{"agg/aggregated.yaml": kratixFile})
	w2.workflow("db2").setOutput(map[string]string{"a.yaml": cm("db2-a"), "c.yaml": cm("db2-c")}).mustRun(0, resourceEnv("pg", "ns", "db2", "instance"))
	want := strings.Join([]string{cm("db1"), cm("db2-a"), cm("db2-c"), cm("db3")}, "\n---\n")
	if got := repoTree(t, w2.repo)["clusters/agg/aggregated.yaml"]; got != want {
		t.Fatalf("aggregated.yaml:\n got  %q\n want %q", got, want)
	}
	// And db1, taken over later, keeps the order.
	w2.workflow("db1").setOutput(map[string]string{"db.yaml": cm("db1")}).mustRun(0, resourceEnv("pg", "ns", "db1", "instance"))
	if got := repoTree(t, w2.repo)["clusters/agg/aggregated.yaml"]; got != want {
		t.Fatalf("after db1's takeover:\n got  %q\n want %q", got, want)
	}
}
