package sim

import (
	"cmp"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/render-dev/render/internal/chaos"
	"github.com/render-dev/render/internal/testenv"
)

// server is one real server of a store kind, kept running for a whole
// campaign and shared by its trials, each in a repository, bucket or
// repository name of its own.
type server interface {
	// newStore makes a fresh store for one trial.
	newStore(t testing.TB, name string) (*store, error)
	// restart stops the server, calls down, and starts it again (a
	// trial that draws a restart runs alone on its server).
	restart(down func()) error
}

// store is one trial's store.
type store struct {
	// kind is its platform kind; docs its platform documents (the store,
	// named "chaos", and its Secret).
	kind, docs string
	// read reads what the store holds, from the server directly.
	read func(ctx context.Context) (*chaos.State, error)
	// place leaves foreign state in the store, as someone else would.
	place func(ctx context.Context, s Schedule, f Foreign, p placed) error
	// cleanup removes the store.
	cleanup func()
}

// newServer starts kind's server for a campaign.
func newServer(t testing.TB, kind chaos.Kind) server {
	t.Helper()
	switch kind {
	case chaos.GitHTTP:
		return newGitHTTP(t)
	case chaos.GitSSH:
		return &sshServer{s: testenv.SSHGit(t)}
	case chaos.S3:
		return &minioServer{m: testenv.PrivateMinIO(t)}
	case chaos.OCI:
		return &registryServer{r: testenv.PrivateRegistry(t)}
	}
	t.Fatalf("sim: unknown store kind %q", kind)
	return nil
}

// gitHTTPServer is git's smart HTTP protocol served by real git: each
// request runs `git upload-pack` or `git receive-pack --stateless-rpc` on
// the bare repository, as a forge does (Gitea runs them the same way),
// with a forge's settings (partial clones allowed). This process only
// frames the requests, as `git http-backend` would, and spares a second
// process per request.
type gitHTTPServer struct {
	root string
	addr string
	git  string
	mu   sync.Mutex
	srv  *http.Server
}

func newGitHTTP(t testing.TB) *gitHTTPServer {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("sim: git over HTTP needs git: %v", err)
	}
	s := &gitHTTPServer{root: t.TempDir(), git: git}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	s.serve(ln)
	t.Cleanup(s.stop)
	return s
}

func (s *gitHTTPServer) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(s.handle), ReadHeaderTimeout: time.Minute}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	go srv.Serve(ln)
}

// handle serves one request of git's smart HTTP protocol (gitprotocol-http).
func (s *gitHTTPServer) handle(w http.ResponseWriter, req *http.Request) {
	p := req.URL.Path
	var repo, service string
	advertise := false
	switch {
	case req.Method == http.MethodGet && strings.HasSuffix(p, "/info/refs"):
		repo, service, advertise = strings.TrimSuffix(p, "/info/refs"), req.URL.Query().Get("service"), true
	case req.Method == http.MethodPost && strings.HasSuffix(p, "/git-upload-pack"):
		repo, service = strings.TrimSuffix(p, "/git-upload-pack"), "git-upload-pack"
	case req.Method == http.MethodPost && strings.HasSuffix(p, "/git-receive-pack"):
		repo, service = strings.TrimSuffix(p, "/git-receive-pack"), "git-receive-pack"
	default:
		http.Error(w, "not a git request", http.StatusNotFound)
		return
	}
	if service != "git-upload-pack" && service != "git-receive-pack" {
		http.Error(w, "unknown service", http.StatusForbidden)
		return
	}
	dir := filepath.Join(s.root, filepath.FromSlash(path.Clean("/"+repo)))
	if fi, err := os.Stat(filepath.Join(dir, "HEAD")); err != nil || fi.IsDir() {
		http.Error(w, "repository not found", http.StatusNotFound)
		return
	}
	args := []string{"-c", "uploadpack.allowFilter=true", "-c", "uploadpack.allowAnySHA1InWant=true", "-c", "receive.autogc=false",
		strings.TrimPrefix(service, "git-"), "--stateless-rpc"}
	if advertise {
		args = append(args, "--advertise-refs")
	}
	cmd := exec.Command(s.git, append(args, dir)...)
	cmd.Env = []string{"GIT_CONFIG_NOSYSTEM=1", "HOME=" + s.root, "PATH=" + os.Getenv("PATH")}
	w.Header().Set("Cache-Control", "no-cache")
	if advertise {
		w.Header().Set("Content-Type", "application/x-"+service+"-advertisement")
		line := "# service=" + service + "\n"
		fmt.Fprintf(w, "%04x%s0000", len(line)+4, line)
	} else {
		w.Header().Set("Content-Type", "application/x-"+service+"-result")
		in := io.Reader(req.Body)
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			in = zr
		}
		cmd.Stdin = in
	}
	cmd.Stdout = w
	cmd.Run() // a failure is git's to report, in its output
}

func (s *gitHTTPServer) restart(down func()) error {
	s.stop()
	down()
	return s.start()
}

func (s *gitHTTPServer) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		s.srv.Close()
		s.srv = nil
	}
}

func (s *gitHTTPServer) start() error {
	var err error
	for range 50 {
		var ln net.Listener
		if ln, err = net.Listen("tcp", s.addr); err == nil {
			s.serve(ln)
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// gitInit makes an empty bare repository whose HEAD is main, as
// `git init --bare -b main` does, without a process.
func gitInit(dir string) error {
	for _, d := range []string{"objects/info", "objects/pack", "refs/heads", "refs/tags"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	for name, data := range map[string]string{
		"HEAD":   "ref: refs/heads/main\n",
		"config": "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (s *gitHTTPServer) newStore(t testing.TB, name string) (*store, error) {
	dir := filepath.Join(s.root, name+".git")
	if err := gitInit(dir); err != nil {
		return nil, err
	}
	return &store{
		kind: "GitStateStore",
		docs: fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: GitStateStore
metadata: {name: chaos}
spec:
  url: http://%s/%s.git
  branch: main
  path: %s
`, s.addr, name, chaos.StorePath),
		read:    func(context.Context) (*chaos.State, error) { return chaos.ReadLocalGit(dir, chaos.StorePath) },
		place:   func(_ context.Context, s Schedule, f Foreign, p placed) error { return placeGit(dir, s, f, p) },
		cleanup: func() { os.RemoveAll(dir) },
	}, nil
}

type sshServer struct{ s *testenv.SSHGitServer }

func (s *sshServer) restart(down func()) error { s.s.Stop(); down(); return s.s.Start() }

func (s *sshServer) newStore(t testing.TB, name string) (*store, error) {
	dir := filepath.Join(s.s.Root, name+".git")
	if err := gitInit(dir); err != nil {
		return nil, err
	}
	return &store{
		kind: "GitStateStore",
		docs: fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: GitStateStore
metadata: {name: chaos}
spec:
  url: ssh://git@%s%s
  branch: main
  path: %s
  authMethod: ssh
  secretRef: {name: chaos-credentials, namespace: default}
---
apiVersion: v1
kind: Secret
metadata: {name: chaos-credentials, namespace: default}
stringData:
  sshPrivateKey: %q
  knownHosts: %q
`, s.s.Addr, dir, chaos.StorePath, s.s.ClientKeyPEM, strings.TrimSpace(string(s.s.KnownHosts))),
		read:    func(context.Context) (*chaos.State, error) { return chaos.ReadLocalGit(dir, chaos.StorePath) },
		place:   func(_ context.Context, s Schedule, f Foreign, p placed) error { return placeGit(dir, s, f, p) },
		cleanup: func() { os.RemoveAll(dir) },
	}, nil
}

type minioServer struct{ m *testenv.MinIOServer }

func (s *minioServer) restart(down func()) error { return s.m.RestartWith(down) }

func (s *minioServer) newStore(t testing.TB, name string) (*store, error) {
	bucket := s.m.CreateBucket(t, "sim")
	c := s.m.Client(t)
	return &store{
		kind: "BucketStateStore",
		docs: fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: BucketStateStore
metadata: {name: chaos}
spec:
  endpoint: %s
  bucketName: %s
  path: %s
  insecure: true
  region: us-east-1
  authMethod: accessKey
  secretRef: {name: chaos-credentials, namespace: default}
---
apiVersion: v1
kind: Secret
metadata: {name: chaos-credentials, namespace: default}
stringData:
  accessKeyID: %q
  secretAccessKey: %q
`, s.m.Endpoint(), bucket, chaos.StorePath, s.m.AccessKey(), s.m.SecretKey()),
		read: func(ctx context.Context) (*chaos.State, error) {
			return chaos.ReadBucket(ctx, c, bucket, chaos.StorePath)
		},
		place: func(ctx context.Context, _ Schedule, _ Foreign, p placed) error {
			return placeBucket(ctx, c, bucket, p)
		},
		cleanup: func() {},
	}, nil
}

type registryServer struct{ r *testenv.RegistryServer }

func (s *registryServer) restart(down func()) error { return s.r.RestartWith(down) }

func (s *registryServer) newStore(t testing.TB, name string) (*store, error) {
	repo := "sim/" + name
	return &store{
		kind: "OCIStateStore",
		docs: fmt.Sprintf(`apiVersion: render.dev/v1alpha1
kind: OCIStateStore
metadata: {name: chaos}
spec:
  registry: %q
  repository: %s
  insecure: true
  create: true
  secretRef: {name: chaos-credentials, namespace: default}
---
apiVersion: v1
kind: Secret
metadata: {name: chaos-credentials, namespace: default}
stringData:
  username: %q
  password: %q
`, s.r.Addr(), repo, s.r.User(), s.r.Password()),
		read: func(ctx context.Context) (*chaos.State, error) {
			return chaos.ReadOCI(ctx, s.r.Addr(), s.r.User(), s.r.Password(), repo)
		},
		cleanup: func() {},
	}, nil
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K { return slices.Sorted(maps.Keys(m)) }
