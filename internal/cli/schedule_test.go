package cli_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// placedOn returns the destination a resource's db.yaml landed on.
func placedOn(t *testing.T, tree map[string]string, ns, promise, name string) []string {
	t.Helper()
	var out []string
	for p := range tree {
		parts := strings.Split(p, "/")
		// clusters/<dest>/resources/<ns>/<promise>/<name>/...
		if len(parts) > 6 && parts[2] == "resources" && parts[3] == ns && parts[4] == promise && parts[5] == name && !slices.Contains(out, parts[1]) {
			out = append(out, parts[1])
		}
	}
	return out
}

// Nine requests, three each of gold, silver and bronze, rendered one after
// another over three matching destinations, end with one of each flavour
// on each destination (the FlavourClusterWide spread).
func TestNineRequestsSpreadByFlavour(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", docs(dest("east", map[string]string{"pool": "a"}), dest("west", map[string]string{"pool": "a"}), dest("north", map[string]string{"pool": "a"})))
	perDest := map[string]map[string]int{}
	for i, flavour := range []string{"gold", "silver", "bronze", "gold", "silver", "bronze", "gold", "silver", "bronze"} {
		name := fmt.Sprintf("db%d", i)
		wf := w.workflow(name).setOutput(map[string]string{"db.yaml": objNamed("ConfigMap", name)})
		wf.setObject(fmt.Sprintf("apiVersion: x/v1\nkind: Database\nmetadata:\n  name: %s\n  namespace: team\n  labels:\n    flavour: %s\n", name, flavour))
		wf.mustRun(0, map[string]string{"KRATIX_WORKFLOW_TYPE": "resource", "KRATIX_PROMISE_NAME": "pg", "KRATIX_PIPELINE_NAME": "configure"})
		on := placedOn(t, repoTree(t, w.repo), "team", "pg", name)
		if len(on) != 1 {
			t.Fatalf("%s is on %v, want one destination", name, on)
		}
		if perDest[on[0]] == nil {
			perDest[on[0]] = map[string]int{}
		}
		perDest[on[0]][flavour]++
	}
	for _, d := range []string{"east", "west", "north"} {
		if got := perDest[d]; got["gold"] != 1 || got["silver"] != 1 || got["bronze"] != 1 {
			t.Errorf("destination %s holds %v, want one of each flavour", d, got)
		}
	}
}

// --dry-run --explain names, per destination, the selector key and value
// that failed; an unscheduled group prints the same short explanation.
func TestExplainNamesTheFailingKey(t *testing.T) {
	w := newWorld(t)
	strict := dest("strict", map[string]string{"tier": "gold"}, "strictMatchLabels: true")
	cordoned := dest("cordoned", map[string]string{"env": "dev"}, "unschedulable: true")
	w.file("platform/destinations.yaml", docs(dest("dev", map[string]string{"env": "dev"}), dest("prod", map[string]string{"env": "prod"}), strict, cordoned))
	wf := w.workflow("wf").setOutput(map[string]string{"db.yaml": obj("ConfigMap"), "gpu/x.yaml": obj("Job")})
	wf.setSelectors("- matchLabels: {env: dev}\n- directory: gpu\n  matchExpressions: [{key: accelerator, operator: In, values: [a100]}]\n")
	r := wf.mustRun(3, resourceEnv("p", "ns", "r", "pipe"), "--dry-run", "--explain")
	for _, want := range []string{
		"prod                 filtered out: label env=dev: the destination has env=prod",
		"strict               filtered out: label env=dev: the destination has no label env",
		"cordoned             filtered out: cordoned",
		"dev                  chosen",
		"expression accelerator in (a100): the destination has no label accelerator",
	} {
		if !strings.Contains(r.out, want) {
			t.Errorf("explanation lacks %q:\n%s", want, r.out)
		}
	}
	if !strings.Contains(r.errout, "group gpu is unscheduled") || !strings.Contains(r.errout, "dev: expression accelerator in (a100)") {
		t.Errorf("unscheduled message: %s", r.errout)
	}
	if _, err := os.Stat(w.repo); !os.IsNotExist(err) {
		t.Error("a dry run created the repository")
	}
}

// A cordoned destination takes no new resources; what is already there
// stays on later renders.
func TestCordonKeepsWhatIsThere(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", docs(dest("only", nil)))
	wf := w.workflow("wf").setOutput(map[string]string{"db.yaml": objNamed("ConfigMap", "a")})
	wf.mustRun(0, resourceEnv("p", "ns", "a", "pipe"))
	w.file("platform/destinations.yaml", docs(dest("only", nil, "unschedulable: true"), dest("fresh", nil)))
	wf.mustRun(0, resourceEnv("p", "ns", "a", "pipe"))
	b := w.workflow("b").setOutput(map[string]string{"db.yaml": objNamed("ConfigMap", "b")})
	b.mustRun(0, resourceEnv("p", "ns", "b", "pipe"))
	tree := repoTree(t, w.repo)
	if on := placedOn(t, tree, "ns", "p", "a"); fmt.Sprint(on) != "[only]" {
		t.Errorf("a moved off the cordoned destination: %v", on)
	}
	if on := placedOn(t, tree, "ns", "p", "b"); fmt.Sprint(on) != "[fresh]" {
		t.Errorf("b went to %v, want fresh (only is cordoned)", on)
	}
}

// render drain moves every resource off a destination, one commit per
// store, updates the records so later renders keep the new place, leaves
// promise dependencies, and reports what cannot move.
func TestDrain(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", docs(dest("old", map[string]string{"pool": "a"}), dest("new", map[string]string{"pool": "a"}), dest("solo", map[string]string{"pool": "b"})))
	env := func(name string) map[string]string { return resourceEnv("pg", "team", name, "configure") }
	// Three resources on "old" (the others cordoned while placing them).
	w.file("platform/destinations.yaml", docs(dest("old", map[string]string{"pool": "a"}), dest("new", map[string]string{"pool": "a"}, "unschedulable: true"), dest("solo", map[string]string{"pool": "b"}, "unschedulable: true")))
	for _, n := range []string{"r1", "r2"} {
		wf := w.workflow(n).setOutput(map[string]string{"db.yaml": objNamed("ConfigMap", n), "extra/cm.yaml": objNamed("ServiceAccount", n)})
		wf.setSelectors("- matchLabels: {pool: a}\n")
		wf.mustRun(0, env(n))
	}
	only := w.workflow("r3").setOutput(map[string]string{"db.yaml": objNamed("ConfigMap", "r3")})
	only.setSelectors("- matchLabels: {zone: mars}\n")
	w.file("platform/destinations.yaml", docs(dest("old", map[string]string{"pool": "a", "zone": "mars"}), dest("new", map[string]string{"pool": "a"}, "unschedulable: true"), dest("solo", map[string]string{"pool": "b"})))
	only.mustRun(0, env("r3"))
	w.workflow("promise").setOutput(map[string]string{"op.yaml": obj("Deployment")}).mustRun(0, promiseEnv("pg", "install"))
	// Now "old" is cordoned and "new" open.
	w.file("platform/destinations.yaml", docs(dest("old", map[string]string{"pool": "a", "zone": "mars"}, "unschedulable: true"), dest("new", map[string]string{"pool": "a"}), dest("solo", map[string]string{"pool": "b"})))
	before := commitCount(t, w.repo)

	dry := run(t, nil, "drain", "old", "--platform", w.platform, "--dry-run")
	if dry.code != 3 || !strings.Contains(dry.out, "would move resource/team/pg/r1/configure group . : old -> new") && !strings.Contains(dry.out, "group .: old -> new") {
		t.Fatalf("dry run: %s", dry)
	}
	if commitCount(t, w.repo) != before {
		t.Fatal("drain --dry-run wrote")
	}

	r := run(t, nil, "drain", "old", "--platform", w.platform)
	if r.code != 3 {
		t.Fatalf("want exit 3 (r3 cannot move), got %s", r)
	}
	if !strings.Contains(r.errout, "resource/team/pg/r3/configure group . could not move: no other destination matches selector zone=mars") {
		t.Errorf("stuck resource not explained: %s", r.errout)
	}
	if !strings.Contains(r.out, "stays: promise/pg/install group .: promise dependencies") {
		t.Errorf("promise dependencies not reported as staying: %s", r.out)
	}
	if got := commitCount(t, w.repo); got != before+1 {
		t.Fatalf("drain made %d commits, want 1", got-before)
	}
	tree := repoTree(t, w.repo)
	for _, n := range []string{"r1", "r2"} {
		if on := placedOn(t, tree, "team", "pg", n); fmt.Sprint(on) != "[new]" {
			t.Errorf("%s is on %v after the drain, want [new]", n, on)
		}
		moved := "clusters/new/resources/team/pg/" + n + "/configure/5058f/db.yaml"
		if tree[moved] != objNamed("ConfigMap", n) {
			t.Errorf("%s: content not copied: %q", moved, tree[moved])
		}
	}
	if on := placedOn(t, tree, "team", "pg", "r3"); fmt.Sprint(on) != "[old]" {
		t.Errorf("r3 should stay on old: %v", on)
	}
	if _, ok := tree["clusters/old/resources/kratix-canary-configmap.yaml"]; !ok {
		t.Error("the drained destination lost its canary")
	}
	// Records moved with the files: a later render keeps the new place.
	w.workflow("r1").mustRun(0, env("r1"))
	if on := placedOn(t, repoTree(t, w.repo), "team", "pg", "r1"); fmt.Sprint(on) != "[new]" {
		t.Errorf("r1 moved back to %v after a render", on)
	}
	// A second drain has nothing left to move but r3.
	again := run(t, nil, "drain", "old", "--platform", w.platform)
	if again.code != 3 || !strings.Contains(again.out, "0 groups moved") {
		t.Errorf("second drain: %s", again)
	}
	if bad := run(t, nil, "drain", "nowhere", "--platform", w.platform); bad.code != 2 || !strings.Contains(bad.errout, "known destinations: new, old, solo") {
		t.Errorf("unknown destination: %s", bad)
	}
}
