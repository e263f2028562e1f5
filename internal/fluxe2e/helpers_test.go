package fluxe2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/render-dev/render/internal/testenv"
)

// reconcileTimeout bounds every wait on Flux: a fetch, a build and an apply
// take a second or two; the margin is for a loaded two-core machine.
const reconcileTimeout = 3 * time.Minute

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveRenderBinary()
	os.Exit(code)
}

// renderBin is the render binary, built once per test binary.
func renderBin(t testing.TB) string { return testenv.RenderBinary(t) }

// suffix is a random name part, so tests share one API server and one Gitea
// without clashing (and may run with -count=N).
func suffix() string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b[:])
}

// scenario is one test's world: a platform configuration in a folder, a
// promise with a CRD, and a Flux namespace on the API server.
type scenario struct {
	t      *testing.T
	kube   *testenv.KubeServer
	s      string // random suffix
	dir    string
	flux   string // the namespace of this test's Flux objects
	group  string // the CRD's API group
	ns     string // the namespace the workloads' objects go to
	prom   string // the promise
	req    string // the resource request's name
	stores string // platform documents: stores and secrets
	dests  []string
}

func newScenario(t *testing.T) *scenario {
	t.Helper()
	kube := testenv.Kube(t)
	s := suffix()
	sc := &scenario{
		t: t, kube: kube, s: s, dir: t.TempDir(),
		flux:  "flux-" + s,
		group: s + ".e2e.render.test",
		ns:    "e2e-" + s,
		prom:  "widgets-" + s,
		req:   "req-" + s,
	}
	kube.Apply(t, fmt.Appendf(nil, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n", sc.flux))
	t.Cleanup(sc.suspendAll)
	return sc
}

// suspendAll stops this test's Flux objects from reconciling once it ends
// (the stack is shared with the other tests and thrown away afterwards).
// They are suspended rather than deleted: deleting a Kustomization with
// prune would garbage-collect the canaries every test's Kustomizations
// share.
func (sc *scenario) suspendAll() {
	for _, k := range []struct{ apiVersion, kind, plural string }{
		{"kustomize.toolkit.fluxcd.io/v1", "Kustomization", "kustomizations"},
		{"source.toolkit.fluxcd.io/v1", "GitRepository", "gitrepositories"},
		{"source.toolkit.fluxcd.io/v1", "Bucket", "buckets"},
	} {
		code, data, err := sc.kube.Do("GET", fmt.Sprintf("/apis/%s/namespaces/%s/%s", k.apiVersion, sc.flux, k.plural), "", nil)
		if err != nil || code != 200 {
			continue
		}
		for _, name := range itemNames(data) {
			_ = sc.kube.MergePatch(k.apiVersion, k.kind, sc.flux, name, map[string]any{"spec": map[string]any{"suspend": true}})
		}
	}
	if sc.t.Failed() && testenv.FluxLogs() != "" {
		sc.t.Logf("Flux logs: %s/{source-controller,kustomize-controller,kube-apiserver}.log", testenv.FluxLogs())
	}
}

// write writes a file under the scenario's folder.
func (sc *scenario) write(rel, data string) {
	sc.t.Helper()
	p := filepath.Join(sc.dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		sc.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		sc.t.Fatal(err)
	}
}

// gitStore makes the platform's store a GitStateStore on a new Gitea
// repository, and puts the worker's credential (Flux's keys) in the Flux
// namespace, as bootstrap's comment asks.
func (sc *scenario) gitStore(g *testenv.GiteaServer) string {
	sc.t.Helper()
	repo := g.CreateRepoInfo(sc.t, "flux-e2e")
	sc.stores = fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
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
`, sc.s, repo.CloneURL, g.AdminUser(), g.AdminPassword())
	sc.secret("gitea-"+sc.s, map[string]string{"username": g.AdminUser(), "password": g.AdminPassword()})
	return "GitStateStore"
}

// bucketStore makes the platform's store a BucketStateStore on a new MinIO
// bucket, and puts the worker's credential in the Flux namespace.
func (sc *scenario) bucketStore(m *testenv.MinIOServer) string {
	sc.t.Helper()
	bucket := m.CreateBucket(sc.t, "flux-e2e")
	sc.stores = fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
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
`, sc.s, m.Endpoint(), bucket, m.AccessKey(), m.SecretKey())
	sc.secret("minio-"+sc.s, map[string]string{"accesskey": m.AccessKey(), "secretkey": m.SecretKey()})
	return "BucketStateStore"
}

func (sc *scenario) secret(name string, data map[string]string) {
	sc.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\n  namespace: %s\nstringData:\n", name, sc.flux)
	for _, k := range slices.Sorted(maps.Keys(data)) {
		fmt.Fprintf(&b, "  %s: %q\n", k, data[k])
	}
	sc.kube.Apply(sc.t, []byte(b.String()))
}

// destination is one Destination of the platform.
type destination struct {
	name          string
	mode          string // nestedByMetadata, aggregatedYAML or none
	unschedulable bool
}

// platform writes the platform configuration: the store, the destinations
// (all labelled for this scenario's promise) and the promise.
func (sc *scenario) platform(storeKind string, dests ...destination) {
	sc.t.Helper()
	var b strings.Builder
	b.WriteString(sc.stores)
	sc.dests = sc.dests[:0]
	for _, d := range dests {
		sc.dests = append(sc.dests, d.name)
		fp := "{mode: " + d.mode + "}"
		if d.mode == "aggregatedYAML" {
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
`, d.name, sc.s, d.unschedulable, fp, storeKind, sc.s)
	}
	fmt.Fprintf(&b, `---
apiVersion: platform.kratix.io/v1alpha1
kind: Promise
metadata:
  name: %s
spec:
  destinationSelectors:
    - matchLabels: {e2e: %q}
`, sc.prom, sc.s)
	sc.write("platform/platform.yaml", b.String())
}

// result is a finished render process.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// run runs the render binary with env added to a KRATIX_*-free environment.
func (sc *scenario) run(env []string, args ...string) result {
	sc.t.Helper()
	cmd := exec.Command(renderBin(sc.t), args...)
	cmd.Dir = sc.dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KRATIX_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		sc.t.Fatalf("running render: %v", err)
	}
	return r
}

// mustRun is run, failing the test unless render exits 0.
func (sc *scenario) mustRun(env []string, args ...string) result {
	sc.t.Helper()
	r := sc.run(env, args...)
	if r.code != 0 {
		sc.t.Fatalf("render %s: %s", strings.Join(args, " "), r)
	}
	return r
}

// promiseWorkflow runs the promise's configure (or delete) workflow: its
// output is a CRD and the namespace the resources go to.
func (sc *scenario) promiseWorkflow(action string) {
	sc.t.Helper()
	w := "promise-" + action
	sc.write(w+"/input/object.yaml", fmt.Sprintf("apiVersion: platform.kratix.io/v1alpha1\nkind: Promise\nmetadata:\n  name: %s\n", sc.prom))
	sc.write(w+"/metadata/.keep", "")
	if action == "configure" {
		sc.write(w+"/output/crd.yaml", fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
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
`, sc.group))
		sc.write(w+"/output/namespace.yaml", fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n", sc.ns))
	} else {
		sc.write(w+"/output/.keep", "")
	}
	sc.mustRun([]string{
		"KRATIX_WORKFLOW_TYPE=promise", "KRATIX_WORKFLOW_ACTION=" + action,
		"KRATIX_PROMISE_NAME=" + sc.prom, "KRATIX_PIPELINE_NAME=promise-" + action,
	}, "--output", filepath.Join(sc.dir, w, "output"), "--metadata", filepath.Join(sc.dir, w, "metadata"),
		"--input", filepath.Join(sc.dir, w, "input"), "--platform", filepath.Join(sc.dir, "platform"))
}

// resourceWorkflow runs the resource request's configure (or delete)
// workflow: its output is a Widget (an object of the promise's CRD) and a
// ConfigMap.
func (sc *scenario) resourceWorkflow(action string) {
	sc.t.Helper()
	w := "resource-" + action
	sc.write(w+"/input/object.yaml", fmt.Sprintf("apiVersion: %s/v1\nkind: WidgetRequest\nmetadata:\n  name: %s\n  namespace: default\nspec:\n  size: small\n", sc.group, sc.req))
	sc.write(w+"/metadata/.keep", "")
	if action == "configure" {
		sc.write(w+"/output/widget.yaml", fmt.Sprintf("apiVersion: %s/v1\nkind: Widget\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n  size: small\n", sc.group, sc.req, sc.ns))
		sc.write(w+"/output/configmap.yaml", fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s-config\n  namespace: %s\ndata:\n  size: small\n", sc.req, sc.ns))
	} else {
		sc.write(w+"/output/.keep", "")
	}
	sc.mustRun([]string{
		"KRATIX_WORKFLOW_TYPE=resource", "KRATIX_WORKFLOW_ACTION=" + action,
		"KRATIX_PROMISE_NAME=" + sc.prom, "KRATIX_PIPELINE_NAME=instance-" + action,
	}, "--output", filepath.Join(sc.dir, w, "output"), "--metadata", filepath.Join(sc.dir, w, "metadata"),
		"--input", filepath.Join(sc.dir, w, "input"), "--platform", filepath.Join(sc.dir, "platform"))
}

// bootstrap applies what `render bootstrap flux DEST` prints, as printed,
// in this scenario's Flux namespace, and returns the printed YAML.
func (sc *scenario) bootstrap(dest string) string {
	sc.t.Helper()
	r := sc.mustRun(nil, "bootstrap", "flux", dest, "--platform", filepath.Join(sc.dir, "platform"), "--namespace", sc.flux)
	sc.kube.Apply(sc.t, []byte(r.stdout))
	return r.stdout
}

// reconcileSources asks every source of the scenario to fetch now, as
// `flux reconcile source` does (the printed interval is a minute).
func (sc *scenario) reconcileSources() {
	sc.t.Helper()
	now := time.Now().Format(time.RFC3339Nano)
	for _, k := range []struct{ kind, plural string }{{"GitRepository", "gitrepositories"}, {"Bucket", "buckets"}} {
		code, data, err := sc.kube.Do("GET", fmt.Sprintf("/apis/source.toolkit.fluxcd.io/v1/namespaces/%s/%s", sc.flux, k.plural), "", nil)
		if err != nil || code != 200 {
			sc.t.Fatalf("listing %s in %s: HTTP %d %v: %s", k.plural, sc.flux, code, err, data)
		}
		for _, name := range itemNames(data) {
			if err := sc.kube.MergePatch("source.toolkit.fluxcd.io/v1", k.kind, sc.flux, name,
				map[string]any{"metadata": map[string]any{"annotations": map[string]any{"reconcile.fluxcd.io/requestedAt": now}}}); err != nil {
				sc.t.Fatal(err)
			}
		}
	}
}

// waitFor polls cond until it reports done, every 250ms, for at most
// reconcileTimeout; every 15s it asks the sources to reconcile again. On
// timeout it fails with cond's last description and the Flux objects'
// states.
func (sc *scenario) waitFor(what string, cond func() (bool, string)) {
	sc.t.Helper()
	deadline := time.Now().Add(reconcileTimeout)
	nudge := time.Now().Add(15 * time.Second)
	var last string
	for {
		done, desc := cond()
		if done {
			return
		}
		last = desc
		if time.Now().After(deadline) {
			sc.t.Fatalf("after %v, still waiting for %s: %s\nFlux objects:\n%s", reconcileTimeout, what, last, sc.fluxState())
		}
		if time.Now().After(nudge) {
			sc.reconcileSources()
			nudge = time.Now().Add(15 * time.Second)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// fluxState describes the Ready condition of every Flux object of the
// scenario, for failure messages.
func (sc *scenario) fluxState() string {
	var b strings.Builder
	for _, k := range []struct{ apiVersion, plural string }{
		{"source.toolkit.fluxcd.io/v1", "gitrepositories"},
		{"source.toolkit.fluxcd.io/v1", "buckets"},
		{"kustomize.toolkit.fluxcd.io/v1", "kustomizations"},
	} {
		code, data, err := sc.kube.Do("GET", fmt.Sprintf("/apis/%s/namespaces/%s/%s", k.apiVersion, sc.flux, k.plural), "", nil)
		if err != nil || code != 200 {
			fmt.Fprintf(&b, "  %s: HTTP %d %v\n", k.plural, code, err)
			continue
		}
		for _, item := range items(data) {
			name, _ := testenv.Field(item, "metadata.name").(string)
			status, msg := testenv.Condition(item, "Ready")
			fmt.Fprintf(&b, "  %s %s: Ready=%s %s\n", k.plural, name, status, msg)
		}
	}
	return b.String()
}

// object identifies one Kubernetes object.
type object struct {
	apiVersion, kind, namespace, name string
}

func (o object) String() string {
	if o.namespace == "" {
		return o.kind + " " + o.name
	}
	return o.kind + " " + o.namespace + "/" + o.name
}

// inventoryID is the object's id in a Kustomization's status.inventory.
func (o object) inventoryID() string {
	group, _, _ := strings.Cut(o.apiVersion, "/")
	if !strings.Contains(o.apiVersion, "/") {
		group = ""
	}
	return o.namespace + "_" + o.name + "_" + group + "_" + o.kind
}

func (sc *scenario) crd() object {
	return object{"apiextensions.k8s.io/v1", "CustomResourceDefinition", "", "widgets." + sc.group}
}
func (sc *scenario) namespace() object { return object{"v1", "Namespace", "", sc.ns} }
func (sc *scenario) widget() object    { return object{sc.group + "/v1", "Widget", sc.ns, sc.req} }
func (sc *scenario) configMap() object { return object{"v1", "ConfigMap", sc.ns, sc.req + "-config"} }

// get reads an object; nil when it does not exist.
func (sc *scenario) get(o object) map[string]any {
	sc.t.Helper()
	obj, err := sc.kube.Get(o.apiVersion, o.kind, o.namespace, o.name)
	if errors.Is(err, testenv.ErrNotFound) {
		return nil
	}
	if err != nil {
		sc.t.Fatalf("reading %s: %v", o, err)
	}
	return obj
}

// owner is the Kustomization that last applied obj (Flux's owner labels).
func owner(obj map[string]any) string {
	labels, _ := testenv.Field(obj, "metadata.labels").(map[string]any)
	name, _ := labels["kustomize.toolkit.fluxcd.io/name"].(string)
	ns, _ := labels["kustomize.toolkit.fluxcd.io/namespace"].(string)
	if name == "" {
		return ""
	}
	return ns + "/" + name
}

// waitApplied waits until every object exists, last applied by the
// Kustomization named (in the scenario's Flux namespace).
func (sc *scenario) waitApplied(kustomization string, objs ...object) map[object]map[string]any {
	sc.t.Helper()
	want := sc.flux + "/" + kustomization
	got := map[object]map[string]any{}
	sc.waitFor(fmt.Sprintf("%v applied by Kustomization %s", objs, want), func() (bool, string) {
		for _, o := range objs {
			obj, err := sc.kube.Get(o.apiVersion, o.kind, o.namespace, o.name)
			if err != nil {
				return false, fmt.Sprintf("%s: %v", o, err)
			}
			if owner(obj) != want {
				return false, fmt.Sprintf("%s is owned by %q", o, owner(obj))
			}
			got[o] = obj
		}
		return true, ""
	})
	return got
}

// gone reports whether an object no longer exists: deleted, or, for a
// namespace (no namespace controller runs here to finish deleting it),
// being deleted.
func (sc *scenario) gone(o object) (bool, string) {
	obj, err := sc.kube.Get(o.apiVersion, o.kind, o.namespace, o.name)
	if errors.Is(err, testenv.ErrNotFound) {
		return true, ""
	}
	if err != nil {
		return false, fmt.Sprintf("%s: %v", o, err)
	}
	if o.kind == "Namespace" && testenv.Field(obj, "metadata.deletionTimestamp") != nil {
		return true, ""
	}
	return false, fmt.Sprintf("%s still exists (owned by %q)", o, owner(obj))
}

// waitPruned waits until every object is gone.
func (sc *scenario) waitPruned(objs ...object) {
	sc.t.Helper()
	sc.waitFor(fmt.Sprintf("%v pruned", objs), func() (bool, string) {
		for _, o := range objs {
			if ok, desc := sc.gone(o); !ok {
				return false, desc
			}
		}
		return true, ""
	})
}

// inventory is the ids in a Kustomization's status.inventory.
func (sc *scenario) inventory(kustomization string) []string {
	sc.t.Helper()
	obj, err := sc.kube.Get("kustomize.toolkit.fluxcd.io/v1", "Kustomization", sc.flux, kustomization)
	if err != nil {
		sc.t.Fatalf("reading Kustomization %s: %v", kustomization, err)
	}
	entries, _ := testenv.Field(obj, "status.inventory.entries").([]any)
	var ids []string
	for _, e := range entries {
		if m, ok := e.(map[string]any); ok {
			id, _ := m["id"].(string)
			ids = append(ids, id)
		}
	}
	return ids
}

// created is an object's creation time.
func created(t testing.TB, o object, obj map[string]any) time.Time {
	t.Helper()
	s, _ := testenv.Field(obj, "metadata.creationTimestamp").(string)
	ts, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("%s: creationTimestamp %q: %v", o, s, err)
	}
	return ts
}

func items(list []byte) []map[string]any {
	var l struct {
		Items []map[string]any `json:"items"`
	}
	_ = json.Unmarshal(list, &l)
	return l.Items
}

func itemNames(list []byte) []string {
	var names []string
	for _, it := range items(list) {
		if n, ok := testenv.Field(it, "metadata.name").(string); ok {
			names = append(names, n)
		}
	}
	return names
}
