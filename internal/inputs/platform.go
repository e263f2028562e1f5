// Package inputs reads everything a render needs from disk and the
// environment — the platform configuration, secrets, the workflow's output,
// metadata and input — and validates it completely, so that bad input is
// refused with one message naming the file and document before anything is
// written. It knows the Kubernetes shapes of Kratix's resources.
package inputs

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/renderer"
)

// Platform is the platform configuration: Kratix-shaped documents.
type Platform struct {
	Destinations []renderer.Destination
	GitStores    map[string]*GitStateStore
	BucketStores map[string]*BucketStateStore
	Promises     map[string]*renderer.Promise
	// Secrets by "namespace/name" (and by bare name), key -> value.
	Secrets map[string]map[string][]byte
	// origin of each destination, for messages.
	destFile map[string]string
}

// SecretRef points at a Secret.
type SecretRef struct {
	Name      string `yaml:"name"`
	Namespace string `yaml:"namespace"`
}

// GitAuthor signs commits.
type GitAuthor struct {
	Name  string `yaml:"name"`
	Email string `yaml:"email"`
}

// GitStateStore is Kratix's GitStateStore spec, plus TLS options.
type GitStateStore struct {
	Name       string     `yaml:"-"`
	File       string     `yaml:"-"`
	URL        string     `yaml:"url"`
	Branch     string     `yaml:"branch"`
	Path       string     `yaml:"path"`
	AuthMethod string     `yaml:"authMethod"`
	SecretRef  *SecretRef `yaml:"secretRef"`
	GitAuthor  GitAuthor  `yaml:"gitAuthor"`
	// InsecureSkipTLSVerify turns TLS verification off (logged as a warning).
	InsecureSkipTLSVerify bool `yaml:"insecureSkipTLSVerify"`
	// AllowInsecureHTTP lets basicAuth send its password over plain
	// http:// to a host that is not this machine (refused otherwise).
	AllowInsecureHTTP bool `yaml:"allowInsecureHTTP"`
}

// BucketStateStore is Kratix's BucketStateStore spec, plus region and bucket creation.
type BucketStateStore struct {
	Name         string     `yaml:"-"`
	File         string     `yaml:"-"`
	Endpoint     string     `yaml:"endpoint"`
	BucketName   string     `yaml:"bucketName"`
	Path         string     `yaml:"path"`
	Insecure     bool       `yaml:"insecure"`
	Region       string     `yaml:"region"`
	AuthMethod   string     `yaml:"authMethod"`
	SecretRef    *SecretRef `yaml:"secretRef"`
	CreateBucket bool       `yaml:"createBucket"`
}

type meta struct {
	Name      string            `yaml:"name"`
	Namespace string            `yaml:"namespace"`
	Labels    map[string]string `yaml:"labels"`
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
	Path              string `yaml:"path"`
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
}

type promiseSpec struct {
	DestinationSelectors []renderer.Selector `yaml:"destinationSelectors"`
}

// LoadPlatform reads the platform configuration from files and folders of
// YAML files (a folder is read recursively, in name order), plus secrets
// mounted as <secretsDir>/<secret name>/<key>.
func LoadPlatform(paths []string, secretsDir string) (*Platform, error) {
	p := &Platform{
		GitStores:    map[string]*GitStateStore{},
		BucketStores: map[string]*BucketStateStore{},
		Promises:     map[string]*renderer.Promise{},
		Secrets:      map[string]map[string][]byte{},
		destFile:     map[string]string{},
	}
	if len(paths) == 0 {
		return nil, &renderer.InputError{Where: "--platform", Msg: "no platform configuration given: pass --platform with a file or folder of Destination and state store documents"}
	}
	var files []string
	for _, root := range paths {
		fi, err := os.Stat(root)
		if err != nil {
			return nil, &renderer.InputError{File: root, Msg: "cannot read platform configuration: " + cleanErr(err)}
		}
		if !fi.IsDir() {
			files = append(files, root)
			continue
		}
		wr := walkRoot(root)
		err = filepath.WalkDir(wr, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != wr {
				return filepath.SkipDir
			}
			if !d.IsDir() && isYAML(p) {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			return nil, &renderer.InputError{File: root, Msg: "cannot read platform configuration: " + cleanErr(err)}
		}
	}
	for _, f := range files {
		if err := p.loadFile(f); err != nil {
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

// walkRoot is root as filepath.WalkDir must be given it to descend into a
// root that is a link to a folder: WalkDir does not follow a link given as
// its root, and would report the link itself as a file.
func walkRoot(root string) string {
	if strings.HasSuffix(root, string(filepath.Separator)) {
		return root
	}
	return root + string(filepath.Separator)
}

func isYAML(p string) bool {
	ext := strings.ToLower(filepath.Ext(p))
	return ext == ".yaml" || ext == ".yml"
}

func cleanErr(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

func (p *Platform) loadFile(file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return &renderer.InputError{File: file, Msg: cleanErr(err)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for i := 1; ; i++ {
		var doc document
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return nil
		}
		where := fmt.Sprintf("document %d", i)
		if err != nil {
			return &renderer.InputError{File: file, Where: where, Msg: "invalid YAML: " + yamlMsg(err)}
		}
		if doc.Kind == "" && doc.APIVersion == "" {
			continue // an empty document
		}
		if doc.Metadata.Name != "" {
			where = fmt.Sprintf("document %d (%s %s)", i, doc.Kind, doc.Metadata.Name)
		}
		if err := p.add(file, where, &doc); err != nil {
			return err
		}
	}
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
	switch doc.Kind {
	case "Destination", "GitStateStore", "BucketStateStore", "Promise", "Secret":
	default:
		return nil // other documents may share the folder; they are not ours
	}
	name := doc.Metadata.Name
	if name == "" {
		return bad("metadata.name is missing")
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
		}
		if d.Path == "" {
			d.Path = name
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
		if d.Store.Kind == "" || d.Store.Name == "" {
			return bad("spec.stateStoreRef needs kind and name")
		}
		p.Destinations = append(p.Destinations, d)
		p.destFile[name] = file
	case "GitStateStore":
		s := &GitStateStore{Name: name, File: file}
		if err := decodeSpec(doc, file, where, s); err != nil {
			return err
		}
		if _, dup := p.GitStores[name]; dup {
			return bad("GitStateStore %s is defined twice", name)
		}
		if s.URL == "" {
			return bad("spec.url is missing")
		}
		if err := checkGitURL(s.URL); err != nil {
			return bad("%v", err)
		}
		if s.Branch == "" {
			s.Branch = "main"
		}
		switch s.AuthMethod {
		case "", "basicAuth", "ssh":
		default:
			return bad("spec.authMethod %q is unknown: use basicAuth or ssh", s.AuthMethod)
		}
		p.GitStores[name] = s
	case "BucketStateStore":
		s := &BucketStateStore{Name: name, File: file}
		if err := decodeSpec(doc, file, where, s); err != nil {
			return err
		}
		if _, dup := p.BucketStores[name]; dup {
			return bad("BucketStateStore %s is defined twice", name)
		}
		if s.Endpoint == "" || s.BucketName == "" {
			return bad("spec.endpoint and spec.bucketName are required")
		}
		if err := checkEndpoint(s.Endpoint); err != nil {
			return bad("%v", err)
		}
		switch s.AuthMethod {
		case "", "accessKey", "IAM":
		default:
			return bad("spec.authMethod %q is unknown: use accessKey or IAM", s.AuthMethod)
		}
		p.BucketStores[name] = s
	case "Promise":
		var spec promiseSpec
		if err := decodeSpec(doc, file, where, &spec); err != nil {
			return err
		}
		pr := &renderer.Promise{Name: name, DestinationSelectors: spec.DestinationSelectors}
		for i, s := range spec.DestinationSelectors {
			if _, err := renderer.CheckSelector(s); err != nil {
				return bad("spec.destinationSelectors[%d]: %v", i, err)
			}
		}
		p.Promises[name] = pr
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
		ns := doc.Metadata.Namespace
		if ns == "" {
			ns = "default"
		}
		registerSecret(values)
		p.Secrets[ns+"/"+name] = values
		p.Secrets[name] = values
	}
	return nil
}

// loadSecretDir reads secrets mounted the way Kubernetes mounts them.
func (p *Platform) loadSecretDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return &renderer.InputError{File: dir, Msg: "cannot read secrets folder: " + cleanErr(err)}
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue // Kubernetes' ..data links
		}
		sub := filepath.Join(dir, e.Name())
		fi, err := os.Stat(sub)
		if err != nil || !fi.IsDir() {
			continue
		}
		keys, err := os.ReadDir(sub)
		if err != nil {
			return &renderer.InputError{File: sub, Msg: "cannot read secret: " + cleanErr(err)}
		}
		values := map[string][]byte{}
		for _, k := range keys {
			if strings.HasPrefix(k.Name(), ".") {
				continue
			}
			b, err := os.ReadFile(filepath.Join(sub, k.Name()))
			if err != nil {
				continue // a folder inside a secret folder is not a key
			}
			values[k.Name()] = b
		}
		registerSecret(values)
		if _, ok := p.Secrets[e.Name()]; !ok {
			p.Secrets[e.Name()] = values
		}
	}
	return nil
}

// validate checks references between documents.
func (p *Platform) validate() error {
	sort.Slice(p.Destinations, func(i, j int) bool { return p.Destinations[i].Name < p.Destinations[j].Name })
	paths := map[string]string{}
	for _, d := range p.Destinations {
		file := p.destFile[d.Name]
		where := "Destination " + d.Name
		switch d.Store.Kind {
		case "GitStateStore":
			if p.GitStores[d.Store.Name] == nil {
				return &renderer.InputError{File: file, Where: where, Msg: fmt.Sprintf("spec.stateStoreRef names GitStateStore %s, which is not defined", d.Store.Name)}
			}
		case "BucketStateStore":
			if p.BucketStores[d.Store.Name] == nil {
				return &renderer.InputError{File: file, Where: where, Msg: fmt.Sprintf("spec.stateStoreRef names BucketStateStore %s, which is not defined", d.Store.Name)}
			}
		default:
			return &renderer.InputError{File: file, Where: where, Msg: fmt.Sprintf("spec.stateStoreRef.kind %q is neither GitStateStore nor BucketStateStore", d.Store.Kind)}
		}
		key := d.Store.String() + ":" + d.Path
		if other, ok := paths[key]; ok {
			return &renderer.InputError{File: file, Where: where, Msg: fmt.Sprintf("spec.path %q is also used by Destination %s in the same state store", d.Path, other)}
		}
		paths[key] = d.Name
		for k, other := range paths {
			otherPath := strings.TrimPrefix(k, d.Store.String()+":")
			if otherPath != k && otherPath != d.Path && (strings.HasPrefix(otherPath+"/", d.Path+"/") || strings.HasPrefix(d.Path+"/", otherPath+"/")) {
				return &renderer.InputError{File: file, Where: where, Msg: fmt.Sprintf("spec.path %q overlaps the path %q of Destination %s in the same state store", d.Path, otherPath, other)}
			}
		}
	}
	return nil
}

// Secret resolves a store's secretRef.
func (p *Platform) Secret(ref *SecretRef) (map[string][]byte, bool) {
	if ref == nil {
		return nil, false
	}
	if ref.Namespace != "" {
		if s, ok := p.Secrets[ref.Namespace+"/"+ref.Name]; ok {
			return s, true
		}
	}
	s, ok := p.Secrets[ref.Name]
	return s, ok
}

// DestinationFile is the file that defined a destination.
func (p *Platform) DestinationFile(name string) string { return p.destFile[name] }
