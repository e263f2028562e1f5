package cli_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// The mass-deletion breaker, end to end: each realistic way a destination
// gets wiped is refused with exit 4 and nothing written, --dry-run shows
// the verdict, and the flag or the store's field lets it through.

func wantBreaker(t *testing.T, r result, want ...string) {
	t.Helper()
	if r.code != 4 {
		t.Fatalf("want exit 4 (mass deletion refused), got %s", r)
	}
	for _, s := range append([]string{"--allow-mass-deletion", "spec.massDeletion.allow: true in GitStateStore default"}, want...) {
		if !strings.Contains(r.errout, s) {
			t.Errorf("stderr lacks %q:\n%s", s, r.errout)
		}
	}
}

func TestBreakerPlatformLostItsDestinations(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", docs(dest("dev-eu", map[string]string{"env": "dev"}), dest("dev-us", map[string]string{"env": "dev"}), dest("prod", map[string]string{"env": "prod"})))
	wf := w.workflow("promise").setOutput(map[string]string{"op.yaml": obj("Deployment"), "crd.yaml": obj("CustomResourceDefinition")})
	wf.setSelectors("- matchLabels: {env: dev}\n")
	env := promiseEnv("pg", "install")
	wf.mustRun(0, env)
	tip := branchTip(t, w.repo)

	// The platform's Destinations file lost dev-eu and dev-us: the promise's
	// dependencies would vanish from both.
	w.file("platform/destinations.yaml", dest("prod", map[string]string{"env": "prod"}))
	r := wf.run(env)
	wantBreaker(t, r, "mass deletion refused (nothing was written)",
		"GitStateStore/default: destination dev-eu (dev-eu) would be left with no workload files (2 of 2 deleted)",
		"destination dev-us (dev-us) would be left with no workload files (2 of 2 deleted)")
	if got := branchTip(t, w.repo); got != tip {
		t.Fatalf("the refused render moved the branch: %s -> %s", tip, got)
	}

	dry := wf.run(env, "--dry-run")
	wantBreaker(t, dry, "mass deletion would be refused")
	for _, s := range []string{"    - dependencies/pg/install/5058f/op.yaml", "mass-deletion breaker: GitStateStore/default: destination dev-eu (dev-eu) would be left with no workload files (2 of 2 deleted): REFUSED"} {
		if !strings.Contains(dry.out, s) {
			t.Errorf("dry run does not show %q:\n%s", s, dry.out)
		}
	}
	js := wf.run(env, "--dry-run", "-o", "json")
	var rep struct {
		MassDeletion struct {
			Stores []struct {
				Store string
				Trips []struct {
					Path                   string
					Before, Deleted, After int
					Rule                   string
				}
			}
		} `json:"massDeletion"`
	}
	if err := json.Unmarshal([]byte(js.out), &rep); err != nil || js.code != 4 {
		t.Fatalf("json dry run: %v\n%s", err, js)
	}
	if s := rep.MassDeletion.Stores; len(s) != 1 || len(s[0].Trips) != 2 || s[0].Trips[0].Path != "dev-eu" || s[0].Trips[0].Before != 2 || s[0].Trips[0].After != 0 || s[0].Trips[0].Rule != "empty" {
		t.Errorf("json verdict: %+v", rep.MassDeletion)
	}
	if got := branchTip(t, w.repo); got != tip {
		t.Fatal("a dry run wrote")
	}

	// Allowed by the flag, the render goes ahead (the group is unscheduled).
	r = wf.mustRun(3, env, "--allow-mass-deletion")
	if left := underPrefix(repoTree(t, w.repo), "clusters/dev-eu/dependencies/pg/"); len(left) > 0 {
		t.Errorf("files left after an allowed mass deletion: %v", left)
	}
}

func TestBreakerEmptyOutputFolder(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", dest("dev", nil))
	env := resourceEnv("pg", "team", "r1", "configure")
	wf := w.workflow("r1").setOutput(map[string]string{"db.yaml": objNamed("ConfigMap", "r1"), "svc.yaml": objNamed("Service", "r1")})
	wf.mustRun(0, env)
	tip := branchTip(t, w.repo)

	// A crashed step left the output folder empty.
	wf.setOutput(nil)
	wantBreaker(t, wf.run(env), "destination dev (dev) would be left with no workload files (2 of 2 deleted)")
	if branchTip(t, w.repo) != tip {
		t.Fatal("the refused render wrote")
	}

	// Deleting the workload on purpose empties the destination: allowed.
	wf.mustRun(0, with(env, "KRATIX_WORKFLOW_ACTION", "delete"))
	if left := underPrefix(repoTree(t, w.repo), "clusters/dev/resources/team/"); len(left) > 0 {
		t.Errorf("delete left %v", left)
	}
}

func TestBreakerOtherWorkloadsKeepTheDestination(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", dest("dev", nil))
	r1 := w.workflow("r1").setOutput(map[string]string{"a.yaml": objNamed("ConfigMap", "r1a"), "b.yaml": objNamed("ConfigMap", "r1b")})
	r2 := w.workflow("r2").setOutput(map[string]string{"a.yaml": objNamed("ConfigMap", "r2a")})
	env1, env2 := resourceEnv("pg", "team", "r1", "configure"), resourceEnv("pg", "team", "r2", "configure")
	r1.mustRun(0, env1)
	r2.mustRun(0, env2)

	// By default, emptying one workload's files is fine while another
	// workload keeps files in the destination.
	r1.setOutput(nil).mustRun(0, env1)
	r1.setOutput(map[string]string{"a.yaml": objNamed("ConfigMap", "r1a"), "b.yaml": objNamed("ConfigMap", "r1b")}).mustRun(0, env1)

	// With a limit of 50% of a destination's files, deleting 2 of 3 is refused.
	w.file("platform/store.yaml", gitStore("default", "file://"+w.repo)+"  massDeletion:\n    maxDestinationPercent: 50\n")
	tip := branchTip(t, w.repo)
	r := r1.setOutput(nil).run(env1)
	wantBreaker(t, r, "destination dev (dev) would lose 2 of its 3 workload files, more than spec.massDeletion.maxDestinationPercent (50%)")
	if branchTip(t, w.repo) != tip {
		t.Fatal("the refused render wrote")
	}
	// Deleting 1 of 3 is within it.
	r1.setOutput(map[string]string{"a.yaml": objNamed("ConfigMap", "r1a")}).mustRun(0, env1)

	// A store-wide limit counts every workload file of the store: deleting
	// r1 (1 of 2) passes 40%, even with --action delete.
	w.file("platform/store.yaml", gitStore("default", "file://"+w.repo)+"  massDeletion:\n    maxStorePercent: 40\n")
	wantBreaker(t, r1.run(with(env1, "KRATIX_WORKFLOW_ACTION", "delete")), "GitStateStore/default: the write deletes 1 of the store's 2 workload files, more than spec.massDeletion.maxStorePercent (40%)")

	// The store's field allows it.
	w.file("platform/store.yaml", gitStore("default", "file://"+w.repo)+"  massDeletion:\n    maxStorePercent: 40\n    allow: true\n")
	r = r1.mustRun(0, with(env1, "KRATIX_WORKFLOW_ACTION", "delete"))
	if !strings.Contains(r.errout, "mass deletion allowed") || !strings.Contains(r.errout, "allowed_by=spec.massDeletion.allow") {
		t.Errorf("an allowed mass deletion is not logged: %s", r)
	}
}

func TestBreakerDrain(t *testing.T) {
	w := newWorld(t)
	env := resourceEnv("pg", "team", "r1", "configure")
	w.file("platform/destinations.yaml", docs(dest("old", map[string]string{"pool": "a"}), dest("new", map[string]string{"pool": "a"}, "unschedulable: true")))
	wf := w.workflow("r1").setOutput(map[string]string{"db.yaml": objNamed("ConfigMap", "r1")})
	wf.setSelectors("- matchLabels: {pool: a}\n")
	wf.mustRun(0, env)
	tip := branchTip(t, w.repo)

	// A drain to nowhere: no other destination takes the resource. It stays,
	// nothing is deleted, and the breaker has nothing to say.
	r := run(t, nil, "drain", "old", "--platform", w.platform)
	if r.code != 3 || strings.Contains(r.errout, "mass deletion") || branchTip(t, w.repo) != tip {
		t.Fatalf("drain to nowhere: %s", r)
	}

	// A drain that moves old's only workload files away leaves old with
	// none: Flux on that cluster would prune everything. Refused by default.
	w.file("platform/destinations.yaml", docs(dest("old", map[string]string{"pool": "a"}, "unschedulable: true"), dest("new", map[string]string{"pool": "a"})))
	r = run(t, nil, "drain", "old", "--platform", w.platform)
	wantBreaker(t, r, "destination old (old) would be left with no workload files (1 of 1 deleted)")
	if branchTip(t, w.repo) != tip {
		t.Fatal("the refused drain wrote")
	}
	dry := run(t, nil, "drain", "old", "--platform", w.platform, "--dry-run")
	if dry.code != 4 || !strings.Contains(dry.out, "destination old (old) would be left with no workload files (1 of 1 deleted): REFUSED") {
		t.Fatalf("drain --dry-run does not show the verdict: %s", dry)
	}
	run(t, nil, "drain", "old", "--platform", w.platform, "--allow-mass-deletion")
	if on := placedOn(t, repoTree(t, w.repo), "team", "pg", "r1"); len(on) != 1 || on[0] != "new" {
		t.Fatalf("allowed drain did not move r1: %v", on)
	}
}

func TestBreakerSettingsAreChecked(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", dest("dev", nil))
	w.file("platform/store.yaml", gitStore("default", "file://"+w.repo)+"  massDeletion:\n    maxDestinationPercent: 150\n")
	wf := w.workflow("r1").setOutput(map[string]string{"db.yaml": obj("ConfigMap")})
	r := wf.mustRun(2, resourceEnv("pg", "team", "r1", "configure"))
	if !strings.Contains(r.errout, "store.yaml") || !strings.Contains(r.errout, "spec.massDeletion.maxDestinationPercent 150: use 0 (no limit) to 100") {
		t.Errorf("bad setting not named: %s", r)
	}
	w.file("platform/store.yaml", gitStore("default", "file://"+w.repo)+"  massDeletion:\n    maxDestinatonPercent: 10\n")
	r = wf.mustRun(2, resourceEnv("pg", "team", "r1", "configure"))
	if !strings.Contains(r.errout, "did you mean spec.massDeletion.maxDestinationPercent") {
		t.Errorf("typo not caught: %s", r)
	}
}
