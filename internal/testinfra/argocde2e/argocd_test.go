package argocde2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/render-dev/render/internal/testinfra/testenv"
)

// The tests run one at a time: see the package comment.

// checkPrinted fails the test unless render printed every string in want.
func checkPrinted(t *testing.T, printed string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(printed, w) {
			t.Fatalf("render bootstrap argocd printed no %q:\n%s", w, printed)
		}
	}
}

// firstSync is when an Application's first successful sync was deployed
// (the oldest entry of status.history).
func firstSync(t *testing.T, name string, obj map[string]any) time.Time {
	t.Helper()
	hist, _ := testenv.Field(obj, "status.history").([]any)
	if len(hist) == 0 {
		t.Fatalf("Application %s has no sync history: %s", name, appState(obj))
	}
	first, _ := hist[0].(map[string]any)
	s, _ := first["deployedAt"].(string)
	ts, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("Application %s: history[0].deployedAt %q: %v", name, s, err)
	}
	return ts
}

// configured waits until Argo CD has synced both workflows' objects to a
// nested destination: the promise's CRD and namespace by
// <dest>-dependencies, the resource's Widget and ConfigMap by
// <dest>-resources; the dependencies' first sync is deployed before the
// resources' one, and no resource object exists before a dependency.
func (sc *scenario) configured(dest string) {
	sc.t.Helper()
	depsApp, resApp := dest+"-dependencies", dest+"-resources"
	deps := sc.waitApplied(depsApp, sc.CRD(), sc.NamespaceObject())
	res := sc.waitApplied(resApp, sc.Widget(), sc.ConfigMap())
	for _, r := range []testenv.Object{sc.Widget(), sc.ConfigMap()} {
		for _, d := range []testenv.Object{sc.CRD(), sc.NamespaceObject()} {
			if rt, dt := testenv.Created(sc.t, r, res[r]), testenv.Created(sc.t, d, deps[d]); rt.Before(dt) {
				sc.t.Errorf("%s was created at %v, before the dependency %s (%v)", r, rt, d, dt)
			}
		}
	}
	if size := testenv.Field(res[sc.Widget()], "spec.size"); size != "small" {
		sc.t.Errorf("%s spec.size = %v, want the workflow's (small)", sc.Widget(), size)
	}
	d, r := sc.waitSynced(depsApp), sc.waitSynced(resApp)
	if dt, rt := firstSync(sc.t, depsApp, d), firstSync(sc.t, resApp, r); rt.Before(dt) {
		sc.t.Errorf("Application %s first synced at %v, before %s (%v)", resApp, rt, depsApp, dt)
	}
}

// changed reruns the resource's workflow with a new size: Argo CD updates
// its objects in place.
func (sc *scenario) changed() {
	sc.t.Helper()
	sc.Size = "large"
	sc.ResourceWorkflow("configure")
	sc.refresh()
	sc.waitSize("large")
}

// deleted runs the resource's delete workflow, then the promise's, and
// waits for Argo CD to prune their objects in turn: the Widget and the
// ConfigMap, then the namespace. The promise's CRD leaves the dependencies
// Application but stays in the cluster: Argo CD puts no tracking annotation
// on a CustomResourceDefinition and so never prunes one (deleting a CRD
// deletes every object of its kind); the README says so.
func (sc *scenario) deleted(dest string) {
	sc.t.Helper()
	depsApp := dest + "-dependencies"
	sc.ResourceWorkflow("delete")
	sc.refresh()
	sc.waitPruned(sc.Widget(), sc.ConfigMap())
	if ok, _ := sc.gone(sc.CRD()); ok {
		sc.t.Fatalf("%s was pruned by the resource's delete; only the promise's delete removes it", sc.CRD())
	}
	sc.PromiseWorkflow("delete")
	sc.refresh()
	sc.waitPruned(sc.NamespaceObject())
	sc.waitFor(sc.CRD().String()+" out of Application "+depsApp, func() (bool, string) {
		return !listed(sc.app(depsApp), sc.CRD()), "still listed among its resources"
	})
	if ok, _ := sc.gone(sc.CRD()); ok {
		sc.t.Errorf("%s was pruned: Argo CD prunes CRDs now; update the README (it says Argo CD leaves them)", sc.CRD())
	}
}

// TestGitRepository: a promise workflow and a resource workflow render into
// a private Gitea repository; the two Applications `render bootstrap
// argocd` prints, applied as printed with the repository Secret the README
// asks for, put their objects in the API server, the dependencies first; a
// changed resource is updated; `--action delete` of the resource, then of
// the promise, has Argo CD prune them.
func TestGitRepository(t *testing.T) {
	sc := newScenario(t)
	sc.gitStore(testenv.Gitea(t))
	dest := "worker-" + sc.Suffix
	sc.Platform(testenv.Destination{Name: dest, Mode: "nestedByMetadata"})
	sc.PromiseWorkflow("configure")
	sc.ResourceWorkflow("configure")
	printed := sc.bootstrap(dest)
	checkPrinted(t, printed, "name: "+dest+"-dependencies", "name: "+dest+"-resources",
		"path: clusters/"+dest+"/dependencies", "recurse: true", "prune: true", `argocd.argoproj.io/sync-wave: "1"`)
	sc.configured(dest)
	sc.changed()
	sc.deleted(dest)
}

// TestOCIRepository: the same into the OCI registry: the Applications read
// the destination's artifact (an oci:// repoURL), with the repository Secret
// of type oci and insecureOCIForceHttp the README documents, and Argo CD's
// repo server unpacks render's one layer with no other setting.
func TestOCIRepository(t *testing.T) {
	sc := newScenario(t)
	dest := "worker-" + sc.Suffix
	repoURL := sc.ociStore(testenv.Registry(t), dest)
	sc.Platform(testenv.Destination{Name: dest, Mode: "nestedByMetadata"})
	sc.PromiseWorkflow("configure")
	sc.ResourceWorkflow("configure")
	printed := sc.bootstrap(dest)
	checkPrinted(t, printed, "repoURL: "+repoURL, "path: dependencies", "path: resources", "prune: true",
		"insecureOCIForceHttp")
	sc.configured(dest)
	sc.changed()
	sc.deleted(dest)
}

// TestFlatDestinations: aggregatedYAML and none destinations, in git and in
// the registry, are read by the one Application bootstrap prints for them,
// on the folder itself; both workflows' objects appear, and a resource
// delete prunes its objects.
func TestFlatDestinations(t *testing.T) {
	for _, store := range []string{"git", "oci"} {
		for _, mode := range []string{"aggregatedYAML", "none"} {
			t.Run(store+"-"+mode, func(t *testing.T) {
				sc := newScenario(t)
				dest := strings.ToLower(mode) + "-" + sc.Suffix
				if store == "git" {
					sc.gitStore(testenv.Gitea(t))
				} else {
					sc.ociStore(testenv.Registry(t), dest)
				}
				sc.Platform(testenv.Destination{Name: dest, Mode: mode})
				sc.PromiseWorkflow("configure")
				sc.ResourceWorkflow("configure")
				printed := sc.bootstrap(dest)
				if n := strings.Count(printed, "kind: Application\n"); n != 1 || len(sc.apps) != 1 || sc.apps[0] != dest {
					t.Fatalf("render bootstrap argocd for a %s destination should print one Application, %s:\n%s", mode, dest, printed)
				}
				sc.waitApplied(dest, sc.CRD(), sc.NamespaceObject(), sc.Widget(), sc.ConfigMap())
				sc.waitSynced(dest)
				sc.ResourceWorkflow("delete")
				sc.refresh()
				sc.waitPruned(sc.Widget(), sc.ConfigMap())
				if ok, _ := sc.gone(sc.CRD()); ok {
					t.Fatalf("%s was pruned by the resource's delete", sc.CRD())
				}
			})
		}
	}
}

// TestBucketRefused: Argo CD cannot read an S3 bucket, so `render bootstrap
// argocd` for a destination in one is bad input: exit code 2, one line
// naming the Destination's file and the reason, nothing on standard output.
// (It needs no server.)
func TestBucketRefused(t *testing.T) {
	w := testenv.NewWorkload(t)
	w.Write("platform/platform.yaml", `apiVersion: platform.kratix.io/v1alpha1
kind: BucketStateStore
metadata: {name: bucket}
spec:
  endpoint: s3.example.com
  bucketName: state
  authMethod: IAM
---
apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata: {name: dev}
spec:
  stateStoreRef: {kind: BucketStateStore, name: bucket}
`)
	r := w.Run(nil, "bootstrap", "argocd", "dev", "--platform", w.PlatformDir())
	if r.Code != 2 || r.Stdout != "" {
		t.Fatalf("want exit 2 and nothing printed; got %s", r)
	}
	msg := strings.TrimSpace(r.Stderr)
	if strings.Count(msg, "\n") != 0 || !strings.Contains(msg, filepath.Join(w.PlatformDir(), "platform.yaml")) ||
		!strings.Contains(msg, "Argo CD reads git repositories and OCI registries only") {
		t.Fatalf("want one line naming platform.yaml and why; got:\n%s", r.Stderr)
	}
}

// TestLongDestinationName: a destination of 250 characters would give
// Applications named "<dest>-dependencies" and "<dest>-resources", over
// the 253 characters the API server takes for a name. Names cut to 253
// are not enough: the API server takes them, but the repo-server looks
// for ".argocd-source-<name>.yaml" in the Application's path, a file name
// over 255 bytes, and the Applications never sync ("file name too long",
// seen here). `render bootstrap argocd` shortens them (the start of the
// destination's name, a hash, the section) to fit that file name; Argo CD
// syncs both workflows' objects through them.
func TestLongDestinationName(t *testing.T) {
	sc := newScenario(t)
	sc.gitStore(testenv.Gitea(t))
	dest := "long-" + sc.Suffix + "-"
	dest += strings.Repeat("x", 250-len(dest))
	sc.Platform(testenv.Destination{Name: dest, Mode: "nestedByMetadata"})
	sc.PromiseWorkflow("configure")
	sc.ResourceWorkflow("configure")
	printed := sc.bootstrap(dest)
	if len(sc.apps) != 2 {
		t.Fatalf("Applications %v:\n%s", sc.apps, printed)
	}
	for i, section := range []string{"-dependencies", "-resources"} {
		if n := sc.apps[i]; len(".argocd-source-argocd_"+n+".yaml") > 255 || !strings.HasPrefix(n, dest[:100]) || !strings.HasSuffix(n, section) {
			t.Errorf("Application %s (%d characters)", n, len(n))
		}
	}
	checkPrinted(t, printed, "path: clusters/"+dest+"/dependencies", "path: clusters/"+dest+"/resources")
	sc.waitApplied(sc.apps[0], sc.CRD(), sc.NamespaceObject())
	sc.waitApplied(sc.apps[1], sc.Widget(), sc.ConfigMap())
	sc.waitSynced(sc.apps[0])
	sc.waitSynced(sc.apps[1])
}
