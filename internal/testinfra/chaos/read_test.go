package chaos

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
)

// TestReadLocalGitWaitsOutALockFile: a read of a bare repository that git
// is updating meets the ref's lock file, empty for a moment, and reads on
// once git is done (in CI the checker failed with "ref file is empty").
func TestReadLocalGitWaitsOutALockFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state.git")
	if _, err := git.PlainInit(dir, true); err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(dir, "refs", "render", "pending", "x.lock")
	if err := os.MkdirAll(filepath.Dir(lock), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(100 * time.Millisecond)
		os.Remove(lock) // git renames it over the ref; gone either way
	}()
	defer func() { <-done }()
	st, err := readLocalGit(dir, storePath)
	if err != nil {
		t.Fatalf("read while a lock file was empty: %v", err)
	}
	if len(st.Files) != 0 {
		t.Fatalf("an empty repository read as %d files", len(st.Files))
	}
}
