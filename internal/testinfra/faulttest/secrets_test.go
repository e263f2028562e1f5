package faulttest

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/render-dev/render/internal/testinfra/testenv"
)

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// secretSet is every credential a test configured, by a name that may be
// printed in its place.
type secretSet map[string]string

// leaks returns, for each secret found in s (as is, base64 or URL-escaped),
// its name and the text around it with the secret replaced.
func (ss secretSet) leaks(s string) []string {
	var out []string
	for name, secret := range ss {
		for _, form := range []string{secret, base64.StdEncoding.EncodeToString([]byte(secret)), url.QueryEscape(secret), url.PathEscape(secret)} {
			i := strings.Index(s, form)
			if i < 0 {
				continue
			}
			lo, hi := max(0, i-80), min(len(s), i+len(form)+80)
			out = append(out, fmt.Sprintf("%s: ...%s...", name, strings.ReplaceAll(s[lo:hi], form, "<"+name+">")))
			break
		}
	}
	return out
}

// redact replaces every secret in s by its name, so that a failing test
// can show render's output without printing them.
func (ss secretSet) redact(s string) string {
	for name, secret := range ss {
		s = strings.ReplaceAll(s, secret, "<"+name+">")
	}
	return s
}

// TestNoSecretsInOutput runs render against stores with known credentials
// (good ones, refused ones, unreachable stores), in text and JSON, with
// debug logs in text and JSON, for real and as a dry run, and in watch
// mode, and scans everything it printed for the credentials.
func TestNoSecretsInOutput(t *testing.T) {
	t.Parallel()
	g := testenv.Gitea(t)
	m := testenv.MinIO(t)

	userPassword := "pw-" + randomHex(12)
	user := g.CreateUser(t, "secrets", userPassword)
	token := g.CreateToken(t, user, userPassword)
	repo := g.CreateRepoInfo(t, "secrets")
	g.AddCollaborator(t, repo.Owner, repo.Name, user, "write")
	bucket := m.CreateBucket(t, "secrets")
	secrets := secretSet{
		"gitea token":              token,
		"gitea password":           userPassword,
		"gitea admin password":     g.AdminPassword(),
		"wrong gitea password":     "wrong-" + randomHex(12),
		"password in URL":          "inurl-" + randomHex(12),
		"unreachable git password": "nowhere-" + randomHex(12),
		"minio secret key":         m.SecretKey(),
		"wrong minio secret key":   "wrongsk-" + randomHex(16),
		"unknown access key":       "AKIA" + strings.ToUpper(randomHex(8)),
		"unknown key's secret":     "unknownsk-" + randomHex(16),
		"unreachable minio secret": "nowheresk-" + randomHex(16),
	}
	if tok := g.AdminToken(); tok != "" {
		secrets["gitea admin token"] = tok
	}
	secretsDir := t.TempDir()
	mount := func(name string, kv map[string]string) {
		for k, v := range kv {
			p := filepath.Join(secretsDir, name, k)
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	withUserinfo, _ := url.Parse(repo.CloneURL)
	withUserinfo.User = url.UserPassword(user, secrets["password in URL"])
	nowhere := closedPort(t)
	// Stores on one repository (or bucket) need paths of their own: their
	// records would overwrite each other, and render refuses that.
	apart := func(doc string) string { return strings.Replace(doc, "path: clusters", "path: clusters-2", 1) }

	// good: a token as password from a mounted secret; a password; a bucket
	// with its secret as base64 data.
	mount("token-credentials", map[string]string{"username": user, "password": token})
	good := []string{
		strings.Replace(gitStore("token", repo.CloneURL, "", ""), "---\napiVersion: v1\nkind: Secret", "---\napiVersion: v1\nkind: Ignored", 1),
		apart(gitStore("password", repo.CloneURL, user, userPassword)),
		fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: BucketStateStore
metadata: {name: minio}
spec:
  endpoint: %s
  bucketName: %s
  path: clusters
  insecure: true
  region: us-east-1
  secretRef: {name: minio-b64}
---
apiVersion: v1
kind: Secret
metadata: {name: minio-b64}
data:
  accessKeyID: %s
  secretAccessKey: %s
`, m.Endpoint(), bucket, b64(m.AccessKey()), b64(m.SecretKey())),
		destination("via-token", "GitStateStore", "token", "path: token"),
		destination("via-password", "GitStateStore", "password", "path: password"),
		destination("via-bucket", "BucketStateStore", "minio"),
	}
	refused := []string{
		gitStore("wrongpw", repo.CloneURL, user, secrets["wrong gitea password"]),
		bucketStore("wrongsk", m.Endpoint(), bucket, m.AccessKey(), secrets["wrong minio secret key"]),
		apart(bucketStore("unknown", m.Endpoint(), bucket, secrets["unknown access key"], secrets["unknown key's secret"])),
		destination("d1", "GitStateStore", "wrongpw", "path: d1"),
		destination("d3", "BucketStateStore", "wrongsk", "path: d3"),
		destination("d4", "BucketStateStore", "unknown", "path: d4"),
	}
	// A password in a store's URL is refused before any store is
	// contacted: exit 2, the password never printed.
	inURL := []string{
		gitStore("inurl", withUserinfo.String(), user, secrets["wrong gitea password"]),
		destination("d2", "GitStateStore", "inurl", "path: d2"),
	}
	unreachable := []string{
		gitStore("nowhere", "http://"+nowhere+"/render/state.git", user, secrets["unreachable git password"]),
		bucketStore("nowhere-s3", nowhere, bucket, m.AccessKey(), secrets["unreachable minio secret"]),
		destination("n1", "GitStateStore", "nowhere", "path: n1"),
		destination("n2", "BucketStateStore", "nowhere-s3", "path: n2"),
	}

	check := func(t *testing.T, what string, res result) {
		t.Helper()
		all := res.stdout + "\n" + res.stderr
		if leaks := secrets.leaks(all); len(leaks) > 0 {
			t.Errorf("%s printed credentials:\n%s", what, strings.Join(leaks, "\n"))
		}
	}
	cases := []struct {
		name     string
		platform []string
		code     int
		extra    []string
	}{
		{"good", good, 0, nil},
		{"refused", refused, 1, nil},
		{"password in URL", inURL, 2, nil},
		{"unreachable", unreachable, 1, []string{"--retry-deadline", "2s"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorkflow(t, "secrets")
			w.docs(t, 0, 3, "v1")
			w.setPlatform(t, c.platform...)
			w.extra = append([]string{"--secrets-dir", secretsDir, "--log-level", "debug"}, c.extra...)
			runs := 0
			for _, dry := range []bool{true, false} {
				for _, format := range []string{"text", "json"} {
					for _, logFormat := range []string{"text", "json"} {
						args := []string{"-o", format, "--log-format", logFormat, "--explain"}
						if dry {
							args = append(args, "--dry-run")
						}
						res := render(t, w, args...)
						what := fmt.Sprintf("render %s", strings.Join(args, " "))
						if res.code != c.code {
							t.Errorf("%s: want exit %d, got %d:\n%s", what, c.code, res.code, secrets.redact(res.stderr))
						}
						check(t, what, res)
						if runs == 4 && c.code != 0 {
							t.Logf("what render said (credentials replaced by their names, none were found):\n%s", secrets.redact(res.stderr))
						}
						runs++
					}
				}
			}
			if c.name == "good" {
				// The store errors a user sees when the secret itself is wrong
				// in shape: a missing key.
				w.setPlatform(t, gitStore("password", repo.CloneURL, user, ""), destination("via-password", "GitStateStore", "password"))
				res := render(t, w)
				check(t, "render with an empty password", res)
			}
			t.Logf("%d renders, nothing printed a credential", runs)
		})
	}
	t.Run("watch", func(t *testing.T) {
		w := newWorkflow(t, "secrets")
		w.docs(t, 0, 3, "v1")
		w.setPlatform(t, append(append([]string{}, refused...), unreachable...)...)
		p := start(t, w, "--watch", "--log-level", "debug", "--log-format", "json", "--secrets-dir", secretsDir, "--retry-deadline", "1s")
		time.Sleep(4 * time.Second)
		p.cmd.Process.Signal(syscall.SIGTERM)
		res := p.wait(t, time.Minute)
		check(t, "render --watch", res)
		if !strings.Contains(res.stderr, "store failed") && !strings.Contains(res.stderr, "render failed") {
			t.Errorf("render --watch did not report the failing stores:\n%s", secrets.redact(res.stderr))
		}
	})
}

// TestBadCredentialConfigIsExit2: the ways a credential can be misplaced
// in the platform configuration are each exit 2, one line naming the file,
// the store or document and the field, before any store is contacted, and
// nothing printed holds the secret or a part of it: a Secret's stringData
// mistyped as a scalar (YAML errors quote the start of a value), a
// password holding @ in a URL, a token as a URL's user, credentials in a
// bucket endpoint, a malformed URL, and `render bootstrap` on any of them.
func TestBadCredentialConfigIsExit2(t *testing.T) {
	t.Parallel()
	pw := "P@ss-" + randomHex(10)
	secrets := secretSet{"password": pw, "its first 7 bytes": pw[:7]}
	store := func(url string) string {
		return fmt.Sprintf("apiVersion: platform.kratix.io/v1alpha1\nkind: GitStateStore\nmetadata: {name: creds}\nspec:\n  url: '%s'\n  branch: main\n", url)
	}
	cases := []struct {
		name, doc string
		want      []string
	}{
		{"stringData as a scalar", "apiVersion: v1\nkind: Secret\nmetadata: {name: git-creds}\nstringData: " + pw + "\n", []string{"platform.yaml", "document 1"}},
		{"password with @ in an https URL", store("https://render:" + pw + "@git.example.com/org/state.git"), []string{"platform.yaml", "GitStateStore creds", "spec.url", "secretRef"}},
		{"token as the user of an https URL", store("https://" + url.QueryEscape(pw) + "@git.example.com/org/state.git"), []string{"platform.yaml", "GitStateStore creds", "spec.url"}},
		{"password in an scp-like URL", store("git:" + pw + "@git.example.com:org/state.git"), []string{"platform.yaml", "GitStateStore creds", "spec.url"}},
		{"malformed URL holding a password", store("https://render:" + pw + "@git example.com/x.git"), []string{"platform.yaml", "GitStateStore creds", "spec.url"}},
		{"malformed URL", store("http://[::1"), []string{"platform.yaml", "GitStateStore creds", "spec.url"}},
		{"credentials in a bucket endpoint", "apiVersion: platform.kratix.io/v1alpha1\nkind: BucketStateStore\nmetadata: {name: b}\nspec:\n  endpoint: 'http://AKIA:" + pw + "@minio:9000'\n  bucketName: x\n", []string{"platform.yaml", "BucketStateStore b", "spec.endpoint"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := newWorkflow(t, "creds")
			w.docs(t, 0, 1, "v1")
			// dev-2 is in the store at fault, so bootstrap would print its URL.
			platform := []string{c.doc, localStore("local", w.path("state.git")), destination("dev-1", "GitStateStore", "local")}
			switch {
			case strings.Contains(c.doc, "kind: GitStateStore"):
				platform = append(platform, destination("dev-2", "GitStateStore", "creds"))
			case strings.Contains(c.doc, "kind: BucketStateStore"):
				platform = append(platform, destination("dev-2", "BucketStateStore", "b"))
			}
			w.setPlatform(t, platform...)
			for _, args := range [][]string{nil, {"bootstrap", "flux", "dev-2", "--platform", w.path("platform")}, {"bootstrap", "argocd", "dev-2", "--platform", w.path("platform")}} {
				var res result
				if args == nil {
					res = render(t, w, "--log-level", "debug")
				} else {
					res = runBin(t, w.dir, args...)
				}
				what := "render " + strings.Join(args, " ")
				if res.code != 2 {
					t.Errorf("%s: want exit 2, got %d\n%s", what, res.code, secrets.redact(res.stderr))
				}
				if leaks := secrets.leaks(res.stdout + res.stderr); len(leaks) > 0 {
					t.Errorf("%s printed the secret:\n%s", what, strings.Join(leaks, "\n"))
				}
				// Debug logging is on (it must not leak either); the
				// message itself is the one line that is not a log record.
				var msgs []string
				for _, l := range strings.Split(strings.TrimSpace(res.stderr), "\n") {
					if !strings.HasPrefix(l, "time=") {
						msgs = append(msgs, l)
					}
				}
				line := strings.Join(msgs, "\n")
				if len(msgs) != 1 {
					t.Errorf("%s: want one line, got:\n%s", what, secrets.redact(line))
				}
				for _, want := range c.want {
					if !strings.Contains(line, want) {
						t.Errorf("%s: the message does not name %q: %s", what, want, secrets.redact(line))
					}
				}
			}
			if _, err := os.Stat(w.path("state.git")); err == nil {
				t.Errorf("a store was written")
			}
		})
	}
}

// runBin runs the render binary with exactly args, in dir.
func runBin(t *testing.T, dir string, args ...string) result {
	t.Helper()
	cmd := exec.Command(renderBin(t), args...)
	cmd.Dir = dir
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err := cmd.Run()
	res := result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errOut.String(), took: time.Since(start)}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run render: %v", err)
	}
	return res
}
