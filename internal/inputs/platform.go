// Package inputs reads everything a render needs from disk and the
// environment — the platform configuration, secrets, the workflow's output,
// metadata and input — and validates it completely, so that bad input is
// refused with one message naming the file and document before anything is
// written. It knows the Kubernetes shapes of Kratix's resources; each
// state store's spec type, its apiVersion and its own fields belong to
// its kind, which it asks through StoreKinds (package internal/storekind),
// and it keeps the stores as StoreSpecs without knowing their types.
package inputs

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"

	"gopkg.in/yaml.v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/renderer"
)

// Platform is the platform configuration: Kratix-shaped documents.
type Platform struct {
	Destinations []renderer.Destination
	// Stores are the state stores, by the reference destinations use;
	// each spec is of its kind's own type (package internal/storekind).
	Stores   map[renderer.StoreRef]StoreSpec
	Promises map[string]*renderer.Promise
	// Secrets are the Secret documents by "namespace/name", key -> value
	// (see Secret for how a reference finds one).
	Secrets map[string]map[string][]byte
	// kinds checks each store's own fields.
	kinds StoreKinds
	// mounted are the Secrets of --secrets-dir (secretsDir), by name;
	// secretFrom where each Secret document was read, by namespace/name.
	mounted    map[string]map[string][]byte
	secretsDir string
	secretFrom map[string]secretOrigin
	// origin of each destination and promise, for messages.
	destFile    map[string]string
	promiseFile map[string]string
	// secretPolicies are the destinations' spec.secrets (see SecretsPolicy).
	secretPolicies map[string]SecretsPolicy
}

// SecretRef points at a Secret.
type SecretRef struct {
	Name      string `yaml:"name"`
	Namespace string `yaml:"namespace"`
}

// Commit is how a store that writes commits (a GitStateStore: see
// storekind.Kind.Commit) writes them: a Go text/template
// for the subject (first line) and body, the annotations of object.yaml it
// may read, and the annotation naming the git author ("Name <email>").
// render's trailers always follow the template's text.
type Commit struct {
	Template         string   `yaml:"template"`
	Annotations      []string `yaml:"annotations"`
	AuthorAnnotation string   `yaml:"authorAnnotation"`
}

// MassDeletion is a store's mass-deletion breaker (bookkeeping.Check): a
// write that would leave a destination with no workload files, or delete
// more than these shares, is refused unless Allow is set.
type MassDeletion struct {
	// Allow lets every write through (as --allow-mass-deletion does).
	Allow bool `yaml:"allow"`
	// MaxDestinationPercent (1-100) refuses a write deleting more than this
	// share of a destination's workload files; 0 is no such limit.
	MaxDestinationPercent int `yaml:"maxDestinationPercent"`
	// MaxStorePercent (1-100) refuses a write deleting more than this share
	// of the store's workload files; 0 is no such limit.
	MaxStorePercent int `yaml:"maxStorePercent"`
}

// Check validates the breaker's limits; its error names the field.
func (m MassDeletion) Check() error {
	if m.MaxDestinationPercent < 0 || m.MaxDestinationPercent > 100 {
		return fmt.Errorf("spec.massDeletion.maxDestinationPercent %d: use 0 (no limit) to 100", m.MaxDestinationPercent)
	}
	if m.MaxStorePercent < 0 || m.MaxStorePercent > 100 {
		return fmt.Errorf("spec.massDeletion.maxStorePercent %d: use 0 (no limit) to 100", m.MaxStorePercent)
	}
	return nil
}

type meta struct {
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type document struct {
	APIVersion string    `yaml:"apiVersion"`
	Kind       string    `yaml:"kind"`
	Metadata   meta      `yaml:"metadata"`
	Spec       yaml.Node `yaml:"spec"`
	// Secret fields.
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
}

type destinationSpec struct {
	Path string `yaml:"path"`
	// Cleanup is Kratix's (what its controller removes when the
	// Destination is deleted); render never deletes a destination.
	Cleanup           string `yaml:"cleanup"`
	StrictMatchLabels bool   `yaml:"strictMatchLabels"`
	Unschedulable     bool   `yaml:"unschedulable"`
	StateStoreRef     struct {
		Kind string `yaml:"kind"`
		Name string `yaml:"name"`
	} `yaml:"stateStoreRef"`
	Filepath struct {
		Mode     string `yaml:"mode"`
		Filename string `yaml:"filename"`
	} `yaml:"filepath"`
	// InitWorkloads is Kratix's: enabled (the default) writes the canary
	// files to the destination.
	InitWorkloads struct {
		Enabled *bool `yaml:"enabled"`
	} `yaml:"initWorkloads"`
	// Secrets is render's own: what it does with the Secrets a workflow
	// writes to the destination (see SecretsSpec).
	Secrets *SecretsSpec `yaml:"secrets"`
}

type promiseSpec struct {
	DestinationSelectors []renderer.Selector `yaml:"destinationSelectors"`
	// The rest of a Kratix Promise, which render does not read.
	API          yaml.Node `yaml:"api"`
	Workflows    yaml.Node `yaml:"workflows"`
	Dependencies yaml.Node `yaml:"dependencies"`
	Requirements yaml.Node `yaml:"requirements"`
}

// secretDoc is the shape of a v1 Secret.
type secretDoc struct {
	APIVersion string            `yaml:"apiVersion"`
	Kind       string            `yaml:"kind"`
	Metadata   metav1.ObjectMeta `yaml:"metadata"`
	Type       string            `yaml:"type"`
	Immutable  *bool             `yaml:"immutable"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
}

// kinds are the documents render reads from the platform configuration,
// with their apiVersion and shape, besides the state stores (whose kinds
// say theirs: StoreKinds.StoreDocument). Other kinds are ignored.
var kinds = map[string]struct {
	apiVersion string
	shape      reflect.Type
}{
	"Destination": {kratixAPI, reflect.TypeFor[Document[destinationSpec]]()},
	"Promise":     {kratixAPI, reflect.TypeFor[Document[promiseSpec]]()},
	"Secret":      {"v1", reflect.TypeFor[secretDoc]()},
}

const kratixAPI = "platform.kratix.io/v1alpha1"

// KratixAPIVersion is the apiVersion of Kratix's documents, its state
// stores' among them.
const KratixAPIVersion = kratixAPI

// LoadPlatform reads the platform configuration from files and folders of
// YAML files (a folder is read recursively, in name order, through an
// os.Root: links in it are followed only inside it), plus secrets mounted
// as <secretsDir>/<secret name>/<key>. kinds checks each state store's own
// fields (storekind.Default, the registry of the kinds render writes).
func LoadPlatform(kinds StoreKinds, paths []string, secretsDir string) (*Platform, error) {
	if kinds == nil {
		// A mistake in the program, not in its input.
		return nil, errors.New("inputs: LoadPlatform needs the store kinds (storekind.Default) to check state stores")
	}
	p := &Platform{
		kinds:       kinds,
		Stores:      map[renderer.StoreRef]StoreSpec{},
		Promises:    map[string]*renderer.Promise{},
		Secrets:     map[string]map[string][]byte{},
		mounted:     map[string]map[string][]byte{},
		secretFrom:  map[string]secretOrigin{},
		secretsDir:  secretsDir,
		destFile:    map[string]string{},
		promiseFile: map[string]string{},
	}
	if len(paths) == 0 {
		return nil, &renderer.InputError{Where: "--platform", Msg: "no platform configuration given: pass --platform with a file or folder of Destination and state store documents"}
	}
	for _, root := range paths {
		if err := p.loadPath(root); err != nil {
			return nil, err
		}
	}
	if secretsDir != "" {
		if err := p.loadSecretDir(secretsDir); err != nil {
			return nil, err
		}
	}
	return p, p.validate()
}

// loadPath reads one --platform path: a file, or a folder of YAML files.
func (p *Platform) loadPath(root string) error {
	fi, err := os.Stat(root)
	if err != nil {
		return &renderer.InputError{File: root, Msg: "cannot read platform configuration: " + cleanErr(err)}
	}
	if !fi.IsDir() {
		data, err := readLimited(root, MaxYAMLBytes)
		if err != nil {
			return &renderer.InputError{File: root, Msg: err.Error()}
		}
		return p.loadFile(root, data)
	}
	f, err := openFolder(root, "platform folder")
	if err != nil {
		return &renderer.InputError{File: root, Msg: "cannot read platform configuration: " + cleanErr(err)}
	}
	defer f.Close()
	return f.walk(func(rel string, d fs.DirEntry) error {
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." {
				return fs.SkipDir
			}
			return nil
		}
		if !isYAML(rel) {
			return nil
		}
		data, err := f.readFile(rel, MaxYAMLBytes)
		if errors.Is(err, fs.ErrNotExist) {
			return f.fail(rel, "broken link: "+cleanErr(err))
		}
		if err != nil {
			return err
		}
		return p.loadFile(f.path(rel), data)
	})
}

// readLimited reads a file named on the command line, at most limit bytes.
func readLimited(file string, limit int64) ([]byte, error) {
	// Opened without waiting: a named pipe must not hang render.
	fh, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, errors.New(cleanErr(err))
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, errors.New(cleanErr(err))
	}
	if !fi.Mode().IsRegular() {
		return nil, errors.New("is not a regular file or a folder")
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("is larger than %s, the limit for a YAML file", mib(limit))
	}
	data, err := io.ReadAll(io.LimitReader(fh, limit+1))
	if err != nil {
		return nil, errors.New(cleanErr(err))
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("is larger than %s, the limit for a YAML file", mib(limit))
	}
	return data, nil
}

func isYAML(p string) bool {
	ext := strings.ToLower(filepath.Ext(p))
	return ext == ".yaml" || ext == ".yml"
}

func cleanErr(err error) string {
	if msg, ok := TooLong(err); ok {
		return msg
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

func (p *Platform) loadFile(file string, data []byte) error {
	docs, err := parseYAML(data)
	if err != nil {
		return &renderer.InputError{File: file, Msg: err.Error()}
	}
	for i, n := range docs {
		where := fmt.Sprintf("document %d", i+1)
		root := content(n)
		if root == nil {
			continue // an empty document
		}
		if root.Kind != yaml.MappingNode {
			return &renderer.InputError{File: file, Where: where, Msg: fmt.Sprintf("line %d: not a Kubernetes object (a mapping with apiVersion and kind)", root.Line)}
		}
		var doc document
		var head struct {
			APIVersion any `yaml:"apiVersion"`
			Kind       any `yaml:"kind"`
			Metadata   struct {
				Name any `yaml:"name"`
			} `yaml:"metadata"`
		}
		_ = root.Decode(&head) // a best effort, to name the document
		kind, _ := head.Kind.(string)
		apiVersion, _ := head.APIVersion.(string)
		if name, ok := head.Metadata.Name.(string); ok && name != "" && kind != "" {
			where = fmt.Sprintf("document %d (%s %s)", i+1, kind, name)
		}
		switch {
		case kind == "" && apiVersion == "":
			return &renderer.InputError{File: file, Where: where, Msg: "apiVersion and kind are missing: every platform document is a Kubernetes object"}
		case kind == "":
			return &renderer.InputError{File: file, Where: where, Msg: "kind is missing"}
		case apiVersion == "":
			return &renderer.InputError{File: file, Where: where, Msg: "apiVersion is missing"}
		}
		k, ours := kinds[kind]
		store, isStore := p.kinds.StoreDocument(kind)
		if isStore {
			k.apiVersion, k.shape = store.APIVersion, store.Shape
		} else if !ours {
			continue // other documents may share the folder; they are not ours
		}
		if err := root.Decode(&doc); err != nil {
			return &renderer.InputError{File: file, Where: where, Msg: "invalid YAML: " + yamlMsg(err)}
		}
		if apiVersion != k.apiVersion {
			return &renderer.InputError{File: file, Where: where, Msg: fmt.Sprintf("apiVersion %q: a %s is %s", apiVersion, kind, k.apiVersion)}
		}
		if err := unknownField(root, k.shape, ""); err != nil {
			return &renderer.InputError{File: file, Where: where, Msg: err.Error()}
		}
		if err := p.add(file, where, &doc); err != nil {
			return err
		}
	}
	return nil
}

// validateMeta checks a document's name, namespace and labels with
// Kubernetes' own rules.
func validateMeta(doc *document) error {
	if errs := validation.IsDNS1123Subdomain(doc.Metadata.Name); len(errs) > 0 {
		return fmt.Errorf("metadata.name %q is not a valid Kubernetes name: %s", doc.Metadata.Name, strings.Join(errs, "; "))
	}
	if ns := doc.Metadata.Namespace; ns != "" {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fmt.Errorf("metadata.namespace %q is not a valid Kubernetes namespace: %s", ns, strings.Join(errs, "; "))
		}
	}
	if errs := metav1validation.ValidateLabels(doc.Metadata.Labels, field.NewPath("metadata", "labels")); len(errs) > 0 {
		return errors.New(errs[0].Error())
	}
	return nil
}

func decodeSpec(doc *document, file, where string, into any) error {
	if doc.Spec.Kind == 0 {
		return nil
	}
	if err := doc.Spec.Decode(into); err != nil {
		return &renderer.InputError{File: file, Where: where, Msg: "spec: " + yamlMsg(err)}
	}
	return nil
}

func (p *Platform) add(file, where string, doc *document) error {
	bad := func(msg string, args ...any) error {
		return &renderer.InputError{File: file, Where: where, Msg: fmt.Sprintf(msg, args...)}
	}
	name := doc.Metadata.Name
	if name == "" {
		return bad("metadata.name is missing")
	}
	if err := validateMeta(doc); err != nil {
		return bad("%v", err)
	}
	switch doc.Kind {
	case "Destination":
		var spec destinationSpec
		if err := decodeSpec(doc, file, where, &spec); err != nil {
			return err
		}
		if _, dup := p.destFile[name]; dup {
			return bad("Destination %s is defined twice (also in %s)", name, p.destFile[name])
		}
		d := renderer.Destination{
			Name: name, Labels: doc.Metadata.Labels, Path: spec.Path,
			Store:             renderer.StoreRef{Kind: spec.StateStoreRef.Kind, Name: spec.StateStoreRef.Name},
			StrictMatchLabels: spec.StrictMatchLabels, Unschedulable: spec.Unschedulable,
			Mode: renderer.FilepathMode(spec.Filepath.Mode), Filename: spec.Filepath.Filename,
			NoInitWorkloads: spec.InitWorkloads.Enabled != nil && !*spec.InitWorkloads.Enabled,
		}
		if d.Path == "" {
			d.Path = name
		}
		if p := strings.Trim(d.Path, "/"); p == "" || p == "." {
			return bad("spec.path %q: a destination at the store's root is refused: render keeps its records in %s beside the destinations, and a root destination would hold every other one; give the destination a folder, or move the store's spec.path into it", d.Path, layout.MetaDir)
		}
		d.Path = strings.Trim(d.Path, "/")
		if d.Mode == "" {
			d.Mode = renderer.NestedByMetadata
		}
		switch d.Mode {
		case renderer.NestedByMetadata, renderer.NoNesting:
		case renderer.AggregatedYAML:
			if d.Filename == "" {
				d.Filename = "aggregated.yaml"
			}
			if strings.Contains(d.Filename, "/") || d.Filename == "." || d.Filename == ".." {
				return bad("spec.filepath.filename %q must be a plain file name", d.Filename)
			}
			if err := layout.CheckAggregateFile(d.Filename); err != nil {
				return bad("spec.filepath.filename: %v", err)
			}
		default:
			return bad("spec.filepath.mode %q is unknown: use nestedByMetadata, aggregatedYAML or none", spec.Filepath.Mode)
		}
		if err := layout.ValidPath(d.Path); err != nil {
			return bad("spec.path: %v", err)
		}
		if layout.IsMeta(d.Path) || strings.HasPrefix(d.Path, layout.MetaDir) {
			return bad("spec.path %q is reserved for render's own records", d.Path)
		}
		switch spec.Cleanup {
		case "", "none", "all":
		default:
			return bad("spec.cleanup %q is unknown: use none or all", spec.Cleanup)
		}
		if d.Store.Kind == "" || d.Store.Name == "" {
			return bad("spec.stateStoreRef needs kind and name")
		}
		if err := p.addSecretsPolicy(name, spec.Secrets); err != nil {
			return bad("%v", err)
		}
		p.Destinations = append(p.Destinations, d)
		p.destFile[name] = file
	case "Promise":
		var spec promiseSpec
		if err := decodeSpec(doc, file, where, &spec); err != nil {
			return err
		}
		pr := &renderer.Promise{Name: name, DestinationSelectors: spec.DestinationSelectors}
		if err := readPromiseExtras(pr, &spec); err != nil {
			return bad("%v", err)
		}
		for i, s := range spec.DestinationSelectors {
			if _, err := renderer.CheckSelector(s); err != nil {
				return bad("spec.destinationSelectors[%d]: %v", i, err)
			}
		}
		if other, dup := p.Promises[name]; dup && !reflect.DeepEqual(other.DestinationSelectors, pr.DestinationSelectors) {
			return bad("Promise %s is defined twice with different spec.destinationSelectors (also in %s): keep one", name, p.promiseFile[name])
		}
		p.Promises[name] = pr
		p.promiseFile[name] = file
	case "Secret":
		values := map[string][]byte{}
		for k, v := range doc.Data {
			b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
			if err != nil {
				return bad("data.%s is not valid base64", k) // never echo the value
			}
			values[k] = b
		}
		for k, v := range doc.StringData {
			values[k] = []byte(v)
		}
		registerSecret(values)
		if err := p.addSecret(file, where, doc.Metadata.Namespace, name, values); err != nil {
			return bad("%v", err)
		}
	default:
		if sd, ok := p.kinds.StoreDocument(doc.Kind); ok {
			return p.addStore(file, where, doc, sd)
		}
	}
	return nil
}

// loadSecretDir reads secrets mounted the way Kubernetes mounts them
// (keys are links into a hidden ..data folder), through an os.Root: a link
// leading out of the folder is refused.
func (p *Platform) loadSecretDir(dir string) error {
	f, err := openFolder(dir, "secrets folder")
	if err != nil {
		return &renderer.InputError{File: dir, Msg: "cannot read secrets folder: " + cleanErr(err)}
	}
	defer f.Close()
	fsys := f.root.FS()
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return &renderer.InputError{File: dir, Msg: "cannot read secrets folder: " + cleanErr(err)}
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue // Kubernetes' ..data links
		}
		if fi, err := fs.Stat(fsys, e.Name()); err != nil || !fi.IsDir() {
			continue
		}
		keys, err := fs.ReadDir(fsys, e.Name())
		if err != nil {
			return f.fail(e.Name(), "cannot read secret: "+cleanErr(err))
		}
		values := map[string][]byte{}
		for _, k := range keys {
			if strings.HasPrefix(k.Name(), ".") {
				continue
			}
			rel := e.Name() + "/" + k.Name()
			if fi, err := fs.Stat(fsys, rel); err == nil && fi.IsDir() {
				continue // a folder inside a secret folder is not a key
			}
			b, err := f.readFile(rel, 0)
			if errors.Is(err, fs.ErrNotExist) {
				return f.fail(rel, "broken link: "+cleanErr(err))
			}
			if err != nil {
				return err
			}
			values[k.Name()] = b
		}
		registerSecret(values)
		p.addMounted(e.Name(), values)
	}
	return nil
}

// validate checks references between documents, and that no two
// destinations write one folder: within a store, or through two stores
// that are the same repository and branch (or bucket).
func (p *Platform) validate() error {
	sort.Slice(p.Destinations, func(i, j int) bool { return p.Destinations[i].Name < p.Destinations[j].Name })
	type placed struct {
		loc, prefix, folder string
		d                   renderer.Destination
	}
	var seen []placed
	for _, d := range p.Destinations {
		file := p.destFile[d.Name]
		bad := func(msg string, args ...any) error {
			return &renderer.InputError{File: file, Where: "Destination " + d.Name, Msg: fmt.Sprintf(msg, args...)}
		}
		spec := p.Store(d.Store)
		switch {
		case spec == nil && !p.isStoreKind(d.Store.Kind):
			return bad("spec.stateStoreRef.kind %q is not %s", d.Store.Kind, p.storeKindList())
		case spec == nil:
			return bad("spec.stateStoreRef names %s %s, which is not defined", d.Store.Kind, d.Store.Name)
		}
		if err := p.kinds.CheckDestination(spec, d.Path); err != nil {
			return bad("%v", err)
		}
		loc, prefix := p.location(d.Store)
		me := placed{loc: loc, prefix: prefix, folder: path.Join(prefix, d.Path), d: d}
		for _, o := range seen {
			if o.loc != loc {
				continue
			}
			if o.d.Store == d.Store {
				if o.d.Path == d.Path {
					return bad("spec.path %q is also used by Destination %s in the same state store", d.Path, o.d.Name)
				}
				if nested(o.d.Path, d.Path) {
					return bad("spec.path %q overlaps the path %q of Destination %s in the same state store: the outer destination would take the inner one's files as its own (read whole by Flux or Argo CD in aggregatedYAML and none modes, listed by a Bucket source's prefix, covered by its completeness marker), so one worker could apply, or prune, another's workloads", d.Path, o.d.Path, o.d.Name)
				}
				continue
			}
			if nested(o.folder, me.folder) {
				return bad("spec.path %q puts it in folder %q of %s, which overlaps folder %q of Destination %s through %s: both stores are %s", d.Path, me.folder, d.Store, o.folder, o.d.Name, o.d.Store, loc)
			}
			if o.prefix == me.prefix {
				return bad("spec.stateStoreRef %s is %s, path %q, as %s of Destination %s is: their records in %s would overwrite each other; use one store, or give them different paths", d.Store, loc, me.prefix, o.d.Store, o.d.Name, path.Join(me.prefix, layout.MetaDir))
			}
		}
		seen = append(seen, me)
	}
	return p.checkRecordFolders()
}

// nested says whether one of two slash paths is the other or inside it
// ("" is the whole store).
func nested(a, b string) bool {
	if a == "" || b == "" || a == "." || b == "." {
		return true
	}
	return a == b || strings.HasPrefix(a+"/", b+"/") || strings.HasPrefix(b+"/", a+"/")
}

// location is where a store's files land, as a phrase (the repository and
// branch, or the bucket), and its folder there. Two stores with one
// location write the same files.
func (p *Platform) location(ref renderer.StoreRef) (string, string) {
	if s := p.Store(ref); s != nil {
		return s.Location()
	}
	return ref.String(), ""
}

// DestinationFile is the file that defined a destination.
func (p *Platform) DestinationFile(name string) string { return p.destFile[name] }
