package containere2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/render-dev/render/internal/testinfra/testenv"
)

// The variables scripts/containers.sh exports (DOCKER_HOST too).
const (
	envDocker      = "RENDER_TEST_DOCKER"         // the docker CLI
	envCompose     = "RENDER_TEST_DOCKER_COMPOSE" // docker-compose (1.29)
	envRenderImage = "RENDER_TEST_RENDER_IMAGE"   // render's image, built by `make image`
	envBaseImage   = "RENDER_TEST_BASE_IMAGE"     // Debian, with sh: the workflow's image
	envGiteaImage  = "RENDER_TEST_GITEA_IMAGE"    // the gitea/gitea tag docker-compose.yaml runs
	envMinIOImage  = "RENDER_TEST_MINIO_IMAGE"    // the minio/minio tag docker-compose.yaml runs
)

// engine is the Docker engine scripts/containers.sh started, and its images.
type engine struct {
	docker, compose                                string
	renderImage, baseImage, giteaImage, minioImage string
}

func newEngine(t *testing.T) *engine {
	t.Helper()
	e := &engine{}
	vars := []struct {
		name string
		to   *string
	}{
		{envDocker, &e.docker}, {envCompose, &e.compose}, {envRenderImage, &e.renderImage},
		{envBaseImage, &e.baseImage}, {envGiteaImage, &e.giteaImage}, {envMinIOImage, &e.minioImage},
	}
	var missing []string
	for _, v := range vars {
		*v.to = os.Getenv(v.name)
		if *v.to == "" {
			missing = append(missing, v.name)
		}
	}
	if len(missing) > 0 {
		testenv.SkipOrFail(t, fmt.Sprintf("no Docker engine for the container tests (%s unset): run `make test-containers` or `make test`",
			strings.Join(missing, ", ")))
	}
	return e
}

// try runs the docker CLI and returns its combined output.
func (e *engine) try(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, e.docker, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// run runs the docker CLI and fails the test if it fails.
func (e *engine) run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := e.try(args...)
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// network creates a user-defined network (service names resolve on it),
// removed when the test ends, after the containers on it.
func (e *engine) network(t *testing.T, prefix string) string {
	t.Helper()
	name := testenv.UniqueName(prefix)
	e.run(t, "network", "create", name)
	t.Cleanup(func() {
		if out, err := e.try("network", "rm", name); err != nil {
			t.Errorf("docker network rm %s: %v\n%s", name, err, out)
		}
	})
	return name
}

// volume creates a named volume (a pod's emptyDir), removed when the test ends.
func (e *engine) volume(t *testing.T, prefix string) string {
	t.Helper()
	name := testenv.UniqueName(prefix)
	e.run(t, "volume", "create", name)
	t.Cleanup(func() {
		if out, err := e.try("volume", "rm", "-f", name); err != nil {
			t.Errorf("docker volume rm %s: %v\n%s", name, err, out)
		}
	})
	return name
}

// start runs a detached container named name (docker run -d ARGS) and
// removes it when the test ends, printing its log first if the test failed.
func (e *engine) start(t *testing.T, name string, args ...string) {
	t.Helper()
	e.removeAtEnd(t, name)
	e.run(t, append([]string{"run", "-d", "--name", name, "--label", "dev.render.test=containere2e"}, args...)...)
}

func (e *engine) removeAtEnd(t *testing.T, name string) {
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := e.try("logs", "--tail", "60", name)
			t.Logf("log of container %s (last 60 lines):\n%s", name, logs)
		}
		if out, err := e.try("rm", "-f", "-v", name); err != nil && !strings.Contains(out, "No such container") {
			t.Errorf("docker rm %s: %v\n%s", name, err, out)
		}
	})
}

// hostPort is the loopback address a container's port is published on.
func (e *engine) hostPort(t testing.TB, name, port string) string {
	t.Helper()
	out := e.run(t, "port", name, port+"/tcp")
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "127.0.0.1:") {
			return l
		}
	}
	t.Fatalf("container %s publishes %s on %q, want 127.0.0.1 only", name, port, out)
	return ""
}

// inspect reads one field of a container with a Go template.
func (e *engine) inspect(t testing.TB, name, format string) string {
	t.Helper()
	return e.run(t, "inspect", "-f", format, name)
}

// waitFor polls check until it returns nil or timeout passes.
func waitFor(t testing.TB, what string, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for {
		if err = check(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// httpGet returns the status and body of a GET.
func httpGet(url, user, password string) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// giteaAPI is Gitea's REST API, reached on its published port as one user.
type giteaAPI struct {
	url, user, password string
}

func (g giteaAPI) call(t testing.TB, method, path string, body any, want int) []byte {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, g.url+"/api/v1"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(g.user, g.password)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("gitea %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("gitea %s %s: HTTP %d, want %d: %s", method, path, resp.StatusCode, want, out)
	}
	return out
}

// files returns the files on a branch of a repository, path to content;
// only those whose path starts with prefix are read.
func (g giteaAPI) files(owner, repo, branch, prefix string) (map[string]string, error) {
	code, body, err := httpGet(fmt.Sprintf("%s/api/v1/repos/%s/%s/git/trees/%s?recursive=true&per_page=10000", g.url, owner, repo, branch), g.user, g.password)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("tree of %s/%s@%s: HTTP %d: %s", owner, repo, branch, code, body)
	}
	var tree struct {
		Tree []struct {
			Path string `json:"path"`
			Type string `json:"type"`
		} `json:"tree"`
		Truncated bool `json:"truncated"`
	}
	if err := json.Unmarshal(body, &tree); err != nil {
		return nil, err
	}
	if tree.Truncated {
		return nil, fmt.Errorf("tree of %s/%s@%s is truncated", owner, repo, branch)
	}
	out := map[string]string{}
	for _, e := range tree.Tree {
		if e.Type != "blob" || !strings.HasPrefix(e.Path, prefix) {
			continue
		}
		code, body, err := httpGet(fmt.Sprintf("%s/api/v1/repos/%s/%s/raw/%s?ref=%s", g.url, owner, repo, e.Path, branch), g.user, g.password)
		if err != nil {
			return nil, err
		}
		if code != http.StatusOK {
			return nil, fmt.Errorf("%s: HTTP %d", e.Path, code)
		}
		out[e.Path] = string(body)
	}
	return out, nil
}

// commits counts the commits on a branch.
func (g giteaAPI) commits(owner, repo, branch string) (int, error) {
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/api/v1/repos/%s/%s/commits?sha=%s&limit=1&stat=false&files=false", g.url, owner, repo, branch), nil)
	if err != nil {
		return 0, err
	}
	req.SetBasicAuth(g.user, g.password)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("commits of %s/%s: HTTP %d", owner, repo, resp.StatusCode)
	}
	var n int
	if _, err := fmt.Sscan(resp.Header.Get("X-Total-Count"), &n); err != nil {
		return 0, fmt.Errorf("commits of %s/%s: X-Total-Count %q", owner, repo, resp.Header.Get("X-Total-Count"))
	}
	return n, nil
}

// s3 reads a bucket on MinIO's published port.
type s3 struct {
	endpoint, accessKey, secretKey, bucket string
}

func (s s3) client() (*minio.Client, error) {
	return minio.New(s.endpoint, &minio.Options{
		Creds: credentials.NewStaticV4(s.accessKey, s.secretKey, ""), Region: "us-east-1",
	})
}

// files returns the objects under prefix, key to content.
func (s s3) files(prefix string) (map[string]string, error) {
	c, err := s.client()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string]string{}
	for o := range c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			return nil, o.Err
		}
		obj, err := c.GetObject(ctx, s.bucket, o.Key, minio.GetObjectOptions{})
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(obj)
		obj.Close()
		if err != nil {
			return nil, err
		}
		out[o.Key] = string(b)
	}
	return out, nil
}

// oneWithSuffix finds the one file whose path ends in suffix.
func oneWithSuffix(files map[string]string, suffix string) (string, string, error) {
	var found []string
	for p := range files {
		if strings.HasSuffix(p, suffix) {
			found = append(found, p)
		}
	}
	sort.Strings(found)
	if len(found) != 1 {
		var all []string
		for p := range files {
			all = append(all, p)
		}
		sort.Strings(all)
		return "", "", fmt.Errorf("%d files end in %s (%v); files: %v", len(found), suffix, found, all)
	}
	return found[0], files[found[0]], nil
}

// writeTree writes files (path to content) under dir, readable by every
// user: the containers run as other users than the test.
func writeTree(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.Chmod(p, 0o755)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
