package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/internal/storekind"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/driver"
	"github.com/render-dev/render/statestore/memstore"
)

// memSpec and memKind are a fourth store kind, made in this test only and
// passed to the engine in Options.Kinds: the engine renders to it with no
// change of its own (it names no kind and no backend).
type memSpec struct {
	Name string `yaml:"-"`
	File string `yaml:"-"`
	Path string `yaml:"path"`
}

func (s *memSpec) Meta() inputs.StoreMeta {
	return inputs.StoreMeta{Kind: "MemStateStore", Name: s.Name, File: s.File, Path: s.Path}
}

func (s *memSpec) Location() (string, string) { return "memory " + s.Name, inputs.TrimFolder(s.Path) }

type memKind struct{ mem *memstore.Mem }

func (memKind) Name() string { return "MemStateStore" }
func (memKind) Document() inputs.StoreDocument {
	return inputs.StoreDocument{APIVersion: "test.render.dev/v1", Shape: reflect.TypeFor[inputs.Document[*memSpec]](),
		New: func(name, file string) inputs.StoreSpec { return &memSpec{Name: name, File: file} }}
}
func (memKind) Check(inputs.StoreSpec) error                    { return nil }
func (memKind) CheckDestination(inputs.StoreSpec, string) error { return nil }
func (memKind) Capabilities() storekind.Capabilities            { return storekind.Capabilities{Uploads: true} }
func (memKind) Commit(inputs.StoreSpec) (*inputs.Commit, bool)  { return nil, false }
func (memKind) WorkerSource(inputs.StoreSpec) (storekind.WorkerSource, bool) {
	return storekind.WorkerSource{}, false
}
func (memKind) PullRequests(inputs.StoreSpec, storekind.Secrets, storekind.Options) (*storekind.PullRequests, error) {
	return nil, nil
}
func (k memKind) Open(spec inputs.StoreSpec, _ storekind.Secrets, _ storekind.Options) (statestore.Store, string, error) {
	s, ok := spec.(*memSpec)
	if !ok {
		return nil, "", errors.New("not a MemStateStore")
	}
	return k.mem.Open(s.Name, driver.RetryPolicy{}), "mem|" + s.Name, nil
}

func TestRenderToAFourthKind(t *testing.T) {
	dir := t.TempDir()
	f := &fixture{dir: dir, platform: filepath.Join(dir, "platform.yaml"), output: filepath.Join(dir, "output"),
		metadata: filepath.Join(dir, "metadata"), input: filepath.Join(dir, "input")}
	writeT(t, f.platform, "apiVersion: test.render.dev/v1\nkind: MemStateStore\nmetadata:\n  name: m\nspec:\n  path: clusters\n---\n"+
		strings.ReplaceAll(dests("d1"), "GitStateStore, name: default", "MemStateStore, name: m"))
	for _, d := range []string{f.output, f.metadata, f.input} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeT(t, filepath.Join(f.output, "db.yaml"), obj("DB"))
	mem := memstore.New()
	e := New(Options{OutputDir: f.output, MetadataDir: f.metadata, InputDir: f.input, Platform: []string{f.platform},
		Identity: map[string]string{"workflow-type": "resource", "promise": "pg", "pipeline": "x", "name": "db", "namespace": "ns"},
		Getenv:   func(string) string { return "" }, Kinds: storekind.NewRegistry(storekind.Git(), memKind{mem})})
	defer e.Close()
	rep, err := e.Render(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Failed()) > 0 || len(rep.Stores) != 1 || !rep.Stores[0].Result.Updated || !rep.Stores[0].Uploads {
		t.Fatalf("report: %+v", rep.Stores)
	}
	recs, err := mem.Open("m", driver.RetryPolicy{}).Records(context.Background())
	if err != nil || len(recs) != 1 || len(recs[0].Files) == 0 {
		t.Fatalf("the store's records: %+v, %v", recs, err)
	}
	var inD1 []string
	for _, p := range recs[0].Files {
		if strings.HasPrefix(p, "d1/resources/") {
			inD1 = append(inD1, p)
		}
	}
	if len(inD1) != 1 {
		t.Errorf("the workload's files in d1/resources: %v (all: %v)", inD1, recs[0].Files)
	}
}
