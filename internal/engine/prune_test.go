package engine

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore"
)

// labelled is a destination of the fixture's store, with labels.
func labelled(name, env string) string {
	return fmt.Sprintf("apiVersion: platform.kratix.io/v1alpha1\nkind: Destination\nmetadata:\n  name: %s\n  labels:\n    env: %s\nspec:\n  stateStoreRef: {kind: GitStateStore, name: default}\n", name, env)
}

// TestPruneThatWentStaleReadsAgain: a prune-misscheduled whose write a
// render of the workload overtakes (the render lands between the prune's
// read and its write, with other objects: the record the prune read no
// longer holds) is refused as stale, and reads the stores again and
// prunes what is misscheduled then, as a render and a drain do (one redo
// rule for the three): it lands, and the render's files, which the prune
// never read, are pruned too, never left behind nor written back over.
// Before the operation driver, a prune had no redo: it reported the store
// as failed ("stale update") and left the misscheduled group in place.
func TestPruneThatWentStaleReadsAgain(t *testing.T) {
	f := newFixture(t, labelled("d1", "dev")+"---\n"+labelled("d2", "prod"))
	ids := map[string]string{"workflow-type": "resource", "promise": "pg", "pipeline": "configure"}
	writeT(t, filepath.Join(f.input, "object.yaml"), "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: db-1\n  namespace: team\n")
	writeT(t, filepath.Join(f.metadata, "destination-selectors.yaml"), "- matchLabels: {env: dev}\n")
	output := func(name string) {
		writeT(t, filepath.Join(f.output, "db.yaml"), fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: team\n", name))
	}
	render := func(what string) {
		t.Helper()
		e := f.engine(ids, false)
		defer e.Close()
		rep, err := e.Render(context.Background())
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if failed := rep.Failed(); len(failed) > 0 {
			t.Fatalf("%s: %v", what, failed[0].Err)
		}
	}
	output("db-1-a")
	render("the first render")
	// d1 no longer matches the resource's selector: renders keep it there
	// (misscheduled), and a prune removes it.
	writeT(t, f.platform, fmt.Sprintf("apiVersion: platform.kratix.io/v1alpha1\nkind: GitStateStore\nmetadata:\n  name: default\nspec:\n  url: file://%s\n---\n", filepath.Join(f.dir, "state.git"))+
		labelled("d1", "staging")+"---\n"+labelled("d2", "prod"))

	var logb strings.Builder
	var once sync.Once
	// (The group is d1's only workload: the breaker would refuse emptying
	// it.)
	e := New(Options{OutputDir: f.output, MetadataDir: f.metadata, InputDir: f.input, Platform: []string{f.platform},
		Getenv: func(string) string { return "" }, AllowMassDeletion: true,
		Log: slog.New(slog.NewTextHandler(&syncWriter{w: &logb}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		OnPhase: func(p string) {
			if p == PhasePublishing {
				// Between the prune's read and its write, a render of the
				// workload with another object lands (and keeps the group
				// on d1: nothing else matches it).
				once.Do(func() { output("db-1-b"); render("the render that overtakes the prune") })
			}
		}})
	defer e.Close()
	rep, err := e.PruneMisscheduled(context.Background(), "d1")
	if err != nil {
		t.Fatal(err)
	}
	if failed := rep.Failed(); len(failed) > 0 {
		t.Fatalf("the prune failed in %s: %v", failed[0].Name, failed[0].Err)
	}
	if !strings.Contains(logb.String(), "reading the stores again") {
		t.Fatalf("the prune did not go stale: nothing to test\n%s", logb.String())
	}
	if len(rep.Pruned) != 1 || rep.Pruned[0].Destination != "d1" || rep.Pruned[0].Workload != statestore.WorkloadKey("resource", "pg", "team", "db-1", "configure") {
		t.Fatalf("pruned %+v, want the resource's group off d1", rep.Pruned)
	}
	// Nothing of the workload is left on the branch: neither the files
	// the prune read nor those of the render that overtook it.
	var left []string
	for name := range branchFiles(t, filepath.Join(f.dir, "state.git")) {
		if strings.Contains(name, "/resources/team/pg/db-1/") {
			left = append(left, name)
		}
	}
	if len(left) > 0 {
		t.Fatalf("the resource's files left on the branch after the prune: %v", left)
	}
}

// branchFiles is every file on the main branch of the repository at dir,
// with its content.
func branchFiles(t *testing.T, dir string) map[string]string {
	return testenv.BranchFiles(t, dir)
}
