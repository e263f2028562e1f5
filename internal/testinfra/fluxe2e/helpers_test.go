package fluxe2e

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/render-dev/render/internal/testinfra/testenv"
)

// reconcileTimeout bounds every wait on Flux: a fetch, a build and an apply
// take a second or two; the margin is for a loaded two-core machine.
const reconcileTimeout = 3 * time.Minute

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveRenderBinary()
	os.Exit(code)
}

// scenario is one test's world: a render workload (a platform
// configuration in a folder, a promise with a CRD, a resource request) and a
// Flux namespace on the API server.
type scenario struct {
	*testenv.Workload
	t    *testing.T
	kube *testenv.KubeServer
	flux string // the namespace of this test's Flux objects
}

func newScenario(t *testing.T) *scenario {
	t.Helper()
	kube := testenv.Kube(t)
	w := testenv.NewWorkload(t)
	sc := &scenario{Workload: w, t: t, kube: kube, flux: "flux-" + w.Suffix}
	kube.Apply(t, fmt.Appendf(nil, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n", sc.flux))
	t.Cleanup(sc.suspendAll)
	return sc
}

// fluxKinds are the Flux objects the tests apply.
var fluxKinds = []struct{ apiVersion, kind, plural string }{
	{"source.toolkit.fluxcd.io/v1", "GitRepository", "gitrepositories"},
	{"source.toolkit.fluxcd.io/v1", "Bucket", "buckets"},
	{"source.toolkit.fluxcd.io/v1", "OCIRepository", "ocirepositories"},
	{"kustomize.toolkit.fluxcd.io/v1", "Kustomization", "kustomizations"},
}

// suspendAll stops this test's Flux objects from reconciling once it ends
// (the stack is shared with the other tests and thrown away afterwards).
// They are suspended rather than deleted: deleting a Kustomization with
// prune would garbage-collect the canaries every test's Kustomizations
// share.
func (sc *scenario) suspendAll() {
	for _, k := range fluxKinds {
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

// gitStore makes the platform's store a GitStateStore on a new Gitea
// repository, and puts the worker's credential (Flux's keys) in the Flux
// namespace, as bootstrap's comment asks.
func (sc *scenario) gitStore(g *testenv.GiteaServer) {
	sc.t.Helper()
	sc.GitStore(g, g.CreateRepoInfo(sc.t, "flux-e2e"))
	sc.secret("gitea-"+sc.Suffix, "", map[string]string{"username": g.AdminUser(), "password": g.AdminToken()})
}

// bucketStore makes the platform's store a BucketStateStore on a new MinIO
// bucket, and puts the worker's credential in the Flux namespace.
func (sc *scenario) bucketStore(m *testenv.MinIOServer) {
	sc.t.Helper()
	sc.BucketStore(m, m.CreateBucket(sc.t, "flux-e2e"))
	sc.secret("minio-"+sc.Suffix, "", map[string]string{"accesskey": m.AccessKey(), "secretkey": m.SecretKey()})
}

// ociStore makes the platform's store an OCIStateStore in the registry,
// and puts the worker's credential in the Flux namespace as bootstrap's
// comment asks: a Secret of type kubernetes.io/dockerconfigjson.
func (sc *scenario) ociStore(r *testenv.RegistryServer) {
	sc.t.Helper()
	sc.OCIStore(r)
	auth := base64.StdEncoding.EncodeToString([]byte(r.User() + ":" + r.Password()))
	cfg, err := json.Marshal(map[string]any{"auths": map[string]any{r.Addr(): map[string]string{
		"username": r.User(), "password": r.Password(), "auth": auth}}})
	if err != nil {
		sc.t.Fatal(err)
	}
	sc.secret("registry-"+sc.Suffix, "kubernetes.io/dockerconfigjson", map[string]string{".dockerconfigjson": string(cfg)})
}

// secret puts a Secret of type typ ("" for Opaque) in the Flux namespace.
func (sc *scenario) secret(name, typ string, data map[string]string) {
	sc.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\n  namespace: %s\n", name, sc.flux)
	if typ != "" {
		fmt.Fprintf(&b, "type: %s\n", typ)
	}
	b.WriteString("stringData:\n")
	for _, k := range slices.Sorted(maps.Keys(data)) {
		fmt.Fprintf(&b, "  %s: %q\n", k, data[k])
	}
	sc.kube.Apply(sc.t, []byte(b.String()))
}

// bootstrap applies what `render bootstrap flux DEST` prints, as printed,
// in this scenario's Flux namespace, and returns the printed YAML.
func (sc *scenario) bootstrap(dest string) string {
	sc.t.Helper()
	out := sc.Bootstrap("flux", dest, "--namespace", sc.flux)
	sc.kube.Apply(sc.t, []byte(out))
	return out
}

// reconcileSources asks every source of the scenario to fetch now, as
// `flux reconcile source` does (the printed interval is a minute).
func (sc *scenario) reconcileSources() {
	sc.t.Helper()
	now := time.Now().Format(time.RFC3339Nano)
	for _, k := range fluxKinds {
		if k.kind == "Kustomization" {
			continue
		}
		code, data, err := sc.kube.Do("GET", fmt.Sprintf("/apis/%s/namespaces/%s/%s", k.apiVersion, sc.flux, k.plural), "", nil)
		if err != nil || code != 200 {
			sc.t.Fatalf("listing %s in %s: HTTP %d %v: %s", k.plural, sc.flux, code, err, data)
		}
		for _, name := range itemNames(data) {
			if err := sc.kube.MergePatch(k.apiVersion, k.kind, sc.flux, name,
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
	for _, k := range fluxKinds {
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
type object = testenv.Object

// inventoryID is the object's id in a Kustomization's status.inventory.
func inventoryID(o object) string {
	group, _, _ := strings.Cut(o.APIVersion, "/")
	if !strings.Contains(o.APIVersion, "/") {
		group = ""
	}
	return o.Namespace + "_" + o.Name + "_" + group + "_" + o.Kind
}

// get reads an object; nil when it does not exist.
func (sc *scenario) get(o object) map[string]any {
	sc.t.Helper()
	return sc.kube.GetObject(sc.t, o)
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
			obj, err := sc.kube.Get(o.APIVersion, o.Kind, o.Namespace, o.Name)
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

// waitSize waits until the resource's Widget and ConfigMap say size.
func (sc *scenario) waitSize(size string) {
	sc.t.Helper()
	sc.waitFor(fmt.Sprintf("the resource's objects of size %s", size), func() (bool, string) {
		w, c := sc.get(sc.Widget()), sc.get(sc.ConfigMap())
		if w == nil || c == nil {
			return false, "the Widget or the ConfigMap does not exist"
		}
		ws, cs := testenv.Field(w, "spec.size"), testenv.Field(c, "data.size")
		return ws == size && cs == size, fmt.Sprintf("Widget size %v, ConfigMap size %v", ws, cs)
	})
}

// gone reports whether an object no longer exists: deleted, or, for a
// namespace (no namespace controller runs here to finish deleting it),
// being deleted.
func (sc *scenario) gone(o object) (bool, string) {
	obj, err := sc.kube.Get(o.APIVersion, o.Kind, o.Namespace, o.Name)
	if errors.Is(err, testenv.ErrNotFound) {
		return true, ""
	}
	if err != nil {
		return false, fmt.Sprintf("%s: %v", o, err)
	}
	if o.Kind == "Namespace" && testenv.Field(obj, "metadata.deletionTimestamp") != nil {
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
