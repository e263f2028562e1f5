package inputs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/render-dev/render/renderer"
)

// SelectorsFileName is the metadata file with the workflow's destination selectors.
const SelectorsFileName = "destination-selectors.yaml"

// LoadSelectors reads <metadata>/destination-selectors.yaml. A missing
// file means no selectors; a missing metadata folder is an error, since the
// selectors it should hold would be dropped without a word.
func LoadSelectors(metadataDir string) ([]renderer.SelectorEntry, string, error) {
	file := filepath.Join(metadataDir, SelectorsFileName)
	f, err := openFolder(metadataDir, "metadata folder")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, file, &renderer.InputError{File: metadataDir, Msg: "the metadata folder does not exist: pass --metadata with the workflow's metadata folder (it may be empty)"}
	}
	if err != nil {
		return nil, file, &renderer.InputError{File: metadataDir, Msg: "cannot read the metadata folder: " + cleanErr(err)}
	}
	defer f.Close()
	data, err := f.readFile(SelectorsFileName, MaxYAMLBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, file, nil
	}
	if err != nil {
		return nil, file, err
	}
	entries, err := ParseSelectors(data)
	if err != nil {
		return nil, file, &renderer.InputError{File: file, Msg: err.Error()}
	}
	return entries, file, nil
}

// ParseSelectors parses destination-selectors.yaml: a list of
// {directory?, matchLabels, matchExpressions?}. Unknown fields are refused,
// so a typo (matchLabel) is not silently a selector that matches everything.
func ParseSelectors(data []byte) ([]renderer.SelectorEntry, error) {
	docs, err := parseYAML(data)
	if err != nil {
		return nil, errors.New(oneDocument(err))
	}
	if len(docs) > 1 {
		return nil, fmt.Errorf("invalid YAML: expected one document, found %d", len(docs))
	}
	if len(docs) == 0 {
		return nil, nil
	}
	n := content(docs[0])
	if n == nil {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("line %d: want a list of {directory, matchLabels}", n.Line)
	}
	var entries []renderer.SelectorEntry
	for i, item := range n.Content {
		if err := unknownField(item, reflect.TypeFor[renderer.SelectorEntry](), ""); err != nil {
			return nil, fmt.Errorf("entry %d: %v", i+1, err)
		}
	}
	if err := n.Decode(&entries); err != nil {
		return nil, fmt.Errorf("invalid YAML: %s (want a list of {directory, matchLabels})", yamlMsg(err))
	}
	return entries, nil
}

// Output is a workflow output folder, read.
type Output struct {
	Files []renderer.File
	// Dirs are the top-level folders, including empty ones.
	Dirs []string
}

// ScanOutput reads every regular file below dir, keeping sub-folders.
// Links are followed only when they stay inside dir, and everything is
// read through an os.Root, so that no file outside dir is ever read, even
// when the tree changes while it is read. A .yaml or .yml file must be
// valid YAML (every document of it), within MaxYAMLBytes and MaxAliasNodes.
func ScanOutput(dir string) (*Output, error) { return ScanOutputContext(context.Background(), dir) }

// ScanOutputContext is ScanOutput that stops with ctx's error once ctx is
// done: it checks before each file.
func ScanOutputContext(ctx context.Context, dir string) (*Output, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, &renderer.InputError{File: dir, Msg: "cannot read the output folder: " + cleanErr(err)}
	}
	if !fi.IsDir() {
		return nil, &renderer.InputError{File: dir, Msg: "the output is not a folder"}
	}
	f, err := openFolder(dir, "output folder")
	if err != nil {
		return nil, &renderer.InputError{File: dir, Msg: "cannot read the output folder: " + cleanErr(err)}
	}
	defer f.Close()
	out := &Output{}
	err = f.walk(func(rel string, d fs.DirEntry) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() {
			if rel != "." && !strings.Contains(rel, "/") {
				out.Dirs = append(out.Dirs, rel)
			}
			return nil
		}
		link := d.Type()&fs.ModeSymlink != 0
		if !link && !d.Type().IsRegular() {
			return f.fail(rel, "not a regular file")
		}
		var limit int64
		if isYAML(rel) {
			limit = MaxYAMLBytes
		}
		data, err := f.readFile(rel, limit)
		if errors.Is(err, fs.ErrNotExist) && link {
			return f.fail(rel, "broken link: "+cleanErr(err))
		}
		if errors.Is(err, fs.ErrNotExist) {
			return f.fail(rel, "cannot read: "+cleanErr(err))
		}
		if err != nil {
			return err
		}
		if isYAML(rel) {
			if err := CheckYAML(data); err != nil {
				return f.fail(rel, err.Error())
			}
		}
		out.Files = append(out.Files, renderer.File{Path: rel, Data: data})
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out.Files, func(i, j int) bool { return out.Files[i].Path < out.Files[j].Path })
	sort.Strings(out.Dirs)
	return out, nil
}

// Object is the workflow's input object (object.yaml): the Promise or the
// resource request.
type Object struct {
	File      string
	Name      string
	Namespace string
	Labels    map[string]string
	// Annotations are object.yaml's metadata.annotations.
	Annotations map[string]string
}

// LoadObject reads <input>/object.yaml; a missing file (or input folder)
// gives nil. It must hold one document.
func LoadObject(inputDir string) (*Object, error) {
	file := filepath.Join(inputDir, "object.yaml")
	f, err := openFolder(inputDir, "input folder")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &renderer.InputError{File: inputDir, Msg: "cannot read the input folder: " + cleanErr(err)}
	}
	defer f.Close()
	data, err := f.readFile("object.yaml", MaxYAMLBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	docs, err := parseYAML(data)
	if err != nil {
		return nil, &renderer.InputError{File: file, Msg: oneDocument(err)}
	}
	if len(docs) > 1 {
		return nil, &renderer.InputError{File: file, Msg: fmt.Sprintf("holds %d documents: it must hold one, the Promise or resource request", len(docs))}
	}
	var doc struct {
		Metadata meta `yaml:"metadata"`
	}
	if len(docs) == 1 {
		if err := docs[0].Decode(&doc); err != nil {
			return nil, &renderer.InputError{File: file, Msg: "invalid YAML: " + yamlMsg(err)}
		}
	}
	return &Object{File: file, Name: doc.Metadata.Name, Namespace: doc.Metadata.Namespace, Labels: doc.Metadata.Labels, Annotations: doc.Metadata.Annotations}, nil
}

// Identity fills the workflow identity from the variables Kratix sets in
// pipeline containers, then the flags that were set, then — for resource
// workflows — object.yaml for a name or namespace still missing.
func Identity(getenv func(string) string, flags map[string]string, obj *Object) renderer.Workflow {
	pick := func(env, flag string) string {
		if v, ok := flags[flag]; ok {
			return v
		}
		return getenv(env)
	}
	w := renderer.Workflow{
		Type:      renderer.WorkflowType(pick("KRATIX_WORKFLOW_TYPE", "workflow-type")),
		Action:    renderer.Action(pick("KRATIX_WORKFLOW_ACTION", "action")),
		Promise:   pick("KRATIX_PROMISE_NAME", "promise"),
		Pipeline:  pick("KRATIX_PIPELINE_NAME", "pipeline"),
		Name:      pick("KRATIX_OBJECT_NAME", "name"),
		Namespace: pick("KRATIX_OBJECT_NAMESPACE", "namespace"),
	}
	if w.Action == "" {
		w.Action = renderer.Configure
	}
	if w.Type == renderer.PromiseWorkflow && obj != nil && w.Promise == "" {
		w.Promise = obj.Name
	}
	if w.Type == renderer.ResourceWorkflow && obj != nil {
		if w.Name == "" {
			w.Name = obj.Name
		}
		if w.Namespace == "" {
			w.Namespace = obj.Namespace
		}
		if w.Namespace == "" && w.Name != "" {
			// A cluster-scoped resource: Kratix files it under its own
			// namespace.
			w.Namespace = renderer.ClusterScopedNamespace
		}
	}
	return w
}
