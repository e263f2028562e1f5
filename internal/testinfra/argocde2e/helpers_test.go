package argocde2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/render-dev/render/internal/testinfra/testenv"
)

// reconcileTimeout bounds every wait on Argo CD: a fetch, a manifest
// generation and a sync take seconds, and an automated sync that failed is
// retried with a growing backoff (5s, 10s, 20s...); the margin is for a
// loaded two-core machine.
const reconcileTimeout = 4 * time.Minute

const applicationAPIVersion = "argoproj.io/v1alpha1"

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveRenderBinary()
	os.Exit(code)
}

// scenario is one test's world: a render workload (a platform
// configuration in a folder, a promise with a CRD, a resource request) and
// the Applications it applied to Argo CD.
type scenario struct {
	*testenv.Workload
	t    *testing.T
	argo *testenv.ArgoCDServer
	kube *testenv.KubeServer
	apps []string // the Applications applied, in Argo CD's namespace
}

func newScenario(t *testing.T) *scenario {
	t.Helper()
	argo := testenv.ArgoCD(t)
	sc := &scenario{Workload: testenv.NewWorkload(t), t: t, argo: argo, kube: argo.Kube}
	t.Cleanup(sc.deleteApps)
	return sc
}

// deleteApps deletes this test's Applications once it ends, leaving their
// objects (an Application without Argo CD's resources finalizer is deleted
// without cascading), so the next test's Applications may take over the
// canary objects they share.
func (sc *scenario) deleteApps() {
	if sc.t.Failed() {
		sc.t.Logf("Argo CD state:\n%s", sc.argoState())
		if sc.argo.Logs != "" {
			sc.t.Logf("Argo CD logs: %s/{application-controller,repo-server}.log", sc.argo.Logs)
		}
	}
	for _, name := range sc.apps {
		p := fmt.Sprintf("/apis/%s/namespaces/%s/applications/%s", applicationAPIVersion, sc.argo.Namespace, name)
		if code, data, err := sc.kube.Do("DELETE", p, "", nil); err != nil || (code/100 != 2 && code != 404) {
			sc.t.Logf("deleting Application %s: HTTP %d %v: %s", name, code, err, data)
		}
	}
}

// repoSecret applies the repository Secret the README tells users to
// create in Argo CD's namespace: label argocd.argoproj.io/secret-type:
// repository, url the Applications' repoURL, the worker's credential, and
// the other keys given (type, insecureOCIForceHttp).
func (sc *scenario) repoSecret(url, user, password string, keys map[string]string) {
	sc.t.Helper()
	data := map[string]string{"url": url, "username": user, "password": password}
	for k, v := range keys {
		data[k] = v
	}
	doc, err := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{
			"name": "repo-" + sc.Suffix, "namespace": sc.argo.Namespace,
			"labels": map[string]string{"argocd.argoproj.io/secret-type": "repository"},
		},
		"stringData": data,
	})
	if err != nil {
		sc.t.Fatal(err)
	}
	sc.kube.Apply(sc.t, doc)
}

// gitStore makes the platform's store a GitStateStore on a new, private
// Gitea repository (so Argo CD reads it only with the repository Secret),
// and creates that Secret.
func (sc *scenario) gitStore(g *testenv.GiteaServer) {
	sc.t.Helper()
	repo := g.CreateRepoInfo(sc.t, "argocd-e2e")
	if code := g.API(sc.t, "PATCH", "/repos/"+repo.Owner+"/"+repo.Name, map[string]any{"private": true}, nil); code != 200 {
		sc.t.Fatalf("making Gitea repository %s/%s private: HTTP %d", repo.Owner, repo.Name, code)
	}
	sc.GitStore(g, repo)
	sc.repoSecret(repo.CloneURL, g.AdminUser(), g.AdminToken(), map[string]string{"type": "git"})
}

// ociStore makes the platform's store an OCIStateStore in the registry, and
// creates the repository Secret for the destination's artifact (type oci,
// insecureOCIForceHttp for the plain-HTTP registry), as the README and
// bootstrap's comment say.
func (sc *scenario) ociStore(r *testenv.RegistryServer, dest string) (repoURL string) {
	sc.t.Helper()
	repo := sc.OCIStore(r)
	repoURL = "oci://" + r.Addr() + "/" + repo + "/" + dest
	sc.repoSecret(repoURL, r.User(), r.Password(), map[string]string{"type": "oci", "insecureOCIForceHttp": "true"})
	return repoURL
}

// bootstrap applies what `render bootstrap argocd DEST` prints, as printed
// (into Argo CD's namespace, render's default), and returns it.
func (sc *scenario) bootstrap(dest string) string {
	sc.t.Helper()
	out := sc.Bootstrap("argocd", dest)
	sc.apps = append(sc.apps, docNames(sc.t, out)...)
	sc.kube.Apply(sc.t, []byte(out))
	return out
}

// docNames is the metadata.name of every Application in printed YAML.
func docNames(t *testing.T, printed string) []string {
	t.Helper()
	dec := yaml.NewDecoder(strings.NewReader(printed))
	var names []string
	for {
		var doc struct {
			Kind     string
			Metadata struct{ Name string }
		}
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return names
		}
		if err != nil {
			t.Fatalf("decoding what render bootstrap argocd printed: %v\n%s", err, printed)
		}
		if doc.Kind == "Application" {
			names = append(names, doc.Metadata.Name)
		}
	}
}

// refresh asks Argo CD to compare every Application of the scenario with
// its source now, fetching it again (as `argocd app get --hard-refresh`
// does; the controller would otherwise look every 30s here, every 3
// minutes by default).
func (sc *scenario) refresh() {
	sc.t.Helper()
	for _, name := range sc.apps {
		if err := sc.kube.MergePatch(applicationAPIVersion, "Application", sc.argo.Namespace, name,
			map[string]any{"metadata": map[string]any{"annotations": map[string]any{"argocd.argoproj.io/refresh": "hard"}}}); err != nil {
			sc.t.Fatal(err)
		}
	}
}

// waitFor polls cond until it reports done, every 250ms, for at most
// reconcileTimeout; every 20s it asks for a refresh again. On timeout it
// fails with cond's last description and the Applications' states.
func (sc *scenario) waitFor(what string, cond func() (bool, string)) {
	sc.t.Helper()
	deadline := time.Now().Add(reconcileTimeout)
	nudge := time.Now().Add(20 * time.Second)
	var last string
	for {
		done, desc := cond()
		if done {
			return
		}
		last = desc
		if time.Now().After(deadline) {
			sc.t.Fatalf("after %v, still waiting for %s: %s\nApplications:\n%s", reconcileTimeout, what, last, sc.argoState())
		}
		if time.Now().After(nudge) {
			sc.refresh()
			nudge = time.Now().Add(20 * time.Second)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// app reads one Application.
func (sc *scenario) app(name string) map[string]any {
	sc.t.Helper()
	obj, err := sc.kube.Get(applicationAPIVersion, "Application", sc.argo.Namespace, name)
	if err != nil {
		sc.t.Fatalf("reading Application %s: %v", name, err)
	}
	return obj
}

// appState is one line on an Application: its sync and health status, the
// revision it compared, its last operation, and its conditions.
func appState(obj map[string]any) string {
	str := func(path string) string { s, _ := testenv.Field(obj, path).(string); return s }
	var conds []string
	cs, _ := testenv.Field(obj, "status.conditions").([]any)
	for _, c := range cs {
		m, _ := c.(map[string]any)
		conds = append(conds, fmt.Sprintf("%v: %v", m["type"], m["message"]))
	}
	return fmt.Sprintf("sync=%s health=%s revision=%s operation=%s %q conditions=%v",
		str("status.sync.status"), str("status.health.status"), str("status.sync.revision"),
		str("status.operationState.phase"), str("status.operationState.message"), conds)
}

// argoState describes every Application of the scenario, for failure
// messages.
func (sc *scenario) argoState() string {
	var b strings.Builder
	for _, name := range sc.apps {
		obj, err := sc.kube.Get(applicationAPIVersion, "Application", sc.argo.Namespace, name)
		if err != nil {
			fmt.Fprintf(&b, "  %s: %v\n", name, err)
			continue
		}
		fmt.Fprintf(&b, "  %s: %s\n", name, appState(obj))
	}
	return b.String()
}

// waitSynced waits until the Application is Synced and its last sync
// succeeded, and returns it.
func (sc *scenario) waitSynced(name string) map[string]any {
	sc.t.Helper()
	var got map[string]any
	sc.waitFor("Application "+name+" synced", func() (bool, string) {
		obj := sc.app(name)
		sync, _ := testenv.Field(obj, "status.sync.status").(string)
		phase, _ := testenv.Field(obj, "status.operationState.phase").(string)
		got = obj
		return sync == "Synced" && phase == "Succeeded", appState(obj)
	})
	return got
}

// finished is when an Application's last sync operation finished.
func finished(t *testing.T, name string, obj map[string]any) time.Time {
	t.Helper()
	s, _ := testenv.Field(obj, "status.operationState.finishedAt").(string)
	ts, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("Application %s: operationState.finishedAt %q: %v", name, s, err)
	}
	return ts
}

// tracker is the Application that tracks obj (Argo CD's tracking-id
// annotation, "<application>:<group>/<kind>:<namespace>/<name>"). Argo CD
// puts none on a CustomResourceDefinition.
func tracker(obj map[string]any) string {
	ann, _ := testenv.Field(obj, "metadata.annotations").(map[string]any)
	id, _ := ann["argocd.argoproj.io/tracking-id"].(string)
	app, _, _ := strings.Cut(id, ":")
	return app
}

// resource is o's entry in the Application's status.resources, or nil.
func resource(app map[string]any, o testenv.Object) map[string]any {
	group, _, ok := strings.Cut(o.APIVersion, "/")
	if !ok {
		group = ""
	}
	res, _ := testenv.Field(app, "status.resources").([]any)
	for _, r := range res {
		m, _ := r.(map[string]any)
		g, _ := m["group"].(string)
		ns, _ := m["namespace"].(string)
		if g == group && m["kind"] == o.Kind && ns == o.Namespace && m["name"] == o.Name {
			return m
		}
	}
	return nil
}

// listed reports whether the Application lists o among its resources.
func listed(app map[string]any, o testenv.Object) bool { return resource(app, o) != nil }

// synced reports whether the Application lists o among its resources,
// Synced.
func synced(app map[string]any, o testenv.Object) bool {
	r := resource(app, o)
	return r != nil && r["status"] == "Synced"
}

// waitApplied waits until every object exists, tracked by the Application
// named (except a CRD, which Argo CD does not mark) and listed Synced among
// its resources.
func (sc *scenario) waitApplied(app string, objs ...testenv.Object) map[testenv.Object]map[string]any {
	sc.t.Helper()
	got := map[testenv.Object]map[string]any{}
	sc.waitFor(fmt.Sprintf("%v applied by Application %s", objs, app), func() (bool, string) {
		a := sc.app(app)
		for _, o := range objs {
			obj, err := sc.kube.Get(o.APIVersion, o.Kind, o.Namespace, o.Name)
			if err != nil {
				return false, fmt.Sprintf("%s: %v", o, err)
			}
			if o.Kind != "CustomResourceDefinition" && tracker(obj) != app {
				return false, fmt.Sprintf("%s is tracked by %q", o, tracker(obj))
			}
			if !synced(a, o) {
				return false, fmt.Sprintf("%s is not among Application %s's Synced resources", o, app)
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
	sc.waitFor("the resource's objects of size "+size, func() (bool, string) {
		w, c := sc.kube.GetObject(sc.t, sc.Widget()), sc.kube.GetObject(sc.t, sc.ConfigMap())
		if w == nil || c == nil {
			return false, "the Widget or the ConfigMap does not exist"
		}
		ws, cs := testenv.Field(w, "spec.size"), testenv.Field(c, "data.size")
		return ws == size && cs == size, fmt.Sprintf("Widget size %v, ConfigMap size %v", ws, cs)
	})
}

// gone reports whether an object no longer exists, or is being deleted: no
// garbage collector runs here to finish the foreground deletion Argo CD
// asks for when it prunes (nor a namespace controller to empty a
// namespace).
func (sc *scenario) gone(o testenv.Object) (bool, string) {
	obj, err := sc.kube.Get(o.APIVersion, o.Kind, o.Namespace, o.Name)
	if errors.Is(err, testenv.ErrNotFound) {
		return true, ""
	}
	if err != nil {
		return false, fmt.Sprintf("%s: %v", o, err)
	}
	if testenv.Field(obj, "metadata.deletionTimestamp") != nil {
		return true, ""
	}
	return false, fmt.Sprintf("%s still exists (tracked by %q)", o, tracker(obj))
}

// waitPruned waits until every object is gone (or being deleted).
func (sc *scenario) waitPruned(objs ...testenv.Object) {
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
