package inputs_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/internal/storekind"
)

const ociStore = `apiVersion: render.dev/v1alpha1
kind: OCIStateStore
metadata: {name: reg}
spec:
  registry: registry.example.com:5000
  repository: fleet/state
  tag: stable
  insecure: true
  create: true
  source: https://git.example.com/platform
  author: render <render@example.com>
  secretRef: {name: reg-creds}
`

func ociDest(name, path string) string {
	return "apiVersion: platform.kratix.io/v1alpha1\nkind: Destination\nmetadata: {name: " + name + "}\nspec:\n  path: " + path + "\n  stateStoreRef: {kind: OCIStateStore, name: reg}\n"
}

func TestOCIStateStore(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "p.yaml"), ociStore+"---\n"+ociDest("dev", "clusters/dev"))
	p, err := inputs.LoadPlatform(kinds, []string{dir}, "")
	if err != nil {
		t.Fatal(err)
	}
	s := inputs.StoresOf[*storekind.OCIStateStore](p)["reg"]
	if s == nil || s.Registry != "registry.example.com:5000" || s.Repository != "fleet/state" || s.Tag != "stable" ||
		!s.Insecure || !s.Create || s.SecretRef == nil || s.SecretRef.Name != "reg-creds" || s.Author == "" || s.Source == "" {
		t.Fatalf("OCIStateStore read as %+v", s)
	}
	if s.MassDeletion != (inputs.MassDeletion{}) {
		t.Fatalf("massDeletion read as %+v with none set", s.MassDeletion)
	}
	write(t, filepath.Join(dir, "p.yaml"), strings.Replace(ociStore, "  insecure: true\n", "  insecure: true\n  massDeletion: {allow: true, maxDestinationPercent: 50}\n", 1)+"---\n"+ociDest("dev", "clusters/dev"))
	if p, err = inputs.LoadPlatform(kinds, []string{dir}, ""); err != nil {
		t.Fatal(err)
	}
	if md := inputs.StoresOf[*storekind.OCIStateStore](p)["reg"].MassDeletion; !md.Allow || md.MaxDestinationPercent != 50 {
		t.Fatalf("massDeletion read as %+v", md)
	}
	if len(p.Destinations) != 1 || p.Destinations[0].Store.Kind != "OCIStateStore" {
		t.Fatalf("destinations %+v", p.Destinations)
	}
}

func TestOCIStateStoreErrors(t *testing.T) {
	long := strings.Repeat("t", 129)
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"unknown field", strings.Replace(ociStore, "  insecure: true\n", "  insecure: true\n  plainHTTP: true\n", 1),
			[]string{"p.yaml: document 1 (OCIStateStore reg): ", "plainHTTP"}},
		{"kratix apiVersion", strings.Replace(ociStore, "render.dev/v1alpha1", "platform.kratix.io/v1alpha1", 1),
			[]string{"apiVersion \"platform.kratix.io/v1alpha1\": a OCIStateStore is render.dev/v1alpha1"}},
		{"no repository", strings.Replace(ociStore, "  repository: fleet/state\n", "", 1),
			[]string{"spec.registry and spec.repository are required"}},
		{"uppercase repository", strings.Replace(ociStore, "fleet/state", "Fleet/State", 1),
			[]string{"(OCIStateStore reg): spec.repository \"Fleet/State\" is not a valid OCI repository name"}},
		{"repository with a scheme", strings.Replace(ociStore, "registry.example.com:5000", "https://registry.example.com", 1),
			[]string{"(OCIStateStore reg): spec.registry \"https://registry.example.com\" must be host[:port]"}},
		{"registry with credentials", strings.Replace(ociStore, "registry.example.com:5000", "robot:s3cr3t-pw@registry.example.com:5000", 1),
			[]string{"(OCIStateStore reg): spec.registry holds credentials (user:password@): credentials belong in the Secret spec.secretRef names, never in spec.registry"}},
		{"registry URL with credentials", strings.Replace(ociStore, "registry.example.com:5000", "https://robot:s3cr3t-pw@registry.example.com", 1),
			[]string{"(OCIStateStore reg): spec.registry holds credentials (user:password@)"}},
		{"registry with a user", strings.Replace(ociStore, "registry.example.com:5000", "robot@registry.example.com", 1),
			[]string{"(OCIStateStore reg): spec.registry holds credentials (user:password@)"}},
		{"source with credentials", strings.Replace(ociStore, "https://git.example.com/platform", "https://robot:s3cr3t-pw@git.example.com/platform", 1),
			[]string{"(OCIStateStore reg): spec.source holds credentials (user:password@): it is published on every artifact"}},
		{"tag too long", strings.Replace(ociStore, "tag: stable", "tag: "+long, 1),
			[]string{"(OCIStateStore reg): spec.tag \"tttttttttttttttttttt...\" is longer than 128 characters"}},
		{"bad tag", strings.Replace(ociStore, "tag: stable", "tag: -x", 1),
			[]string{"(OCIStateStore reg): spec.tag \"-x\" is not a valid OCI tag"}},
		{"destination path no artifact can have", ociStore + "---\n" + ociDest("dev", "Clusters/Dev"),
			[]string{"Destination dev: spec.path \"Clusters/Dev\" cannot name an artifact of OCIStateStore reg"}},
		{"mass-deletion share", strings.Replace(ociStore, "  insecure: true\n", "  insecure: true\n  massDeletion: {maxStorePercent: 101}\n", 1),
			[]string{"(OCIStateStore reg): spec.massDeletion.maxStorePercent 101"}},
		{"undefined store", strings.Replace(ociDest("dev", "dev"), "name: reg}", "name: other}", 1),
			[]string{"spec.stateStoreRef names OCIStateStore other, which is not defined"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, filepath.Join(dir, "p.yaml"), tc.doc)
			_, err := inputs.LoadPlatform(kinds, []string{dir}, "")
			if ie := inputErr(t, err, tc.want...); strings.Contains(ie.Error(), "s3cr3t") || strings.Contains(ie.Error(), "robot") {
				t.Errorf("the error echoes the credentials: %v", ie)
			}
		})
	}
}
