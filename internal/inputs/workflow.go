package inputs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/render-dev/render/renderer"
)

// SelectorsFileName is the metadata file with the workflow's destination selectors.
const SelectorsFileName = "destination-selectors.yaml"

// LoadSelectors reads <metadata>/destination-selectors.yaml. A missing
// file means no selectors.
func LoadSelectors(metadataDir string) ([]renderer.SelectorEntry, string, error) {
	file := filepath.Join(metadataDir, SelectorsFileName)
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, file, nil
	}
	if err != nil {
		return nil, file, &renderer.InputError{File: file, Msg: cleanErr(err)}
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
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var entries []renderer.SelectorEntry
	if err := dec.Decode(&entries); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, fmt.Errorf("invalid YAML: %s (want a list of {directory, matchLabels})", yamlMsg(err))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("invalid YAML: expected one document, found more")
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
// Links are followed only when they stay inside dir; a .yaml or .yml file
// must be valid YAML (every document of it).
func ScanOutput(dir string) (*Output, error) { return ScanOutputContext(context.Background(), dir) }

// ScanOutputContext is ScanOutput that stops with ctx's error once ctx is
// done: it checks before each file.
func ScanOutputContext(ctx context.Context, dir string) (*Output, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, &renderer.InputError{File: dir, Msg: err.Error()}
	}
	fi, err := os.Stat(root)
	if err != nil {
		return nil, &renderer.InputError{File: dir, Msg: "cannot read the output folder: " + cleanErr(err)}
	}
	if !fi.IsDir() {
		return nil, &renderer.InputError{File: dir, Msg: "the output is not a folder"}
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, &renderer.InputError{File: dir, Msg: cleanErr(err)}
	}
	out := &Output{}
	err = filepath.WalkDir(walkRoot(root), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return &renderer.InputError{File: p, Msg: "cannot read: " + cleanErr(err)}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && !strings.Contains(rel, "/") {
				out.Dirs = append(out.Dirs, rel)
			}
			return nil
		}
		target := p
		if d.Type()&fs.ModeSymlink != 0 {
			real, err := filepath.EvalSymlinks(p)
			if err != nil {
				return &renderer.InputError{File: p, Msg: "broken link: " + cleanErr(err)}
			}
			if r, err := filepath.Rel(realRoot, real); err != nil || r == ".." || strings.HasPrefix(r, "../") {
				return &renderer.InputError{File: p, Msg: "link leads outside the output folder"}
			}
			ti, err := os.Stat(real)
			if err != nil {
				return &renderer.InputError{File: p, Msg: cleanErr(err)}
			}
			if ti.IsDir() {
				return &renderer.InputError{File: p, Msg: "links to folders are not followed: copy the folder into the output instead"}
			}
			target = real
		} else if !d.Type().IsRegular() {
			return &renderer.InputError{File: p, Msg: "not a regular file"}
		}
		data, err := os.ReadFile(target)
		if err != nil {
			return &renderer.InputError{File: p, Msg: "cannot read: " + cleanErr(err)}
		}
		if isYAML(p) {
			if err := CheckYAML(data); err != nil {
				return &renderer.InputError{File: p, Msg: err.Error()}
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

// yamlMsg is a YAML error as one line without the "yaml: " prefix: a
// decoding (type) error lists each of its problems on a line of its own,
// and a message is printed as one line. The value a type error quotes is
// left out: it may be a password (a Secret's stringData mistyped as a
// scalar), and the line number finds it.
func yamlMsg(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs := make([]string, len(te.Errors))
		for i, m := range te.Errors {
			msgs[i] = quotedValue.ReplaceAllString(m, "cannot unmarshal $1 into ")
		}
		return strings.Join(msgs, "; ")
	}
	return strings.ReplaceAll(strings.TrimPrefix(err.Error(), "yaml: "), "\n", " ")
}

// quotedValue is the value yaml.v3 quotes in a type error, up to the last
// "into" of the line (the value itself may hold one).
var quotedValue = regexp.MustCompile("cannot unmarshal (\\S+) `.*` into ")

// CheckYAML reports the first document of data that is not valid YAML.
func CheckYAML(data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for i := 1; ; i++ {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("document %d: invalid YAML: %s", i, strings.TrimPrefix(err.Error(), "yaml: "))
		}
	}
}

// Object is the workflow's input object (object.yaml): the Promise or the
// resource request.
type Object struct {
	File      string
	Name      string
	Namespace string
	Labels    map[string]string
}

// LoadObject reads <input>/object.yaml; a missing file gives nil.
func LoadObject(inputDir string) (*Object, error) {
	file := filepath.Join(inputDir, "object.yaml")
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &renderer.InputError{File: file, Msg: cleanErr(err)}
	}
	var doc struct {
		Metadata meta `yaml:"metadata"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &renderer.InputError{File: file, Msg: "invalid YAML: " + yamlMsg(err)}
	}
	return &Object{File: file, Name: doc.Metadata.Name, Namespace: doc.Metadata.Namespace, Labels: doc.Metadata.Labels}, nil
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
			w.Namespace = "default"
		}
	}
	return w
}
