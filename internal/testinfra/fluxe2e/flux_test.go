package fluxe2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/render-dev/render/internal/testinfra/testenv"
)

// configured waits until Flux has applied both workflows' objects to a
// nested destination: the promise's CRD and namespace by
// <dest>-dependencies, the resource's Widget and ConfigMap by
// <dest>-resources, and none of the resources before the dependencies (the
// Widget cannot exist before its CRD; render's dependsOn makes Flux wait
// rather than fail and retry).
func (sc *scenario) configured(dest string) {
	sc.t.Helper()
	deps := sc.waitApplied(dest+"-dependencies", sc.CRD(), sc.NamespaceObject())
	res := sc.waitApplied(dest+"-resources", sc.Widget(), sc.ConfigMap())
	for _, r := range []object{sc.Widget(), sc.ConfigMap()} {
		for _, d := range []object{sc.CRD(), sc.NamespaceObject()} {
			if rt, dt := testenv.Created(sc.t, r, res[r]), testenv.Created(sc.t, d, deps[d]); rt.Before(dt) {
				sc.t.Errorf("%s was created at %v, before the dependency %s (%v)", r, rt, d, dt)
			}
		}
	}
	if spec, _ := testenv.Field(res[sc.Widget()], "spec").(map[string]any); spec["size"] != "small" {
		sc.t.Errorf("%s spec = %v, want the workflow's (size: small)", sc.Widget(), spec)
	}
}

// deleted runs the resource's delete workflow, then the promise's, and
// waits for Flux to prune their objects in turn.
func (sc *scenario) deleted() {
	sc.t.Helper()
	sc.ResourceWorkflow("delete")
	sc.reconcileSources()
	sc.waitPruned(sc.Widget(), sc.ConfigMap())
	if sc.get(sc.CRD()) == nil {
		sc.t.Fatalf("%s was pruned by the resource's delete; only the promise's delete removes it", sc.CRD())
	}
	sc.PromiseWorkflow("delete")
	sc.reconcileSources()
	sc.waitPruned(sc.CRD(), sc.NamespaceObject())
}

// TestGitRepository: a promise workflow and a resource workflow render into
// Gitea; the GitRepository and the two Kustomizations `render bootstrap flux`
// prints, applied as printed, put their objects in the API server,
// dependencies first; `--action delete` of the resource, then of the
// promise, has Flux prune them.
func TestGitRepository(t *testing.T) {
	t.Parallel()
	sc := newScenario(t)
	sc.gitStore(testenv.Gitea(t))
	dest := "worker-" + sc.Suffix
	sc.Platform(testenv.Destination{Name: dest, Mode: "nestedByMetadata"})
	sc.PromiseWorkflow("configure")
	sc.ResourceWorkflow("configure")
	printed := sc.bootstrap(dest)
	for _, want := range []string{"kind: GitRepository", "name: " + dest + "-dependencies", "name: " + dest + "-resources", "dependsOn:"} {
		if !strings.Contains(printed, want) {
			t.Fatalf("render bootstrap flux printed no %q:\n%s", want, printed)
		}
	}
	sc.configured(dest)
	sc.deleted()
}

// TestBucket: the same into a MinIO bucket, read by the Bucket source with
// spec.prefix that `render bootstrap flux` prints for a BucketStateStore.
func TestBucket(t *testing.T) {
	t.Parallel()
	sc := newScenario(t)
	sc.bucketStore(testenv.MinIO(t))
	dest := "worker-" + sc.Suffix
	sc.Platform(testenv.Destination{Name: dest, Mode: "nestedByMetadata"})
	sc.PromiseWorkflow("configure")
	sc.ResourceWorkflow("configure")
	printed := sc.bootstrap(dest)
	for _, want := range []string{"kind: Bucket", "prefix: clusters/" + dest + "/", "dependsOn:"} {
		if !strings.Contains(printed, want) {
			t.Fatalf("render bootstrap flux printed no %q:\n%s", want, printed)
		}
	}
	sc.configured(dest)
	sc.deleted()
}

// TestOCIRepository: the same into the OCI registry, read by the
// OCIRepository `render bootstrap flux` prints for an OCIStateStore (the
// destination's own artifact, plain HTTP, a dockerconfigjson Secret) and
// Kustomizations on the artifact's folders; a changed resource is updated
// in place.
func TestOCIRepository(t *testing.T) {
	t.Parallel()
	sc := newScenario(t)
	r := testenv.Registry(t)
	sc.ociStore(r)
	dest := "worker-" + sc.Suffix
	sc.Platform(testenv.Destination{Name: dest, Mode: "nestedByMetadata"})
	sc.PromiseWorkflow("configure")
	sc.ResourceWorkflow("configure")
	printed := sc.bootstrap(dest)
	for _, want := range []string{"kind: OCIRepository", "url: oci://" + r.Addr() + "/render-e2e/" + sc.Suffix + "/" + dest,
		"insecure: true", "path: ./dependencies", "path: ./resources", "dependsOn:"} {
		if !strings.Contains(printed, want) {
			t.Fatalf("render bootstrap flux printed no %q:\n%s", want, printed)
		}
	}
	sc.configured(dest)
	sc.Size = "large"
	sc.ResourceWorkflow("configure")
	sc.reconcileSources()
	sc.waitSize("large")
	sc.deleted()
}

// TestDrain: two destinations stand for two workers, each with the pair of
// Kustomizations bootstrap prints for it. The promise's dependencies go to
// both and the resource to one; after `render drain` of that one (cordoned
// first), the resource's objects leave its Kustomization's inventory and
// ownership for the other worker's, and the dependencies stay on both.
func TestDrain(t *testing.T) {
	t.Parallel()
	sc := newScenario(t)
	sc.gitStore(testenv.Gitea(t))
	a, b := "worker-a-"+sc.Suffix, "worker-b-"+sc.Suffix
	sc.Platform(testenv.Destination{Name: a, Mode: "nestedByMetadata"}, testenv.Destination{Name: b, Mode: "nestedByMetadata"})
	sc.PromiseWorkflow("configure")
	sc.ResourceWorkflow("configure")
	sc.bootstrap(a)
	sc.bootstrap(b)

	// Where did the resource go? Its Widget is owned by that worker's
	// resources Kustomization.
	var from, to string
	sc.waitFor(sc.Widget().String()+" applied by a worker", func() (bool, string) {
		obj := sc.get(sc.Widget())
		if obj == nil {
			return false, sc.Widget().String() + " does not exist"
		}
		switch owner(obj) {
		case sc.flux + "/" + a + "-resources":
			from, to = a, b
		case sc.flux + "/" + b + "-resources":
			from, to = b, a
		default:
			return false, fmt.Sprintf("%s is owned by %q", sc.Widget(), owner(obj))
		}
		return true, ""
	})
	sc.waitApplied(from+"-resources", sc.Widget(), sc.ConfigMap())
	for _, d := range []string{a, b} {
		sc.waitFor("the CRD in "+d+"-dependencies' inventory", func() (bool, string) {
			inv := sc.inventory(d + "-dependencies")
			return slices.Contains(inv, inventoryID(sc.CRD())), fmt.Sprintf("inventory %v", inv)
		})
	}

	// Cordon the worker, then drain it.
	dests := []testenv.Destination{{Name: a, Mode: "nestedByMetadata"}, {Name: b, Mode: "nestedByMetadata"}}
	for i := range dests {
		dests[i].Unschedulable = dests[i].Name == from
	}
	sc.Platform(dests...)
	r := sc.MustRun(nil, "drain", from, "--platform", sc.PlatformDir())
	t.Logf("render drain %s:\n%s%s", from, r.Stdout, r.Stderr)
	sc.reconcileSources()

	moved := []object{sc.Widget(), sc.ConfigMap()}
	sc.waitApplied(to+"-resources", moved...)
	sc.waitFor("the resource's objects out of "+from+"-resources' inventory and in "+to+"-resources'", func() (bool, string) {
		src, dst := sc.inventory(from+"-resources"), sc.inventory(to+"-resources")
		for _, o := range moved {
			if slices.Contains(src, inventoryID(o)) || !slices.Contains(dst, inventoryID(o)) {
				return false, fmt.Sprintf("%s: %s inventory %v, %s inventory %v", o, from, src, to, dst)
			}
		}
		return true, ""
	})
	for _, d := range []string{a, b} {
		if inv := sc.inventory(d + "-dependencies"); !slices.Contains(inv, inventoryID(sc.CRD())) {
			t.Errorf("after the drain, %s-dependencies' inventory lost the promise's CRD: %v", d, inv)
		}
	}
	if sc.get(sc.CRD()) == nil || sc.get(sc.NamespaceObject()) == nil {
		t.Errorf("the drain pruned the promise's dependencies")
	}
}

// TestFlatDestinations: aggregatedYAML and none destinations are read by
// the one Kustomization bootstrap prints for them, on the folder itself;
// both workflows' objects appear, and a resource delete prunes its objects.
func TestFlatDestinations(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"aggregatedYAML", "none"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			sc := newScenario(t)
			sc.gitStore(testenv.Gitea(t))
			dest := strings.ToLower(mode) + "-" + sc.Suffix
			sc.Platform(testenv.Destination{Name: dest, Mode: mode})
			sc.PromiseWorkflow("configure")
			sc.ResourceWorkflow("configure")
			printed := sc.bootstrap(dest)
			if strings.Contains(printed, "dependsOn") || strings.Count(printed, "kind: Kustomization") != 1 {
				t.Fatalf("render bootstrap flux for a %s destination should print one Kustomization:\n%s", mode, printed)
			}
			sc.waitApplied(dest, sc.CRD(), sc.NamespaceObject(), sc.Widget(), sc.ConfigMap())
			sc.ResourceWorkflow("delete")
			sc.reconcileSources()
			sc.waitPruned(sc.Widget(), sc.ConfigMap())
			if sc.get(sc.CRD()) == nil {
				t.Fatalf("%s was pruned by the resource's delete", sc.CRD())
			}
		})
	}
}

// kustomizations is the name of every Kustomization in printed YAML, and
// the kind and name of the source they read.
func kustomizations(t *testing.T, printed string) (names []string, source string) {
	t.Helper()
	for _, doc := range strings.Split(printed, "\n---\n") {
		var kind, name string
		for _, line := range strings.Split(doc, "\n") {
			if k, ok := strings.CutPrefix(line, "kind: "); ok {
				kind = k
			}
			if n, ok := strings.CutPrefix(line, "  name: "); ok && name == "" {
				name = n
			}
		}
		switch kind {
		case "Kustomization":
			names = append(names, name)
		case "GitRepository", "Bucket", "OCIRepository":
			source = kind + "/" + name
		}
	}
	return names, source
}

// TestLongDestinationNames: Flux puts a Kustomization's name in the label
// kustomize.toolkit.fluxcd.io/name of every object it applies, and a label
// value holds 63 characters. A destination of 60 characters would give
// Kustomizations of 73 ("<dest>-dependencies"), which the API server takes
// as objects but whose objects it refuses; one of 250 a Bucket named
// "<store>-<dest>" over the 253 any name holds. A Bucket cut to 253 is
// not enough: the API server takes it, but source-controller makes a
// folder "Bucket-<namespace>-<name>-<digits>" on every reconcile, a file
// name over 255 bytes, and fails ("file name too long", seen here).
// `render bootstrap flux` shortens such names (the start of the
// destination's name, a hash, the section) to fit, and Flux applies both
// workflows' objects through them.
func TestLongDestinationNames(t *testing.T) {
	for _, c := range []struct {
		name   string
		length int
		store  func(sc *scenario)
	}{
		{"git, 60 characters", 60, func(sc *scenario) { sc.gitStore(testenv.Gitea(sc.t)) }},
		{"bucket, 250 characters", 250, func(sc *scenario) { sc.bucketStore(testenv.MinIO(sc.t)) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			sc := newScenario(t)
			c.store(sc)
			dest := "long-" + sc.Suffix + "-"
			dest += strings.Repeat("x", c.length-len(dest))
			sc.Platform(testenv.Destination{Name: dest, Mode: "nestedByMetadata"})
			sc.PromiseWorkflow("configure")
			sc.ResourceWorkflow("configure")
			printed := sc.bootstrap(dest)
			ks, source := kustomizations(t, printed)
			if len(ks) != 2 || !strings.HasSuffix(ks[0], "-dependencies") || !strings.HasSuffix(ks[1], "-resources") {
				t.Fatalf("Kustomizations %v:\n%s", ks, printed)
			}
			for _, n := range append(ks, strings.SplitN(source, "/", 2)[1]) {
				if len(n) > 253 || !strings.HasPrefix(n, "long-"+sc.Suffix) && !strings.HasPrefix(n, sc.StoreName()) {
					t.Errorf("name %s (%d characters)", n, len(n))
				}
			}
			for _, n := range ks {
				if len(n) > 63 {
					t.Errorf("Kustomization %s is %d characters: over a label value's 63", n, len(n))
				}
			}
			deps := sc.waitApplied(ks[0], sc.CRD(), sc.NamespaceObject())
			res := sc.waitApplied(ks[1], sc.Widget(), sc.ConfigMap())
			if len(deps) != 2 || len(res) != 2 {
				t.Fatalf("applied: %v, %v", deps, res)
			}
		})
	}
}
