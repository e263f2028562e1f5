package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// workflow is one promise workflow's folders, laid out as Kratix mounts
// them, and the platform configuration render reads.
type workflow struct {
	dir      string // holds output/, metadata/, input/, platform/
	promise  string
	docs     int
	platform string
	// resource, when set, makes it a resource workflow: a request of that
	// name, in namespace "team", of the promise.
	resource string
}

// env is the render process's environment for w.
func (w *workflow) env() []string {
	if w.resource == "" {
		return renderEnv(w.promise)
	}
	var out []string
	for _, kv := range renderEnv(w.promise) {
		if !strings.HasPrefix(kv, "KRATIX_WORKFLOW_TYPE=") {
			out = append(out, kv)
		}
	}
	return append(out, "KRATIX_WORKFLOW_TYPE=resource", "KRATIX_OBJECT_NAME="+w.resource, "KRATIX_OBJECT_NAMESPACE=team")
}

func (w *workflow) output() string { return filepath.Join(w.dir, "output") }

func (w *workflow) args() []string {
	return []string{
		"--output", w.output(), "--metadata", filepath.Join(w.dir, "metadata"),
		"--input", filepath.Join(w.dir, "input"), "--platform", w.platform,
	}
}

// doc is one ConfigMap of about 1 KiB, as a workflow would write it.
func doc(prefix string, i int, version string) []byte {
	return fmt.Appendf(nil, `apiVersion: v1
kind: ConfigMap
metadata:
  name: %s-%05d
  namespace: %s
  labels:
    app.kubernetes.io/part-of: %s
data:
  index: "%d"
  version: %q
  payload: |
    %s
`, prefix, i, prefix, prefix, i, version, strings.Repeat("0123456789abcdef", 56))
}

// newWorkflow writes a promise workflow with docs documents (one file each)
// and a platform file made by platform(dir).
func newWorkflow(root, promise string, docs int, platform string) (*workflow, error) {
	w := &workflow{dir: filepath.Join(root, promise), promise: promise, docs: docs}
	for _, d := range []string{"output", "metadata", "input", "platform"} {
		if err := os.MkdirAll(filepath.Join(w.dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	obj := fmt.Sprintf("apiVersion: platform.kratix.io/v1alpha1\nkind: Promise\nmetadata:\n  name: %s\n", promise)
	if err := os.WriteFile(filepath.Join(w.dir, "input", "object.yaml"), []byte(obj), 0o644); err != nil {
		return nil, err
	}
	for i := range docs {
		if err := w.writeDoc(i, "v1"); err != nil {
			return nil, err
		}
	}
	w.platform = filepath.Join(w.dir, "platform", "platform.yaml")
	return w, os.WriteFile(w.platform, []byte(platform), 0o644)
}

// writeDoc (re)writes document i with the given version.
func (w *workflow) writeDoc(i int, version string) error {
	return writeAtomic(filepath.Join(w.output(), fmt.Sprintf("doc-%05d.yaml", i)), doc(w.promise, i, version))
}

// writeAtomic writes through a temporary file and a rename, as a workflow
// container writing its output usually does not, but as an editor does:
// a watcher sees one complete file.
func writeAtomic(p string, data []byte) error {
	tmp := filepath.Join(filepath.Dir(p), "."+filepath.Base(p)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// Platform documents.

func destinations(n int, store string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata:
  name: worker-%02d
  labels: {env: bench}
spec:
  stateStoreRef: %s
---
`, i, store)
	}
	return b.String()
}

func (e *env) gitStore(name, cloneURL string) string {
	return gitStoreDocs(name, cloneURL, "basicAuth", "username", e.giteaUser, "password", e.giteaPass)
}

// gitStoreDocs is a GitStateStore named name at url (branch main, path
// clusters) with authMethod auth, and its Secret holding secret's key,
// value pairs.
func gitStoreDocs(name, url, auth string, secret ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: platform.kratix.io/v1alpha1
kind: GitStateStore
metadata:
  name: %s
spec:
  url: %s
  branch: main
  path: clusters
  authMethod: %s
  secretRef: {name: %s-credentials, namespace: default}
  gitAuthor: {name: render, email: render@example.com}
---
apiVersion: v1
kind: Secret
metadata: {name: %s-credentials, namespace: default}
stringData:
`, name, url, auth, name, name)
	for i := 0; i+1 < len(secret); i += 2 {
		fmt.Fprintf(&b, "  %s: %q\n", secret[i], secret[i+1])
	}
	b.WriteString("---\n")
	return b.String()
}

func localGitStore(name, dir string) string {
	return fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: GitStateStore
metadata:
  name: %s
spec:
  url: file://%s
  branch: main
  path: clusters
  gitAuthor: {name: render, email: render@example.com}
---
`, name, dir)
}

func (e *env) bucketStore(name, bucket string) string {
	return e.bucketStoreAt(name, e.minioEndpoint, bucket)
}

// bucketStoreAt is bucketStore with another endpoint (host:port) in front
// of the same MinIO, such as the benchmark's counting proxy.
func (e *env) bucketStoreAt(name, endpoint, bucket string) string {
	return fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: BucketStateStore
metadata:
  name: %s
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
---
`, name, endpoint, bucket, name, name, e.minioAK, e.minioSK)
}

func gitRef(name string) string    { return "{kind: GitStateStore, name: " + name + "}" }
func bucketRef(name string) string { return "{kind: BucketStateStore, name: " + name + "}" }
