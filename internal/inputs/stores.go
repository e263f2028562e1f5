package inputs

import (
	"fmt"
	"reflect"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gopkg.in/yaml.v3"

	"github.com/render-dev/render/renderer"
)

// StoreSpec is a state store's spec, whatever its kind: each kind of
// store (package internal/storekind) has its own spec type, which this
// package decodes from the store's document and keeps without knowing it.
type StoreSpec interface {
	// Meta is what every kind of store has.
	Meta() StoreMeta
	// Location is where the store's files land, as a phrase (the
	// repository and branch, or the bucket), and its folder there: two
	// stores with one location write the same files.
	Location() (where, folder string)
}

// StoreMeta is what every kind of state store has: its document's kind
// and name, the file that defined it, its folder (spec.path, "" for a
// kind without one), its secret and its mass-deletion breaker.
type StoreMeta struct {
	Kind, Name, File, Path string
	SecretRef              *SecretRef
	MassDeletion           MassDeletion
}

// Ref names the store as destinations do.
func (m StoreMeta) Ref() renderer.StoreRef { return renderer.StoreRef{Kind: m.Kind, Name: m.Name} }

// TrimFolder is a store's spec.path as its Location gives it: without
// leading or trailing slashes, and "" for the store's root.
func TrimFolder(s string) string {
	s = strings.Trim(s, "/")
	if s == "." {
		return ""
	}
	return s
}

// Store returns the spec of the store ref names, or nil when the platform
// defines no such store.
func (p *Platform) Store(ref renderer.StoreRef) StoreSpec {
	if s, ok := p.Stores[ref]; ok && s != nil {
		return s
	}
	return nil
}

// StoresOf are the platform's stores whose spec is of type S (one kind's),
// by name.
func StoresOf[S StoreSpec](p *Platform) map[string]S {
	out := map[string]S{}
	for ref, s := range p.Stores {
		if s, ok := s.(S); ok {
			out[ref.Name] = s
		}
	}
	return out
}

// StoreDocument is how a kind of state store is written in the platform
// configuration: the apiVersion of its documents, the Go shape of a whole
// document (Document of its spec type), against which unknown fields and
// values of the wrong type are refused, and a new, empty spec for the
// store of that name, defined in that file, to decode the document's
// spec into.
type StoreDocument struct {
	APIVersion string
	Shape      reflect.Type
	New        func(name, file string) StoreSpec
}

// Document is the shape of a platform.kratix.io document with a spec of
// type Spec, for the check of unknown fields; metadata is apimachinery's,
// so that documents exported from a cluster (uid, annotations,
// managedFields) are accepted. A kind's StoreDocument.Shape is
// reflect.TypeFor[Document[its spec type]]().
type Document[Spec any] struct {
	APIVersion string            `yaml:"apiVersion"`
	Kind       string            `yaml:"kind"`
	Metadata   metav1.ObjectMeta `yaml:"metadata"`
	Spec       Spec              `yaml:"spec"`
	Status     yaml.Node         `yaml:"status"`
}

// StoreKinds are the kinds of state store a program writes: how each
// kind's documents are written (StoreDocument), and what each kind says
// about its spec: the fields it takes and their defaults, and what its
// backend accepts (a git URL and branch as go-git reads them, an OCI
// reference as the registry client does). This package knows the
// documents' shapes and checks what lies between documents; it asks
// StoreKinds about each store's own fields. The registry of store kinds
// (internal/storekind) is the implementation, which its user passes to
// LoadPlatform.
type StoreKinds interface {
	// StoreDocument is how the documents of the store kind of that name
	// are written; ok is false for a kind that is no store kind.
	StoreDocument(kind string) (d StoreDocument, ok bool)
	// StoreKindNames are the kinds' names, in the order messages list
	// them.
	StoreKindNames() []string
	// CheckStore validates a store's spec as decoded from its document,
	// and fills in its defaults. The error is the message, which names
	// the field (spec.…).
	CheckStore(spec StoreSpec) error
	// CheckDestination validates what a destination at path (its
	// spec.path, cleaned) needs of its store; the error is the message.
	CheckDestination(spec StoreSpec, path string) error
}

// addStore decodes a store's document into its kind's spec, and asks
// the kind to check and complete it.
func (p *Platform) addStore(file, where string, doc *document, sd StoreDocument) error {
	name := doc.Metadata.Name
	s := sd.New(name, file)
	if err := decodeSpec(doc, file, where, s); err != nil {
		return err
	}
	ref := renderer.StoreRef{Kind: doc.Kind, Name: name}
	if _, dup := p.Stores[ref]; dup {
		return &renderer.InputError{File: file, Where: where, Msg: fmt.Sprintf("%s %s is defined twice", doc.Kind, name)}
	}
	if err := p.kinds.CheckStore(s); err != nil {
		return &renderer.InputError{File: file, Where: where, Msg: err.Error()}
	}
	p.Stores[ref] = s
	return nil
}

// isStoreKind reports whether kind is a kind of state store the platform
// may define.
func (p *Platform) isStoreKind(kind string) bool {
	_, ok := p.kinds.StoreDocument(kind)
	return ok
}

// storeKindList names the store kinds for a message: "A, B or C".
func (p *Platform) storeKindList() string {
	names := p.kinds.StoreKindNames()
	switch len(names) {
	case 0:
		return "a state store kind"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// UnsafeInAuthor reports whether s holds what git does not take in an
// author or committer's name or email: a line break, another control
// character or an angle bracket.
func UnsafeInAuthor(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return lineBreaking(r) || r == '<' || r == '>' }) >= 0
}

// StoreMap is specs by the reference destinations use, for a Platform
// built by hand (tests).
func StoreMap(specs ...StoreSpec) map[renderer.StoreRef]StoreSpec {
	out := map[renderer.StoreRef]StoreSpec{}
	for _, s := range specs {
		out[s.Meta().Ref()] = s
	}
	return out
}
