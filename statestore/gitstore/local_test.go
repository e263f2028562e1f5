package gitstore

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/render-dev/render/statestore"
)

func localGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.com", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func localUpdate() statestore.Update {
	return statestore.Update{Workload: "w/a", Files: map[string][]byte{"d/a.yaml": []byte("a\n")},
		Record: &statestore.Record{}, Message: statestore.Message{Subject: "t"}}
}

// A repository with a work tree is written as git push writes it: never
// on the branch checked out there (refused, before anything is read or
// written, also through its .git folder), on any other branch as a bare
// repository's.
func TestLocalWorkTreeBranchIsRefused(t *testing.T) {
	ctx := context.Background()
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "README"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	localGit(t, work, "init", "--quiet", "--initial-branch=main")
	localGit(t, work, "add", "-A")
	localGit(t, work, "commit", "--quiet", "-m", "first")
	head := localGit(t, work, "rev-parse", "HEAD")
	for _, url := range []string{"file://" + work, work + "/.git"} {
		_, err := mustNew(t, Config{URL: url, Branch: "main"}).Apply(ctx, localUpdate())
		if err == nil || !strings.Contains(err.Error(), "checked out") || !strings.Contains(err.Error(), "bare") {
			t.Errorf("%s: %v, want a refusal of the checked-out branch", url, err)
		}
	}
	if got := localGit(t, work, "rev-parse", "HEAD"); got != head {
		t.Errorf("the checked-out branch moved")
	}
	// Another branch of the same repository is written.
	if _, err := mustNew(t, Config{URL: "file://" + work, Branch: "state"}).Apply(ctx, localUpdate()); err != nil {
		t.Fatalf("branch state: %v", err)
	}
	if got := localGit(t, work, "show", "state:d/a.yaml"); got != "a" {
		t.Errorf("state:d/a.yaml = %q", got)
	}
	if st := localGit(t, work, "status", "--porcelain"); st != "" {
		t.Errorf("the work tree changed:\n%s", st)
	}
}

// A branch ref that exists and holds no commit id is damage: the write is
// refused naming the ref, and the ref is left as it was. A missing ref is
// a branch to create.
func TestLocalTornRefIsDamage(t *testing.T) {
	ctx := context.Background()
	for name, content := range map[string]string{"empty": "", "cut off": "3b18e512db", "not an id": "hello\n"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state.git")
			s := mustNew(t, Config{URL: "file://" + dir, Branch: "main"})
			if _, err := s.Apply(ctx, localUpdate()); err != nil {
				t.Fatal(err)
			}
			ref := filepath.Join(dir, "refs", "heads", "main")
			if err := os.WriteFile(ref, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			u := localUpdate()
			u.Files["d/b.yaml"] = []byte("b\n")
			_, err := mustNew(t, Config{URL: "file://" + dir, Branch: "main"}).Apply(ctx, u)
			if err == nil || !strings.Contains(err.Error(), "refs/heads/main") || !strings.Contains(err.Error(), "damaged") {
				t.Errorf("err = %v, want the ref named as damaged", err)
			}
			if data, _ := os.ReadFile(ref); string(data) != content {
				t.Errorf("the ref was written: %q", data)
			}
		})
	}
}
