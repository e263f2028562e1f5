package faulttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/minio/minio-go/v7"

	"github.com/render-dev/render/internal/testinfra/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveRenderBinary()
	os.Exit(code)
}

// renderBin is the render binary, built once per test binary.
func renderBin(t testing.TB) string { return testenv.RenderBinary(t) }

// workflow is a promise (or resource) workflow's folders and a platform
// configuration, laid out as Kratix mounts them.
type workflow struct {
	dir      string
	typ      string // promise or resource
	promise  string
	pipeline string
	name, ns string // resource workflows
	extra    []string
}

func newWorkflow(t testing.TB, promise string) *workflow {
	t.Helper()
	w := &workflow{dir: t.TempDir(), typ: "promise", promise: promise, pipeline: "configure"}
	for _, d := range []string{"output", "metadata", "input", "platform"} {
		if err := os.MkdirAll(filepath.Join(w.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w.writeFile(t, "input/object.yaml", fmt.Sprintf("apiVersion: platform.kratix.io/v1alpha1\nkind: Promise\nmetadata:\n  name: %s\n", promise))
	return w
}

func (w *workflow) path(rel string) string { return filepath.Join(w.dir, filepath.FromSlash(rel)) }

func (w *workflow) writeFile(t testing.TB, rel, data string) {
	t.Helper()
	p := w.path(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// docs writes documents from..to-1 of the given version into the output.
func (w *workflow) docs(t testing.TB, from, to int, version string) {
	t.Helper()
	for i := from; i < to; i++ {
		w.writeFile(t, fmt.Sprintf("output/doc-%05d.yaml", i), configMap(w.promise, i, version))
	}
}

func configMap(prefix string, i int, version string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s-%05d\n  namespace: %s\ndata:\n  version: %q\n  payload: %q\n",
		prefix, i, prefix, version, strings.Repeat("x", 200))
}

func (w *workflow) setPlatform(t testing.TB, docs ...string) {
	t.Helper()
	w.writeFile(t, "platform/platform.yaml", strings.Join(docs, "---\n"))
}

func (w *workflow) args() []string {
	return append([]string{
		"--output", w.path("output"), "--metadata", w.path("metadata"),
		"--input", w.path("input"), "--platform", w.path("platform"),
	}, w.extra...)
}

func (w *workflow) env() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KRATIX_") {
			out = append(out, kv)
		}
	}
	out = append(out, "KRATIX_WORKFLOW_TYPE="+w.typ, "KRATIX_PROMISE_NAME="+w.promise, "KRATIX_PIPELINE_NAME="+w.pipeline)
	if w.typ == "resource" {
		out = append(out, "KRATIX_OBJECT_NAME="+w.name, "KRATIX_OBJECT_NAMESPACE="+w.ns)
	}
	return out
}

// result is a finished render process.
type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

func (r result) String() string {
	return fmt.Sprintf("exit %d after %v\nstdout:\n%s\nstderr:\n%s", r.code, r.took.Round(time.Millisecond), r.stdout, r.stderr)
}

// process is a started render.
type process struct {
	cmd      *exec.Cmd
	out, err *lockedBuffer
	start    time.Time
	done     chan struct{}
	res      result
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// start starts the render binary for w with extra arguments. A process
// still running when the test ends is killed.
func start(t testing.TB, w *workflow, extra ...string) *process {
	t.Helper()
	cmd := exec.Command(renderBin(t), append(w.args(), extra...)...)
	cmd.Dir = w.dir
	cmd.Env = w.env()
	p := &process{cmd: cmd, out: &lockedBuffer{}, err: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.err
	p.start = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := cmd.Wait()
		p.res = result{code: cmd.ProcessState.ExitCode(), stdout: p.out.String(), stderr: p.err.String(), took: time.Since(p.start)}
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			p.res.code = -1
			p.res.stderr += "\n" + err.Error()
		}
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

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for the process to end, at most limit.
func (p *process) wait(t testing.TB, limit time.Duration) result {
	t.Helper()
	select {
	case <-p.done:
		return p.res
	case <-time.After(limit):
		p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("render did not finish within %v:\n%s", limit, p.res)
		return p.res
	}
}

// kill kills the process with SIGKILL and waits for it.
func (p *process) kill() result {
	p.cmd.Process.Kill()
	<-p.done
	return p.res
}

// render runs the render binary to its end.
func render(t testing.TB, w *workflow, extra ...string) result {
	t.Helper()
	return start(t, w, extra...).wait(t, 3*time.Minute)
}

// mustRender runs render and fails the test unless it exits with code.
func mustRender(t testing.TB, w *workflow, code int, extra ...string) result {
	t.Helper()
	r := render(t, w, extra...)
	if r.code != code {
		t.Fatalf("render: want exit %d, got %s", code, r)
	}
	return r
}

// Platform documents.

func gitStore(name, url, user, password string) string {
	return fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: GitStateStore
metadata: {name: %s}
spec:
  url: %s
  branch: main
  path: clusters
  authMethod: basicAuth
  secretRef: {name: %s-credentials, namespace: default}
---
apiVersion: v1
kind: Secret
metadata: {name: %s-credentials, namespace: default}
stringData:
  username: %q
  password: %q
`, name, url, name, name, user, password)
}

func localStore(name, dir string) string {
	return fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: GitStateStore
metadata: {name: %s}
spec:
  url: file://%s
  branch: main
  path: clusters
`, name, dir)
}

func bucketStore(name, endpoint, bucket, accessKey, secretKey string) string {
	return fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: BucketStateStore
metadata: {name: %s}
spec:
  endpoint: %s
  bucketName: %s
  path: clusters
  insecure: true
  region: us-east-1
  authMethod: accessKey
  secretRef: {name: %s-credentials, namespace: default}
---
apiVersion: v1
kind: Secret
metadata: {name: %s-credentials, namespace: default}
stringData:
  accessKeyID: %q
  secretAccessKey: %q
`, name, endpoint, bucket, name, name, accessKey, secretKey)
}

// destination is a Destination document; spec holds extra spec lines.
func destination(name, kind, store string, spec ...string) string {
	s := fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata:
  name: %s
  labels: {env: dev}
spec:
  stateStoreRef: {kind: %s, name: %s}
`, name, kind, store)
	for _, l := range spec {
		s += "  " + l + "\n"
	}
	return s
}

// Reading the stores.

// tree is a branch tip: its commit and every file's blob id, by path.
type tree struct {
	commit string
	files  map[string]string
}

func readCommitTree(t testing.TB, r *git.Repository) tree {
	t.Helper()
	ref, err := r.Reference(plumbing.NewBranchReferenceName("main"), true)
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return tree{files: map[string]string{}}
	}
	if err != nil {
		t.Fatalf("read branch: %v", err)
	}
	c, err := r.CommitObject(ref.Hash())
	if err != nil {
		t.Fatalf("read commit: %v", err)
	}
	tr, err := c.Tree()
	if err != nil {
		t.Fatalf("read tree: %v", err)
	}
	out := tree{commit: ref.Hash().String(), files: map[string]string{}}
	err = tr.Files().ForEach(func(f *object.File) error {
		out.files[f.Name] = f.Hash.String()
		return nil
	})
	if err != nil {
		t.Fatalf("read tree: %v", err)
	}
	return out
}

// remoteTree reads branch main of a remote repository.
func remoteTree(t testing.TB, url, user, password string) tree {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := git.CloneContext(ctx, memory.NewStorage(), nil, &git.CloneOptions{
		URL: url, Auth: &githttp.BasicAuth{Username: user, Password: password},
		ReferenceName: plumbing.NewBranchReferenceName("main"), SingleBranch: true, Depth: 1,
	})
	if errors.Is(err, transport.ErrEmptyRemoteRepository) || (err != nil && strings.Contains(err.Error(), "couldn't find remote ref")) {
		return tree{files: map[string]string{}}
	}
	if err != nil {
		t.Fatalf("clone %s: %v", url, err)
	}
	return readCommitTree(t, r)
}

// localTree reads branch main of a bare repository on disk.
func localTree(t testing.TB, dir string) tree {
	t.Helper()
	r, err := git.PlainOpen(dir)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	return readCommitTree(t, r)
}

func (a tree) equal(b tree) bool {
	if len(a.files) != len(b.files) {
		return false
	}
	for p, h := range a.files {
		if b.files[p] != h {
			return false
		}
	}
	return true
}

// listBucket lists every object below prefix: key (relative to prefix) to ETag.
func listBucket(ctx context.Context, c *minio.Client, bucket, prefix string) (map[string]string, error) {
	out := map[string]string{}
	for o := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			return nil, o.Err
		}
		out[strings.TrimPrefix(o.Key, prefix)] = strings.ToLower(strings.Trim(o.ETag, `"`))
	}
	return out, nil
}
