package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/spf13/pflag"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

// --- a workflow on disk -----------------------------------------------------

// watchDirs is a promise workflow's folders and a platform folder, all
// in a temporary folder, with the git store given by storeYAML.
type watchDirs struct {
	root, output, metadata, input, platform string
}

const watchDestinations = `apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata:
  name: dev-eu
  labels: {env: dev, zone: eu}
spec:
  stateStoreRef: {kind: GitStateStore, name: default}
`

// watchLocalStore is a GitStateStore on a bare repository at repo (file://,
// absolute; created on first use).
func watchLocalStore(repo string) string {
	return fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: GitStateStore
metadata:
  name: default
spec:
  url: file://%s
  branch: main
  path: clusters
  gitAuthor: {name: render test, email: render@example.com}
`, repo)
}

func newWatchDirs(t testing.TB, storeYAML string) watchDirs {
	t.Helper()
	root := t.TempDir()
	d := watchDirs{
		root:     root,
		output:   filepath.Join(root, "kratix", "output"),
		metadata: filepath.Join(root, "kratix", "metadata"),
		input:    filepath.Join(root, "kratix", "input"),
		platform: filepath.Join(root, "platform"),
	}
	watchWrite(t, filepath.Join(d.input, "object.yaml"), "apiVersion: platform.kratix.io/v1alpha1\nkind: Promise\nmetadata:\n  name: postgres\n")
	watchWrite(t, filepath.Join(d.platform, "destinations.yaml"), watchDestinations)
	watchWrite(t, filepath.Join(d.platform, "state-stores.yaml"), storeYAML)
	if err := os.MkdirAll(d.output, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(d.metadata, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// args are the command-line flags for d; extra ones come after.
func (d watchDirs) args(extra ...string) []string {
	return append([]string{"--watch", "--platform", d.platform, "--output", d.output,
		"--metadata", d.metadata, "--input", d.input}, extra...)
}

var watchEnv = map[string]string{
	"KRATIX_WORKFLOW_TYPE": "promise",
	"KRATIX_PROMISE_NAME":  "postgres",
	"KRATIX_PIPELINE_NAME": "configure",
}

// watchObj is a small Kubernetes object named name, as every YAML file in
// an output must hold; "" makes a name unique in the test binary.
func watchObj(name string) string {
	if name == "" {
		name = fmt.Sprintf("obj-%d", watchObjs.Add(1))
	}
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n"
}

var watchObjs atomic.Int64

func watchWrite(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// --- reading a repository ----------------------------------------------------

// watchRepoState is a branch's commits (newest first) and the files of its head.
type watchRepoState struct {
	commits int
	head    string
	files   []string
}

// has reports whether some file's path ends with suffix.
func (s watchRepoState) has(suffix string) bool {
	for _, f := range s.files {
		if strings.HasSuffix(f, suffix) {
			return true
		}
	}
	return false
}

// count counts the files whose path ends with suffix.
func (s watchRepoState) count(suffix string) int {
	n := 0
	for _, f := range s.files {
		if strings.HasSuffix(f, suffix) {
			n++
		}
	}
	return n
}

func watchReadRepo(r *git.Repository, branch string) (watchRepoState, error) {
	ref, err := r.Reference(plumbing.NewBranchReferenceName(branch), true)
	if err != nil {
		return watchRepoState{}, err
	}
	var st watchRepoState
	st.head = ref.Hash().String()
	iter, err := r.Log(&git.LogOptions{From: ref.Hash()})
	if err != nil {
		return watchRepoState{}, err
	}
	err = iter.ForEach(func(*object.Commit) error { st.commits++; return nil })
	if err != nil {
		return watchRepoState{}, err
	}
	c, err := r.CommitObject(ref.Hash())
	if err != nil {
		return watchRepoState{}, err
	}
	tree, err := c.Tree()
	if err != nil {
		return watchRepoState{}, err
	}
	err = tree.Files().ForEach(func(f *object.File) error { st.files = append(st.files, f.Name); return nil })
	return st, err
}

// watchLocalRepo reads a bare repository on disk; a repository that does not
// exist yet has no commits.
func watchLocalRepo(dir string) func() (watchRepoState, error) {
	return func() (watchRepoState, error) {
		r, err := git.PlainOpen(dir)
		if errors.Is(err, git.ErrRepositoryNotExists) {
			return watchRepoState{}, nil
		}
		if err != nil {
			return watchRepoState{}, err
		}
		st, err := watchReadRepo(r, "main")
		if errors.Is(err, plumbing.ErrReferenceNotFound) {
			return watchRepoState{}, nil
		}
		return st, err
	}
}

// watchWaitRepo polls read until ok holds, and returns that state.
func watchWaitRepo(t testing.TB, read func() (watchRepoState, error), what string, timeout time.Duration, ok func(watchRepoState) bool) watchRepoState {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last watchRepoState
	var lastErr error
	for time.Now().Before(deadline) {
		st, err := read()
		if err == nil && ok(st) {
			return st
		}
		last, lastErr = st, err
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("waiting for %s: not within %v (last: %d commits, %d files, err %v)", what, timeout, last.commits, len(last.files), lastErr)
	return watchRepoState{}
}

// --- running watch mode in this process -------------------------------------

// watchLogBuffer is a bytes.Buffer safe for a logger and a test to share.
type watchLogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *watchLogBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *watchLogBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// watchRun is watch mode running in a goroutine.
type watchRun struct {
	sigs   chan os.Signal
	cancel context.CancelFunc
	done   chan error
	logs   *watchLogBuffer
}

func watchOptions(t testing.TB, args []string) *renderOptions {
	t.Helper()
	o := &renderOptions{}
	fs := pflag.NewFlagSet("render", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	return o
}

func startWatch(t testing.TB, args []string, backoff time.Duration, hooks ...func(*watchHooks)) *watchRun {
	t.Helper()
	return startWatchClock(t, args, backoff, nil, hooks...)
}

// startWatchClock is startWatch with the backoff timed by clk (nil: the
// real clock).
func startWatchClock(t testing.TB, args []string, backoff time.Duration, clk clock.Clock, hooks ...func(*watchHooks)) *watchRun {
	t.Helper()
	o := watchOptions(t, args)
	ctx, cancel := context.WithCancel(context.Background())
	r := &watchRun{sigs: make(chan os.Signal, 2), cancel: cancel, done: make(chan error, 1), logs: &watchLogBuffer{}}
	var abandoned <-chan struct{}
	io := IO{Out: io.Discard, Err: r.logs, Getenv: func(k string) string { return watchEnv[k] }}
	log := newLogger(r.logs, "json", "debug")
	h := watchHooks{signals: r.sigs, backoffMin: backoff, backoffMax: 4 * backoff, clock: clk,
		abandoned: func(c <-chan struct{}) { abandoned = c }}
	for _, f := range hooks {
		f(&h)
	}
	go func() { r.done <- watch(ctx, o, io, log, h) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			t.Error("watch did not end after its context was cancelled")
		}
		if abandoned != nil {
			<-abandoned // the render a second signal left behind
		}
		if t.Failed() {
			t.Logf("watch logs:\n%s", r.logs.String())
		}
	})
	return r
}

// wait returns watch's result and exit code.
func (r *watchRun) wait(t testing.TB) (int, error) {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		var ee *ExitError
		switch {
		case err == nil:
			return ExitOK, nil
		case errors.As(err, &ee):
			return ee.Code, err
		}
		return -1, err
	case <-time.After(60 * time.Second):
		t.Fatalf("watch did not end; logs:\n%s", r.logs.String())
	}
	return -1, nil
}

// logged waits until a log line matches re.
func watchWaitLog(t testing.TB, logs interface{ String() string }, re string, timeout time.Duration) string {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if m := rx.FindString(logs.String()); m != "" {
			return m
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no log line matching %q within %v; logs:\n%s", re, timeout, logs.String())
	return ""
}

// watchMetricsAddr finds the address watch mode serves metrics on in its logs.
func watchMetricsAddr(t testing.TB, logs interface{ String() string }) string {
	t.Helper()
	watchWaitLog(t, logs, `serving /metrics`, 10*time.Second)
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() {
		var line struct{ Msg, Addr string }
		if json.Unmarshal(sc.Bytes(), &line) == nil && strings.HasPrefix(line.Msg, "serving /metrics") {
			return line.Addr
		}
	}
	t.Fatal("metrics address not logged")
	return ""
}

func watchGet(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// --- tests -------------------------------------------------------------------

func TestWatchRendersChangesAndLastRenderOnSignal(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "state.git")
	d := newWatchDirs(t, watchLocalStore(repo))
	watchWrite(t, filepath.Join(d.output, "a.yaml"), watchObj(""))
	r := startWatch(t, d.args("--quiet-period", "100ms", "--metrics-addr", "127.0.0.1:0"), time.Second)
	read := watchLocalRepo(repo)
	watchWaitRepo(t, read, "the first render", 20*time.Second, func(s watchRepoState) bool { return s.has("/a.yaml") })

	watchWrite(t, filepath.Join(d.output, "sub", "b.yaml"), watchObj(""))
	watchWaitRepo(t, read, "b.yaml", 20*time.Second, func(s watchRepoState) bool { return s.has("/sub/b.yaml") })

	addr := watchMetricsAddr(t, r.logs)
	code, body := watchGet(t, "http://"+addr+"/healthz")
	if code != 200 || !strings.Contains(body, "last render: ok") {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	_, body = watchGet(t, "http://"+addr+"/metrics")
	for _, want := range []string{`render_renders_total{result="ok"}`, `render_store_writes_total{result="committed",store="GitStateStore/default"}`, "render_last_success_timestamp_seconds 1."} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// A file written just before SIGTERM is in the last render.
	watchWrite(t, filepath.Join(d.output, "c.yaml"), watchObj(""))
	r.sigs <- syscall.SIGTERM
	if code, err := r.wait(t); code != ExitOK {
		t.Fatalf("exit %d (%v), want 0", code, err)
	}
	st, err := read()
	if err != nil || !st.has("/c.yaml") {
		t.Fatalf("c.yaml not committed by the last render (err %v): %v", err, st.files)
	}
}

func TestWatchBurstIsOneCommit(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "state.git")
	d := newWatchDirs(t, watchLocalStore(repo))
	watchWrite(t, filepath.Join(d.output, "first.yaml"), watchObj(""))
	r := startWatch(t, d.args("--quiet-period", "300ms"), time.Second)
	read := watchLocalRepo(repo)
	before := watchWaitRepo(t, read, "the first render", 20*time.Second, func(s watchRepoState) bool { return s.has("/first.yaml") })

	for i := range 300 {
		watchWrite(t, filepath.Join(d.output, "burst", fmt.Sprintf("f%03d.yaml", i)), watchObj(fmt.Sprintf("n%d", i)))
	}
	after := watchWaitRepo(t, read, "the burst", 30*time.Second, func(s watchRepoState) bool { return s.count(".yaml") >= before.count(".yaml")+300 })
	if got := after.commits - before.commits; got != 1 {
		t.Fatalf("the burst of 300 files made %d commits, want 1", got)
	}
	// Every render still to come has run once watch mode has exited, the
	// last one included: none of them may commit again.
	r.sigs <- syscall.SIGTERM
	if code, err := r.wait(t); code != ExitOK {
		t.Fatalf("exit %d (%v)", code, err)
	}
	if final, err := read(); err != nil || final.head != after.head {
		t.Fatalf("the burst made %d commits, want 1 (err %v)", final.commits-before.commits, err)
	}
}

func TestWatchUnscheduledGroupPlacedWhenPlatformChanges(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "state.git")
	d := newWatchDirs(t, watchLocalStore(repo))
	watchWrite(t, filepath.Join(d.metadata, "destination-selectors.yaml"), "- directory: us\n  matchLabels: {zone: us}\n")
	watchWrite(t, filepath.Join(d.output, "us", "app.yaml"), watchObj(""))
	watchWrite(t, filepath.Join(d.output, "root.yaml"), watchObj(""))
	r := startWatch(t, d.args("--quiet-period", "100ms"), time.Second)
	read := watchLocalRepo(repo)
	watchWaitRepo(t, read, "the first render", 20*time.Second, func(s watchRepoState) bool { return s.has("/root.yaml") })
	watchWaitLog(t, r.logs, `"msg":"group unscheduled","group":"us"`, 10*time.Second)
	if st, _ := read(); st.has("/app.yaml") {
		t.Fatal("the unscheduled group was written")
	}

	// A new Destination in the platform folder: the next render places it.
	watchWrite(t, filepath.Join(d.platform, "dev-us.yaml"), `apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata:
  name: dev-us
  labels: {env: dev, zone: us}
spec:
  stateStoreRef: {kind: GitStateStore, name: default}
`)
	st := watchWaitRepo(t, read, "the group placed on dev-us", 20*time.Second, func(s watchRepoState) bool { return s.has("/app.yaml") })
	for _, f := range st.files {
		if strings.HasSuffix(f, "/app.yaml") && !strings.HasPrefix(f, "clusters/dev-us/") {
			t.Fatalf("app.yaml went to %s, want under clusters/dev-us/", f)
		}
	}
	r.sigs <- syscall.SIGTERM
	if code, err := r.wait(t); code != ExitOK {
		t.Fatalf("exit %d (%v)", code, err)
	}
}

func TestWatchBadInputWaitsForNextChange(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "state.git")
	d := newWatchDirs(t, watchLocalStore(repo))
	watchWrite(t, filepath.Join(d.output, "ok.yaml"), watchObj(""))
	clk := clocktesting.NewFakeClock(time.Now()) // times the retries, were there any
	r := startWatchClock(t, d.args("--quiet-period", "100ms"), 50*time.Millisecond, clk)
	read := watchLocalRepo(repo)
	before := watchWaitRepo(t, read, "the first render", 20*time.Second, func(s watchRepoState) bool { return s.has("/ok.yaml") })

	watchWrite(t, filepath.Join(d.output, "broken.yaml"), "a: [\n")
	watchWaitLog(t, r.logs, `(?s)"msg":"bad input: nothing was written".*broken.yaml.*"msg":"(waiting for the next change|render failed; retrying)"`, 10*time.Second)
	// No retry of bad input: none is set to come.
	if clk.HasWaiters() || strings.Contains(r.logs.String(), "retrying") {
		t.Fatal("bad input is retried without a change")
	}
	if n := strings.Count(r.logs.String(), `"msg":"bad input`); n != 1 {
		t.Fatalf("bad input rendered %d times, want once (no retry without a change)", n)
	}
	if st, _ := read(); st.head != before.head {
		t.Fatal("bad input wrote a commit")
	}

	watchWrite(t, filepath.Join(d.output, "broken.yaml"), watchObj("fixed"))
	watchWaitRepo(t, read, "the fixed file", 20*time.Second, func(s watchRepoState) bool { return s.has("/broken.yaml") })

	// Bad input at the end decides the exit code.
	watchWrite(t, filepath.Join(d.output, "broken.yaml"), "a: [\n")
	r.sigs <- syscall.SIGTERM
	if code, _ := r.wait(t); code != ExitBadInput {
		t.Fatalf("exit %d, want %d", code, ExitBadInput)
	}
}

func TestWatchStoreFailureIsRetried(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "state.git")
	// A file where the repository should be: the store fails. (A missing
	// parent folder would be bad input: a mistyped URL.)
	watchWrite(t, repo, "not a repository\n")
	d := newWatchDirs(t, watchLocalStore(repo))
	watchWrite(t, filepath.Join(d.output, "a.yaml"), watchObj(""))
	r := startWatch(t, d.args("--quiet-period", "100ms", "--retry-deadline", "1s", "--metrics-addr", "127.0.0.1:0"), 200*time.Millisecond)
	watchWaitLog(t, r.logs, `"msg":"render failed; retrying"`, 20*time.Second)
	addr := watchMetricsAddr(t, r.logs)
	code, body := watchGet(t, "http://"+addr+"/healthz")
	if code != 200 || !strings.Contains(body, "last render: failed") || !strings.Contains(body, "last error: ") {
		t.Fatalf("/healthz after a failure: %d %q", code, body)
	}

	// The store comes back; no input changes, yet the retry writes.
	if err := os.Remove(repo); err != nil {
		t.Fatal(err)
	}
	watchWaitRepo(t, watchLocalRepo(repo), "a retried render", 20*time.Second, func(s watchRepoState) bool { return s.has("/a.yaml") })
	_, body = watchGet(t, "http://"+addr+"/metrics")
	if !regexp.MustCompile(`render_renders_total\{result="failed"\} [1-9]`).MatchString(body) {
		t.Errorf("failed renders not counted:\n%s", body)
	}
	r.sigs <- syscall.SIGTERM
	if code, err := r.wait(t); code != ExitOK {
		t.Fatalf("exit %d (%v)", code, err)
	}
}

func TestWatchLastRenderStoreFailureExitsOne(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "state.git")
	watchWrite(t, repo, "not a repository\n") // the store fails
	d := newWatchDirs(t, watchLocalStore(repo))
	watchWrite(t, filepath.Join(d.output, "a.yaml"), watchObj(""))
	r := startWatch(t, d.args("--retry-deadline", "1s"), time.Hour)
	watchWaitLog(t, r.logs, `"msg":"render failed; retrying"`, 20*time.Second)
	r.sigs <- syscall.SIGTERM
	if code, _ := r.wait(t); code != ExitStoreFailed {
		t.Fatalf("exit %d, want %d", code, ExitStoreFailed)
	}
}

// brokenListener accepts nothing: once closed is closed, Accept fails
// with a permanent error, as a listener whose socket died does.
type brokenListener struct {
	net.Listener
	closed chan struct{}
}

func (l brokenListener) Accept() (net.Conn, error) {
	<-l.closed
	return nil, errors.New("accept: socket died")
}

// The metrics server's failure is not dropped: it is logged, the watch
// stops with a last render, and the exit code is 1.
func TestWatchMetricsServerFailureExitsOne(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "state.git")
	d := newWatchDirs(t, watchLocalStore(repo))
	watchWrite(t, filepath.Join(d.output, "a.yaml"), watchObj(""))
	die := make(chan struct{})
	r := startWatch(t, d.args("--metrics-addr", "127.0.0.1:0"), time.Second, func(h *watchHooks) {
		h.listen = func(network, addr string) (net.Listener, error) {
			ln, err := net.Listen(network, addr)
			return brokenListener{ln, die}, err
		}
	})
	watchWaitRepo(t, watchLocalRepo(repo), "the first render", 20*time.Second, func(s watchRepoState) bool { return s.has("/a.yaml") })
	close(die)
	watchWaitLog(t, r.logs, `"msg":"serving /metrics and /healthz stopped".*"error":"accept: socket died"`, 10*time.Second)
	code, err := r.wait(t)
	if code != ExitStoreFailed || err == nil || !strings.Contains(err.Error(), "--metrics-addr: serving /metrics and /healthz stopped: accept: socket died") {
		t.Fatalf("exit %d (%v), want %d naming the metrics server", code, err, ExitStoreFailed)
	}
	if !strings.Contains(r.logs.String(), `"reason":"last render before exit"`) {
		t.Error("no last render before exiting")
	}
}

func TestWatchSecondSignalExitsAtOnce(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "state.git")
	d := newWatchDirs(t, watchLocalStore(repo))
	for i := range 50 {
		watchWrite(t, filepath.Join(d.output, fmt.Sprintf("f%d.yaml", i)), watchObj(""))
	}
	r := startWatch(t, d.args(), time.Second)
	// Both signals arrive while the first render runs.
	r.sigs <- syscall.SIGTERM
	r.sigs <- syscall.SIGINT
	if code, _ := r.wait(t); code != ExitInterrupted {
		t.Fatalf("exit %d, want %d", code, ExitInterrupted)
	}
}

func TestWatchContextCancelIsGraceful(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "state.git")
	d := newWatchDirs(t, watchLocalStore(repo))
	watchWrite(t, filepath.Join(d.output, "early.yaml"), watchObj(""))
	r := startWatch(t, d.args(), time.Second)
	watchWaitLog(t, r.logs, `"msg":"render done"`, 20*time.Second)
	watchWrite(t, filepath.Join(d.output, "late.yaml"), watchObj(""))
	r.cancel()
	if code, err := r.wait(t); code != ExitOK {
		t.Fatalf("exit %d (%v)", code, err)
	}
	if st, _ := watchLocalRepo(repo)(); !st.has("/late.yaml") {
		t.Fatalf("late.yaml not in the last render: %v", st.files)
	}
}

func TestWatchOutputFolderAppearsLater(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "state.git")
	d := newWatchDirs(t, watchLocalStore(repo))
	if err := os.RemoveAll(filepath.Dir(d.output)); err != nil { // no /kratix at all
		t.Fatal(err)
	}
	r := startWatch(t, d.args("--quiet-period", "100ms"), time.Second)
	watchWaitLog(t, r.logs, `"msg":"the output folder is empty`, 20*time.Second)
	watchWrite(t, filepath.Join(d.input, "object.yaml"), "apiVersion: platform.kratix.io/v1alpha1\nkind: Promise\nmetadata:\n  name: postgres\n")
	if err := os.MkdirAll(d.metadata, 0o755); err != nil { // Kratix makes it with the others
		t.Fatal(err)
	}
	watchWrite(t, filepath.Join(d.output, "deep", "er", "x.yaml"), watchObj(""))
	watchWaitRepo(t, watchLocalRepo(repo), "the output that appeared", 20*time.Second, func(s watchRepoState) bool { return s.has("/deep/er/x.yaml") })
	r.sigs <- syscall.SIGTERM
	if code, err := r.wait(t); code != ExitOK {
		t.Fatalf("exit %d (%v)", code, err)
	}
}

func TestWatchEmptyOutputWaitsForFiles(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "state.git")
	d := newWatchDirs(t, watchLocalStore(repo))
	r := startWatch(t, d.args(), time.Second)
	watchWaitLog(t, r.logs, `"msg":"the output folder is empty`, 20*time.Second)
	// The workflow writes its metadata first: still nothing to render.
	watchWrite(t, filepath.Join(d.metadata, "destination-selectors.yaml"), "- matchLabels: {env: dev}\n")
	watchWaitLog(t, r.logs, `(?s)the output folder is empty.*the output folder is empty`, 20*time.Second)
	if strings.Contains(r.logs.String(), `"msg":"rendering"`) {
		t.Fatal("rendered an empty output")
	}
	// The last render renders whatever is there, even nothing.
	r.sigs <- syscall.SIGTERM
	if code, err := r.wait(t); code != ExitOK {
		t.Fatalf("exit %d (%v)", code, err)
	}
	if !strings.Contains(r.logs.String(), `"reason":"last render before exit"`) {
		t.Fatal("no last render")
	}
}

func TestWatchHealthz(t *testing.T) {
	h := &health{alive: true}
	check := func(wantCode int, wants ...string) {
		t.Helper()
		rec := &watchRecorder{header: http.Header{}}
		h.ServeHTTP(rec, nil)
		if rec.code != wantCode {
			t.Fatalf("code %d, want %d", rec.code, wantCode)
		}
		for _, w := range wants {
			if !strings.Contains(rec.body.String(), w) {
				t.Fatalf("body %q lacks %q", rec.body.String(), w)
			}
		}
	}
	check(200, "last render: none yet")
	h.record("failed", errors.New("GitStateStore/default: push: boom"))
	check(200, "last render: failed", "last error: GitStateStore/default: push: boom")
	h.record("ok", nil)
	check(200, "last render: ok", "last error: GitStateStore/default")
	h.setAlive(false)
	check(503, "stopping")
}

type watchRecorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (r *watchRecorder) Header() http.Header         { return r.header }
func (r *watchRecorder) Write(p []byte) (int, error) { return r.body.Write(p) }
func (r *watchRecorder) WriteHeader(code int)        { r.code = code }
