package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// Environment variables of the OCI registry and the oras CLI, written by
// scripts/testservers.sh start.
const (
	EnvRegistryAddr     = "RENDER_TEST_REGISTRY_ADDR" // 127.0.0.1:PORT (plain HTTP)
	EnvRegistryUser     = "RENDER_TEST_REGISTRY_USER"
	EnvRegistryPassword = "RENDER_TEST_REGISTRY_PASSWORD"
	EnvRegistryPIDFile  = "RENDER_TEST_REGISTRY_PIDFILE"
	EnvORAS             = "RENDER_TEST_ORAS" // path of the oras CLI
)

// RegistryServer is a running OCI registry (distribution) test server,
// plain HTTP on loopback, with one htpasswd user.
type RegistryServer struct {
	addr     string
	user     string
	password string
	oras     string
	ctl      serverControl
}

var registryVars = []string{EnvRegistryAddr, EnvRegistryUser, EnvRegistryPassword, EnvRegistryPIDFile, EnvORAS}

// Registry returns the shared registry test server described by the
// RENDER_TEST_REGISTRY_* variables; it skips the test (fails it when
// CI=true) if they are unset.
func Registry(t testing.TB) *RegistryServer {
	t.Helper()
	requireEnv(t, "OCI registry", registryVars...)
	get := os.Getenv
	return &RegistryServer{
		addr:     get(EnvRegistryAddr),
		user:     get(EnvRegistryUser),
		password: get(EnvRegistryPassword),
		oras:     get(EnvORAS),
		ctl:      newServerControl("registry", get(EnvServersDir), get(EnvRegistryPIDFile)),
	}
}

// PrivateRegistry starts a registry used only by this test (fresh data, own
// port, deletes enabled as on the shared one), stopped when the test ends:
// for tests that stop or restart it. It skips/fails like Registry when the
// test servers are not set up.
func PrivateRegistry(t testing.TB) *RegistryServer {
	t.Helper()
	return privateRegistry(t, nil)
}

// PrivateRegistryNoDeletes starts a registry used only by this test whose
// storage refuses deletes (storage.delete.enabled: false, as distribution
// ships by default): every DELETE is 405 Method Not Allowed. It is stopped
// when the test ends, and skips/fails like Registry when the test servers
// are not set up.
func PrivateRegistryNoDeletes(t testing.TB) *RegistryServer {
	t.Helper()
	return privateRegistry(t, []string{"RENDER_TEST_REGISTRY_DELETE=false"})
}

func privateRegistry(t testing.TB, env []string) *RegistryServer {
	t.Helper()
	vars := startPrivateEnv(t, "registry", "OCI registry", env, registryVars...)
	get := func(k string) string { return vars[k] }
	return &RegistryServer{
		addr:     get(EnvRegistryAddr),
		user:     get(EnvRegistryUser),
		password: get(EnvRegistryPassword),
		oras:     get(EnvORAS),
		ctl:      newServerControl("registry", get(EnvServersDir), get(EnvRegistryPIDFile)),
	}
}

// Addr returns host:port.
func (r *RegistryServer) Addr() string { return r.addr }

// User returns the user name the registry accepts.
func (r *RegistryServer) User() string { return r.user }

// Password returns the user's password.
func (r *RegistryServer) Password() string { return r.password }

// ORAS returns the path of the oras CLI built beside the servers.
func (r *RegistryServer) ORAS() string { return r.oras }

// Stop stops the shared registry (restarted when the test ends).
func (r *RegistryServer) Stop(t testing.TB) { t.Helper(); r.ctl.stop(t) }

// Start restarts a stopped registry on its old port and data.
func (r *RegistryServer) Start(t testing.TB) { t.Helper(); r.ctl.start(t) }

// Restart stops the registry, waits down and starts it again (same port
// and data), returning what failed instead of failing the test: it may be
// called from any goroutine. Use it on a PrivateRegistry.
func (r *RegistryServer) Restart(down time.Duration) error { return r.ctl.restart(down) }

// RestartWith is Restart with the wait while the server is down given as
// a function (one that waits on a simulation's clock).
func (r *RegistryServer) RestartWith(down func()) error { return r.ctl.restartWith(down) }

// RunORAS runs the oras CLI against the registry as its user (the password
// on standard input, never on the command line) and returns its standard
// output; plain HTTP. It fails the test when oras fails.
func (r *RegistryServer) RunORAS(t testing.TB, args ...string) []byte {
	t.Helper()
	out, err := r.TryORAS(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TryORAS is RunORAS returning oras' failure (with its standard error)
// instead of failing the test.
func (r *RegistryServer) TryORAS(t testing.TB, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args = append(args[:len(args):len(args)], "--plain-http", "-u", r.user, "--password-stdin")
	cmd := exec.CommandContext(ctx, r.oras, args...)
	cmd.Stdin = strings.NewReader(r.password)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("oras %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// Artifact is one artifact as the oras CLI fetched it.
type Artifact struct {
	// Digest is the manifest's digest.
	Digest          string
	ConfigMediaType string
	LayerMediaTypes []string
	Annotations     map[string]string
	// Files are the files of its layers, extracted with tar -xz, by
	// slash-separated path.
	Files map[string]string
}

// Pull fetches the artifact ref (registry/repository:tag) with the oras
// CLI: it resolves the tag, fetches the manifest and every layer blob, and
// extracts the layers with tar as a consumer of a tar+gzip layer would.
// (`oras pull` itself only writes layers that carry a file name, which a
// Flux artifact's layer does not.)
func (r *RegistryServer) Pull(t testing.TB, ref string) Artifact {
	t.Helper()
	repo, _, ok := strings.Cut(ref, "@")
	if !ok {
		i := strings.LastIndex(ref, ":")
		if i < 0 || strings.Contains(ref[i:], "/") {
			t.Fatalf("Pull(%q): give registry/repository:tag or @digest", ref)
		}
		repo = ref[:i]
	}
	var a Artifact
	a.Digest = strings.TrimSpace(string(r.RunORAS(t, "resolve", ref)))
	out := r.RunORAS(t, "manifest", "fetch", repo+"@"+a.Digest)
	var m struct {
		Config struct {
			MediaType string `json:"mediaType"`
		} `json:"config"`
		Layers []struct {
			MediaType string `json:"mediaType"`
			Digest    string `json:"digest"`
		} `json:"layers"`
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("manifest of %s: %v\n%s", ref, err, out)
	}
	a.ConfigMediaType, a.Annotations = m.Config.MediaType, m.Annotations
	dir := t.TempDir()
	files := filepath.Join(dir, "files")
	if err := os.MkdirAll(files, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, l := range m.Layers {
		a.LayerMediaTypes = append(a.LayerMediaTypes, l.MediaType)
		blob := filepath.Join(dir, fmt.Sprintf("layer-%d", i))
		r.RunORAS(t, "blob", "fetch", "-o", blob, repo+"@"+l.Digest)
		if out, err := exec.Command("tar", "-xzf", blob, "-C", files).CombinedOutput(); err != nil {
			t.Fatalf("tar -xzf layer %s of %s: %v\n%s", l.Digest, ref, err, out)
		}
	}
	a.Files = map[string]string{}
	err := filepath.WalkDir(files, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(files, p)
		a.Files[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Tags lists repository's tags (registry/repository) with the oras CLI,
// sorted; none for a repository that does not exist.
func (r *RegistryServer) Tags(t testing.TB, repository string) []string {
	t.Helper()
	out, err := r.TryORAS(t, "repo", "tags", repository)
	if err != nil {
		if strings.Contains(err.Error(), "name unknown") {
			return nil
		}
		t.Fatal(err)
	}
	return sortedLines(out)
}

// Repositories lists the repositories below namespace (registry/namespace)
// with the oras CLI (the registry's catalog), as full names, sorted.
func (r *RegistryServer) Repositories(t testing.TB, namespace string) []string {
	t.Helper()
	out := r.RunORAS(t, "repo", "ls", namespace)
	_, ns, _ := strings.Cut(namespace, "/")
	var full []string
	for _, l := range sortedLines(out) {
		full = append(full, path.Join(ns, l))
	}
	return full
}

func sortedLines(b []byte) []string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return out
}

// RegistryProxy is a reverse proxy in front of the registry, on a loopback
// port of its own, that records every request passing through it: point a
// client at its Addr to count what that client asks of the registry.
type RegistryProxy struct {
	addr string
	mu   sync.Mutex
	reqs []string
}

// Proxy starts a RegistryProxy for the test; it stops when the test ends.
func (r *RegistryServer) Proxy(t testing.TB) *RegistryProxy {
	t.Helper()
	target := &url.URL{Scheme: "http", Host: r.addr}
	p := &RegistryProxy{}
	rp := httputil.NewSingleHostReverseProxy(target)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			p.mu.Lock()
			p.reqs = append(p.reqs, req.Method+" "+req.URL.Path)
			p.mu.Unlock()
			rp.ServeHTTP(w, req)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return p
}

// Addr returns the proxy's host:port.
func (p *RegistryProxy) Addr() string { return p.addr }

// Requests returns the requests seen so far, as "METHOD /path", in order.
func (p *RegistryProxy) Requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.reqs...)
}

// Reset forgets the requests seen so far.
func (p *RegistryProxy) Reset() {
	p.mu.Lock()
	p.reqs = nil
	p.mu.Unlock()
}

// Writes returns the requests seen so far that may change the registry
// (every method but GET and HEAD).
func (p *RegistryProxy) Writes() []string {
	var out []string
	for _, r := range p.Requests() {
		if !strings.HasPrefix(r, "GET ") && !strings.HasPrefix(r, "HEAD ") {
			out = append(out, r)
		}
	}
	return out
}
