package testenv

import (
	"bytes"
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

// Workload is one end-to-end test's render world, shared by the Flux and
// Argo CD end-to-end packages: a folder holding a platform configuration
// (one state store, its Destinations, and a Promise whose CRD and namespace
// the promise's workflow outputs), and the workflows the render binary runs
// as Kratix runs it in a pipeline. Names carry a random suffix, so tests
// share one API server, Gitea and registry without clashing.
type Workload struct {
	T      *testing.T
	Suffix string // random name part
	Dir    string // the folder of the platform and the workflows' inputs

	Group     string // the promise's CRD's API group
	Namespace string // the namespace the workloads' objects go to
	Promise   string // the promise's name
	Request   string // the resource request's name
	// Size is what the resource workflow writes into its Widget and
	// ConfigMap ("small" at first): change it and rerun the workflow to
	// change the resource.
	Size string

	storeKind string
	stores    string // platform documents: the store and its Secret
}

// NewWorkload returns a Workload in a new temporary folder.
func NewWorkload(t *testing.T) *Workload {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	s := hex.EncodeToString(b[:])
	return &Workload{
		T: t, Suffix: s, Dir: t.TempDir(),
		Group:     s + ".e2e.render.test",
		Namespace: "e2e-" + s,
		Promise:   "widgets-" + s,
		Request:   "req-" + s,
		Size:      "small",
	}
}

// StoreName is the name of the platform's state store.
func (w *Workload) StoreName() string { return "state-" + w.Suffix }

// GitStore makes the platform's store a GitStateStore on repo (branch main,
// path clusters), with the Gitea admin's credentials.
func (w *Workload) GitStore(g *GiteaServer, repo Repo) {
	w.storeKind = "GitStateStore"
	w.stores = fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: GitStateStore
metadata:
  name: state-%[1]s
spec:
  url: %[2]s
  branch: main
  path: clusters
  authMethod: basicAuth
  secretRef: {name: gitea-%[1]s, namespace: default}
  gitAuthor: {name: render e2e, email: render@example.com}
---
apiVersion: v1
kind: Secret
metadata: {name: gitea-%[1]s, namespace: default}
stringData:
  username: %[3]q
  password: %[4]q
`, w.Suffix, repo.CloneURL, g.AdminUser(), g.AdminToken())
}

// BucketStore makes the platform's store a BucketStateStore on bucket
// (plain HTTP, path clusters).
func (w *Workload) BucketStore(m *MinIOServer, bucket string) {
	w.storeKind = "BucketStateStore"
	w.stores = fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: BucketStateStore
metadata:
  name: state-%[1]s
spec:
  endpoint: %[2]s
  bucketName: %[3]s
  path: clusters
  insecure: true
  authMethod: accessKey
  secretRef: {name: minio-%[1]s, namespace: default}
---
apiVersion: v1
kind: Secret
metadata: {name: minio-%[1]s, namespace: default}
stringData:
  accessKeyID: %[4]q
  secretAccessKey: %[5]q
`, w.Suffix, m.Endpoint(), bucket, m.AccessKey(), m.SecretKey())
}

// OCIStore makes the platform's store an OCIStateStore in the registry
// (plain HTTP), repository render-e2e/<suffix>, and returns that
// repository. Each destination is the artifact <repository>/<destination>.
func (w *Workload) OCIStore(r *RegistryServer) string {
	w.storeKind = "OCIStateStore"
	repo := "render-e2e/" + w.Suffix
	w.stores = fmt.Sprintf(`apiVersion: render.dev/v1alpha1
kind: OCIStateStore
metadata:
  name: state-%[1]s
spec:
  registry: %[2]q
  repository: %[3]s
  insecure: true
  create: true
  secretRef: {name: registry-%[1]s, namespace: default}
---
apiVersion: v1
kind: Secret
metadata: {name: registry-%[1]s, namespace: default}
stringData:
  username: %[4]q
  password: %[5]q
`, w.Suffix, r.Addr(), repo, r.User(), r.Password())
	return repo
}

// Destination is one Destination of the platform.
type Destination struct {
	Name          string
	Mode          string // nestedByMetadata, aggregatedYAML or none
	Unschedulable bool
	// Spec is more of the Destination's spec, as YAML lines without
	// indent (spec.secrets, say).
	Spec string
}

// Platform writes the platform configuration: the store, the destinations
// (all labelled for this workload's promise) and the promise.
func (w *Workload) Platform(dests ...Destination) {
	w.T.Helper()
	if w.storeKind == "" {
		w.T.Fatal("testenv: Workload.Platform before a store was chosen")
	}
	var b strings.Builder
	b.WriteString(w.stores)
	for _, d := range dests {
		fp := "{mode: " + d.Mode + "}"
		if d.Mode == "aggregatedYAML" {
			fp = "{mode: aggregatedYAML, filename: aggregated.yaml}"
		}
		fmt.Fprintf(&b, `---
apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata:
  name: %s
  labels: {e2e: %q}
spec:
  unschedulable: %t
  filepath: %s
  stateStoreRef: {kind: %s, name: state-%s}
`, d.Name, w.Suffix, d.Unschedulable, fp, w.storeKind, w.Suffix)
		if d.Spec != "" {
			b.WriteString("  " + strings.ReplaceAll(strings.TrimSpace(d.Spec), "\n", "\n  ") + "\n")
		}
	}
	fmt.Fprintf(&b, `---
apiVersion: platform.kratix.io/v1alpha1
kind: Promise
metadata:
  name: %s
spec:
  destinationSelectors:
    - matchLabels: {e2e: %q}
`, w.Promise, w.Suffix)
	w.Write("platform/platform.yaml", b.String())
}

// PlatformDir is the folder to pass render as --platform.
func (w *Workload) PlatformDir() string { return filepath.Join(w.Dir, "platform") }

// Write writes a file under the workload's folder.
func (w *Workload) Write(rel, data string) {
	w.T.Helper()
	p := filepath.Join(w.Dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		w.T.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		w.T.Fatal(err)
	}
}

// Result is a finished render process.
type Result struct {
	Code           int
	Stdout, Stderr string
}

func (r Result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
}

// Run runs the render binary (RenderBinary) in the workload's folder with
// env added to a KRATIX_*-free environment.
func (w *Workload) Run(env []string, args ...string) Result {
	w.T.Helper()
	cmd := exec.Command(RenderBinary(w.T), args...)
	cmd.Dir = w.Dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KRATIX_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		w.T.Fatalf("running render: %v", err)
	}
	return Result{Code: cmd.ProcessState.ExitCode(), Stdout: out.String(), Stderr: errb.String()}
}

// MustRun is Run, failing the test unless render exits 0.
func (w *Workload) MustRun(env []string, args ...string) Result {
	w.T.Helper()
	r := w.Run(env, args...)
	if r.Code != 0 {
		w.T.Fatalf("render %s: %s", strings.Join(args, " "), r)
	}
	return r
}

// PromiseWorkflow runs the promise's configure (or delete) workflow: its
// output is the CRD of Widgets and the namespace the resources go to.
func (w *Workload) PromiseWorkflow(action string) {
	w.T.Helper()
	f := "promise-" + action
	w.Write(f+"/input/object.yaml", fmt.Sprintf("apiVersion: platform.kratix.io/v1alpha1\nkind: Promise\nmetadata:\n  name: %s\n", w.Promise))
	w.Write(f+"/metadata/.keep", "")
	if action == "configure" {
		w.Write(f+"/output/crd.yaml", fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.%[1]s
spec:
  group: %[1]s
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
`, w.Group))
		w.Write(f+"/output/namespace.yaml", fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n", w.Namespace))
	} else {
		w.Write(f+"/output/.keep", "")
	}
	w.MustRun([]string{
		"KRATIX_WORKFLOW_TYPE=promise", "KRATIX_WORKFLOW_ACTION=" + action,
		"KRATIX_PROMISE_NAME=" + w.Promise, "KRATIX_PIPELINE_NAME=promise-" + action,
	}, "--output", filepath.Join(w.Dir, f, "output"), "--metadata", filepath.Join(w.Dir, f, "metadata"),
		"--input", filepath.Join(w.Dir, f, "input"), "--platform", w.PlatformDir())
}

// ResourceWorkflow runs the resource request's configure (or delete)
// workflow: its output is a Widget (an object of the promise's CRD) and a
// ConfigMap, both of size w.Size.
func (w *Workload) ResourceWorkflow(action string) {
	w.T.Helper()
	f := "resource-" + action
	w.Write(f+"/input/object.yaml", fmt.Sprintf("apiVersion: %s/v1\nkind: WidgetRequest\nmetadata:\n  name: %s\n  namespace: default\nspec:\n  size: %s\n", w.Group, w.Request, w.Size))
	w.Write(f+"/metadata/.keep", "")
	if action == "configure" {
		w.Write(f+"/output/widget.yaml", fmt.Sprintf("apiVersion: %s/v1\nkind: Widget\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n  size: %s\n", w.Group, w.Request, w.Namespace, w.Size))
		w.Write(f+"/output/configmap.yaml", fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s-config\n  namespace: %s\ndata:\n  size: %s\n", w.Request, w.Namespace, w.Size))
	} else {
		w.Write(f+"/output/.keep", "")
	}
	w.MustRun([]string{
		"KRATIX_WORKFLOW_TYPE=resource", "KRATIX_WORKFLOW_ACTION=" + action,
		"KRATIX_PROMISE_NAME=" + w.Promise, "KRATIX_PIPELINE_NAME=instance-" + action,
	}, "--output", filepath.Join(w.Dir, f, "output"), "--metadata", filepath.Join(w.Dir, f, "metadata"),
		"--input", filepath.Join(w.Dir, f, "input"), "--platform", w.PlatformDir())
}

// Bootstrap runs `render bootstrap KIND DEST` (flux or argocd) with extra
// arguments and returns what it printed on standard output; it fails the
// test unless render exits 0.
func (w *Workload) Bootstrap(kind, dest string, args ...string) string {
	w.T.Helper()
	return w.MustRun(nil, append([]string{"bootstrap", kind, dest, "--platform", w.PlatformDir()}, args...)...).Stdout
}

// Object identifies one Kubernetes object.
type Object struct {
	APIVersion, Kind, Namespace, Name string
}

func (o Object) String() string {
	if o.Namespace == "" {
		return o.Kind + " " + o.Name
	}
	return o.Kind + " " + o.Namespace + "/" + o.Name
}

// CRD is the promise's CustomResourceDefinition.
func (w *Workload) CRD() Object {
	return Object{"apiextensions.k8s.io/v1", "CustomResourceDefinition", "", "widgets." + w.Group}
}

// NamespaceObject is the namespace the promise creates for the resources.
func (w *Workload) NamespaceObject() Object { return Object{"v1", "Namespace", "", w.Namespace} }

// Widget is the resource's Widget.
func (w *Workload) Widget() Object { return Object{w.Group + "/v1", "Widget", w.Namespace, w.Request} }

// ConfigMap is the resource's ConfigMap.
func (w *Workload) ConfigMap() Object {
	return Object{"v1", "ConfigMap", w.Namespace, w.Request + "-config"}
}

// GetObject reads o; nil when it does not exist.
func (k *KubeServer) GetObject(t testing.TB, o Object) map[string]any {
	t.Helper()
	obj, err := k.Get(o.APIVersion, o.Kind, o.Namespace, o.Name)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("reading %s: %v", o, err)
	}
	return obj
}

// Created is an object's creation time.
func Created(t testing.TB, o Object, obj map[string]any) time.Time {
	t.Helper()
	s, _ := Field(obj, "metadata.creationTimestamp").(string)
	ts, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("%s: creationTimestamp %q: %v", o, s, err)
	}
	return ts
}
