package cli

// End-to-end tests of `render --watch` as a built binary, the way a pipeline
// pod runs it, against a local bare repository and against Gitea; and the
// change-to-commit latency benchmark:
//
//	go test -run '^$' -bench BenchmarkWatchLatency -benchtime 100x ./internal/cli/
//
// (with Gitea's variables set, e.g. through scripts/test.sh, for the gitea
// half).

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/render-dev/render/internal/testinfra/testenv"
)

// watchBuildRender builds the render binary the way the Dockerfile does.
func watchBuildRender(t testing.TB) string {
	t.Helper()
	return testenv.RenderBinary(t)
}

// watchGiteaStore is a GitStateStore on a new Gitea repository with basic auth
// from a Secret document, and a reader of that repository.
func watchGiteaStore(t testing.TB, g *testenv.GiteaServer) (string, testenv.Repo, func() (watchRepoState, error)) {
	t.Helper()
	repo := g.CreateRepoInfo(t, "render-watch")
	store := fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: GitStateStore
metadata:
  name: default
spec:
  url: %s
  branch: main
  path: clusters
  authMethod: basicAuth
  secretRef: {name: gitea-credentials, namespace: default}
  gitAuthor: {name: render test, email: render@example.com}
---
apiVersion: v1
kind: Secret
metadata: {name: gitea-credentials, namespace: default}
stringData:
  username: %q
  password: %q
`, repo.CloneURL, g.AdminUser(), g.AdminToken())
	auth := &githttp.BasicAuth{Username: g.AdminUser(), Password: g.AdminToken()}
	read := func() (watchRepoState, error) {
		r, err := git.Clone(memory.NewStorage(), nil, &git.CloneOptions{
			URL: repo.CloneURL, Auth: auth, ReferenceName: plumbing.NewBranchReferenceName("main"), SingleBranch: true,
		})
		if errors.Is(err, transport.ErrEmptyRemoteRepository) || (err != nil && strings.Contains(err.Error(), "couldn't find remote ref")) {
			return watchRepoState{}, nil
		}
		if err != nil {
			return watchRepoState{}, err
		}
		return watchReadRepo(r, "main")
	}
	return store, repo, read
}

func TestWatchE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	bin := watchBuildRender(t)
	t.Run("local", func(t *testing.T) {
		repo := filepath.Join(t.TempDir(), "state.git")
		watchE2EScenario(t, bin, watchLocalStore(repo), watchLocalRepo(repo))
	})
	t.Run("gitea", func(t *testing.T) {
		g := testenv.Gitea(t)
		store, _, read := watchGiteaStore(t, g)
		watchE2EScenario(t, bin, store, read)
	})
}

// watchE2EScenario runs `render --watch` until a first commit, sends a burst of
// 300 files (one commit), then writes one more file, sends SIGTERM at once,
// and expects that file committed and exit code 0.
func watchE2EScenario(t *testing.T, bin, store string, read func() (watchRepoState, error)) {
	d := newWatchDirs(t, store)
	watchWrite(t, filepath.Join(d.output, "a.yaml"), watchObj(""))
	logs := &watchLogBuffer{}
	cmd := exec.Command(bin, d.args("--quiet-period", "200ms", "--log-format", "json", "--metrics-addr", "127.0.0.1:0")...)
	cmd.Env = os.Environ()
	for k, v := range watchEnv {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = logs, logs
	exited := watchStartProcess(t, cmd)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("render logs:\n%s", logs.String())
		}
	})

	first := watchWaitRepo(t, read, "the first commit", 60*time.Second, func(s watchRepoState) bool { return s.has("/a.yaml") })
	addr := watchMetricsAddr(t, logs)
	if code, body := watchGet(t, "http://"+addr+"/healthz"); code != 200 {
		t.Fatalf("/healthz: %d %q", code, body)
	}

	// A burst of 300 files lands as one commit.
	for i := range 300 {
		watchWrite(t, filepath.Join(d.output, "burst", fmt.Sprintf("f%03d.yaml", i)), watchObj(fmt.Sprintf("n%d", i)))
	}
	watchWaitRepo(t, read, "the burst", 60*time.Second, func(s watchRepoState) bool { return s.count(".yaml") >= first.count(".yaml")+300 })
	// The metrics count a commit once its render has returned, which can be
	// well after the push landed on a busy machine: wait for it.
	committed := `render_store_writes_total{result="committed",store="GitStateStore/default"} `
	metrics := watchWaitMetrics(t, addr, "2 commits counted", 60*time.Second, func(m string) bool {
		return strings.Contains(m, committed+"2") || strings.Contains(m, committed+"3")
	})
	// That the burst made one commit is checked once render has exited
	// (below): every render it made by then is on the branch, with no
	// wait to prove that none came later.
	if !strings.Contains(metrics, committed+"2") {
		t.Errorf("metrics do not count 2 commits:\n%s", watchGrep(metrics, "render_"))
	}

	// The last write before SIGTERM is committed, and the exit code is 0.
	watchWrite(t, filepath.Join(d.output, "last.yaml"), watchObj(""))
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exited.exitCode(t, 60*time.Second, logs); code != 0 {
		t.Fatalf("render --watch exited with %d after SIGTERM, want 0", code)
	}
	st, err := read()
	if err != nil || !st.has("/last.yaml") {
		t.Fatalf("last.yaml not committed by the last render (err %v)", err)
	}
	// The burst's one commit, and the last render's.
	if st.commits != first.commits+2 {
		t.Fatalf("the burst and the last write made %d commits, want 2", st.commits-first.commits)
	}
	if !strings.Contains(logs.String(), `"msg":"stopping: one last render, then exit"`) {
		t.Error("no log of the last render")
	}
}

func TestWatchE2ESecondSignalExits130(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	bin := watchBuildRender(t)
	// A store that does not answer keeps the last render busy retrying.
	d := newWatchDirs(t, strings.Replace(watchLocalStore("/unused"), "file:///unused", "http://127.0.0.1:9/nobody.git", 1))
	watchWrite(t, filepath.Join(d.output, "a.yaml"), watchObj(""))
	logs := &watchLogBuffer{}
	cmd := exec.Command(bin, d.args("--retry-deadline", "1m")...)
	cmd.Env = os.Environ()
	for k, v := range watchEnv {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = logs, logs
	exited := watchStartProcess(t, cmd)
	watchWaitLog(t, logs, `msg=rendering`, 10*time.Second)
	cmd.Process.Signal(syscall.SIGTERM)
	watchWaitLog(t, logs, `stopping`, 10*time.Second)
	cmd.Process.Signal(syscall.SIGINT)
	if code := exited.exitCode(t, 10*time.Second, logs); code != ExitInterrupted {
		t.Fatalf("exit %d after a second signal, want %d; logs:\n%s", code, ExitInterrupted, logs.String())
	}
}

// watchProcess is a started command.
type watchProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // valid once done is closed
}

// watchStartProcess starts cmd; a process still running when the test ends is
// killed.
func watchStartProcess(t testing.TB, cmd *exec.Cmd) *watchProcess {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &watchProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// exitCode waits up to timeout for the process to end, and returns its
// exit code.
func (p *watchProcess) exitCode(t testing.TB, timeout time.Duration, logs fmt.Stringer) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("render did not exit within %v; logs:\n%s", timeout, logs)
	}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0
	case errors.As(p.err, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("render: %v", p.err)
	return -1
}

func watchGrep(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// BenchmarkWatchLatency measures change-to-commit latency of watch mode
// with the default quiet period: from writing one file to the branch head
// moving. It reports the median and the 99th percentile; run it with
// -benchtime 100x for a meaningful p99.
func BenchmarkWatchLatency(b *testing.B) {
	b.Run("local", func(b *testing.B) {
		repo := filepath.Join(b.TempDir(), "state.git")
		watchBenchLatency(b, watchLocalStore(repo), 2*time.Millisecond, func() (string, error) {
			r, err := git.PlainOpen(repo)
			if err != nil {
				return "", err
			}
			ref, err := r.Reference(plumbing.NewBranchReferenceName("main"), true)
			if err != nil {
				return "", err
			}
			return ref.Hash().String(), nil
		})
	})
	b.Run("gitea", func(b *testing.B) {
		g := testenv.Gitea(b)
		store, repo, _ := watchGiteaStore(b, g)
		// The refs git itself advertises (Gitea's branch API lags pushes).
		remote := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{repo.CloneURL}})
		auth := &githttp.BasicAuth{Username: g.AdminUser(), Password: g.AdminToken()}
		// Polled gently: every ls-remote costs Gitea a git process.
		watchBenchLatency(b, store, 25*time.Millisecond, func() (string, error) {
			refs, err := remote.List(&git.ListOptions{Auth: auth})
			if err != nil {
				return "", err
			}
			for _, r := range refs {
				if r.Name() == plumbing.NewBranchReferenceName("main") {
					return r.Hash().String(), nil
				}
			}
			return "", errors.New("no branch main")
		})
	})
}

func watchBenchLatency(b *testing.B, store string, poll time.Duration, head func() (string, error)) {
	d := newWatchDirs(b, store)
	watchWrite(b, filepath.Join(d.output, "seed.yaml"), watchObj("seed"))
	r := startWatch(b, d.args(), time.Second)
	watchWaitLog(b, r.logs, `"msg":"store written"`, 60*time.Second)
	prev := ""
	for deadline := time.Now().Add(30 * time.Second); prev == "" && time.Now().Before(deadline); {
		prev, _ = head()
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		watchWrite(b, filepath.Join(d.output, "changing.yaml"), watchObj(fmt.Sprintf("n%d", i)))
		for {
			h, err := head()
			if err == nil && h != prev {
				prev = h
				break
			}
			if time.Since(t0) > time.Minute {
				b.Fatalf("no commit within a minute of change %d", i)
			}
			time.Sleep(poll)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	// The render's own share (reading inputs, the stores' reads and writes),
	// from its logs; the rest is the quiet period and noticing the change.
	var renders []time.Duration
	sc := bufio.NewScanner(strings.NewReader(r.logs.String()))
	for sc.Scan() {
		var line struct{ Msg, Duration string }
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "render done" {
			if d, err := time.ParseDuration(line.Duration); err == nil {
				renders = append(renders, d)
			}
		}
	}
	if len(renders) > 0 {
		slices.Sort(renders)
		b.ReportMetric(float64(renders[len(renders)/2].Microseconds())/1000, "render-p50-ms")
	}
	r.sigs <- syscall.SIGTERM
	r.wait(b)
}

// watchWaitMetrics polls /metrics until ok holds, and fails naming what it
// waited for after timeout.
func watchWaitMetrics(t testing.TB, addr, what string, timeout time.Duration, ok func(string) bool) string {
	t.Helper()
	var last string
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if code, body := watchGet(t, "http://"+addr+"/metrics"); code == 200 {
			if last = body; ok(body) {
				return body
			}
		}
	}
	t.Fatalf("waited %v for metrics: %s; last seen:\n%s", timeout, what, watchGrep(last, "render_"))
	return ""
}
