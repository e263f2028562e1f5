package bootstrap

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/internal/storekind"
	"github.com/render-dev/render/renderer"
)

func ociPlatform() *inputs.Platform {
	return &inputs.Platform{
		Stores: inputs.StoreMap(&storekind.OCIStateStore{
			Name: "reg", Registry: "registry.example.com:5000", Repository: "fleet/state",
			Insecure: true, SecretRef: &inputs.SecretRef{Name: "reg-creds"},
		}),
		Destinations: []renderer.Destination{
			{Name: "dev", Path: "clusters/dev", Store: renderer.StoreRef{Kind: "OCIStateStore", Name: "reg"}},
		},
	}
}

type printed struct {
	Kind     string
	Metadata struct{ Name string }
	Spec     map[string]any
}

func decodeAll(t *testing.T, b []byte) []printed {
	t.Helper()
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	var out []printed
	for {
		var o printed
		if err := dec.Decode(&o); err != nil {
			break
		}
		out = append(out, o)
	}
	return out
}

// An OCI destination gets an OCIRepository on its own artifact, and
// Kustomizations on the artifact's folders (the artifact is the
// destination folder).
func TestBootstrapFluxOCI(t *testing.T) {
	out, err := Flux(ociPlatform(), "dev", FluxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeAll(t, out.YAML)
	if len(objs) != 3 {
		t.Fatalf("%d documents:\n%s", len(objs), out.YAML)
	}
	src := objs[0]
	if src.Kind != "OCIRepository" || src.Spec["url"] != "oci://registry.example.com:5000/fleet/state/clusters/dev" ||
		src.Spec["ref"].(map[string]any)["tag"] != "latest" || src.Spec["insecure"] != true ||
		src.Spec["secretRef"].(map[string]any)["name"] != "reg-creds" {
		t.Fatalf("source:\n%s", out.YAML)
	}
	for i, want := range []string{"./dependencies", "./resources"} {
		k := objs[i+1]
		ref := k.Spec["sourceRef"].(map[string]any)
		if k.Kind != "Kustomization" || k.Spec["path"] != want || ref["kind"] != "OCIRepository" || ref["name"] != src.Metadata.Name {
			t.Fatalf("kustomization %d:\n%s", i, out.YAML)
		}
	}
	if !strings.Contains(string(out.YAML), "kubernetes.io/dockerconfigjson") {
		t.Fatalf("no note on the registry Secret:\n%s", out.YAML)
	}
}

func TestBootstrapArgoCDOCI(t *testing.T) {
	out, err := ArgoCD(ociPlatform(), "dev", ArgoCDOptions{})
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeAll(t, out.YAML)
	if len(objs) != 2 {
		t.Fatalf("%d documents:\n%s", len(objs), out.YAML)
	}
	for i, section := range []string{"dependencies", "resources"} {
		src := objs[i].Spec["source"].(map[string]any)
		if objs[i].Kind != "Application" || src["repoURL"] != "oci://registry.example.com:5000/fleet/state/clusters/dev" ||
			src["targetRevision"] != "latest" || src["path"] != section {
			t.Fatalf("application %d:\n%s", i, out.YAML)
		}
	}
	for _, want := range []string{
		"insecureOCIForceHttp",
		// Argo CD matches a type: oci repository Secret on the repoURL, scheme included.
		"type: oci, url: oci://registry.example.com:5000/fleet/state/clusters/dev,",
	} {
		if !strings.Contains(string(out.YAML), want) {
			t.Fatalf("no %q in the notes:\n%s", want, out.YAML)
		}
	}
}

// An aggregatedYAML or none destination in a registry is flat: one
// Application on the artifact's root (an Application on dependencies/ fails
// in Argo CD with "app path does not exist"; internal/testinfra/argocde2e saw it).
func TestBootstrapArgoCDOCIFlat(t *testing.T) {
	for _, mode := range []renderer.FilepathMode{renderer.AggregatedYAML, renderer.NoNesting} {
		p := ociPlatform()
		p.Destinations[0].Mode = mode
		out, err := ArgoCD(p, "dev", ArgoCDOptions{})
		if err != nil {
			t.Fatal(err)
		}
		objs := decodeAll(t, out.YAML)
		if len(objs) != 1 {
			t.Fatalf("%s: %d documents:\n%s", mode, len(objs), out.YAML)
		}
		src := objs[0].Spec["source"].(map[string]any)
		if objs[0].Kind != "Application" || objs[0].Metadata.Name != "dev" || src["path"] != "." ||
			src["repoURL"] != "oci://registry.example.com:5000/fleet/state/clusters/dev" {
			t.Fatalf("%s:\n%s", mode, out.YAML)
		}
		if !strings.Contains(string(out.YAML), "insecureOCIForceHttp") {
			t.Fatalf("%s: no note on the repository Secret:\n%s", mode, out.YAML)
		}
	}
}
