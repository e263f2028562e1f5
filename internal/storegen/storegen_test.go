package storegen

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/render-dev/render/statestore"
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
	if len(got) != len(files) {
		t.Fatalf("the commit holds %d files, want %d", len(got), len(files))
	}
	for _, p := range got {
		if _, ok := files[strings.TrimPrefix(p, "state/")]; !ok || !strings.HasPrefix(p, "state/") {
			t.Fatalf("unexpected file %s", p)
		}
	}
}
