package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
)

// The git HTTP server answers a ref advertisement from its memo only
// while the refs read as they did when git made it: after a ref moves, it
// is git's new answer, never the old one; a fetch that names no object
// the client has is answered from the memo the second time, byte for
// byte git's, and one that does is always git's.
func TestGitHTTPMemo(t *testing.T) {
	s := newGitHTTP(t)
	st, err := s.newStore("memo")
	if err != nil {
		t.Fatal(err)
	}
	defer st.cleanup()
	dir := filepath.Join(s.root, "memo.git")
	base := "http://" + s.addr + "/memo.git"
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	get := func(service string) string {
		t.Helper()
		resp, err := http.Get(base + "/info/refs?service=" + service)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET info/refs: %d %v", resp.StatusCode, err)
		}
		return string(b)
	}
	post := func(body string) string {
		t.Helper()
		resp, err := http.Post(base+"/git-upload-pack", "application/x-git-upload-pack-request", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	counts := func() string { return fmt.Sprintf("git ran %d, memo %d", s.Ran.Load(), s.Memo.Load()) }

	commit := func(msg string) string {
		t.Helper()
		tree := git("mktree") // the empty tree
		c := git("commit-tree", tree, "-m", msg)
		git("update-ref", "refs/heads/main", c)
		return c
	}
	c1 := commit("one")
	a1 := get("git-upload-pack")
	if !strings.Contains(a1, c1+" refs/heads/main") {
		t.Fatalf("advertisement without main at %s:\n%s", c1, a1)
	}
	if again := get("git-upload-pack"); again != a1 || counts() != "git ran 1, memo 1" {
		t.Fatalf("the same refs: %s; answers equal %t", counts(), again == a1)
	}
	c2 := commit("two")
	a2 := get("git-upload-pack")
	if !strings.Contains(a2, c2+" refs/heads/main") || counts() != "git ran 2, memo 1" {
		t.Fatalf("after main moved to %s: %s, advertisement:\n%s", c2, counts(), a2)
	}
	// A new ref (a folder git made for it) counts as a move too.
	git("update-ref", "refs/render/pending/w0", c1)
	if a3 := get("git-upload-pack"); !strings.Contains(a3, "refs/render/pending/w0") {
		t.Fatalf("a new ref not advertised:\n%s", a3)
	}

	pkt := func(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }
	want := pkt("want "+c2+" ofs-delta\n") + "0000" + pkt("done\n")
	f1 := post(want)
	if !strings.HasPrefix(f1, pkt("NAK\n")) || !bytes.Contains([]byte(f1), []byte("PACK")) {
		t.Fatalf("fetch of %s: not a pack: %q", c2, f1)
	}
	ran := s.Ran.Load()
	if f2 := post(want); f2 != f1 || s.Ran.Load() != ran {
		t.Fatalf("the same fetch again: git ran again %t, answers equal %t", s.Ran.Load() != ran, f2 == f1)
	}
	have := pkt("want "+c2+" ofs-delta\n") + "0000" + pkt("have "+c1+"\n") + pkt("done\n")
	post(have)
	post(have)
	if got := s.Ran.Load() - ran; got != 2 {
		t.Fatalf("a fetch with a have ran git %d times in two, want 2", got)
	}
}

// A trial repository (gitInit) takes a push as a server set up for cost
// does: the objects kept as the one pack the client sent, not a loose
// file each, and the connectivity check's rev-list without a git
// for-each-ref of the repository's own refs as an alternate's; and git
// (fsck) and go-git (as the checker reads it) read it whole through its
// objects/ link.
func TestGitInitPush(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "srv.git")
	if err := gitInit(dir); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(root, "work")
	trace := filepath.Join(root, "trace")
	git := func(env []string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = root
		cmd.Env = append(append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid"), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git(nil, "init", "-q", "-b", "main", work)
	for i := range 5 {
		if err := os.WriteFile(filepath.Join(work, fmt.Sprintf("f%d.yaml", i)), []byte(strings.Repeat("x", 100*i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git(nil, "-C", work, "add", ".")
	git(nil, "-C", work, "commit", "-q", "-m", "one")
	head := git(nil, "-C", work, "rev-parse", "HEAD")
	// A push to a local path runs git receive-pack on the repository, with
	// its config, as the servers do; the trace names every process.
	git([]string{"GIT_TRACE2_EVENT=" + trace}, "-C", work, "push", "-q", dir, "main")

	data, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	var children []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var ev struct {
			Event string   `json:"event"`
			Argv  []string `json:"argv"`
		}
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("trace line %q: %v", l, err)
		}
		if ev.Event == "child_start" {
			children = append(children, strings.Join(ev.Argv, " "))
		}
	}
	joined := strings.Join(children, "; ")
	for _, want := range []string{"git index-pack", "git rev-list"} {
		if !strings.Contains(joined, want) {
			t.Errorf("the push ran no %s; its processes: %s", want, joined)
		}
	}
	for _, not := range []string{"unpack-objects", "for-each-ref", "git gc"} {
		if strings.Contains(joined, not) {
			t.Errorf("the push ran %s; its processes: %s", not, joined)
		}
	}
	packs, _ := filepath.Glob(filepath.Join(dir, "odb", "pack", "*.pack"))
	loose, _ := filepath.Glob(filepath.Join(dir, "odb", "[0-9a-f][0-9a-f]"))
	if len(packs) != 1 || len(loose) != 0 {
		t.Errorf("after one push: packs %v, loose object folders %v; want one pack and none", packs, loose)
	}
	git(nil, "--git-dir", dir, "fsck", "--strict", "--no-dangling")
	repo, err := gogit.PlainOpen(dir)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := repo.Reference(plumbing.NewBranchReferenceName("main"), true)
	if err != nil || ref.Hash().String() != head {
		t.Fatalf("go-git reads main as %v (%v), want %s", ref, err, head)
	}
	c, err := repo.CommitObject(ref.Hash())
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.File("f4.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if s, err := f.Contents(); err != nil || s != strings.Repeat("x", 400) {
		t.Fatalf("go-git reads f4.yaml as %d bytes (%v)", len(s), err)
	}
}
