package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/render-dev/render/internal/cli"
)

// twoStores is a world with destination near in store default (w.repo)
// and far in store far, and resource r1 placed on near.
func twoStores(t *testing.T) (w *world, far string, r1 *workflow) {
	t.Helper()
	w = newWorld(t)
	far = filepath.Join(w.root, "far.git")
	w.file("platform/far.yaml", gitStore("far", "file://"+far))
	w.file("platform/destinations.yaml", docs(dest("near", map[string]string{"pool": "a"}), dest("far", map[string]string{"pool": "a"}, "store=far", "unschedulable: true")))
	r1 = w.workflow("r1").setOutput(map[string]string{"db.yaml": objNamed("ConfigMap", "r1"), "svc/svc.yaml": objNamed("Service", "r1")})
	r1.setSelectors("- matchLabels: {pool: a}\n")
	r1.mustRun(0, resourceEnv("pg", "team", "r1", "configure"))
	// near is cordoned now, far open.
	w.file("platform/destinations.yaml", docs(dest("near", map[string]string{"pool": "a"}, "unschedulable: true"), dest("far", map[string]string{"pool": "a"}, "store=far")))
	return w, far, r1
}

// where lists the stores and destinations holding r1's files.
func where(t *testing.T, repos map[string]string) []string {
	t.Helper()
	return whereIs(t, repos, "r1")
}

// whereIs lists the stores and destinations holding resource name's files.
func whereIs(t *testing.T, repos map[string]string, resource string) []string {
	t.Helper()
	var out []string
	for name, repo := range repos {
		if branchTip(t, repo) == "" {
			continue
		}
		for _, d := range placedOn(t, repoTree(t, repo), "team", "pg", resource) {
			out = append(out, name+":"+d)
		}
	}
	slices.Sort(out)
	return out
}

// placementsIn is what the store's record of r1 says, "" without one.
func placementsIn(t *testing.T, repo string) string {
	t.Helper()
	if branchTip(t, repo) == "" {
		return ""
	}
	data, ok := repoTree(t, repo)["clusters/.render/workloads/resource/team/pg/r1/configure.json"]
	if !ok {
		return ""
	}
	var rec struct {
		Placements []struct {
			Group        string
			Destinations []string
		}
	}
	if err := json.Unmarshal([]byte(data), &rec); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(rec.Placements)
}

// lockBranch holds the branch of a local repository with a lock file
// whose owner render cannot check (git's own kind), so its writes fail
// within a short retry deadline; the returned func lets go.
func lockBranch(t *testing.T, repo string) func() {
	t.Helper()
	if _, err := os.Stat(repo); os.IsNotExist(err) {
		if out, err := exec.Command("git", "init", "--bare", "--quiet", "--initial-branch=main", repo).CombinedOutput(); err != nil {
			t.Fatalf("git init --bare: %v\n%s", err, out)
		}
	}
	unlock, err := takeLock(repo)
	if err != nil {
		t.Fatal(err)
	}
	return unlock
}

// takeLock is lockBranch's lock on an existing repository, for a fault
// injected from another goroutine than the test's.
func takeLock(repo string) (func(), error) {
	lock := filepath.Join(repo, "refs", "heads", "main.lock")
	if err := os.WriteFile(lock, []byte("0123456789012345678901234567890123456789\n"), 0o644); err != nil {
		return nil, err
	}
	return func() { os.Remove(lock) }, nil
}

// A drain from a destination of one store to a destination of another
// ends with the workload in exactly one place, its records in both
// stores agreeing, and later renders keeping it there. Before, the first
// attempt's copy of the record shared its objects with the drained
// store's basis, so the drained store's write was refused as stale; the
// retry then picked one of the workload's two records at random and
// could find nothing to move ("0 groups moved", files in both stores),
// and the report called the store it had written "up to date".
func TestDrainAcrossStores(t *testing.T) {
	w, far, r1 := twoStores(t)
	repos := map[string]string{"default": w.repo, "far": far}
	r := run(t, nil, "drain", "near", "--platform", w.platform, "--allow-mass-deletion")
	if r.code != 0 || !strings.Contains(r.out, "drain near: 1 groups moved") || !strings.Contains(r.out, "moved resource/team/pg/r1/configure group .: near -> far (2 files)") {
		t.Fatalf("want exit 0 and the move reported, got %s", r)
	}
	for _, s := range []string{"GitStateStore/default: wrote", "GitStateStore/far: wrote"} {
		if !strings.Contains(r.out, s) {
			t.Errorf("report lacks %q:\n%s", s, r.out)
		}
	}
	if got := where(t, repos); fmt.Sprint(got) != "[far:far]" {
		t.Fatalf("r1 is on %v after the drain, want [far:far]", got)
	}
	if p := placementsIn(t, w.repo); p != "" {
		t.Errorf("the drained store keeps a record of r1: %s", p)
	}
	if p := placementsIn(t, far); p != "[{. [far]}]" {
		t.Errorf("far's record of r1: %s", p)
	}
	if n := len(underPrefix(repoTree(t, far), "clusters/.render/objects/")); n != 2 {
		t.Errorf("far holds %d claims, want r1's 2 objects", n)
	}
	// Renders keep it where it went, and a second drain has nothing to do.
	r1.mustRun(0, resourceEnv("pg", "team", "r1", "configure"))
	if got := where(t, repos); fmt.Sprint(got) != "[far:far]" {
		t.Fatalf("r1 is on %v after a render, want [far:far]", got)
	}
	if again := run(t, nil, "drain", "near", "--platform", w.platform); again.code != 0 || !strings.Contains(again.out, "0 groups moved") {
		t.Errorf("second drain: %s", again)
	}
}

// The move's two writes come in an order that never leaves the workload
// nowhere: the store it moves into first, then the drained one. When the
// first fails, nothing is removed (before, both stores were written at
// once, and the drained one lost the files the other never got).
func TestDrainAcrossStoresWritesTheCopyFirst(t *testing.T) {
	w, far, _ := twoStores(t)
	repos := map[string]string{"default": w.repo, "far": far}
	before := branchTip(t, w.repo)
	unlock := lockBranch(t, far)
	r := run(t, nil, "drain", "near", "--platform", w.platform, "--allow-mass-deletion", "--retry-deadline", "1s")
	unlock()
	if r.code != 1 {
		t.Fatalf("want exit 1 (far cannot be written), got %s", r)
	}
	if branchTip(t, w.repo) != before {
		t.Error("the drained store was written although the copy failed")
	}
	if got := where(t, repos); fmt.Sprint(got) != "[default:near]" {
		t.Fatalf("r1 is on %v, want [default:near]: nothing moved", got)
	}
	for _, s := range []string{"nothing was removed from near", "nothing was moved off near"} {
		if !strings.Contains(r.errout, s) {
			t.Errorf("stderr lacks %q:\n%s", s, r.errout)
		}
	}
	if !strings.Contains(r.out, "1 groups to move, none moved (a store failed)") {
		t.Errorf("the report says something moved:\n%s", r.out)
	}
}

// When the removal from the drained destination's store fails after the
// copy landed, the drain takes the copy back out of the other store: the
// workload ends where it was, in one place, exit 1, and the message says
// nothing moved and why. Before, it stayed in both places, both applied by
// Flux ("drain near is unfinished"). Once the store can be written again,
// the drain moves it.
func TestDrainAcrossStoresUndoesTheCopyWhenTheRemovalFails(t *testing.T) {
	t.Parallel()
	w, far, r1 := twoStores(t)
	repos := map[string]string{"default": w.repo, "far": far}
	unlock := lockBranch(t, w.repo)
	r := run(t, nil, "drain", "near", "--platform", w.platform, "--allow-mass-deletion", "--retry-deadline", "1s")
	unlock()
	if r.code != 1 {
		t.Fatalf("want exit 1 (near's store cannot be written), got %s", r)
	}
	if got := where(t, repos); fmt.Sprint(got) != "[default:near]" {
		t.Fatalf("r1 is on %v, want [default:near]: the copy taken back, nothing moved", got)
	}
	if p := placementsIn(t, far); p != "" {
		t.Errorf("far keeps a record of r1: %s", p)
	}
	if claims := underPrefix(repoTree(t, far), "clusters/.render/objects/"); len(claims) > 0 {
		t.Errorf("far keeps r1's claims: %v", claims)
	}
	if p := placementsIn(t, w.repo); p != "[{. [near]}]" {
		t.Errorf("near's record of r1: %s", p)
	}
	for _, want := range []string{"GitStateStore/default", "nothing was moved off near", "the copies written to GitStateStore/far were removed again"} {
		if !strings.Contains(r.errout, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.errout)
		}
	}
	for _, want := range []string{"drain near: 1 groups to move, none moved (a store failed)", "not moved resource/team/pg/r1/configure group .: near -> far", "GitStateStore/far: copies removed again"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.out)
		}
	}
	if strings.Contains(r.errout, "unfinished") {
		t.Errorf("the drain calls itself unfinished, though nothing moved:\n%s", r.errout)
	}
	// Once near's store can be written, the drain moves r1, and renders
	// keep it there.
	if r = run(t, nil, "drain", "near", "--platform", w.platform, "--allow-mass-deletion"); r.code != 0 || !strings.Contains(r.out, "near -> far") {
		t.Fatalf("the second drain should move r1: %s", r)
	}
	if got := where(t, repos); fmt.Sprint(got) != "[far:far]" {
		t.Fatalf("r1 is on %v after the second drain, want [far:far]", got)
	}
	r1.mustRun(0, resourceEnv("pg", "team", "r1", "configure"))
	if got := where(t, repos); fmt.Sprint(got) != "[far:far]" {
		t.Fatalf("r1 is on %v after a render, want [far:far]", got)
	}
}

// A drain whose groups go into two stores, where the copy into one lands
// and the copy into the other fails: the drained destination's store is
// not written, and the copy that landed is taken back out, so every
// workload is where it was, once. Before, "nothing was moved off near"
// was said while one of them was on near and on the store whose copy
// landed.
func TestDrainIntoTwoStoresUndoesTheCopyThatLanded(t *testing.T) {
	w := newWorld(t)
	far1, far2 := filepath.Join(w.root, "far1.git"), filepath.Join(w.root, "far2.git")
	w.file("platform/far1.yaml", gitStore("far1", "file://"+far1))
	w.file("platform/far2.yaml", gitStore("far2", "file://"+far2))
	pool := map[string]string{"pool": "a"}
	w.file("platform/destinations.yaml", docs(dest("near", pool), dest("far1", pool, "store=far1", "unschedulable: true"), dest("far2", pool, "store=far2", "unschedulable: true")))
	for _, name := range []string{"r1", "r2"} {
		wf := w.workflow(name).setOutput(map[string]string{"db.yaml": objNamed("ConfigMap", name)})
		wf.setSelectors("- matchLabels: {pool: a}\n")
		wf.mustRun(0, resourceEnv("pg", "team", name, "configure"))
	}
	w.file("platform/destinations.yaml", docs(dest("near", pool, "unschedulable: true"), dest("far1", pool, "store=far1"), dest("far2", pool, "store=far2")))
	// The spread sends one to each store.
	plan := run(t, nil, "drain", "near", "--platform", w.platform, "--dry-run", "--allow-mass-deletion")
	if plan.code != 0 || !strings.Contains(plan.out, "near -> far1") || !strings.Contains(plan.out, "near -> far2") {
		t.Fatalf("want one resource drained to each store: %s", plan)
	}
	repos := map[string]string{"default": w.repo, "far1": far1, "far2": far2}
	before := branchTip(t, w.repo)
	unlock := lockBranch(t, far2)
	r := run(t, nil, "drain", "near", "--platform", w.platform, "--allow-mass-deletion", "--retry-deadline", "1s")
	unlock()
	if r.code != 1 {
		t.Fatalf("want exit 1 (far2 cannot be written), got %s", r)
	}
	if branchTip(t, w.repo) != before {
		t.Error("the drained store was written although a copy failed")
	}
	for _, name := range []string{"r1", "r2"} {
		if got := whereIs(t, repos, name); fmt.Sprint(got) != "[default:near]" {
			t.Errorf("%s is on %v, want [default:near]: nothing moved", name, got)
		}
	}
	tree := repoTree(t, far1)
	if left := append(underPrefix(tree, "clusters/.render/workloads/"), underPrefix(tree, "clusters/.render/objects/")...); len(left) > 0 {
		t.Errorf("far1 keeps records or claims the drain copied: %v", left)
	}
	for _, want := range []string{"nothing was moved off near", "the copies written to GitStateStore/far1 were removed again"} {
		if !strings.Contains(r.errout, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.errout)
		}
	}
	if strings.Contains(r.errout, "unfinished") {
		t.Errorf("the drain calls itself unfinished, though nothing moved:\n%s", r.errout)
	}
}

// runTripped runs render with --log-level debug, and calls trip once, from
// inside the run, when a debug line holding every one of on is logged: a
// fault injected at a known point of the drain.
func runTripped(t *testing.T, trip func(), on []string, args ...string) result {
	t.Helper()
	var out bytes.Buffer
	errw := &tripwire{on: on, trip: trip}
	code := cli.Main(context.Background(), append(args, "--log-level", "debug"), cli.IO{Out: &out, Err: errw, Getenv: func(string) string { return "" }})
	if !errw.tripped {
		t.Fatalf("no line held %q: the fault was never injected\n%s", on, errw.buf.String())
	}
	return result{code: code, out: out.String(), errout: errw.buf.String()}
}

// tripwire is a log writer that calls trip at the first line holding
// every string of on.
type tripwire struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	on      []string
	trip    func()
	tripped bool
}

func (w *tripwire) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.tripped {
		return len(p), nil
	}
	for _, line := range strings.Split(string(p), "\n") {
		all := true
		for _, s := range w.on {
			all = all && strings.Contains(line, s)
		}
		if all {
			w.tripped = true
			w.trip()
			break
		}
	}
	return len(p), nil
}

// copyLanded is the debug line of the copy's push into far landing.
var copyLanded = []string{"msg=push", "store=GitStateStore/far", "outcome=landed"}

// When the removal fails and taking the copy back fails too, the drain
// says it is unfinished (exit 1), naming both places and the command that
// finishes it; running it again finishes the move: to where the copy is,
// with nothing written twice.
func TestDrainAcrossStoresFinishesOnARerunWhenTheUndoFails(t *testing.T) {
	t.Parallel()
	w, far, r1 := twoStores(t)
	repos := map[string]string{"default": w.repo, "far": far}
	unlockNear := lockBranch(t, w.repo)
	unlockFar := func() {}
	r := runTripped(t, func() {
		var err error
		if unlockFar, err = takeLock(far); err != nil {
			unlockFar = func() {}
			t.Error(err)
		}
	}, copyLanded,
		"drain", "near", "--platform", w.platform, "--allow-mass-deletion", "--retry-deadline", "1s")
	unlockNear()
	unlockFar()
	if r.code != 1 {
		t.Fatalf("want exit 1, got %s", r)
	}
	for _, want := range []string{"drain near is unfinished", "resource/team/pg/r1/configure group . is on near (GitStateStore/default) and was copied to far (GitStateStore/far)", "removing the copy from GitStateStore/far failed", "run render drain near again"} {
		if !strings.Contains(r.errout, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.errout)
		}
	}
	if !strings.Contains(r.out, "GitStateStore/far: removing the copies FAILED") {
		t.Errorf("stdout does not report the failed undo:\n%s", r.out)
	}
	if got := where(t, repos); fmt.Sprint(got) != "[default:near far:far]" {
		t.Fatalf("r1 is on %v, want both (copied, neither removed nor taken back)", got)
	}
	farTip := branchTip(t, far)
	// A destination far makes more attractive meanwhile: the re-run still
	// finishes the move to far, where the copy is.
	w.file("platform/destinations.yaml", docs(dest("near", map[string]string{"pool": "a"}, "unschedulable: true"), dest("far", map[string]string{"pool": "a"}, "store=far"), dest("aaa", map[string]string{"pool": "a"})))
	r = run(t, nil, "drain", "near", "--platform", w.platform, "--allow-mass-deletion")
	if r.code != 0 || !strings.Contains(r.out, "near -> far") {
		t.Fatalf("the re-run should finish the move to far: %s", r)
	}
	if got := where(t, repos); fmt.Sprint(got) != "[far:far]" {
		t.Fatalf("r1 is on %v after the re-run, want [far:far]", got)
	}
	if branchTip(t, far) != farTip {
		t.Error("the re-run wrote far again, which held the copy already")
	}
	r1.mustRun(0, resourceEnv("pg", "team", "r1", "configure"))
	if got := where(t, repos); fmt.Sprint(got) != "[far:far]" {
		t.Fatalf("r1 is on %v after a render, want [far:far]", got)
	}
}

// The undo lands only on exactly what the drain wrote: a writer that
// changed the copy after it landed keeps its change (the undo of that
// workload is refused as stale), and the drain says the group is in two
// places and how to finish the move. The other workload copied into the
// same store is taken out all the same.
func TestDrainUndoKeepsAnotherWritersChange(t *testing.T) {
	w, far, _ := twoStores(t)
	repos := map[string]string{"default": w.repo, "far": far}
	// r2 on near too.
	pool := map[string]string{"pool": "a"}
	w.file("platform/destinations.yaml", docs(dest("near", pool), dest("far", pool, "store=far", "unschedulable: true")))
	r2 := w.workflow("r2").setOutput(map[string]string{"db.yaml": objNamed("ConfigMap", "r2")})
	r2.setSelectors("- matchLabels: {pool: a}\n")
	r2.mustRun(0, resourceEnv("pg", "team", "r2", "configure"))
	w.file("platform/destinations.yaml", docs(dest("near", pool, "unschedulable: true"), dest("far", pool, "store=far")))
	file := "clusters/far/resources/team/pg/r1/configure/5058f/db.yaml"
	changed := objNamed("ConfigMap", "r1") + "# changed by another writer\n"
	unlock := lockBranch(t, w.repo)
	r := runTripped(t, func() {
		if err := gitCommit(far, file, changed); err != nil {
			t.Error(err)
		}
	}, copyLanded,
		"drain", "near", "--platform", w.platform, "--allow-mass-deletion", "--retry-deadline", "1s")
	unlock()
	if r.code != 1 {
		t.Fatalf("want exit 1, got %s", r)
	}
	for _, want := range []string{"drain near is unfinished", "group . is on near (GitStateStore/default) and was copied to far (GitStateStore/far)", "another writer changed the workload in GitStateStore/far after the drain copied it there", "run render drain near again"} {
		if !strings.Contains(r.errout, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.errout)
		}
	}
	if got := repoTree(t, far)[file]; got != changed {
		t.Errorf("the other writer's change was overwritten: far holds\n%s", got)
	}
	if got := where(t, repos); fmt.Sprint(got) != "[default:near far:far]" {
		t.Fatalf("r1 is on %v, want both", got)
	}
	if got := whereIs(t, repos, "r2"); fmt.Sprint(got) != "[default:near]" {
		t.Errorf("r2 is on %v, want [default:near]: its copy taken out", got)
	}
	if strings.Contains(r.errout, "group r2") || strings.Contains(r.errout, "r2/configure group") {
		t.Errorf("r2 is reported as unfinished:\n%s", r.errout)
	}
}

// gitCommit commits file with content to the main branch of bare
// repository repo, with the git command line: another writer.
func gitCommit(repo, file, content string) error {
	dir, err := os.MkdirTemp("", "other-writer")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	git := func(args ...string) error {
		cmd := exec.Command("git", append([]string{"-c", "user.name=other", "-c", "user.email=other@example.com"}, args...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %v: %v\n%s", args, err, out)
		}
		return nil
	}
	if err := git("clone", "--quiet", "--branch", "main", repo, "."); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
		return err
	}
	if err := git("commit", "--quiet", "-am", "another writer"); err != nil {
		return err
	}
	return git("push", "--quiet", "origin", "main")
}

// When the removal fails and the drained destination's store cannot even
// be read to check whether the removal landed, the copy stays: taking it
// back could leave the workload nowhere. The drain says so (exit 1,
// unfinished, the group is on far and may still be on near), and running
// it again finishes the move.
func TestDrainAcrossStoresKeepsTheCopyWhenTheSourceCannotBeRead(t *testing.T) {
	w, far, _ := twoStores(t)
	repos := map[string]string{"default": w.repo, "far": far}
	away := w.repo + ".away"
	r := runTripped(t, func() {
		// near's repository is gone, a file in its place.
		if err := os.Rename(w.repo, away); err != nil {
			t.Error(err)
		}
		if err := os.WriteFile(w.repo, []byte("not a repository\n"), 0o644); err != nil {
			t.Error(err)
		}
	}, copyLanded, "drain", "near", "--platform", w.platform, "--allow-mass-deletion", "--retry-deadline", "1s")
	if err := os.Remove(w.repo); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(away, w.repo); err != nil {
		t.Fatal(err)
	}
	if r.code != 1 {
		t.Fatalf("want exit 1, got %s", r)
	}
	for _, want := range []string{"drain near is unfinished", "resource/team/pg/r1/configure group . is on far (GitStateStore/far) and may still be on near (GitStateStore/default)", "could not be read to check whether the removal landed", "run render drain near again"} {
		if !strings.Contains(r.errout, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.errout)
		}
	}
	if got := where(t, repos); fmt.Sprint(got) != "[default:near far:far]" {
		t.Fatalf("r1 is on %v, want both (the copy kept)", got)
	}
	if r = run(t, nil, "drain", "near", "--platform", w.platform, "--allow-mass-deletion"); r.code != 0 || !strings.Contains(r.out, "near -> far") {
		t.Fatalf("the re-run should finish the move to far: %s", r)
	}
	if got := where(t, repos); fmt.Sprint(got) != "[far:far]" {
		t.Fatalf("r1 is on %v after the re-run, want [far:far]", got)
	}
}

// "Drained" means empty: a resource Kratix wrote (no render record) on
// the drained destination is reported as staying, with why and what to do
// (exit 3), never passed over in silence. Rendered once, it is adopted
// with its place, and the next drain moves it.
func TestDrainReportsWhatKratixWrote(t *testing.T) {
	w := newWorld(t)
	w.file("platform/promise.yaml", pgPromise)
	kratixRepo(t, w, map[string]string{
		"old/dependencies/kratix-canary-namespace.yaml":          kNamespace,
		"old/resources/kratix-canary-configmap.yaml":             kConfigMap,
		"old/resources/ns/pg/legacy/configure/5058f/legacy.yaml": objNamed("ConfigMap", "legacy"),
	})
	w.file("platform/destinations.yaml", docs(dest("old", map[string]string{"env": "dev", "pool": "a"}, "unschedulable: true"), dest("new", map[string]string{"env": "dev", "pool": "a"})))
	before := branchTip(t, w.repo)
	r := run(t, nil, "drain", "old", "--platform", w.platform, "--allow-mass-deletion")
	if r.code != 3 {
		t.Fatalf("want exit 3 (what Kratix wrote stays), got %s", r)
	}
	for _, want := range []string{"resource/ns/pg/legacy/configure group 5058f could not move", "no render record owns", "render its workflow once", "then drain again"} {
		if !strings.Contains(r.errout, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.errout)
		}
	}
	if branchTip(t, w.repo) != before {
		t.Error("the drain wrote although nothing could move")
	}
	// Rendered by render, it keeps Kratix's place, with a record...
	legacy := w.workflow("legacy").setOutput(map[string]string{"legacy.yaml": objNamed("ConfigMap", "legacy")})
	legacy.setSelectors("- matchLabels: {pool: a}\n")
	legacy.mustRun(0, resourceEnv("pg", "ns", "legacy", "configure"))
	if on := placedOn(t, repoTree(t, w.repo), "ns", "pg", "legacy"); fmt.Sprint(on) != "[old]" {
		t.Fatalf("the adopted resource is on %v, want [old]", on)
	}
	// ...and the drain moves it: old is empty.
	r = run(t, nil, "drain", "old", "--platform", w.platform, "--allow-mass-deletion")
	if r.code != 0 || !strings.Contains(r.out, "old -> new") {
		t.Fatalf("want the adopted resource moved, got %s", r)
	}
	if left := underPrefix(repoTree(t, w.repo), "clusters/old/resources/"); fmt.Sprint(left) != "[clusters/old/resources/kratix-canary-configmap.yaml]" {
		t.Errorf("old still holds %v", left)
	}
}

// A group whose files would not fit in the destination chosen for it (a
// path too long for a store) is not moved, and the drain says so, exit 3
// as for any resource that cannot move. Before, it reported "1 groups
// moved", then the store's write FAILED (exit 1).
func TestDrainToAPathTooLong(t *testing.T) {
	w := newWorld(t)
	long := strings.Repeat("a", 220) + "/" + strings.Repeat("b", 220) + "/" + strings.Repeat("c", 220) + "/" + strings.Repeat("d", 220) // 883 bytes
	w.file("platform/destinations.yaml", docs(dest("dev", map[string]string{"pool": "a"}), dest("longpath", map[string]string{"pool": "a"}, "unschedulable: true", "path: "+long)))
	r1 := w.workflow("r1").setOutput(map[string]string{strings.Repeat("deep/", 20) + "db.yaml": objNamed("ConfigMap", "r1")})
	r1.setSelectors("- matchLabels: {pool: a}\n")
	r1.mustRun(0, resourceEnv("pg", "team", "r1", "configure"))
	w.file("platform/destinations.yaml", docs(dest("dev", map[string]string{"pool": "a"}, "unschedulable: true"), dest("longpath", map[string]string{"pool": "a"}, "path: "+long)))
	before := branchTip(t, w.repo)
	r := run(t, nil, "drain", "dev", "--platform", w.platform, "--allow-mass-deletion")
	if r.code != 3 {
		t.Fatalf("want exit 3 (r1 cannot move), got %s", r)
	}
	if !strings.Contains(r.out, "drain dev: 0 groups moved") || strings.Contains(r.out, "FAILED") {
		t.Errorf("the report should say nothing moved:\n%s", r.out)
	}
	for _, want := range []string{"could not move: its files would not fit in destination longpath", "a whole path, with its folders, holds at most 1024 bytes", "nothing of it was moved"} {
		if !strings.Contains(r.errout, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.errout)
		}
	}
	if branchTip(t, w.repo) != before {
		t.Error("the drain wrote")
	}
}
