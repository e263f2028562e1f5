package testenv

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestUniqueName(t *testing.T) {
	for _, in := range []string{"", "TestFoo/sub_case", "---", strings.Repeat("abc", 40), "Bucket.Name"} {
		a, b := UniqueName(in), UniqueName(in)
		if a == b {
			t.Errorf("UniqueName(%q) not unique: %q", in, a)
		}
		if len(a) < 3 || len(a) > 40 || strings.Trim(a, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" ||
			strings.HasPrefix(a, "-") || strings.Contains(a, "--") {
			t.Errorf("UniqueName(%q) = %q: invalid", in, a)
		}
	}
}

// TestHarness proves the servers from scripts/testservers.sh are usable. In
// CI (CI=true) it fails when they are absent.
func TestHarness(t *testing.T) {
	g := Gitea(t)
	repo := g.CreateRepoInfo(t, t.Name())
	if !strings.HasPrefix(repo.CloneURL, g.URL()+"/") || !strings.HasSuffix(repo.CloneURL, ".git") {
		t.Errorf("clone URL %q not under %s", repo.CloneURL, g.URL())
	}
	if code := g.API(t, http.MethodGet, "/repos/"+repo.Owner+"/"+repo.Name, nil, nil); code != http.StatusOK {
		t.Errorf("GET repo %s/%s: HTTP %d", repo.Owner, repo.Name, code)
	}

	m := MinIO(t)
	bucket := m.CreateBucket(t, t.Name())
	ok, err := m.Client(t).BucketExists(t.Context(), bucket)
	if err != nil || !ok {
		t.Errorf("BucketExists(%s) = %v, %v", bucket, ok, err)
	}
}

// TestGiteaUsersTokens exercises the user, token and collaborator helpers.
func TestGiteaUsersTokens(t *testing.T) {
	g := Gitea(t)
	user := g.CreateUser(t, "alice", "alice-pw-1")
	tok := g.CreateToken(t, user, "alice-pw-1")
	repo := g.CreateRepoInfo(t, "shared")
	g.AddCollaborator(t, repo.Owner, repo.Name, user, "write")

	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet,
		g.URL()+"/api/v1/repos/"+repo.Owner+"/"+repo.Name+"/collaborators/"+user, nil)
	req.Header.Set("Authorization", "token "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("collaborator check with %s's token: HTTP %d, want 204", user, resp.StatusCode)
	}
	own := g.CreateRepoFor(t, user, "own")
	if own.Owner != user {
		t.Errorf("CreateRepoFor owner = %q, want %q", own.Owner, user)
	}
}

// TestGiteaGitPush pushes with the git CLI over HTTP using basic auth.
func TestGiteaGitPush(t *testing.T) {
	g := Gitea(t)
	if _, err := exec.LookPath("git"); err != nil {
		SkipOrFail(t, "git not found in PATH")
	}
	cloneURL := g.CreateRepo(t, "push")
	work := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "HOME="+work, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(bytes.TrimSpace(out))
	}
	git("init", "-q", "-b", "main")
	if err := os.WriteFile(work+"/README", []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "README")
	git("commit", "-q", "-m", "init")
	head := git("rev-parse", "HEAD")
	git("push", "-q", g.AdminAuthURL(cloneURL), "main")
	remote := git("ls-remote", g.AdminAuthURL(cloneURL), "refs/heads/main")
	if !strings.HasPrefix(remote, head) {
		t.Errorf("ls-remote after push = %q, want %s", remote, head)
	}
}

// TestRestart stops and restarts private servers and checks data survives.
func TestRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and restarts servers; skipped with -short")
	}
	g := PrivateGitea(t)
	m := PrivateMinIO(t)
	if shared := os.Getenv(EnvGiteaURL); g.URL() == shared {
		t.Fatalf("PrivateGitea returned the shared server %s", shared)
	}
	repo := g.CreateRepoInfo(t, "restart")
	bucket := m.CreateBucket(t, "restart")

	g.Stop(t)
	c := &http.Client{Timeout: 2 * time.Second}
	if resp, err := c.Get(g.URL() + "/api/healthz"); err == nil {
		resp.Body.Close()
		t.Fatalf("gitea still answering after Stop: %s", resp.Status)
	}
	g.Start(t)
	if code := g.API(t, http.MethodGet, "/repos/"+repo.Owner+"/"+repo.Name, nil, nil); code != http.StatusOK {
		t.Errorf("repo lost across restart: HTTP %d", code)
	}

	m.Stop(t)
	if resp, err := c.Get(m.URL() + "/minio/health/live"); err == nil {
		resp.Body.Close()
		t.Fatalf("minio still answering after Stop: %s", resp.Status)
	}
	m.Start(t)
	if ok, err := m.Client(t).BucketExists(t.Context(), bucket); err != nil || !ok {
		t.Errorf("bucket lost across restart: %v, %v", ok, err)
	}
}
