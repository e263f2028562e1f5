package gitstore

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/render-dev/render/statestore"
)

// A workload's folder may become a file on its next render, and a file a
// folder: the tree changes shape (this crashed with a nil map before). A
// file never replaces another workload's folder, and one update never
// writes a file and files below it.
func TestTreeChangesShape(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state.git")
	s := mustNew(t, Config{URL: "file://" + dir})
	ctx := context.Background()
	apply := func(workload string, files map[string]string) error {
		u := statestore.Update{Workload: workload, Files: map[string][]byte{}, Record: &statestore.Record{}, Message: statestore.Message{Subject: "t"}}
		for p, c := range files {
			u.Files[p] = []byte(c)
		}
		_, err := s.Apply(ctx, u)
		return err
	}
	read := func(p string) string {
		snap, err := s.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b, err := snap.ReadFile(p)
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}
	if err := apply("w/a", map[string]string{"d/dir/x.yaml": "1", "d/dir/sub/y.yaml": "2"}); err != nil {
		t.Fatal(err)
	}
	if err := apply("w/a", map[string]string{"d/dir": "file now"}); err != nil {
		t.Fatalf("folder to file: %v", err)
	}
	if got := read("d/dir"); got != "file now" {
		t.Fatalf("d/dir = %q", got)
	}
	if err := apply("w/a", map[string]string{"d/dir/z.yaml": "folder again"}); err != nil {
		t.Fatalf("file to folder: %v", err)
	}
	if got := read("d/dir/z.yaml"); got != "folder again" {
		t.Fatalf("d/dir/z.yaml = %q", got)
	}
	// Another workload's file in the folder: a file may not replace it.
	if err := apply("w/b", map[string]string{"d/dir/other.yaml": "b's"}); err != nil {
		t.Fatal(err)
	}
	var be *statestore.BlockedError
	if err := apply("w/a", map[string]string{"d/dir": "file"}); !errors.As(err, &be) || be.Owner != "w/b" || !be.Folder || !be.BadInput() {
		t.Fatalf("a file over another workload's folder: err = %v, want a BlockedError naming w/b's folder", err)
	}
	if got := read("d/dir/other.yaml"); got != "b's" {
		t.Fatalf("the other workload's file: %q", got)
	}
	// One update writing a file and a file below it.
	if err := apply("w/c", map[string]string{"e/f": "1", "e/f/g": "2"}); !errors.As(err, &be) || be.Blocker != "e/f" || be.Owner != "w/c" {
		t.Fatalf("file and file below it: err = %v, want a BlockedError", err)
	}
}
