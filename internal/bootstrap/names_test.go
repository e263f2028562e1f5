package bootstrap

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/internal/storekind"
	"github.com/render-dev/render/renderer"
)

// names prints bootstrap's documents for destination d and returns each
// document's kind, name and (Kustomizations) dependsOn.
func names(t *testing.T, out *Output) (kinds, names []string, dependsOn map[string]string) {
	t.Helper()
	dec := yaml.NewDecoder(strings.NewReader(string(out.YAML)))
	dependsOn = map[string]string{}
	for {
		var d struct {
			Kind     string
			Metadata struct{ Name string }
			Spec     struct {
				DependsOn []struct{ Name string } `yaml:"dependsOn"`
			}
		}
		if err := dec.Decode(&d); err != nil {
			break
		}
		kinds, names = append(kinds, d.Kind), append(names, d.Metadata.Name)
		if len(d.Spec.DependsOn) > 0 {
			dependsOn[d.Metadata.Name] = d.Spec.DependsOn[0].Name
		}
	}
	return kinds, names, dependsOn
}

func longPlatform(dests ...string) *inputs.Platform {
	p := &inputs.Platform{
		Stores: inputs.StoreMap(
			&storekind.GitStateStore{Name: "git", URL: "https://git.example.com/state.git", Branch: "main", Path: "clusters"},
			&storekind.BucketStateStore{Name: "bucket", Endpoint: "s3:9000", BucketName: "b"}),
	}
	for _, d := range dests {
		store := renderer.StoreRef{Kind: "GitStateStore", Name: "git"}
		if strings.HasPrefix(d, "b") {
			store = renderer.StoreRef{Kind: "BucketStateStore", Name: "bucket"}
		}
		p.Destinations = append(p.Destinations, renderer.Destination{Name: d, Path: d, Store: store, Mode: renderer.NestedByMetadata})
	}
	return p
}

// Names render derives from a destination's are within Kubernetes'
// limits: a Kustomization's name is a label value on every object Flux
// applies (at most 63 characters), any object's name at most 253. A
// longer one is shortened deterministically: the start of the
// destination's name, a hash of the whole name, and the section; two
// destinations that differ only past the cut get different names.
func TestDerivedNamesFitKubernetesLimits(t *testing.T) {
	d60 := "g" + strings.Repeat("a", 58) + "1" // 60 characters
	d60b := "g" + strings.Repeat("a", 58) + "2"
	d250 := "g" + strings.Repeat("x", 248) + "1"
	b250 := "b" + strings.Repeat("y", 248) + "1"
	p := longPlatform(d60, d60b, d250, b250, "gshort")

	seen := map[string]string{}
	for _, d := range []string{d60, d60b, d250, b250} {
		out, err := Flux(p, d, FluxOptions{})
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		kinds, ns, deps := names(t, out)
		for i, n := range ns {
			limit := MaxObjectName
			switch kinds[i] {
			case "Bucket", "GitRepository", "OCIRepository":
				// source-controller's temporary folder per reconcile,
				// "<kind>-flux-system-<name>-<10 digits>", is one file
				// name of at most 255 bytes (found with the real
				// source-controller: a Bucket of 253 characters failed
				// with "file name too long").
				if folder := len(kinds[i] + "-flux-system-" + n + "-0123456789"); folder > 255 {
					t.Errorf("%s %s: source-controller's folder name would be %d bytes", kinds[i], n, folder)
				}
			}
			if kinds[i] == "Kustomization" {
				limit = MaxKustomizationName
				if errs := validation.IsValidLabelValue(n); len(errs) > 0 {
					t.Errorf("Kustomization %s is not a label value: %v", n, errs)
				}
			}
			if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 || len(n) > limit {
				t.Errorf("%s %s (%d characters): %v", kinds[i], n, len(n), errs)
			}
			if kinds[i] == "Kustomization" && !strings.HasPrefix(n, d[:20]) {
				t.Errorf("%s does not start with the destination's name", n)
			}
			if other, dup := seen[kinds[i]+"/"+n]; dup && other != d && kinds[i] != "GitRepository" {
				t.Errorf("%s %s is the name for %s and for %s", kinds[i], n, other, d)
			}
			seen[kinds[i]+"/"+n] = d
		}
		// The resources Kustomization depends on the dependencies one,
		// by the name it has.
		if kinds[1] != "Kustomization" || deps[ns[2]] != ns[1] || !strings.HasSuffix(ns[1], "-dependencies") || !strings.HasSuffix(ns[2], "-resources") {
			t.Errorf("%s: names %v, dependsOn %v", d, ns, deps)
		}
		again, _ := Flux(p, d, FluxOptions{})
		if string(again.YAML) != string(out.YAML) {
			t.Errorf("%s: two runs print different documents", d)
		}
	}
	for _, d := range []string{d60, d250} {
		out, err := ArgoCD(p, d, ArgoCDOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, ns, _ := names(t, out)
		for _, n := range ns {
			if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
				t.Errorf("Application %s (%d characters): %v", n, len(n), errs)
			}
			// The file Argo CD's repo-server looks for in the
			// Application's path, ".argocd-source-<namespace>_<name>.yaml"
			// (found with the real repo-server: an Application of 253
			// characters never synced, "file name too long").
			if file := len(".argocd-source-argocd_" + n + ".yaml"); file > 255 {
				t.Errorf("Application %s: the repo-server's file name would be %d bytes", n, file)
			}
		}
		if d == d60 && (ns[0] != d60+"-dependencies" || len(out.Warnings) == 0) {
			// 73 characters fit an object's name: kept, with a
			// warning about Argo CD's label tracking.
			t.Errorf("Applications %v, warnings %q", ns, out.Warnings)
		}
		if d == d250 && (!strings.HasPrefix(ns[0], d250[:100]) || ns[0] == ns[1]) {
			t.Errorf("Applications %v", ns)
		}
	}
	// Names that fit are as they always were.
	out, _ := Flux(p, "gshort", FluxOptions{})
	if _, ns, _ := names(t, out); ns[1] != "gshort-dependencies" || ns[2] != "gshort-resources" {
		t.Errorf("short names changed: %v", ns)
	}
}

func TestKubeName(t *testing.T) {
	for _, c := range []struct {
		base, suffix string
		limit        int
	}{
		{strings.Repeat("a", 100), "-dependencies", 63},
		{strings.Repeat("a", 49) + "-" + strings.Repeat("b", 20), "", 63}, // cut at a dash: no "--"
		{strings.Repeat("a.", 150), "-resources", 253},
	} {
		n := kubeName(c.base, c.suffix, c.limit)
		if len(n) > c.limit || len(validation.IsDNS1123Subdomain(n)) > 0 || !strings.HasSuffix(n, c.suffix) {
			t.Errorf("kubeName(%q, %q, %d) = %q (%d)", c.base, c.suffix, c.limit, n, len(n))
		}
		if strings.Contains(n, "--") || strings.Contains(n, ".-") {
			t.Errorf("kubeName(%q...) = %q: a cut left a dash or dot before the hash", c.base[:10], n)
		}
	}
}
