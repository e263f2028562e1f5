package inputs

import (
	"errors"
	"os"
	"path/filepath"
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
	f.Fuzz(func(t *testing.T, data []byte) {
		file := filepath.Join(t.TempDir(), "platform.yaml")
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadPlatform([]string{file}, "")
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
	f.Fuzz(func(t *testing.T, data []byte, name string) {
		name = filepath.Base(filepath.Clean("/" + name))
		if name == "/" || name == "." || name == ".." {
			return
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return // a name the file system refuses
		}
		out, err := ScanOutput(dir)
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
