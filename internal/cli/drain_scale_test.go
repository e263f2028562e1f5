package cli_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/render-dev/render/internal/testinfra/storegen"
	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore/gitstore"
)

// A drain reads what it moves, not the store: draining a destination of
// 100 resources out of a Gitea store of 200 workloads, then out of one of
// 2,000 (read partially, as large stores are), costs the same number of
// fetch requests (the index, the records, the files and what the write
// looks at, each a folder level per request for all workloads at once):
// they follow the workloads moved, not the store's size (measured: 74 and
// 77).
func TestDrainRequestsFollowTheWorkloadsMoved(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("the git CLI is needed to seed the repository")
	}
	g := testenv.Gitea(t)
	fetched := regexp.MustCompile(`msg=fetched .*requests=(\d+) .*partial=true`)
	drain := func(spec storegen.Spec) int {
		t.Helper()
		files, err := storegen.Files(spec)
		if err != nil {
			t.Fatal(err)
		}
		seed := filepath.Join(t.TempDir(), "seed.git")
		if err := storegen.WriteGit(seed, "main", "clusters", files, true); err != nil {
			t.Fatal(err)
		}
		u := g.CreateRepo(t, fmt.Sprintf("drain-%d", spec.Workloads))
		if out, err := exec.Command("git", "-C", seed, "push", "--quiet", g.AdminAuthURL(u), "main").CombinedOutput(); err != nil {
			t.Fatalf("git push: %v\n%s", err, gitstore.RedactURL(string(out)))
		}
		w := newWorld(t)
		var plat strings.Builder
		fmt.Fprintf(&plat, `apiVersion: platform.kratix.io/v1alpha1
kind: GitStateStore
metadata: {name: default}
spec:
  url: %s
  branch: main
  path: clusters
  authMethod: basicAuth
  secretRef: {name: gitea, namespace: default}
---
apiVersion: v1
kind: Secret
metadata: {name: gitea, namespace: default}
stringData: {username: %q, password: %q}
`, u, g.AdminUser(), g.AdminToken())
		for i := range spec.Destinations {
			extra := []string{}
			if i == 0 {
				extra = append(extra, "unschedulable: true")
			}
			plat.WriteString("---\n" + dest(storegen.Destination(i), map[string]string{"env": "dev"}, extra...))
		}
		w.file("platform/store.yaml", plat.String())
		r := run(t, nil, "drain", storegen.Destination(0), "--platform", w.platform, "--allow-mass-deletion", "--log-level", "debug")
		perDest := spec.Workloads / spec.Destinations
		if r.code != 0 || !strings.Contains(r.out, fmt.Sprintf("%d groups moved", perDest)) {
			t.Fatalf("drain: %s", r)
		}
		m := fetched.FindStringSubmatch(r.errout)
		if m == nil {
			t.Fatalf("no partial fetch logged: %s", r.errout)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	small := drain(storegen.Spec{Workloads: 200, Destinations: 2})
	large := drain(storegen.Spec{Workloads: 2000, Destinations: 20})
	t.Logf("fetch requests: %d in a store of 200 workloads, %d in one of 2,000", small, large)
	if large > small+5 {
		t.Errorf("draining 100 workloads fetched with %d requests from a store of 2,000 workloads and %d from one of 200: want the same number", large, small)
	}
}
