package cli_test

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A file name holding a newline is quoted, as git quotes paths, so the
// message naming it stays on one line; plain names are printed as they are.
func TestFileNameWithNewlineStaysOnOneLine(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", dest("dev", nil))
	wf := w.workflow("wf")
	for _, c := range []struct {
		content, want string
	}{
		{"kind: [\n", strconv.Quote(filepath.Join(wf.output, "new\nline.yaml")) + ": document 1: invalid YAML"},
		{obj("ConfigMap"), `"new\nline.yaml": cannot be written to a state store: path "new\nline.yaml" holds a control character`},
	} {
		wf.setOutput(map[string]string{"new\nline.yaml": c.content})
		r := wf.run(promiseEnv("p", "pipe"))
		if r.code != 2 {
			t.Fatalf("want exit 2, got %s", r)
		}
		if strings.Count(r.errout, "\n") != 1 || !strings.HasPrefix(r.errout, "render: "+c.want) {
			t.Errorf("stderr is not the one line %q...:\n%s", c.want, r.errout)
		}
	}
}

// A binary file in the output of a group placed on an aggregatedYAML
// destination is reported against that file, not the aggregated file.
func TestBinaryFileInAggregatedOutputNamesTheFile(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", dest("dev", nil, "filepath: {mode: aggregatedYAML}"))
	wf := w.workflow("wf").setOutput(map[string]string{"cm.yaml": obj("ConfigMap"), "diagram.png": "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"})
	r := wf.run(promiseEnv("p", "pipe"))
	want := "render: diagram.png: is binary, not YAML, and goes to destination dev, whose filepath.mode aggregatedYAML puts every document into one file, dev/aggregated.yaml"
	if r.code != 2 || strings.Count(r.errout, "\n") != 1 || !strings.HasPrefix(r.errout, want) {
		t.Errorf("want exit 2 and the one line %q..., got %s", want, r)
	}
}

// A path too long for a store says which limit it passes (the whole path;
// one name over 255 bytes cannot come from an output folder on Linux, see
// internal/layout's tests) and what to shorten.
func TestTooLongPathSaysWhichLimit(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", dest("dev", nil))
	wf := w.workflow("wf")
	deep := strings.Repeat("folder/", 140) + "cm.yaml" // 987 bytes: fits in the output, not in the store
	for _, c := range []struct {
		file string
		want []string
	}{
		{strings.Repeat("folder/", 150) + "cm.yaml", []string{"bytes long: a whole path, with its folders, holds at most 1024 bytes", "shorten its folders and file name in the workflow's output"}},
		{deep, []string{"bytes long: a whole path, with its folders, holds at most 1024 bytes", "the store's spec.path takes 9, the destination's spec.path 4, and the file's path below the destination", "shorten the folders and file names in the workflow's output, or the destination's or the store's spec.path"}},
	} {
		wf.setOutput(map[string]string{c.file: obj("ConfigMap")})
		r := wf.run(resourceEnv("p", "ns", "r", "pipe"))
		if r.code != 2 || strings.Count(r.errout, "\n") != 1 {
			t.Fatalf("want exit 2 and one line, got %s", r)
		}
		for _, want := range c.want {
			if !strings.Contains(r.errout, want) {
				t.Errorf("stderr lacks %q:\n%s", want, r.errout)
			}
		}
	}
}
