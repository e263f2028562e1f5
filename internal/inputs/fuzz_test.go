package inputs

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/render-dev/render/renderer"
)

// FuzzSelectors: any destination-selectors.yaml either parses into entries
// the renderer accepts or refuses as a clean InputError, and never panics.
func FuzzSelectors(f *testing.F) {
	for _, s := range []string{
		"- directory: scheduled-dir\n  matchLabels:\n    workflow: subdir\n",
		"- matchLabels: {env: dev}\n",
		"- matchExpressions: [{key: zone, operator: In, values: [eu]}]\n",
		"- directory: ../x\n  matchLabels: {a: b}\n",
		"[",
		"- directory: a/b\n  matchLabels: {}\n",
		"{}",
		"- matchLabels: {'': x}\n",
		"- matchLabel: {a: b}\n",
		"- &a {matchLabels: {a: b}}\n- *a\n- <<: *a\n  directory: x\n",
		ListBomb,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := ParseSelectors(data)
		if err != nil {
			return
		}
		_, err = renderer.Render(renderer.Input{
			Workflow:  renderer.Workflow{Type: renderer.PromiseWorkflow, Action: renderer.Configure, Promise: "p", Pipeline: "x"},
			Output:    []renderer.File{{Path: "a.yaml"}, {Path: "scheduled-dir/b.yaml"}, {Path: "x/c.yaml"}},
			Selectors: entries,
			Destinations: []renderer.Destination{{Name: "d", Path: "d", Labels: map[string]string{"env": "dev"},
				Store: renderer.StoreRef{Kind: "GitStateStore", Name: "s"}, Mode: renderer.NestedByMetadata}},
		})
		var ie *renderer.InputError
		if err != nil && !errors.As(err, &ie) {
			t.Fatalf("rejection is not an InputError: %T %v", err, err)
		}
	})
}

// FuzzPlatform: any platform file loads or is refused with an InputError
// naming it.
func FuzzPlatform(f *testing.F) {
	seed, _ := os.ReadFile("../../fixtures/platform/destinations.yaml")
	f.Add(seed)
	stores, _ := os.ReadFile("../../fixtures/platform/state-stores.yaml")
	f.Add(append(append(stores, []byte("\n---\n")...), seed...))
	f.Add([]byte("kind: Secret\nmetadata: {name: s}\ndata: {password: '!!notbase64'}\n"))
	f.Add([]byte("kind: Destination\nmetadata: {name: d}\nspec: {path: ../../etc, stateStoreRef: {kind: GitStateStore, name: s}}\n"))
	f.Add([]byte("kind: Promise\nmetadata: {name: p}\nspec: {destinationSelectors: [{matchLabels: {a: b}}]}\n"))
	f.Add([]byte("\t- :"))
	f.Add([]byte(AliasBomb))
	f.Add([]byte(strings.Replace(AliasBomb, "apiVersion: v1\nkind: ConfigMap", "apiVersion: platform.kratix.io/v1alpha1\nkind: Promise", 1)))
	f.Add([]byte(strings.Replace(string(seed), "strictMatchLabels", "strictMatchLabel", 1)))
	f.Add([]byte("apiVersion: platform.kratix.io/v1alpha1\nkind: GitStateStore\nmetadata: {name: s}\nspec: {url: x, branch: a..b}\n"))
	f.Add([]byte("metadata: {name: x}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file := filepath.Join(t.TempDir(), "platform.yaml")
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadPlatform(Kinds, []string{file}, "")
		var ie *renderer.InputError
		if err != nil && (!errors.As(err, &ie) || ie.File != file) {
			t.Fatalf("rejection does not name the file: %T %v", err, err)
		}
	})
}

// FuzzOutputFile: any output file is read or refused cleanly; a .yaml file
// is refused exactly when it is not valid YAML.
func FuzzOutputFile(f *testing.F) {
	f.Add([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"), "a.yaml")
	f.Add([]byte("a: [\n"), "b.yml")
	f.Add([]byte("\x00\x01binary"), "c.bin")
	f.Add([]byte("---\n---\n"), "d.yaml")
	f.Add([]byte(AliasBomb), "bomb.yaml")
	f.Add([]byte(ListBomb), "bomb.yml")
	f.Fuzz(func(t *testing.T, data []byte, name string) {
		name = filepath.Base(filepath.Clean("/" + name))
		if name == "/" || name == "." || name == ".." {
			return
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return // a name the file system refuses
		}
		var out *Output
		var err error
		if n := allocated(func() { out, err = ScanOutput(dir) }); n > 64<<20+16*uint64(len(data)) {
			t.Fatalf("reading a %d-byte file allocated %d MiB", len(data), n>>20)
		}
		yamlErr := error(nil)
		if isYAML(name) {
			yamlErr = CheckYAML(data)
		}
		var ie *renderer.InputError
		switch {
		case err != nil && !errors.As(err, &ie):
			t.Fatalf("rejection is not an InputError: %v", err)
		case (err == nil) != (yamlErr == nil):
			t.Fatalf("scan error %v, YAML check %v", err, yamlErr)
		case err == nil && (len(out.Files) != 1 || string(out.Files[0].Data) != string(data)):
			t.Fatalf("file not read back: %+v", out.Files)
		}
	})
}

// allocated is how many bytes f allocates (in this process: a fuzz worker
// runs one input at a time).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
