// Package testenv gives integration tests access to the real Gitea, MinIO and
// OCI registry servers (and the oras CLI) started by scripts/testservers.sh.
//
// The servers are described by environment variables written to DIR/env by
// `scripts/testservers.sh start DIR` (see the Env* constants). When they are
// missing, Gitea and MinIO skip the test, or fail it when CI=true so that a
// misconfigured CI run cannot silently pass without exercising the servers.
//
// Typical use:
//
//	g := testenv.Gitea(t)
//	cloneURL := g.CreateRepo(t, "myrepo") // unique name, owned by the admin
//
//	m := testenv.MinIO(t)
//	bucket := m.CreateBucket(t, "artifacts") // unique bucket name
//
// Names passed to the Create* helpers are prefixes: a random suffix is always
// added so tests may run repeatedly (-count=N) against the same servers.
//
// Stop and Start stop and restart a server (same port, same data) for fault
// tests. The servers returned by Gitea and MinIO are shared by every test
// package run against them (go test runs packages in parallel), so fault tests
// should use PrivateGitea / PrivateMinIO, which start a dedicated server for
// the test (about 1-3 s) and stop it when the test ends.
//
// The registry helpers run the oras CLI (RunORAS, Pull, Tags, Repositories)
// and can count a client's requests through a proxy (Proxy).
//
// Kube gives the Flux end-to-end tests the API server of the optional Flux
// stack (scripts/testservers.sh with --flux), read with plain REST calls;
// ArgoCD gives the Argo CD end-to-end tests the Argo CD running against it
// (with --argocd). Workload is the render world (platform, workflows, the
// render binary) both end-to-end packages run.
//
// This package depends only on the standard library, minio-go and yaml.v3.
package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Environment variables written by scripts/testservers.sh start.
const (
	EnvServersDir    = "RENDER_TEST_SERVERS_DIR"    // state directory passed to start
	EnvServersScript = "RENDER_TEST_SERVERS_SCRIPT" // absolute path of testservers.sh

	EnvGiteaURL      = "RENDER_TEST_GITEA_URL"      // http://127.0.0.1:PORT
	EnvGiteaUser     = "RENDER_TEST_GITEA_USER"     // admin user name
	EnvGiteaPassword = "RENDER_TEST_GITEA_PASSWORD" // admin password
	EnvGiteaToken    = "RENDER_TEST_GITEA_TOKEN"    // admin API token (all scopes)
	EnvGiteaPIDFile  = "RENDER_TEST_GITEA_PIDFILE"

	EnvMinIOEndpoint  = "RENDER_TEST_MINIO_ENDPOINT" // 127.0.0.1:PORT (no scheme, plain HTTP)
	EnvMinIOAccessKey = "RENDER_TEST_MINIO_ACCESS_KEY"
	EnvMinIOSecretKey = "RENDER_TEST_MINIO_SECRET_KEY"
	EnvMinIOPIDFile   = "RENDER_TEST_MINIO_PIDFILE"
)

// InCI reports whether the tests run in CI (environment variable CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// SkipOrFail skips the test with msg, or fails it with msg when CI=true.
func SkipOrFail(t testing.TB, msg string) {
	t.Helper()
	if InCI() {
		t.Fatalf("%s (CI=true: required test dependencies must be present)", msg)
	}
	t.Skip(msg)
}

// requireEnv returns the values of the named variables, or calls SkipOrFail
// naming the missing ones.
func requireEnv(t testing.TB, what string, names ...string) []string {
	t.Helper()
	vals := make([]string, len(names))
	var missing []string
	for i, n := range names {
		vals[i] = os.Getenv(n)
		if vals[i] == "" {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		SkipOrFail(t, fmt.Sprintf("%s test server not available (%s unset): run `make test`, "+
			"or `scripts/testservers.sh start DIR && . DIR/env` before `go test`",
			what, strings.Join(missing, ", ")))
	}
	return vals
}

// UniqueName returns prefix (sanitised to [a-z0-9-], at most 40 bytes in
// total) followed by a random suffix. The result is valid as a Gitea user or
// repository name and as an S3 bucket name.
func UniqueName(prefix string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(prefix) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			if s := b.String(); s != "" && !strings.HasSuffix(s, "-") {
				b.WriteByte('-')
			}
		}
	}
	p := strings.Trim(b.String(), "-")
	if p == "" {
		p = "t"
	}
	const maxPrefix = 40 - 1 - 10 // 40 is Gitea's user name limit; "-" + 10 hex chars
	if len(p) > maxPrefix {
		p = strings.TrimRight(p[:maxPrefix], "-")
	}
	var buf [5]byte
	if _, err := rand.Read(buf[:]); err != nil {
		panic(err)
	}
	return p + "-" + hex.EncodeToString(buf[:])
}

// serversScript locates scripts/testservers.sh: $RENDER_TEST_SERVERS_SCRIPT,
// else scripts/testservers.sh in the first parent of the working directory
// that contains go.mod.
func serversScript() (string, error) {
	if s := os.Getenv(EnvServersScript); s != "" {
		return s, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "scripts", "testservers.sh"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testenv: go.mod not found above the working directory")
		}
		dir = parent
	}
}

// runServersScript runs `testservers.sh ARGS...`.
func runServersScript(t testing.TB, args ...string) {
	t.Helper()
	runServersScriptEnv(t, nil, args...)
}

// runServersScriptEnv runs `testservers.sh ARGS...` with env added to its
// environment.
func runServersScriptEnv(t testing.TB, env []string, args ...string) {
	t.Helper()
	script, err := serversScript()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cmd := exec.Command("bash", append([]string{script}, args...)...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("testenv: %s %s: %v\n%s", script, strings.Join(args, " "), err, out)
	}
	t.Logf("testenv: testservers.sh %s took %v", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
}

// serverControl implements Stop/Start shared by both server types.
type serverControl struct {
	name    string // "gitea" or "minio"
	dir     string // state directory given to `testservers.sh start`
	stopped bool
}

func newServerControl(name, dir, pidfile string) serverControl {
	if dir == "" {
		dir = filepath.Dir(pidfile) // pidfiles live directly in the state directory
	}
	return serverControl{name: name, dir: dir}
}

func (c *serverControl) stop(t testing.TB) {
	t.Helper()
	runServersScript(t, "stop-one", c.name, c.dir)
	if !c.stopped {
		c.stopped = true
		// Never leave a shared server down for later tests.
		t.Cleanup(func() {
			if c.stopped {
				c.start(t)
			}
		})
	}
}

func (c *serverControl) start(t testing.TB) {
	t.Helper()
	runServersScript(t, "start-one", c.name, c.dir)
	c.stopped = false
}

// restart stops the server, waits down, and starts it again on the same
// port and data. It returns what failed instead of failing a test, so it
// may run on any goroutine (fault campaigns restart a server while renders
// run); the server is running again when it returns nil.
func (c *serverControl) restart(down time.Duration) error {
	return c.restartWith(func() { time.Sleep(down) })
}

// restartWith is restart with the wait while the server is down given as
// a function (one that waits on a simulation's clock).
func (c *serverControl) restartWith(down func()) error {
	script, err := serversScript()
	if err != nil {
		return err
	}
	run := func(args ...string) error {
		out, err := exec.Command("bash", append([]string{script}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("testenv: testservers.sh %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := run("stop-one", c.name, c.dir); err != nil {
		return err
	}
	down()
	return run("start-one", c.name, c.dir)
}

// startPrivate starts a dedicated `which` server ("gitea" or "minio") in a
// temporary directory, stopped when the test ends, and returns the variables
// of its env file. The shared servers must be configured (this proves the
// binaries are built); otherwise the test is skipped (failed when CI=true).
func startPrivate(t testing.TB, which, what string, sharedVars ...string) map[string]string {
	t.Helper()
	return startPrivateEnv(t, which, what, nil, sharedVars...)
}

// startPrivateEnv is startPrivate with env (KEY=VALUE) added to the
// script's environment, for the settings it takes from there.
func startPrivateEnv(t testing.TB, which, what string, env []string, sharedVars ...string) map[string]string {
	t.Helper()
	requireEnv(t, what, sharedVars...)
	dir := t.TempDir()
	t.Cleanup(func() { runServersScript(t, "stop", dir) }) // runs before TempDir's removal
	runServersScriptEnv(t, env, "start", dir, which)
	data, err := os.ReadFile(filepath.Join(dir, "env"))
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return parseEnvFile(string(data))
}

// parseEnvFile parses the `export K='V'` lines written by testservers.sh.
func parseEnvFile(s string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		m[k] = strings.Trim(v, "'")
	}
	return m
}
