package cli_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/render-dev/render/internal/testinfra/testenv"
)

// A registry that refuses DELETE (distribution without
// storage.delete.enabled) cannot hold the writers' lock: a render is
// refused at once, with one line naming the store and what the registry
// must allow, and nothing is written to the registry.
func TestOCIRegistryThatRefusesDeletes(t *testing.T) {
	t.Parallel()
	r := testenv.PrivateRegistryNoDeletes(t)
	w := newWorld(t)
	repo := "render-test/" + testenv.UniqueName("nodelete")
	if err := os.Remove(w.platform + "/store.yaml"); err != nil {
		t.Fatal(err)
	}
	w.file("platform/store.yaml", fmt.Sprintf(`apiVersion: render.dev/v1alpha1
kind: OCIStateStore
metadata: {name: registry}
spec:
  registry: %q
  repository: %s
  insecure: true
  create: true
  secretRef: {name: registry-creds}
---
apiVersion: v1
kind: Secret
metadata: {name: registry-creds}
stringData: {username: %q, password: %q}
`, r.Addr(), repo, r.User(), r.Password()))
	w.file("platform/destinations.yaml", "apiVersion: platform.kratix.io/v1alpha1\nkind: Destination\nmetadata: {name: dev}\nspec:\n  path: dev\n  stateStoreRef: {kind: OCIStateStore, name: registry}\n")
	wf := w.workflow("wf").setOutput(map[string]string{"cm.yaml": obj("ConfigMap")})

	res := wf.run(promiseEnv("p", "install"))
	if res.code != 1 {
		t.Fatalf("want exit 1, got %s", res)
	}
	line := strings.TrimSuffix(res.errout, "\n")
	if strings.Contains(line, "\n") {
		t.Errorf("stderr is not one line:\n%s", res.errout)
	}
	for _, want := range []string{
		"render: OCIStateStore/registry: lock: the registry refuses to delete tags (DELETE /v2/" + repo + "/manifests/lock-probe-",
		": 405 Method Not Allowed), which the writers' lock needs: allow DELETE of manifests by tag (distribution's registry: storage.delete.enabled: true)",
	} {
		if !strings.Contains(line, want) {
			t.Errorf("stderr lacks %q:\n%s", want, res.errout)
		}
	}
	if strings.Contains(line, "lock: lock") || strings.Contains(line, r.Password()) {
		t.Errorf("stderr repeats itself or shows the password:\n%s", res.errout)
	}
	if tags := r.Tags(t, r.Addr()+"/"+repo); len(tags) != 0 {
		t.Errorf("the refused render left tags in the registry: %v", tags)
	}
}
