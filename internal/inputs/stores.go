package inputs

import (
	"fmt"
	"strings"

	"github.com/render-dev/render/renderer"
)

// StoreSpec is a state store's spec, whatever its kind: a *GitStateStore,
// a *BucketStateStore or an *OCIStateStore.
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

// Meta implements StoreSpec.
func (s *GitStateStore) Meta() StoreMeta {
	return StoreMeta{Kind: "GitStateStore", Name: s.Name, File: s.File, Path: s.Path, SecretRef: s.SecretRef, MassDeletion: s.MassDeletion}
}

// Meta implements StoreSpec.
func (s *BucketStateStore) Meta() StoreMeta {
	return StoreMeta{Kind: "BucketStateStore", Name: s.Name, File: s.File, Path: s.Path, SecretRef: s.SecretRef, MassDeletion: s.MassDeletion}
}

// Meta implements StoreSpec. An OCI store has no folder of its own.
func (s *OCIStateStore) Meta() StoreMeta {
	return StoreMeta{Kind: "OCIStateStore", Name: s.Name, File: s.File, SecretRef: s.SecretRef, MassDeletion: s.MassDeletion}
}

// Location implements StoreSpec: the repository (however its URL is
// spelled) and branch.
func (s *GitStateStore) Location() (string, string) {
	return fmt.Sprintf("repository %s, branch %s", repoKey(s.URL), s.Branch), trimFolder(s.Path)
}

// Location implements StoreSpec: the bucket and its endpoint.
func (s *BucketStateStore) Location() (string, string) {
	host := strings.ToLower(s.Endpoint)
	if _, rest, ok := strings.Cut(host, "://"); ok {
		host = rest
	}
	return fmt.Sprintf("bucket %s at %s", s.BucketName, strings.TrimSuffix(host, "/")), trimFolder(s.Path)
}

// Location implements StoreSpec: the base repository.
func (s *OCIStateStore) Location() (string, string) {
	return fmt.Sprintf("repository %s/%s", strings.ToLower(s.Registry), s.Repository), ""
}

func trimFolder(s string) string {
	s = strings.Trim(s, "/")
	if s == "." {
		return ""
	}
	return s
}

// Store returns the spec of the store ref names, or nil when the platform
// defines no such store.
func (p *Platform) Store(ref renderer.StoreRef) StoreSpec {
	switch ref.Kind {
	case "GitStateStore":
		if s := p.GitStores[ref.Name]; s != nil {
			return s
		}
	case "BucketStateStore":
		if s := p.BucketStores[ref.Name]; s != nil {
			return s
		}
	case "OCIStateStore":
		if s := p.OCIStores[ref.Name]; s != nil {
			return s
		}
	}
	return nil
}

// isStoreKind reports whether kind is a kind of state store this package
// reads.
func isStoreKind(kind string) bool {
	switch kind {
	case "GitStateStore", "BucketStateStore", "OCIStateStore":
		return true
	}
	return false
}

// StoreKinds checks what each kind of state store says about its spec:
// the fields it takes and their defaults, and what its backend accepts (a
// git URL and branch as go-git reads them, an OCI reference as the
// registry client does). This package knows the documents' shapes and
// checks what lies between documents; it asks StoreKinds about each
// store's own fields. The registry of store kinds (internal/storekind) is
// the implementation, which its user passes to LoadPlatform.
type StoreKinds interface {
	// CheckStore validates a store's spec as decoded from its document,
	// and fills in its defaults. The error is the message, which names
	// the field (spec.…).
	CheckStore(spec StoreSpec) error
	// CheckDestination validates what a destination at path (its
	// spec.path, cleaned) needs of its store; the error is the message.
	CheckDestination(spec StoreSpec, path string) error
}

// checkStore asks the store's kind to check and complete its spec.
func (p *Platform) checkStore(s StoreSpec) error { return p.kinds.CheckStore(s) }

// Check refuses an author name or email git does not take: a line break,
// another control character or an angle bracket. The error names the
// field.
func (a GitAuthor) Check() error {
	for _, f := range [][2]string{{"name", a.Name}, {"email", a.Email}} {
		if strings.IndexFunc(f[1], func(r rune) bool { return lineBreaking(r) || r == '<' || r == '>' }) >= 0 {
			return fmt.Errorf("spec.gitAuthor.%s holds a line break, another control character or an angle bracket, which git does not take in an author or committer", f[0])
		}
	}
	return nil
}
