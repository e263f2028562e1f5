package storekind

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/driver"
	"github.com/render-dev/render/statestore/memstore"
)

// memSpec is a fourth kind's spec type, made here only: the seam's test
// that a kind is its spec type and its factory, registered in a registry
// passed to LoadPlatform, with nothing to add to inputs, the engine or
// bootstrap.
type memSpec struct {
	Name         string              `yaml:"-"`
	File         string              `yaml:"-"`
	Bucket       string              `yaml:"bucket"`
	Path         string              `yaml:"path"`
	MassDeletion inputs.MassDeletion `yaml:"massDeletion"`
}

func (s *memSpec) Meta() inputs.StoreMeta {
	return inputs.StoreMeta{Kind: "MemStateStore", Name: s.Name, File: s.File, Path: s.Path, MassDeletion: s.MassDeletion}
}

func (s *memSpec) Location() (string, string) { return "memory " + s.Bucket, inputs.TrimFolder(s.Path) }

func memKind() Kind {
	return factory[*memSpec]{name: "MemStateStore", apiVersion: "test.render.dev/v1",
		newSpec: func(name, file string) *memSpec { return &memSpec{Name: name, File: file} },
		check: func(s *memSpec) error {
			if s.Bucket == "" {
				return errors.New("spec.bucket is required")
			}
			return nil
		},
		open: func(s *memSpec, v env) (statestore.Store, string, error) {
			return memstore.New().Open(v.name, driver.RetryPolicy{}), "mem|" + s.Bucket, nil
		},
		caps: Capabilities{Uploads: true, FluxSource: "Bucket"},
		source: func(s *memSpec) WorkerSource {
			return WorkerSource{Bucket: &BucketStateStore{Name: s.Name, File: s.File, Endpoint: "mem.example.com", BucketName: s.Bucket, Path: s.Path}}
		},
	}
}

func writePlatform(t *testing.T, docs string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(docs), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

const memDestination = `apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata: {name: dev}
spec:
  stateStoreRef: {kind: MemStateStore, name: m}
`

func TestAFourthKindIsItsFactoryAndARegistryLine(t *testing.T) {
	kinds := NewRegistry(Git(), Bucket(), OCI(), memKind())
	dir := writePlatform(t, memDestination+`---
apiVersion: test.render.dev/v1
kind: MemStateStore
metadata: {name: m}
spec: {bucket: b, path: clusters}
`)
	p, err := inputs.LoadPlatform(kinds, []string{dir}, "")
	if err != nil {
		t.Fatal(err)
	}
	ref := renderer.StoreRef{Kind: "MemStateStore", Name: "m"}
	s, ok := p.Store(ref).(*memSpec)
	if !ok || s.Bucket != "b" || s.File != filepath.Join(dir, "p.yaml") {
		t.Fatalf("the store's spec: %#v", p.Store(ref))
	}
	st, key, err := kinds.Open(p, ref, Options{})
	if err != nil || key != "mem|b" {
		t.Fatalf("Open: %v, %q", err, key)
	}
	st.Close()
	if c := kinds.Capabilities("MemStateStore"); !c.Uploads || c.FluxSource != "Bucket" || c.PullRequests {
		t.Errorf("capabilities: %+v", c)
	}
	if src, ok := kinds.WorkerSource(p, ref); !ok || src.Bucket == nil || src.Bucket.BucketName != "b" {
		t.Errorf("worker source: %+v, %t", src, ok)
	}
	if pr, err := kinds.PullRequests(p, ref, Options{}); pr != nil || err != nil {
		t.Errorf("pull requests: %v, %v", pr, err)
	}
	if _, ok := kinds.Commit(s); ok {
		t.Error("a kind without commit settings says it writes commits")
	}

	// Its documents are checked as the others are: their apiVersion,
	// their fields, and by the kind.
	for _, c := range []struct{ doc, want string }{
		{"apiVersion: platform.kratix.io/v1alpha1\nkind: MemStateStore\nmetadata: {name: m}\nspec: {bucket: b}\n", `apiVersion "platform.kratix.io/v1alpha1": a MemStateStore is test.render.dev/v1`},
		{"apiVersion: test.render.dev/v1\nkind: MemStateStore\nmetadata: {name: m}\nspec: {buckett: b}\n", "unknown field spec.buckett (did you mean spec.bucket?)"},
		{"apiVersion: test.render.dev/v1\nkind: MemStateStore\nmetadata: {name: m}\nspec: {path: x}\n", "spec.bucket is required"},
	} {
		_, err := inputs.LoadPlatform(kinds, []string{writePlatform(t, memDestination+"---\n"+c.doc)}, "")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.doc, err, c.want)
		}
	}
	// A destination naming no kind the registry holds lists its kinds.
	_, err = inputs.LoadPlatform(kinds, []string{writePlatform(t, strings.Replace(memDestination, "MemStateStore", "FooStateStore", 1))}, "")
	if err == nil || !strings.Contains(err.Error(), `"FooStateStore" is not GitStateStore, BucketStateStore, OCIStateStore or MemStateStore`) {
		t.Errorf("an unknown kind: %v", err)
	}
	// Without the kind in the registry, its documents are not render's.
	_, err = inputs.LoadPlatform(Default, []string{dir}, "")
	if err == nil || !strings.Contains(err.Error(), `"MemStateStore" is not GitStateStore, BucketStateStore or OCIStateStore`) {
		t.Errorf("the default registry: %v", err)
	}
}
