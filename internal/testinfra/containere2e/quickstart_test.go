package containere2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const repoRoot = "../../.."

// What docker-compose.yaml and fixtures/compose set up.
const (
	qsGiteaURL      = "http://127.0.0.1:3000"
	qsGiteaUser     = "render"
	qsGiteaPassword = "render-gitea-pw-1"
	qsMinIO         = "127.0.0.1:9000"
	qsMinIOUser     = "render-minio"
	qsMinIOPassword = "render-minio-secret-1"
	qsBucket        = "kratix"
	qsProject       = "render" // the folder's name, as in a clone
)

// TestQuickstart follows the quickstart in docs/flux.md with the
// repository's docker-compose.yaml as it is, in a copy of the repository
// (the edit below must not touch the checkout): `docker-compose up --build`,
// the fixtures' files in Gitea and MinIO, an edit under fixtures/*/output
// committed, `docker-compose down -v`. docker-compose is Compose 1.29, which
// reads the same file as `docker compose`. The gitea/gitea and minio/minio
// images are local stand-ins built by scripts/containers.sh under the tags
// the file names (the upstream images cannot be pulled here); render's image
// is built by compose from the Dockerfile.
func TestQuickstart(t *testing.T) {
	e := newEngine(t)
	for _, port := range []string{"3000", "9000", "9001"} {
		ln, err := net.Listen("tcp", "127.0.0.1:"+port)
		if err != nil {
			t.Fatalf("docker-compose.yaml publishes port %s, which is taken here: %v", port, err)
		}
		ln.Close()
	}
	dir := copyRepo(t)

	compose := func(timeout time.Duration, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, e.compose, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	downed := false
	t.Cleanup(func() {
		if downed {
			return
		}
		if t.Failed() {
			logs, _ := compose(time.Minute, "logs", "--no-color", "--tail", "40")
			t.Logf("docker-compose logs (last 40 lines each):\n%s", logs)
		}
		if out, err := compose(5*time.Minute, "down", "-v", "--remove-orphans"); err != nil {
			t.Errorf("docker-compose down -v: %v\n%s", err, out)
		}
	})

	start := time.Now()
	if out, err := compose(15*time.Minute, "up", "-d", "--build"); err != nil {
		t.Fatalf("docker-compose up -d --build: %v\n%s", err, out)
	}
	t.Logf("docker-compose up -d --build: %s", time.Since(start).Round(time.Second))

	// Published on loopback only: the demo's credentials stay on this machine.
	for svc, port := range map[string]string{"gitea": "3000", "minio": "9000"} {
		out, err := compose(time.Minute, "port", svc, port)
		if err != nil || strings.TrimSpace(out) != "127.0.0.1:"+port {
			t.Errorf("docker-compose port %s %s: %q (%v), want 127.0.0.1:%s", svc, port, strings.TrimSpace(out), err, port)
		}
	}

	gitea := giteaAPI{url: qsGiteaURL, user: qsGiteaUser, password: qsGiteaPassword}
	bucket := s3{endpoint: qsMinIO, accessKey: qsMinIOUser, secretKey: qsMinIOPassword, bucket: qsBucket}
	stores := func() (map[string]string, map[string]string, error) {
		g, err := gitea.files(qsGiteaUser, "state", "main", "clusters/")
		if err != nil {
			return nil, nil, err
		}
		b, err := bucket.files("clusters/")
		return g, b, err
	}

	// Every file of both workflows' output lands in a store, as it is; the
	// promise's dependencies also in the bucket, for dev-ap.
	for _, wf := range []string{"promise-workflow", "resource-workflow"} {
		out := filepath.Join(dir, "fixtures", wf, "output")
		err := filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(out, p)
			want, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			waitFor(t, fmt.Sprintf("fixtures/%s/output/%s in Gitea or MinIO", wf, rel), 2*time.Minute, func() error {
				g, b, err := stores()
				if err != nil {
					return err
				}
				for path, content := range g {
					if strings.HasSuffix(path, "/"+rel) && content == string(want) {
						return nil
					}
				}
				for key, content := range b {
					if strings.HasSuffix(key, "/"+rel) && content == string(want) {
						return nil
					}
				}
				return fmt.Errorf("no copy yet")
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	operator := filepath.Join(dir, "fixtures", "promise-workflow", "output", "operator.yaml")
	original, err := os.ReadFile(operator)
	if err != nil {
		t.Fatal(err)
	}
	inBucket := func(want string) error {
		b, err := bucket.files("clusters/dev-ap/dependencies/")
		if err != nil {
			return err
		}
		path, content, err := oneWithSuffix(b, "/operator.yaml")
		if err == nil && content != want {
			err = fmt.Errorf("%s is not as the fixture says:\n%s", path, content)
		}
		return err
	}
	waitFor(t, "operator.yaml for dev-ap in MinIO", time.Minute, func() error { return inBucket(string(original)) })

	// "Edit a file under fixtures/promise-workflow/output and a commit appears."
	before, err := gitea.commits(qsGiteaUser, "state", "main")
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(original), "replicas: 1", "replicas: 2", 1)
	if edited == string(original) {
		t.Fatal("fixtures/promise-workflow/output/operator.yaml has no `replicas: 1` to edit")
	}
	if err := os.WriteFile(operator, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	editedAt := time.Now()
	waitFor(t, "the edit committed to Gitea", time.Minute, func() error {
		g, err := gitea.files(qsGiteaUser, "state", "main", "clusters/dev-eu/dependencies/")
		if err != nil {
			return err
		}
		path, content, err := oneWithSuffix(g, "/operator.yaml")
		if err == nil && content != edited {
			err = fmt.Errorf("%s is not edited yet", path)
		}
		return err
	})
	t.Logf("the edit was committed %s after it was written", time.Since(editedAt).Round(10*time.Millisecond))
	if after, err := gitea.commits(qsGiteaUser, "state", "main"); err != nil || after <= before {
		t.Errorf("commits on main: %d before the edit, %d after (%v)", before, after, err)
	}
	waitFor(t, "the edit uploaded to MinIO", time.Minute, func() error { return inBucket(edited) })

	// The render services stop as a pod's sidecar does: SIGTERM, a last
	// render, exit 0.
	if out, err := compose(2*time.Minute, "stop", "render-promise", "render-resource"); err != nil {
		t.Fatalf("docker-compose stop: %v\n%s", err, out)
	}
	for _, svc := range []string{"render-promise", "render-resource"} {
		id, err := compose(time.Minute, "ps", "-q", svc)
		if err != nil {
			t.Fatalf("docker-compose ps -q %s: %v\n%s", svc, err, id)
		}
		if code := e.inspect(t, strings.TrimSpace(id), "{{.State.ExitCode}}"); code != "0" {
			t.Errorf("%s exited with %s after SIGTERM, want 0", svc, code)
		}
	}

	if out, err := compose(5*time.Minute, "down", "-v"); err != nil {
		t.Fatalf("docker-compose down -v: %v\n%s", err, out)
	}
	downed = true
	for _, what := range []string{"ps -a", "volume ls", "network ls"} {
		args := append(strings.Fields(what), "-q", "--filter", "label=com.docker.compose.project="+qsProject)
		if left := e.run(t, args...); left != "" {
			t.Errorf("docker %s after docker-compose down -v: %s is left", what, strings.ReplaceAll(left, "\n", " "))
		}
	}
}

// copyRepo copies the repository's files (tracked, and untracked but not
// ignored, as a clone with local changes would have them) to a folder
// named as the repository, and returns it.
func copyRepo(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	dir := filepath.Join(t.TempDir(), qsProject)
	for _, rel := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, rel)
		info, err := os.Lstat(src)
		if os.IsNotExist(err) {
			continue // deleted in the checkout, not yet committed
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if info.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, dst); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	// The containers read the fixtures as other users than the test's.
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
