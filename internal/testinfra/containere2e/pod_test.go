package containere2e

import (
	"bufio"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/crypto/ssh"

	"github.com/render-dev/render/internal/testinfra/testenv"
)

// The pod's credentials: throwaway, for these containers only.
const (
	podGiteaUser     = "render"
	podGiteaPassword = "render-pod-pw-1"
	podMinIOUser     = "render-pod-minio"
	podMinIOPassword = "render-pod-minio-secret-1"
	sshPort          = "2222"
)

// stack is Gitea (HTTP and its built-in SSH server) and MinIO, as containers
// on one user-defined network where they are called gitea and minio.
type stack struct {
	e            *engine
	network      string
	gitea, minio string // container names
	api          giteaAPI
	knownHosts   string // Gitea's SSH host key, as a known_hosts line
	clientKey    []byte // an SSH key Gitea accepts for podGiteaUser (OpenSSH PEM)
}

func startStack(t *testing.T, e *engine) *stack {
	t.Helper()
	s := &stack{e: e, network: e.network(t, "pod")}

	// Gitea's SSH host key is made here, so the test knows it as an
	// administrator does who puts it into the secret's knownHosts.
	keys := t.TempDir()
	_, hostKey, _ := ed25519.GenerateKey(rand.Reader)
	block, err := ssh.MarshalPrivateKey(hostKey, "gitea host key")
	if err != nil {
		t.Fatal(err)
	}
	writeTree(t, keys, map[string]string{"ssh_host_ed25519_key": string(pem.EncodeToMemory(block))})
	hostSigner, err := ssh.NewSignerFromKey(hostKey)
	if err != nil {
		t.Fatal(err)
	}
	s.knownHosts = fmt.Sprintf("[gitea]:%s %s", sshPort, ssh.MarshalAuthorizedKey(hostSigner.PublicKey()))

	s.gitea = testenv.UniqueName("gitea")
	e.start(t, s.gitea, "--network", s.network, "--network-alias", "gitea", "-p", "127.0.0.1::3000",
		"-v", keys+":/keys:ro",
		"-e", "USER_UID=1000", "-e", "USER_GID=1000",
		"-e", "GITEA__database__DB_TYPE=sqlite3",
		"-e", "GITEA__security__INSTALL_LOCK=true",
		"-e", "GITEA__server__HTTP_PORT=3000",
		"-e", "GITEA__server__ROOT_URL=http://gitea:3000/",
		"-e", "GITEA__service__DISABLE_REGISTRATION=true",
		"-e", "GITEA__log__LEVEL=warn", // a failed test prints the log's tail
		"-e", "GITEA__server__DISABLE_SSH=false",
		"-e", "GITEA__server__START_SSH_SERVER=true",
		"-e", "GITEA__server__SSH_DOMAIN=gitea",
		"-e", "GITEA__server__SSH_PORT="+sshPort,
		"-e", "GITEA__server__SSH_LISTEN_PORT="+sshPort,
		"-e", "GITEA__server__SSH_SERVER_HOST_KEYS=/keys/ssh_host_ed25519_key",
		e.giteaImage)
	s.minio = testenv.UniqueName("minio")
	e.start(t, s.minio, "--network", s.network, "--network-alias", "minio", "-p", "127.0.0.1::9000",
		"-e", "MINIO_ROOT_USER="+podMinIOUser, "-e", "MINIO_ROOT_PASSWORD="+podMinIOPassword,
		e.minioImage, "server", "/data")

	s.api = giteaAPI{url: "http://" + e.hostPort(t, s.gitea, "3000"), user: podGiteaUser, password: podGiteaPassword}
	waitFor(t, "Gitea healthy", 3*time.Minute, func() error {
		code, body, err := httpGet(s.api.url+"/api/healthz", "", "")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("HTTP %d: %s", code, body)
		}
		return err
	})
	e.run(t, "exec", s.gitea, "su-exec", "git", "gitea", "--config", "/data/gitea/conf/app.ini",
		"admin", "user", "create", "--username", podGiteaUser, "--password", podGiteaPassword,
		"--email", "render@example.invalid", "--admin", "--must-change-password=false")

	clientPub, clientKey, _ := ed25519.GenerateKey(rand.Reader)
	block, err = ssh.MarshalPrivateKey(clientKey, "render sidecar")
	if err != nil {
		t.Fatal(err)
	}
	s.clientKey = pem.EncodeToMemory(block)
	pub, err := ssh.NewPublicKey(clientPub)
	if err != nil {
		t.Fatal(err)
	}
	s.api.call(t, "POST", "/user/keys", map[string]any{"title": "render sidecar", "key": string(ssh.MarshalAuthorizedKey(pub))}, http.StatusCreated)

	waitFor(t, "MinIO ready", 2*time.Minute, func() error {
		code, _, err := httpGet("http://"+e.hostPort(t, s.minio, "9000")+"/minio/health/ready", "", "")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("HTTP %d", code)
		}
		return err
	})
	return s
}

// repo creates a repository with a first commit on main.
func (s *stack) repo(t *testing.T, prefix string) string {
	t.Helper()
	name := testenv.UniqueName(prefix)
	s.api.call(t, "POST", "/user/repos", map[string]any{"name": name, "default_branch": "main", "auto_init": true}, http.StatusCreated)
	return name
}

// bucket creates a bucket in MinIO.
func (s *stack) bucket(t *testing.T, prefix string) s3 {
	t.Helper()
	b := s.s3("")
	b.bucket = testenv.UniqueName(prefix)
	c, err := b.client()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.MakeBucket(t.Context(), b.bucket, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		t.Fatalf("make bucket %s: %v", b.bucket, err)
	}
	return b
}

// s3 reaches a bucket on MinIO's published port (which changes when the
// container restarts).
func (s *stack) s3(bucket string) s3 {
	out, err := s.e.try("port", s.minio, "9000/tcp")
	if err != nil {
		out = "127.0.0.1:0"
	}
	return s3{endpoint: strings.Split(out, "\n")[0], accessKey: podMinIOUser, secretKey: podMinIOPassword, bucket: bucket}
}

// pod is one workflow pod: its three emptyDir volumes, its platform
// (a ConfigMap) and secrets (Secrets, one folder each), and render's
// image as its sidecar.
type pod struct {
	s                 *stack
	output, metadata  string // volumes
	input             string
	platform, secrets string // host folders, mounted read-only
	sidecar           string // container name
	metrics           string // /metrics and /healthz, on loopback
}

func newPod(t *testing.T, s *stack, platform string, secrets map[string]string) *pod {
	t.Helper()
	p := &pod{s: s, platform: t.TempDir(), secrets: t.TempDir()}
	p.output = s.e.volume(t, "kratix-output")
	p.metadata = s.e.volume(t, "kratix-metadata")
	p.input = s.e.volume(t, "kratix-input")
	writeTree(t, p.platform, map[string]string{"platform.yaml": platform})
	writeTree(t, p.secrets, secrets)
	return p
}

// mounts are the sidecar's volumes; nothing else of its file system is writable.
var sidecarMounts = []string{"/kratix/output", "/kratix/metadata", "/kratix/input", "/etc/render/platform", "/etc/render/secrets"}

// startSidecar runs render --watch as Kubernetes' restricted profile
// would: a non-root user, a read-only root file system with only the pod's
// volumes (no /tmp, no home folder), every capability dropped and no
// privilege escalation.
func (p *pod) startSidecar(t *testing.T) {
	t.Helper()
	e := p.s.e
	p.sidecar = testenv.UniqueName("render-sidecar")
	e.start(t, p.sidecar, "--network", p.s.network,
		"--user", "65532:65532", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"-v", p.output+":/kratix/output:ro",
		"-v", p.metadata+":/kratix/metadata:ro",
		"-v", p.input+":/kratix/input:ro",
		"-v", p.platform+":/etc/render/platform:ro",
		"-v", p.secrets+":/etc/render/secrets:ro",
		"-p", "127.0.0.1::9090",
		"-e", "KRATIX_WORKFLOW_TYPE=promise", "-e", "KRATIX_WORKFLOW_ACTION=configure",
		"-e", "KRATIX_PIPELINE_NAME=promise-configure",
		e.renderImage,
		"--watch", "--output=/kratix/output", "--metadata=/kratix/metadata", "--input=/kratix/input",
		"--platform=/etc/render/platform", "--secrets-dir=/etc/render/secrets",
		// Longer than the gap between the workflow's last write and
		// `docker stop` below, so the last change is left to the last render.
		"--quiet-period=3s", "--max-wait=30s",
		// Below docker stop's 10 s grace period.
		"--retry-deadline=5s",
		"--metrics-addr=:9090", "--log-format=json")
	p.metrics = "http://" + e.hostPort(t, p.sidecar, "9090")
	waitFor(t, "the sidecar's /healthz", time.Minute, func() error {
		code, body, err := httpGet(p.metrics+"/healthz", "", "")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("HTTP %d: %s", code, body)
		}
		return err
	})
}

// workflow runs the workflow's container: it writes a promise's request,
// its output (a ConfigMap carrying mark) and its destination selectors into
// the pod's volumes, as root, the way Kratix's pipeline containers do.
func (p *pod) workflow(t *testing.T, mark string) {
	t.Helper()
	p.s.e.run(t, "run", "--rm", "--network", "none", "--label", "dev.render.test=containere2e",
		"-v", p.output+":/kratix/output", "-v", p.metadata+":/kratix/metadata", "-v", p.input+":/kratix/input",
		"-e", "MARK="+mark, p.s.e.baseImage, "sh", "-ec", `
cat >/kratix/input/object.yaml <<EOF
apiVersion: platform.kratix.io/v1alpha1
kind: Promise
metadata:
  name: postgres
EOF
printf -- '- matchLabels: {env: dev}\n' >/kratix/metadata/destination-selectors.yaml
cat >/kratix/output/operator.yaml <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: postgres-operator
  namespace: default
data:
  mark: "$MARK"
EOF
`)
}

// landed waits until the repository's destination folder holds the
// workflow's ConfigMap with mark.
func (p *pod) landedInGit(t *testing.T, repo, dest, mark string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s in %s (Gitea, %s)", mark, dest, repo), 2*time.Minute, func() error {
		files, err := p.s.api.files(podGiteaUser, repo, "main", "clusters/"+dest+"/dependencies/")
		if err != nil {
			return err
		}
		return hasMark(files, mark)
	})
}

func (p *pod) landedInBucket(t *testing.T, bucket, dest, mark string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s in %s (MinIO, %s)", mark, dest, bucket), 2*time.Minute, func() error {
		files, err := p.s.s3(bucket).files("clusters/" + dest + "/dependencies/")
		if err != nil {
			return err
		}
		return hasMark(files, mark)
	})
}

func hasMark(files map[string]string, mark string) error {
	path, content, err := oneWithSuffix(files, "/operator.yaml")
	if err != nil {
		return err
	}
	if !strings.Contains(content, fmt.Sprintf("mark: %q", mark)) {
		return fmt.Errorf("%s does not carry %s:\n%s", path, mark, content)
	}
	return nil
}

// metric sums the samples of a metric whose labels contain every one of labels.
func (p *pod) metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	code, body, err := httpGet(p.metrics+"/metrics", "", "")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics: HTTP %d, %v", code, err)
	}
	sum := 0.0
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, name+"{") && !strings.HasPrefix(l, name+" ") {
			continue
		}
		ok := true
		for _, want := range labels {
			ok = ok && strings.Contains(l, want)
		}
		if !ok {
			continue
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("/metrics: %q: %v", l, err)
		}
		sum += v
	}
	return sum
}

// stop is `docker stop` with Kubernetes' default grace period: SIGTERM to
// render (PID 1), SIGKILL after 10 s. render must exit 0 by itself.
func (p *pod) stop(t *testing.T) {
	t.Helper()
	start := time.Now()
	p.s.e.run(t, "stop", "-t", "10", p.sidecar)
	took := time.Since(start)
	code := p.s.e.inspect(t, p.sidecar, "{{.State.ExitCode}}")
	t.Logf("docker stop %s: %s, exit code %s", p.sidecar, took.Round(time.Millisecond), code)
	if code != "0" {
		t.Errorf("render exited with %s after SIGTERM, want 0 (137 is SIGKILL after the 10 s grace period)", code)
	}
}

// logLines are the sidecar's JSON log lines, in order.
func (p *pod) logLines(t *testing.T) []map[string]any {
	t.Helper()
	out := p.s.e.run(t, "logs", p.sidecar)
	var lines []map[string]any
	for _, l := range strings.Split(out, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			lines = append(lines, m)
		}
	}
	return lines
}

// rootUntouched checks that render wrote nothing inside its container's
// root file system: `docker diff` lists only the mount points the engine
// made for the volumes (and their parent folders).
func (p *pod) rootUntouched(t *testing.T) {
	t.Helper()
	out := p.s.e.run(t, "diff", p.sidecar)
	for _, l := range strings.Split(out, "\n") {
		if l == "" {
			continue
		}
		kind, path, _ := strings.Cut(l, " ")
		mountPoint := false
		for _, m := range sidecarMounts {
			mountPoint = mountPoint || m == path || strings.HasPrefix(m, path+"/")
		}
		if !mountPoint || (kind != "A" && kind != "C") {
			t.Errorf("docker diff: %q: render changed its container's root file system", l)
		}
	}
}

func httpPlatform(repo, bucket string) string {
	return fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: GitStateStore
metadata:
  name: default
spec:
  url: http://gitea:3000/%[1]s/%[2]s.git
  branch: main
  path: clusters
  authMethod: basicAuth
  allowInsecureHTTP: true
  secretRef:
    name: git-credentials
  gitAuthor:
    name: render sidecar
    email: render@example.invalid
---
apiVersion: platform.kratix.io/v1alpha1
kind: BucketStateStore
metadata:
  name: minio
spec:
  endpoint: minio:9000
  bucketName: %[3]s
  path: clusters
  insecure: true
  authMethod: accessKey
  secretRef:
    name: minio-credentials
---
apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata:
  name: dev-git
  labels: {env: dev}
spec:
  stateStoreRef: {kind: GitStateStore, name: default}
---
apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata:
  name: dev-s3
  labels: {env: dev}
spec:
  stateStoreRef: {kind: BucketStateStore, name: minio}
`, podGiteaUser, repo, bucket)
}

var httpSecrets = map[string]string{
	"git-credentials/username":          podGiteaUser,
	"git-credentials/password":          podGiteaPassword,
	"minio-credentials/accessKeyID":     podMinIOUser,
	"minio-credentials/secretAccessKey": podMinIOPassword,
}

// TestSidecarPod runs render's image as the sidecar of a workflow pod. The
// Gitea and MinIO images are local stand-ins built by
// scripts/containers.sh under the tags docker-compose.yaml names (the
// upstream images cannot be pulled here): the same Gitea version and a
// MinIO built from source, on Debian.
func TestSidecarPod(t *testing.T) {
	e := newEngine(t)
	s := startStack(t, e)

	t.Run("http and s3", func(t *testing.T) {
		repo, bucket := s.repo(t, "state"), s.bucket(t, "state")
		p := newPod(t, s, httpPlatform(repo, bucket.bucket), httpSecrets)
		p.startSidecar(t) // first, as a native sidecar: it watches before the workflow writes

		p.workflow(t, "v1")
		p.landedInGit(t, repo, "dev-git", "v1")
		p.landedInBucket(t, bucket.bucket, "dev-s3", "v1")

		p.workflow(t, "v2")
		p.landedInGit(t, repo, "dev-git", "v2")
		p.landedInBucket(t, bucket.bucket, "dev-s3", "v2")

		// The stores have the files a moment before the render is done
		// and counted.
		waitFor(t, "/metrics counting two renders", 30*time.Second, func() error {
			for _, m := range []struct{ name, label string }{
				{"render_renders_total", `result="ok"`},
				{"render_store_writes_total", `result="committed"`},
				{"render_store_writes_total", `result="uploaded"`},
			} {
				if n := p.metric(t, m.name, m.label); n < 2 {
					return fmt.Errorf("%s{%s} = %v, want 2 or more", m.name, m.label, n)
				}
			}
			return nil
		})
		code, body, err := httpGet(p.metrics+"/healthz", "", "")
		if err != nil || code != http.StatusOK || !strings.Contains(string(body), "last render: ok") {
			t.Errorf("/healthz: HTTP %d, %v: %s", code, err, body)
		}

		// The workflow's last change, then at once the pod's end: the
		// quiet period has not passed, so only the last render on SIGTERM
		// can write v3.
		before, err := s.api.commits(podGiteaUser, repo, "main")
		if err != nil {
			t.Fatal(err)
		}
		p.workflow(t, "v3")
		p.stop(t)
		p.landedInGit(t, repo, "dev-git", "v3")
		p.landedInBucket(t, bucket.bucket, "dev-s3", "v3")
		if after, err := s.api.commits(podGiteaUser, repo, "main"); err != nil || after != before+1 {
			t.Errorf("commits on main: %d before the stop, %d after (%v), want one more", before, after, err)
		}
		lastRender(t, p.logLines(t), "GitStateStore/default", "BucketStateStore/minio")
		p.rootUntouched(t)
	})

	t.Run("a store down at start", func(t *testing.T) {
		repo, bucket := s.repo(t, "state"), s.bucket(t, "state")
		p := newPod(t, s, httpPlatform(repo, bucket.bucket), httpSecrets)
		e.run(t, "stop", s.minio)
		started := false
		t.Cleanup(func() {
			if !started {
				e.try("start", s.minio)
			}
		})
		p.workflow(t, "down-1")
		p.startSidecar(t)
		waitFor(t, "a failed write to MinIO", time.Minute, func() error {
			if n := p.metric(t, "render_store_writes_total", "minio", `result="failed"`); n == 0 {
				return fmt.Errorf("render_store_writes_total{store=~minio, result=failed} is 0")
			}
			return nil
		})
		e.run(t, "start", s.minio)
		started = true
		// No change in the pod: the retry alone writes it.
		p.landedInBucket(t, bucket.bucket, "dev-s3", "down-1")
		p.landedInGit(t, repo, "dev-git", "down-1")
		p.stop(t)
		p.rootUntouched(t)
	})

	t.Run("ssh", func(t *testing.T) {
		repo := s.repo(t, "state-ssh")
		platform := fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: GitStateStore
metadata:
  name: ssh
spec:
  url: ssh://git@gitea:%s/%s/%s.git
  branch: main
  path: clusters
  authMethod: ssh
  secretRef:
    name: git-ssh
---
apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata:
  name: dev-ssh
  labels: {env: dev}
spec:
  stateStoreRef: {kind: GitStateStore, name: ssh}
`, sshPort, podGiteaUser, repo)
		p := newPod(t, s, platform, map[string]string{
			"git-ssh/sshPrivateKey": string(s.clientKey),
			"git-ssh/knownHosts":    s.knownHosts,
		})
		p.startSidecar(t)
		p.workflow(t, "ssh-1")
		p.landedInGit(t, repo, "dev-ssh", "ssh-1")
		p.workflow(t, "ssh-2")
		p.stop(t)
		p.landedInGit(t, repo, "dev-ssh", "ssh-2")
		lastRender(t, p.logLines(t), "GitStateStore/ssh")
		p.rootUntouched(t)
	})
}

// lastRender checks that, after the stop was logged, a last render wrote
// each of stores.
func lastRender(t *testing.T, lines []map[string]any, stores ...string) {
	t.Helper()
	stopped := -1
	for i, l := range lines {
		if l["msg"] == "stopping: one last render, then exit" {
			stopped = i
		}
	}
	if stopped < 0 {
		t.Errorf("the sidecar did not log its stop")
		return
	}
	for _, st := range stores {
		wrote := false
		for _, l := range lines[stopped:] {
			if l["msg"] == "store written" && l["store"] == st {
				changed, _ := l["changed"].(float64)
				added, _ := l["added"].(float64)
				wrote = wrote || changed+added > 0
			}
		}
		if !wrote {
			t.Errorf("the last render after SIGTERM did not write %s", st)
		}
	}
}
