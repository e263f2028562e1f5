package gitstore

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/storetest"
)

// TestLocalConformance runs the suite on a bare repository written in place.
func TestLocalConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		Fresh: func(t *testing.T) func() statestore.Store {
			dir := filepath.Join(t.TempDir(), "state.git")
			return func() statestore.Store { return mustNew(t, Config{URL: "file://" + dir, Path: "clusters"}) }
		},
		Missing: func(t *testing.T) statestore.Store {
			return mustNew(t, Config{URL: "file://" + filepath.Join(t.TempDir(), "no", "such", "repo.git")})
		},
	})
}

// TestRemoteConformance runs the suite through the clone-and-push path,
// against a bare repository served by the git binaries over file://.
func TestRemoteConformance(t *testing.T) {
	if _, err := exec.LookPath("git-upload-pack"); err != nil {
		if _, err := exec.LookPath("git"); err != nil {
			t.Fatal("git is needed for go-git's file transport")
		}
	}
	storetest.Run(t, storetest.Harness{
		Fresh: func(t *testing.T) func() statestore.Store {
			dir := filepath.Join(t.TempDir(), "state.git")
			if out, err := exec.Command("git", "init", "--bare", "-b", "main", dir).CombinedOutput(); err != nil {
				t.Fatalf("git init: %v\n%s", err, out)
			}
			return func() statestore.Store { return mustNewRemote(t, Config{URL: "file://" + dir, Path: "clusters"}) }
		},
		Missing: func(t *testing.T) statestore.Store {
			return mustNewRemote(t, Config{URL: "file://" + filepath.Join(t.TempDir(), "missing.git")})
		},
		Writers: 4,
	})
}

func mustNew(t *testing.T, cfg Config) *Store {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// mustNewRemote forces the remote (clone and push) path for a file:// URL.
func mustNewRemote(t *testing.T, cfg Config) *Store {
	s := mustNew(t, cfg)
	s.repo = newRemoteRepo(s.cfg)
	return s
}
