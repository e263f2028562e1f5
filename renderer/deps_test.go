package renderer

import (
	"os/exec"
	"strings"
	"testing"
)

// The renderer is pure: it, and the vocabulary it shares with the stores
// (internal/layout), link no store client. A store library among their
// dependencies (even one used for a single check) would make every
// program that only renders link a git, S3 or OCI client.
func TestRendererLinksNoStoreClient(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command, to list the renderer's dependencies: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".", "../internal/layout").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed only %q: is it listing at all?", deps)
	}
	banned := []string{
		"github.com/go-git/", "github.com/minio/minio-go", "oras.land/",
		"github.com/render-dev/render/statestore",
	}
	for _, b := range banned {
		var found []string
		for _, d := range deps {
			if strings.HasPrefix(d, b) {
				found = append(found, d)
			}
		}
		if len(found) > 0 {
			t.Errorf("the renderer depends on %d packages of %s, among them %s", len(found), b, found[0])
		}
	}
}
