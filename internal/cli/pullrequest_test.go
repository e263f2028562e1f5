package cli_test

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/render-dev/render/internal/forge"
	"github.com/render-dev/render/internal/testinfra/testenv"
)

// prRepo is a Gitea repository a world's store "default" writes, in
// pull-request mode or not, and a reader of it through Gitea's API.
type prRepo struct {
	t     *testing.T
	g     *testenv.GiteaServer
	repo  testenv.Repo
	token string
}

// prWorld is a world whose store "default" is a new Gitea repository,
// with spec.pullRequest set to pr ("" for none), the API token in the
// store's secret, and destinations dev (env=dev) and prod (env=prod).
func prWorld(t *testing.T, pr string) (*world, *prRepo) {
	t.Helper()
	g := testenv.Gitea(t)
	w := newWorld(t)
	r := &prRepo{t: t, g: g, repo: g.CreateRepoInfo(t, "render-pr"), token: g.CreateToken(t, g.AdminUser(), g.AdminPassword())}
	w.file("platform/destinations.yaml", docs(dest("dev", map[string]string{"env": "dev"}), dest("prod", map[string]string{"env": "prod"})))
	r.setStore(w, pr)
	return w, r
}

// setStore rewrites the world's store document.
func (r *prRepo) setStore(w *world, pr string) {
	store := gitStore("default", r.repo.CloneURL) + `  authMethod: basicAuth
  secretRef: {name: gitea}
`
	if pr != "" {
		store += "  pullRequest:\n    " + strings.ReplaceAll(strings.TrimSpace(pr), "\n", "\n    ") + "\n"
	}
	store += fmt.Sprintf(`---
apiVersion: v1
kind: Secret
metadata: {name: gitea}
stringData:
  username: %q
  password: %q
  token: %q
`, r.g.AdminUser(), r.g.AdminPassword(), r.token)
	w.file("platform/store.yaml", store)
}

// apiPR is a pull request as Gitea's API returns it.
type apiPR = forge.PullRequest

// pulls lists every pull request of the repository.
func (r *prRepo) pulls() []apiPR {
	r.t.Helper()
	// Gitea answers 404 while it still takes a repository that was just
	// pushed to for empty.
	deadline := time.Now().Add(20 * time.Second)
	for {
		var out []apiPR
		code := r.g.API(r.t, http.MethodGet, fmt.Sprintf("/repos/%s/%s/pulls?state=all&limit=50", r.repo.Owner, r.repo.Name), nil, &out)
		if code == http.StatusOK {
			return out
		}
		if code != http.StatusNotFound || time.Now().After(deadline) {
			r.t.Fatalf("listing pull requests: HTTP %d", code)
		}
		time.Sleep(200 * time.Millisecond) // polling a condition, bounded above
	}
}

// onlyPR is the repository's one pull request; the test fails when there
// is not exactly one.
func (r *prRepo) onlyPR() apiPR {
	r.t.Helper()
	prs := r.pulls()
	if len(prs) != 1 {
		r.t.Fatalf("want exactly one pull request, got %d: %+v", len(prs), prs)
	}
	return prs[0]
}

// files lists the paths on branch under clusters/ (render's own .render/
// files left out); nil when the branch does not exist.
func (r *prRepo) files(branch string) []string {
	r.t.Helper()
	var tree struct {
		Tree []struct {
			Path string `json:"path"`
			Type string `json:"type"`
		} `json:"tree"`
	}
	var refs []struct {
		Ref    string `json:"ref"`
		Object struct {
			SHA string `json:"sha"`
		} `json:"object"`
	}
	if code := r.g.API(r.t, http.MethodGet, fmt.Sprintf("/repos/%s/%s/git/refs/heads/%s", r.repo.Owner, r.repo.Name, branch), nil, &refs); code == http.StatusNotFound {
		return nil
	}
	sha := ""
	for _, ref := range refs {
		if ref.Ref == "refs/heads/"+branch {
			sha = ref.Object.SHA
		}
	}
	if sha == "" {
		return nil
	}
	code := r.g.API(r.t, http.MethodGet, fmt.Sprintf("/repos/%s/%s/git/trees/%s?recursive=true&per_page=1000", r.repo.Owner, r.repo.Name, sha), nil, &tree)
	if code == http.StatusNotFound {
		return nil
	}
	if code != http.StatusOK {
		r.t.Fatalf("reading %s: HTTP %d", branch, code)
	}
	var out []string
	for _, e := range tree.Tree {
		if e.Type == "blob" && strings.HasPrefix(e.Path, "clusters/") && !strings.HasPrefix(e.Path, "clusters/.render/") && !strings.Contains(e.Path, "kratix-canary") {
			out = append(out, e.Path)
		}
	}
	sort.Strings(out)
	return out
}

func (r *prRepo) has(branch, path string) bool {
	for _, f := range r.files(branch) {
		if f == path {
			return true
		}
	}
	return false
}

// noSecrets fails the test when res printed the token or the password.
func (r *prRepo) noSecrets(res result) {
	r.t.Helper()
	for _, s := range []string{r.token, r.g.AdminPassword()} {
		if strings.Contains(res.out+res.errout, s) {
			r.t.Fatalf("a credential was printed: %s", res)
		}
	}
}

const prBranch = "render/resource/team/pg/db/configure"

func TestPullRequestOpenUpdateClose(t *testing.T) {
	w, r := prWorld(t, "")
	env := resourceEnv("pg", "team", "db", "configure")
	sel := "- matchLabels: {env: dev}\n"
	wf := w.workflow("db").setSelectors(sel).setOutput(map[string]string{"a.yaml": objNamed("ConfigMap", "a")})
	// The base: written directly.
	wf.mustRun(0, env)
	base := r.files("main")
	if len(base) != 1 {
		t.Fatalf("main after the direct render: %v", base)
	}

	r.setStore(w, "{}")
	wf.setOutput(map[string]string{"a.yaml": objNamed("ConfigMap", "a"), "b.yaml": objNamed("ConfigMap", "b")})
	res := wf.mustRun(0, env, "--dry-run")
	if !strings.Contains(res.out, "would propose it in a pull request from "+prBranch+" into main") || !strings.Contains(res.out, "+ resources/team/pg/db/configure/5058f/b.yaml") {
		t.Errorf("dry run: %s", res)
	}
	if prs := r.pulls(); len(prs) != 0 || r.files(prBranch) != nil {
		t.Fatalf("a dry run proposed: %+v", prs)
	}
	res = wf.mustRun(0, env)
	r.noSecrets(res)
	first := r.onlyPR()
	if first.State != "open" || first.Head.Ref != prBranch || first.Base.Ref != "main" {
		t.Fatalf("pull request: %+v", first)
	}
	if !strings.Contains(res.out, fmt.Sprintf("pull request #%d opened", first.Number)) {
		t.Errorf("stdout does not say the pull request was opened: %s", res)
	}
	if got := r.files("main"); strings.Join(got, ",") != strings.Join(base, ",") {
		t.Errorf("main moved in pull-request mode: %v, was %v", got, base)
	}
	if !r.has(prBranch, "clusters/dev/resources/team/pg/db/configure/5058f/b.yaml") {
		t.Errorf("the branch lacks the new file: %v", r.files(prBranch))
	}
	// The body is the per-destination diff, as --dry-run prints it.
	if !strings.Contains(first.Body, "#### destination dev (`dev`)") || !strings.Contains(first.Body, "+ resources/team/pg/db/configure/5058f/b.yaml") {
		t.Errorf("body lacks the diff:\n%s", first.Body)
	}

	// A re-render with another change updates the same pull request.
	wf.setOutput(map[string]string{"a.yaml": objNamed("ConfigMap", "a"), "c.yaml": objNamed("ConfigMap", "c")})
	res = wf.mustRun(0, env)
	second := r.onlyPR()
	if second.Number != first.Number || second.State != "open" {
		t.Fatalf("re-render: want pull request #%d still open, got %+v", first.Number, second)
	}
	if second.Head.SHA == first.Head.SHA {
		t.Errorf("re-render: the head did not move (%s)", second.Head.SHA)
	}
	if !strings.Contains(res.out, fmt.Sprintf("pull request #%d updated", first.Number)) {
		t.Errorf("stdout does not say the pull request was updated: %s", res)
	}
	files := r.files(prBranch)
	if !r.has(prBranch, "clusters/dev/resources/team/pg/db/configure/5058f/c.yaml") || r.has(prBranch, "clusters/dev/resources/team/pg/db/configure/5058f/b.yaml") {
		t.Errorf("the branch is not exactly the new plan on main: %v", files)
	}
	if !strings.Contains(second.Body, "+ resources/team/pg/db/configure/5058f/c.yaml") || strings.Contains(second.Body, "b.yaml") {
		t.Errorf("the body was not updated:\n%s", second.Body)
	}

	// The same output again: the branch already holds this proposal, so
	// nothing is pushed and the head stays (a forge's checks do not restart).
	wf.mustRun(0, env)
	same := r.onlyPR()
	if same.Number != first.Number || same.State != "open" || same.Head.SHA != second.Head.SHA {
		t.Errorf("unchanged re-render: want pull request #%d open at %s, got #%d %s at %s", first.Number, second.Head.SHA, same.Number, same.State, same.Head.SHA)
	}

	// Back to what main holds: nothing to propose; the pull request closes.
	wf.setOutput(map[string]string{"a.yaml": objNamed("ConfigMap", "a")})
	res = wf.mustRun(0, env)
	closed := r.onlyPR()
	if closed.State != "closed" || closed.Merged {
		t.Errorf("want the pull request closed unmerged, got %+v", closed)
	}
	if !strings.Contains(res.out, fmt.Sprintf("pull request #%d closed", first.Number)) {
		t.Errorf("stdout does not say the pull request was closed: %s", res)
	}
	if r.files(prBranch) != nil {
		t.Errorf("the branch is left: %v", r.files(prBranch))
	}
	// And again: no pull request, and nothing opened.
	res = wf.mustRun(0, env)
	if !strings.Contains(res.out, "no pull request: nothing differs from main") {
		t.Errorf("stdout: %s", res)
	}
	r.onlyPR()
}

func TestPullRequestAutoMerge(t *testing.T) {
	w, r := prWorld(t, "autoMerge: true\nwait: 1m")
	env := resourceEnv("pg", "team", "db", "configure")
	wf := w.workflow("db").setSelectors("- matchLabels: {env: prod}\n").setOutput(map[string]string{"a.yaml": objNamed("ConfigMap", "a")})
	// A new repository: render starts main with an empty commit, then
	// proposes the change into it.
	res := wf.mustRun(0, env)
	r.noSecrets(res)
	pr := r.onlyPR()
	if !pr.Merged {
		t.Fatalf("want the pull request merged, got %+v\n%s", pr, res)
	}
	if !r.has("main", "clusters/prod/resources/team/pg/db/configure/5058f/a.yaml") {
		t.Errorf("main lacks the change after the merge: %v", r.files("main"))
	}
	if !strings.Contains(res.out, fmt.Sprintf("pull request #%d is merged", pr.Number)) {
		t.Errorf("stdout: %s", res)
	}
	// The records landed with it: a re-render has nothing to propose.
	res = wf.mustRun(0, env)
	if !strings.Contains(res.out, "no pull request: nothing differs from main") {
		t.Errorf("re-render after the merge: %s", res)
	}
	r.onlyPR()
}

func TestPullRequestClosedIsReported(t *testing.T) {
	w, r := prWorld(t, "{}")
	env := resourceEnv("pg", "team", "db", "configure")
	wf := w.workflow("db").setSelectors("- matchLabels: {env: dev}\n").setOutput(map[string]string{"a.yaml": objNamed("ConfigMap", "a")})
	wf.mustRun(0, env)
	pr := r.onlyPR()
	if code := r.g.API(t, http.MethodPatch, fmt.Sprintf("/repos/%s/%s/pulls/%d", r.repo.Owner, r.repo.Name, pr.Number), map[string]any{"state": "closed"}, nil); code != http.StatusCreated && code != http.StatusOK {
		t.Fatalf("closing the pull request: HTTP %d", code)
	}
	// The same change again: reported on one line, not opened again.
	for range 2 {
		res := wf.mustRun(1, env)
		lines := strings.Split(strings.TrimSpace(res.errout), "\n")
		if len(lines) != 1 || !strings.Contains(lines[0], fmt.Sprintf("pull request #%d (%s) was closed without being merged", pr.Number, prBranch)) {
			t.Errorf("want one line saying the pull request was closed: %s", res)
		}
		if got := r.onlyPR(); got.State != "closed" {
			t.Errorf("the pull request was reopened: %+v", got)
		}
	}
	// Another change is proposed anew.
	wf.setOutput(map[string]string{"b.yaml": objNamed("ConfigMap", "b")})
	wf.mustRun(0, env)
	prs := r.pulls()
	if len(prs) != 2 || prs[0].State != "open" || prs[0].Head.Ref != prBranch {
		t.Errorf("want a second, open pull request for the new change: %+v", prs)
	}
}

func TestPullRequestDestinationSelector(t *testing.T) {
	w, r := prWorld(t, "destinationSelector: {matchLabels: {env: prod}}")
	devEnv := resourceEnv("pg", "team", "devdb", "configure")
	w.workflow("devdb").setSelectors("- matchLabels: {env: dev}\n").setOutput(map[string]string{"a.yaml": objNamed("ConfigMap", "a")}).mustRun(0, devEnv)
	if !r.has("main", "clusters/dev/resources/team/pg/devdb/configure/5058f/a.yaml") {
		t.Errorf("a write to dev did not go to main directly: %v", r.files("main"))
	}
	if prs := r.pulls(); len(prs) != 0 {
		t.Errorf("a write to dev opened a pull request: %+v", prs)
	}
	res := w.workflow("db").setSelectors("- matchLabels: {env: prod}\n").setOutput(map[string]string{"a.yaml": objNamed("ConfigMap", "a")}).mustRun(0, resourceEnv("pg", "team", "db", "configure"))
	pr := r.onlyPR()
	if pr.Head.Ref != prBranch || r.has("main", "clusters/prod/resources/team/pg/db/configure/5058f/a.yaml") {
		t.Errorf("a write to prod did not go through a pull request: %+v %v\n%s", pr, r.files("main"), res)
	}
}

func TestPullRequestBadInput(t *testing.T) {
	for _, tc := range []struct {
		name, store, want string
	}{
		{"file store", gitStore("default", "file://%s") + "  pullRequest: {}\n",
			"(GitStateStore default): spec.pullRequest: spec.url is a repository on this machine"},
		{"ssh without apiURL", gitStore("default", "ssh://git@git.example.com/org/state.git") + "  authMethod: ssh\n  secretRef: {name: s}\n  pullRequest: {}\n",
			"(GitStateStore default): spec.pullRequest.apiURL is needed: the forge's API cannot be known from a ssh URL"},
		{"a typo", gitStore("default", "https://git.example.com/org/state.git") + "  pullRequest: {autoMerg: true}\n",
			"unknown field spec.pullRequest.autoMerg (did you mean spec.pullRequest.autoMerge?)"},
		{"unknown forge", gitStore("default", "https://git.example.com/org/state.git") + "  authMethod: basicAuth\n  secretRef: {name: s}\n  pullRequest: {forge: gitlab}\n",
			`spec.pullRequest.forge "gitlab" is unknown: use gitea`},
		{"no secret", gitStore("default", "https://git.example.com/org/state.git") + "  pullRequest: {}\n",
			"spec.pullRequest needs the store's spec.secretRef"},
		{"bad selector", gitStore("default", "https://git.example.com/org/state.git") + "  authMethod: basicAuth\n  secretRef: {name: s}\n  pullRequest: {destinationSelector: {matchLabels: {env: a b}}}\n",
			"spec.pullRequest.destinationSelector: invalid selector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			store := tc.store
			if strings.Contains(store, "%s") {
				store = fmt.Sprintf(store, w.repo)
			}
			w.file("platform/store.yaml", store)
			w.file("platform/destinations.yaml", dest("dev", nil))
			res := w.workflow("r1").setOutput(map[string]string{"db.yaml": obj("ConfigMap")}).mustRun(2, resourceEnv("pg", "team", "r1", "configure"))
			if !strings.Contains(res.errout, tc.want) || !strings.Contains(res.errout, "store.yaml") {
				t.Errorf("stderr lacks %q: %s", tc.want, res)
			}
			if _, err := os.Stat(w.repo); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the local repository was written: %v", err)
			}
		})
	}
	t.Run("no token", func(t *testing.T) {
		w := newWorld(t)
		w.file("platform/store.yaml", gitStore("default", "ssh://git@git.example.com/org/state.git")+`  authMethod: ssh
  secretRef: {name: s}
  pullRequest: {apiURL: "https://git.example.com/api/v1"}
---
apiVersion: v1
kind: Secret
metadata: {name: s}
stringData: {sshPrivateKey: x, knownHosts: y}
`)
		w.file("platform/destinations.yaml", dest("dev", nil))
		res := w.workflow("r1").setOutput(map[string]string{"db.yaml": obj("ConfigMap")}).mustRun(2, resourceEnv("pg", "team", "r1", "configure"))
		if !strings.Contains(res.errout, "GitStateStore default: spec.pullRequest: secret s has no key \"token\"") {
			t.Errorf("stderr: %s", res)
		}
	})
}

// TestPullRequestWaitTimeoutBinary runs the built binary: a pull request
// nobody merges is still open when the wait ends, which is exit code 5.
func TestPullRequestWaitTimeoutBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	w, r := prWorld(t, "wait: 2s")
	bin := testenv.RenderBinary(t)
	wf := w.workflow("db").setSelectors("- matchLabels: {env: dev}\n").setOutput(map[string]string{"a.yaml": objNamed("ConfigMap", "a")})
	cmd := exec.Command(bin, wf.args()...)
	cmd.Env = []string{"KRATIX_WORKFLOW_TYPE=resource", "KRATIX_PROMISE_NAME=pg", "KRATIX_OBJECT_NAMESPACE=team", "KRATIX_OBJECT_NAME=db", "KRATIX_PIPELINE_NAME=configure", "PATH=" + os.Getenv("PATH")}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	t0 := time.Now()
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 5 {
		t.Fatalf("want exit code 5, got %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	if took := time.Since(t0); took < 2*time.Second {
		t.Errorf("exited after %s, before the wait ended", took)
	}
	pr := r.onlyPR()
	if !strings.Contains(errb.String(), fmt.Sprintf("pull request #%d (%s) is still open", pr.Number, prBranch)) {
		t.Errorf("stderr: %s", errb.String())
	}
	r.noSecrets(result{out: out.String(), errout: errb.String()})
}

// TestPullRequestClosedWhileWaiting closes the pull request while render
// waits for its merge: the wait ends at once, with one line and exit 1.
func TestPullRequestClosedWhileWaiting(t *testing.T) {
	w, r := prWorld(t, "wait: 2m")
	wf := w.workflow("db").setSelectors("- matchLabels: {env: dev}\n").setOutput(map[string]string{"a.yaml": objNamed("ConfigMap", "a")})
	done := make(chan result, 1)
	go func() { done <- run(t, resourceEnv("pg", "team", "db", "configure"), wf.args()...) }()
	var pr apiPR
	deadline := time.Now().Add(90 * time.Second)
	for {
		if prs := r.pulls(); len(prs) == 1 {
			pr = prs[0]
			break
		}
		select {
		case res := <-done:
			t.Fatalf("render ended before a pull request was opened: %s", res)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no pull request was opened within 90s")
		}
		time.Sleep(200 * time.Millisecond) // polling a condition, bounded above
	}
	if code := r.g.API(t, http.MethodPatch, fmt.Sprintf("/repos/%s/%s/pulls/%d", r.repo.Owner, r.repo.Name, pr.Number), map[string]any{"state": "closed"}, nil); code != http.StatusCreated && code != http.StatusOK {
		t.Fatalf("closing the pull request: HTTP %d", code)
	}
	select {
	case res := <-done:
		if res.code != 1 || !strings.Contains(res.errout, fmt.Sprintf("pull request #%d (%s) was closed without being merged while render waited", pr.Number, prBranch)) {
			t.Errorf("want exit 1 and one line saying the pull request was closed: %s", res)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("render still waits 60s after the pull request was closed")
	}
}
