package storegen

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/gitstore"
)

// A generated store is a valid repository holding, for each workload, what
// PlanUpdate plans for it: its file, record, claim and index entry.
func TestWriteGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	spec := Spec{Workloads: 50, Destinations: 5}
	files, err := Files(spec)
	if err != nil {
		t.Fatal(err)
	}
	// 50 × (file, record, claim, index entry) and the index marker.
	if len(files) != 50*4+1 {
		t.Fatalf("%d files, want %d", len(files), 50*4+1)
	}
	if _, ok := files[statestore.RecordPath(Workload(spec, 7))]; !ok {
		t.Fatalf("no record for %s", Workload(spec, 7))
	}
	dir := filepath.Join(t.TempDir(), "store.git")
	if err := WriteGit(dir, "main", "state", files, false); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "-C", dir, "fsck", "--strict").CombinedOutput(); err != nil {
		t.Fatalf("git fsck: %v\n%s", err, out)
	}
	out, err := exec.Command("git", "-C", dir, "ls-tree", "-r", "--name-only", "main").Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(string(out))
	// And the load summary: one entry per destination, whose name counts
	// its 10 resources (see statestore/gitstore's load.go).
	if len(got) != len(files)+spec.Destinations {
		t.Fatalf("the commit holds %d files, want %d", len(got), len(files)+spec.Destinations)
	}
	summary := 0
	for _, p := range got {
		if rest, ok := strings.CutPrefix(p, "state/"+gitstore.LoadDir+"/"); ok {
			parts := strings.Split(rest, "@")
			if len(parts) != 4 || !strings.HasPrefix(parts[0], "dest-") || parts[2] != "10" || parts[3] != "_" {
				t.Fatalf("summary entry %s: want dest-N@<stamp>@10@_", rest)
			}
			summary++
			continue
		}
		if _, ok := files[strings.TrimPrefix(p, "state/")]; !ok || !strings.HasPrefix(p, "state/") {
			t.Fatalf("unexpected file %s", p)
		}
	}
	if summary != spec.Destinations {
		t.Fatalf("%d summary entries, want %d", summary, spec.Destinations)
	}
}

// A store in Kratix's layout holds each request's file where Kratix puts it
// and each destination's canaries, and nothing of render's.
func TestKratixFiles(t *testing.T) {
	spec := Spec{Workloads: 30, Destinations: 3}
	files := KratixFiles(spec)
	if len(files) != 30+3*2 {
		t.Fatalf("%d files, want %d", len(files), 30+3*2)
	}
	for p := range files {
		if strings.HasPrefix(p, ".render") {
			t.Errorf("render's own file %s in a store Kratix wrote", p)
		}
	}
	want := "dest-001/resources/team/promise-04/request-000004/configure/5058f/configmap.yaml"
	if _, ok := files[want]; !ok {
		t.Errorf("no %s", want)
	}
	if _, ok := files["dest-002/dependencies/kratix-canary-namespace.yaml"]; !ok {
		t.Error("no canary")
	}
}
