package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// env is what every scenario needs: the servers scripts/testservers.sh
// started, the render binary, and a scratch folder.
type env struct {
	giteaURL, giteaUser, giteaPass  string
	minioEndpoint, minioAK, minioSK string
	bin                             string // the render binary, built for this run
	work                            string // scratch folder, removed at the end
	client                          *http.Client
	quiesced                        time.Duration // total waited in quiesce
	minio                           *minio.Client
}

func loadEnv(work string) (*env, error) {
	e := &env{
		giteaURL:  strings.TrimRight(os.Getenv("RENDER_TEST_GITEA_URL"), "/"),
		giteaUser: os.Getenv("RENDER_TEST_GITEA_USER"),
		// The admin's access token, as the password of basic auth: what
		// a platform gives render (a password costs Gitea a PBKDF2 check
		// per request; see testenv.GiteaServer.AdminToken).
		giteaPass:     os.Getenv("RENDER_TEST_GITEA_TOKEN"),
		minioEndpoint: os.Getenv("RENDER_TEST_MINIO_ENDPOINT"),
		minioAK:       os.Getenv("RENDER_TEST_MINIO_ACCESS_KEY"),
		minioSK:       os.Getenv("RENDER_TEST_MINIO_SECRET_KEY"),
		work:          work,
		client:        &http.Client{Timeout: 60 * time.Second},
	}
	var missing []string
	for k, v := range map[string]string{
		"RENDER_TEST_GITEA_URL": e.giteaURL, "RENDER_TEST_GITEA_USER": e.giteaUser,
		"RENDER_TEST_GITEA_TOKEN": e.giteaPass, "RENDER_TEST_MINIO_ENDPOINT": e.minioEndpoint,
		"RENDER_TEST_MINIO_ACCESS_KEY": e.minioAK, "RENDER_TEST_MINIO_SECRET_KEY": e.minioSK,
	} {
		if v == "" {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("test servers not configured (%s unset): run `make bench`, or "+
			"`scripts/testservers.sh start DIR && set -a && . DIR/env && set +a` first", strings.Join(missing, ", "))
	}
	mc, err := minio.New(e.minioEndpoint, &minio.Options{
		Creds: credentials.NewStaticV4(e.minioAK, e.minioSK, ""), Region: "us-east-1",
	})
	if err != nil {
		return nil, err
	}
	e.minio = mc
	return e, nil
}

// buildRender builds cmd/render the way `make build` does.
func buildRender(dir string) (string, error) {
	bin := filepath.Join(dir, "render")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "github.com/render-dev/render/cmd/render")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/render: %v\n%s", err, out)
	}
	return bin, nil
}

func uniqueName(prefix string) string {
	var b [5]byte
	rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

type repo struct {
	Owner, Name, CloneURL string
}

// api calls Gitea's API as the admin user.
func (e *env) api(method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.giteaURL+"/api/v1"+path, rd)
	if err != nil {
		return err
	}
	req.SetBasicAuth(e.giteaUser, e.giteaPass)
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("gitea %s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(data))
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// createRepo makes a repository; with initialised it holds one commit (a
// README) on main, so that `git clone --depth 1` works.
func (e *env) createRepo(prefix string, initialised bool) (repo, error) {
	var r struct {
		Name     string `json:"name"`
		CloneURL string `json:"clone_url"`
		Owner    struct {
			Login string `json:"login"`
		} `json:"owner"`
	}
	err := e.api("POST", "/user/repos", map[string]any{
		"name": uniqueName(prefix), "auto_init": initialised, "default_branch": "main", "private": false,
	}, &r)
	return repo{Owner: r.Owner.Login, Name: r.Name, CloneURL: r.CloneURL}, err
}

// head returns the commit id of branch main ("" when there is none).
func (e *env) head(r repo) (string, error) {
	var br struct {
		Commit struct {
			ID string `json:"id"`
		} `json:"commit"`
	}
	err := e.api("GET", "/repos/"+r.Owner+"/"+r.Name+"/branches/main", nil, &br)
	if err != nil && strings.Contains(err.Error(), "404") {
		return "", nil
	}
	return br.Commit.ID, err
}

// authURL is a clone URL with the admin's credentials, for the git CLI. It
// is never printed.
func (e *env) authURL(cloneURL string) string {
	if !strings.Contains(cloneURL, "://") {
		return cloneURL // a repository on this machine (the SSH server's)
	}
	u, _ := url.Parse(cloneURL)
	u.User = url.UserPassword(e.giteaUser, e.giteaPass)
	return u.String()
}

// redact removes the servers' secrets from s, so error messages can be printed.
func (e *env) redact(s string) string {
	for _, secret := range []string{e.giteaPass, e.minioSK, url.QueryEscape(e.giteaPass)} {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, "***")
		}
	}
	return s
}

func (e *env) createBucket(ctx context.Context, prefix string) (string, error) {
	b := uniqueName(prefix)
	return b, e.minio.MakeBucket(ctx, b, minio.MakeBucketOptions{Region: "us-east-1"})
}

// proc is the outcome of one child process.
type proc struct {
	Code     int
	Wall     time.Duration
	CPU      time.Duration // user + system time of the process
	MaxRSSKB int64
	Stdout   string
	Stderr   string
}

// run runs the command and waits for it; a non-zero exit is not an error.
func run(ctx context.Context, dir string, envv []string, name string, args ...string) (proc, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = envv
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	t0 := time.Now()
	err := cmd.Run()
	p := proc{Wall: time.Since(t0), Stdout: out.String(), Stderr: errb.String()}
	if cmd.ProcessState != nil {
		p.Code = cmd.ProcessState.ExitCode()
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			p.MaxRSSKB = ru.Maxrss // kilobytes on Linux
		}
		p.CPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return p, err
	}
	return p, nil
}

// rssWrapperArg makes this program run the rest of its arguments as a
// child and write the child's peak RSS (kilobytes) to $RENDER_BENCH_RSS_OUT.
//
// Peak RSS must be read by a small parent: on Linux a child's ru_maxrss
// also counts the memory its parent had when it forked (Go forks with
// CLONE_VM, and exec keeps the old address space's high-water mark), so a
// child of this (large) benchmark process would report at least the
// benchmark's own peak. The wrapper is a fresh, small process.
const rssWrapperArg = "rss-wrapper"

func rssWrapper(args []string) int {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	if cmd.ProcessState == nil {
		fmt.Fprintln(os.Stderr, "rss-wrapper:", err)
		return 125
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		os.WriteFile(os.Getenv("RENDER_BENCH_RSS_OUT"), fmt.Appendf(nil, "%d\n", ru.Maxrss), 0o644)
	}
	return cmd.ProcessState.ExitCode()
}

// renderRSS runs the render binary once for workflow w, through the RSS
// wrapper, and returns its peak RSS in proc.MaxRSSKB.
func (e *env) renderRSS(ctx context.Context, w *workflow, extra ...string) (proc, error) {
	self, err := os.Executable()
	if err != nil {
		return proc{}, err
	}
	out := filepath.Join(e.work, "rss.out")
	os.Remove(out)
	envv := append(w.env(), "RENDER_BENCH_RSS_OUT="+out)
	p, err := run(ctx, w.dir, envv, self, append(append([]string{rssWrapperArg, e.bin}, w.args()...), extra...)...)
	if err == nil && p.Code != 0 {
		err = fmt.Errorf("render exited %d: %s", p.Code, e.redact(strings.TrimSpace(p.Stderr)))
	}
	if err != nil {
		return p, err
	}
	data, err := os.ReadFile(out)
	if err != nil {
		return p, fmt.Errorf("peak RSS: %w", err)
	}
	_, err = fmt.Sscan(string(data), &p.MaxRSSKB)
	return p, err
}

// gitEnv is an environment for the git CLI that ignores the user's and
// the system's configuration.
func (e *env) gitEnv() []string {
	home := filepath.Join(e.work, "git-home")
	os.MkdirAll(home, 0o755)
	return append(os.Environ(), "HOME="+home, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=kratix", "GIT_AUTHOR_EMAIL=kratix@example.com",
		"GIT_COMMITTER_NAME=kratix", "GIT_COMMITTER_EMAIL=kratix@example.com")
}

// git runs the git CLI in dir; failures carry its (redacted) output.
func (e *env) git(ctx context.Context, dir string, args ...string) error {
	p, err := run(ctx, dir, e.gitEnv(), "git", args...)
	if err == nil && p.Code != 0 {
		err = fmt.Errorf("exit %d: %s", p.Code, strings.TrimSpace(p.Stderr))
	}
	if err != nil {
		return fmt.Errorf("git %s: %s", args[0], e.redact(err.Error()))
	}
	return nil
}

// renderEnv is the environment of a render child process: the workflow
// identity Kratix would set.
func renderEnv(promise string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KRATIX_") {
			out = append(out, kv)
		}
	}
	return append(out, "KRATIX_WORKFLOW_TYPE=promise", "KRATIX_PROMISE_NAME="+promise,
		"KRATIX_PIPELINE_NAME=configure", "KRATIX_WORKFLOW_ACTION=configure")
}

// render runs the render binary once for workflow w.
func (e *env) render(ctx context.Context, w *workflow, extra ...string) (proc, error) {
	args := append(w.args(), extra...)
	p, err := run(ctx, w.dir, w.env(), e.bin, args...)
	if err == nil && p.Code != 0 {
		err = fmt.Errorf("render exited %d: %s", p.Code, e.redact(strings.TrimSpace(p.Stderr)))
	}
	return p, err
}
