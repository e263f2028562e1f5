package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/renderer"
)

// misscheduledWorld is two destinations, each holding a resource of its
// own besides the promise's dependencies, so that the breaker (whose
// default is to refuse emptying a destination) cannot be what saves them.
func misscheduledWorld(t *testing.T) (*world, *workflow) {
	t.Helper()
	w := newWorld(t)
	w.file("platform/destinations.yaml", docs(
		dest("dev", map[string]string{"env": "dev", "tier": "app"}),
		dest("prod", map[string]string{"env": "prod", "tier": "app"}),
	))
	for _, r := range []struct{ name, env string }{{"r-dev", "dev"}, {"r-prod", "prod"}} {
		w.workflow(r.name).setOutput(map[string]string{"app.yaml": objNamed("ConfigMap", r.name)}).
			setSelectors("- matchLabels: {env: "+r.env+"}\n").
			mustRun(0, resourceEnv("app", "team", r.name, "configure"))
	}
	deps := w.workflow("deps").setOutput(map[string]string{"operator.yaml": objNamed("ConfigMap", "operator"), "crds/crd.yaml": objNamed("ConfigMap", "crd")}).
		setSelectors("- matchLabels: {tier: app}\n")
	deps.mustRun(0, promiseEnv("db", "install"))
	return w, deps
}

func mustHave(t *testing.T, tree map[string]string, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, ok := tree[p]; !ok {
			t.Errorf("%s is gone; tree: %v", p, slices.Sorted(mapKeys(tree)))
		}
	}
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

var depsOn = func(d string) []string {
	return []string{"clusters/" + d + "/dependencies/db/install/5058f/operator.yaml", "clusters/" + d + "/dependencies/db/install/5058f/crds/crd.yaml"}
}

// The case, tried as a new user would: a typo in the promise
// workflow's selector matches nothing. Nothing is deleted (Flux would
// prune the operator on both workers), the exit code is 3, and every
// report says where the group stays and why.
func TestSelectorTypoDeletesNothing(t *testing.T) {
	w, deps := misscheduledWorld(t)
	before := repoTree(t, w.repo)
	deps.setSelectors("- matchLabels: {tier: ap}\n") // the typo

	// The dry run says so first.
	r := deps.run(promiseEnv("db", "install"), "--dry-run", "-o", "json")
	if r.code != 3 {
		t.Fatalf("dry run: want exit 3, got %s", r)
	}
	rep := decodeReport(t, r)
	g := rep.Groups[0]
	if !g.Unscheduled || !slices.Equal(g.Destinations, []string{"dev", "prod"}) || !slices.Equal(g.Misscheduled, []string{"dev", "prod"}) || g.KeptFrom != "render" {
		t.Fatalf("group in the JSON report: %+v", g)
	}
	for _, v := range g.Verdicts {
		if !v.Chosen || !v.Misscheduled || !strings.Contains(v.Filtered, "tier=ap") {
			t.Fatalf("verdict %+v", v)
		}
	}
	for _, s := range rep.Stores {
		for _, d := range s.Destinations {
			if len(d.Deleted) > 0 {
				t.Fatalf("the dry run would delete %v", d.Deleted)
			}
		}
	}

	r = deps.run(promiseEnv("db", "install"))
	if r.code != 3 {
		t.Fatalf("want exit 3, got %s", r)
	}
	for _, want := range []string{
		"group . is unscheduled: no destination matches selector tier=ap",
		"dev: label tier=ap: the destination has tier=app", "prod: label tier=ap: the destination has tier=app",
		"it is kept on dev, prod, where it was placed, as Kratix keeps a misscheduled placement, and nothing was deleted",
	} {
		if !strings.Contains(r.errout, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r)
		}
	}
	if !strings.Contains(r.out, "-> dev, prod (UNSCHEDULED: nothing matches; kept where it was placed, misscheduled)") ||
		!strings.Contains(r.out, "kept, misscheduled (placed earlier, no longer matches): label tier=ap") {
		t.Errorf("text report:\n%s", r.out)
	}
	after := repoTree(t, w.repo)
	for p := range before {
		if _, ok := after[p]; !ok {
			t.Errorf("%s was deleted", p)
		}
	}
	mustHave(t, after, append(depsOn("dev"), depsOn("prod")...)...)

	// A changed output still lands where the group is kept.
	deps.setOutput(map[string]string{"operator.yaml": objNamed("ConfigMap", "operator-v2"), "crds/crd.yaml": objNamed("ConfigMap", "crd")})
	if r := deps.run(promiseEnv("db", "install")); r.code != 3 {
		t.Fatalf("want exit 3, got %s", r)
	}
	if got := repoTree(t, w.repo)[depsOn("prod")[0]]; !strings.Contains(got, "operator-v2") {
		t.Errorf("the kept placement was not updated: %q", got)
	}
}

// The same for a resource group: its selector typo keeps it where it is.
func TestResourceSelectorTypoDeletesNothing(t *testing.T) {
	w, _ := misscheduledWorld(t)
	env := resourceEnv("app", "team", "r-prod", "configure")
	wf := w.workflow("r-prod").setOutput(map[string]string{"app.yaml": objNamed("ConfigMap", "r-prod"), "db/db.yaml": objNamed("ConfigMap", "r-prod-db")}).
		setSelectors("- matchLabels: {env: prod}\n- directory: db\n  matchLabels: {env: prod}\n")
	wf.mustRun(0, env)
	dbFile := "clusters/prod/resources/team/app/r-prod/configure/" + renderer.GroupID("db") + "/db/db.yaml"
	mustHave(t, repoTree(t, w.repo), dbFile)

	wf.setSelectors("- matchLabels: {env: prod}\n- directory: db\n  matchLabels: {env: prdo}\n")
	r := wf.run(env)
	if r.code != 3 || !strings.Contains(r.errout, "group db is unscheduled") || !strings.Contains(r.errout, "it is kept on prod, where it was placed, as Kratix keeps a misscheduled placement") {
		t.Fatalf("want exit 3 naming group db, got %s", r)
	}
	mustHave(t, repoTree(t, w.repo), dbFile, "clusters/prod/resources/team/app/r-prod/configure/5058f/app.yaml")
}

// A destination relabelled so that it no longer matches keeps the
// promise's dependencies (Kratix's misscheduled WorkPlacement): the render
// succeeds, since dev still matches, and says prod is misscheduled.
func TestRelabelledDestinationKeepsDependencies(t *testing.T) {
	w, deps := misscheduledWorld(t)
	w.file("platform/destinations.yaml", docs(
		dest("dev", map[string]string{"env": "dev", "tier": "app"}),
		dest("prod", map[string]string{"env": "prod", "tier": "frozen"}),
	))
	r := deps.mustRun(0, promiseEnv("db", "install"), "-o", "json")
	g := decodeReport(t, r).Groups[0]
	if g.Unscheduled || !slices.Equal(g.Misscheduled, []string{"prod"}) || !slices.Equal(g.Destinations, []string{"dev", "prod"}) {
		t.Fatalf("group: %+v", g)
	}
	mustHave(t, repoTree(t, w.repo), append(depsOn("dev"), depsOn("prod")...)...)
	// The sidecar's log says it once per render, not per file.
	r = deps.mustRun(0, promiseEnv("db", "install"))
	if n := strings.Count(r.out, "misscheduled"); n < 1 {
		t.Fatalf("the report does not say prod is misscheduled:\n%s", r)
	}
}

// prune-misscheduled removes kept placements on purpose, through the
// breaker, and leaves everything else as it is.
func TestPruneMisscheduled(t *testing.T) {
	w, deps := misscheduledWorld(t)
	// A third destination holding only the dependencies: pruning there
	// empties it, which the breaker refuses by default.
	w.file("platform/destinations.yaml", docs(
		dest("dev", map[string]string{"env": "dev", "tier": "app"}),
		dest("prod", map[string]string{"env": "prod", "tier": "app"}),
		dest("test", map[string]string{"env": "test", "tier": "app"}),
	))
	deps.mustRun(0, promiseEnv("db", "install"))
	mustHave(t, repoTree(t, w.repo), depsOn("test")...)
	// Now only dev matches.
	w.file("platform/destinations.yaml", docs(
		dest("dev", map[string]string{"env": "dev", "tier": "app"}),
		dest("prod", map[string]string{"env": "prod", "tier": "legacy"}),
		dest("test", map[string]string{"env": "test", "tier": "legacy"}),
	))
	deps.mustRun(0, promiseEnv("db", "install"))
	prune := func(want int, extra ...string) result {
		t.Helper()
		r := run(t, nil, append([]string{"prune-misscheduled", "--platform", w.platform}, extra...)...)
		if r.code != want {
			t.Fatalf("want exit %d, got %s", want, r)
		}
		return r
	}

	// A dry run names what would go, and writes nothing; it says the
	// breaker would refuse emptying test (exit 4).
	tip := branchTip(t, w.repo)
	r := prune(4, "--dry-run", "-o", "json")
	var rep struct {
		Destinations []string `json:"destinations"`
		DryRun       bool     `json:"dryRun"`
		Pruned       []struct {
			Workload, Group, Destination, Reason string
			Files                                int
		} `json:"pruned"`
	}
	if err := json.Unmarshal([]byte(r.out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, r)
	}
	if !rep.DryRun || len(rep.Pruned) != 2 || rep.Pruned[0].Destination != "prod" || rep.Pruned[1].Destination != "test" ||
		rep.Pruned[0].Workload != "promise/db/install" || rep.Pruned[0].Files != 2 || !strings.Contains(rep.Pruned[0].Reason, "tier=legacy") {
		t.Fatalf("dry run report: %+v\n%s", rep, r)
	}
	if branchTip(t, w.repo) != tip {
		t.Fatal("the dry run wrote")
	}

	// On prod only: r-prod stays, the dependencies go.
	prune(0, "--destination", "prod")
	tree := repoTree(t, w.repo)
	mustHave(t, tree, append(depsOn("dev"), depsOn("test")...)...)
	mustHave(t, tree, "clusters/prod/resources/team/app/r-prod/configure/5058f/app.yaml", "clusters/dev/resources/team/app/r-dev/configure/5058f/app.yaml")
	for _, p := range depsOn("prod") {
		if _, ok := tree[p]; ok {
			t.Errorf("%s was not pruned", p)
		}
	}
	// A render does not bring it back: the record forgot prod.
	r = deps.mustRun(0, promiseEnv("db", "install"), "-o", "json")
	if g := decodeReport(t, r).Groups[0]; !slices.Equal(g.Destinations, []string{"dev", "test"}) {
		t.Fatalf("after the prune the group is on %v", g.Destinations)
	}

	// test holds nothing else: emptying it needs --allow-mass-deletion.
	tip = branchTip(t, w.repo)
	r = prune(4)
	if !strings.Contains(r.out+r.errout, "destination test") || branchTip(t, w.repo) != tip {
		t.Fatalf("the breaker did not refuse emptying test:\n%s", r)
	}
	prune(0, "--allow-mass-deletion")
	tree = repoTree(t, w.repo)
	for _, p := range depsOn("test") {
		if _, ok := tree[p]; ok {
			t.Errorf("%s was not pruned", p)
		}
	}
	mustHave(t, tree, depsOn("dev")...)
	// Nothing left to prune.
	if r := prune(0); !strings.Contains(r.out, "0 placements pruned") {
		t.Fatalf("second prune:\n%s", r)
	}
	// Bad input: an unknown destination.
	if r := prune(2, "--destination", "nope"); !strings.Contains(r.errout, `destination "nope" is not defined`) {
		t.Fatalf("%s", r)
	}
}

// The same in a bucket, in every filepath mode: a typo deletes nothing,
// and prune-misscheduled removes what it says, aggregated documents too.
func TestSelectorTypoDeletesNothingInABucket(t *testing.T) {
	m := testenv.MinIO(t)
	bucket := m.CreateBucket(t, "render-missched")
	w := newWorld(t)
	w.file("platform/bucket.yaml", docs(bucketStore("minio", m.Endpoint(), bucket, "minio-creds"), s3Secret("minio-creds", m.AccessKey(), m.SecretKey())))
	inBucket := func(d string) string {
		return strings.Replace(strings.Replace(d, "kind: GitStateStore", "kind: BucketStateStore", 1), "name: default", "name: minio", 1)
	}
	w.file("platform/destinations.yaml", docs(
		inBucket(dest("dev", map[string]string{"env": "dev", "tier": "app"})),
		inBucket(dest("agg", map[string]string{"env": "prod", "tier": "app"}, "filepath: {mode: aggregatedYAML}")),
		inBucket(dest("flat", map[string]string{"env": "test", "tier": "app"}, "filepath: {mode: none}")),
	))
	for _, r := range []struct{ name, env string }{{"r-dev", "dev"}, {"r-prod", "prod"}, {"r-test", "test"}} {
		w.workflow(r.name).setOutput(map[string]string{r.name + ".yaml": objNamed("ConfigMap", r.name)}).
			setSelectors("- matchLabels: {env: "+r.env+"}\n").
			mustRun(0, resourceEnv("app", "team", r.name, "configure"))
	}
	deps := w.workflow("deps").setOutput(map[string]string{"operator.yaml": objNamed("ConfigMap", "operator")}).
		setSelectors("- matchLabels: {tier: app}\n")
	deps.mustRun(0, promiseEnv("db", "install"))
	c := m.Client(t)
	read := func(key string) string {
		t.Helper()
		o, err := c.GetObject(context.Background(), bucket, key, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		b, err := io.ReadAll(o)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	before := bucketKeys(t, c, bucket)
	aggBefore := read("clusters/agg/aggregated.yaml")
	if !strings.Contains(aggBefore, "name: operator") {
		t.Fatalf("aggregated.yaml lacks the dependencies: %q", aggBefore)
	}

	deps.setSelectors("- matchLabels: {tier: ap}\n")
	if r := deps.run(promiseEnv("db", "install")); r.code != 3 || !strings.Contains(r.errout, "nothing was deleted") {
		t.Fatalf("want exit 3, got %s", r)
	}
	if after := bucketKeys(t, c, bucket); !slices.Equal(before, after) {
		t.Fatalf("objects changed:\n before %v\n after  %v", before, after)
	}
	if got := read("clusters/agg/aggregated.yaml"); got != aggBefore {
		t.Fatalf("aggregated.yaml changed: %q", got)
	}

	// Pruned on purpose, in the aggregated and the flat destination.
	if r := run(t, nil, "prune-misscheduled", "--platform", w.platform, "--destination", "agg"); r.code != 0 {
		t.Fatalf("prune agg: %s", r)
	}
	if got := read("clusters/agg/aggregated.yaml"); strings.Contains(got, "operator") || !strings.Contains(got, "name: r-prod") {
		t.Fatalf("aggregated.yaml after the prune: %q", got)
	}
	if r := run(t, nil, "prune-misscheduled", "--platform", w.platform, "--destination", "flat"); r.code != 0 {
		t.Fatalf("prune flat: %s", r)
	}
	keys := bucketKeys(t, c, bucket)
	for _, k := range []string{"clusters/flat/operator.yaml"} {
		if slicesContains(keys, k) {
			t.Errorf("%s was not pruned", k)
		}
	}
	for _, k := range []string{"clusters/flat/r-test.yaml", "clusters/dev/dependencies/db/install/5058f/operator.yaml"} {
		if !slicesContains(keys, k) {
			t.Errorf("%s is gone", k)
		}
	}
}

// A resource placed on dev, dev relabelled so that it no longer matches,
// and prod now matching: the resource is kept on dev (as Kratix keeps a
// misscheduled WorkPlacement), and that is not unscheduled work: exit 0,
// and the report says where it is kept, that prod matches now, and what
// moves it. Before, the render exited 3 with "UNSCHEDULED: nothing
// matches", never naming prod.
func TestKeptWorkNamesWhatMatchesNow(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", docs(dest("dev", map[string]string{"env": "prod"}), dest("prod", map[string]string{"env": "prod"}, "unschedulable: true")))
	r := w.workflow("r").setOutput(map[string]string{"app.yaml": objNamed("ConfigMap", "r")}).setSelectors("- matchLabels: {env: prod}\n")
	env := resourceEnv("app", "team", "r", "configure")
	r.mustRun(0, env)
	// dev is relabelled; prod opens.
	w.file("platform/destinations.yaml", docs(dest("dev", map[string]string{"env": "staging"}), dest("prod", map[string]string{"env": "prod"})))

	res := r.run(env)
	if res.code != 0 {
		t.Fatalf("want exit 0 (kept work is placed, not unscheduled), got %s", res)
	}
	for _, want := range []string{
		"-> dev (misscheduled on dev: kept where it was placed; matches now: prod)",
		"group . is kept on dev, where an earlier render placed it, as Kratix keeps a misscheduled placement: selector env=prod no longer matches there (dev: label env=prod: the destination has env=staging)",
		"prod matches it now: `render drain dev` moves it there (with every resource on dev), or `render prune-misscheduled --destination dev` removes it there and its next render places it anew",
	} {
		if !strings.Contains(res.out, want) {
			t.Errorf("report lacks %q:\n%s", want, res.out)
		}
	}
	if strings.Contains(res.out+res.errout, "UNSCHEDULED") || strings.Contains(res.out+res.errout, "nothing matches") {
		t.Errorf("kept work reported as unscheduled:\n%s", res)
	}
	js := decodeReport(t, r.run(env, "-o", "json"))
	if g := js.Groups[0]; g.Unscheduled || !slices.Equal(g.Misscheduled, []string{"dev"}) || len(js.Warnings) != 1 || !strings.Contains(js.Warnings[0], "prod matches it now") {
		t.Errorf("JSON report: group %+v, warnings %q", g, js.Warnings)
	}
	if on := placedOn(t, repoTree(t, w.repo), "team", "app", "r"); fmt.Sprint(on) != "[dev]" {
		t.Fatalf("r is on %v, want [dev] (kept)", on)
	}

	// The commands the message names do what it says.
	if p := run(t, nil, "prune-misscheduled", "--destination", "dev", "--platform", w.platform, "--allow-mass-deletion"); p.code != 0 {
		t.Fatalf("prune: %s", p)
	}
	r.mustRun(0, env)
	if on := placedOn(t, repoTree(t, w.repo), "team", "app", "r"); fmt.Sprint(on) != "[prod]" {
		t.Fatalf("after the prune and a render, r is on %v, want [prod]", on)
	}
}

// The other command the message names: a drain moves the kept resource
// to the destination that matches now.
func TestKeptWorkMovesWithDrain(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", docs(dest("dev", map[string]string{"env": "prod"}), dest("prod", map[string]string{"env": "prod"}, "unschedulable: true")))
	r := w.workflow("r").setOutput(map[string]string{"app.yaml": objNamed("ConfigMap", "r")}).setSelectors("- matchLabels: {env: prod}\n")
	env := resourceEnv("app", "team", "r", "configure")
	r.mustRun(0, env)
	w.file("platform/destinations.yaml", docs(dest("dev", map[string]string{"env": "staging"}), dest("prod", map[string]string{"env": "prod"})))
	if d := run(t, nil, "drain", "dev", "--platform", w.platform, "--allow-mass-deletion"); d.code != 0 || !strings.Contains(d.out, "dev -> prod") {
		t.Fatalf("drain: %s", d)
	}
	res := r.mustRun(0, env)
	if on := placedOn(t, repoTree(t, w.repo), "team", "app", "r"); fmt.Sprint(on) != "[prod]" || strings.Contains(res.out, "misscheduled") {
		t.Fatalf("after the drain, r is on %v:\n%s", on, res.out)
	}
}
