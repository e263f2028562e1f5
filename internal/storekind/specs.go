package storekind

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/render-dev/render/internal/inputs"
)

// The spec types of the kinds render writes: each is what its kind's
// documents hold under spec, decoded by package inputs into a new value
// the kind gives it (inputs.StoreDocument.New), then checked by the kind.

// OCIAPIVersion is the apiVersion of render's own kinds.
const OCIAPIVersion = "render.dev/v1alpha1"

// GitAuthor signs commits.
type GitAuthor struct {
	Name  string `yaml:"name"`
	Email string `yaml:"email"`
}

// GitStateStore is Kratix's GitStateStore spec, plus TLS options.
type GitStateStore struct {
	Name       string            `yaml:"-"`
	File       string            `yaml:"-"`
	URL        string            `yaml:"url"`
	Branch     string            `yaml:"branch"`
	Path       string            `yaml:"path"`
	AuthMethod string            `yaml:"authMethod"`
	SecretRef  *inputs.SecretRef `yaml:"secretRef"`
	GitAuthor  GitAuthor         `yaml:"gitAuthor"`
	// InsecureSkipTLSVerify turns TLS verification off (logged as a warning).
	InsecureSkipTLSVerify bool `yaml:"insecureSkipTLSVerify"`
	// AllowInsecureHTTP lets basicAuth send its password over plain
	// http:// to a host that is not this machine (refused otherwise).
	AllowInsecureHTTP bool `yaml:"allowInsecureHTTP"`
	// MassDeletion sets the store's mass-deletion breaker.
	MassDeletion inputs.MassDeletion `yaml:"massDeletion"`
	// Signing, when set, signs every commit render makes.
	Signing *Signing `yaml:"signing"`
	// Commit sets the commit message and author.
	Commit *inputs.Commit `yaml:"commit"`
	// PullRequest, when set, writes through pull requests (see PullRequest).
	PullRequest *PullRequest `yaml:"pullRequest"`
}

// Signing is how a GitStateStore signs its commits: the key is the
// signingKey of the secret secretRef names (default: the store's own
// secretRef), with an optional signingKeyPassphrase.
type Signing struct {
	// Format is git's gpg.format: ssh or openpgp.
	Format    string            `yaml:"format"`
	SecretRef *inputs.SecretRef `yaml:"secretRef"`
}

// BucketStateStore is Kratix's BucketStateStore spec, plus region and bucket creation.
type BucketStateStore struct {
	Name         string            `yaml:"-"`
	File         string            `yaml:"-"`
	Endpoint     string            `yaml:"endpoint"`
	BucketName   string            `yaml:"bucketName"`
	Path         string            `yaml:"path"`
	Insecure     bool              `yaml:"insecure"`
	Region       string            `yaml:"region"`
	AuthMethod   string            `yaml:"authMethod"`
	SecretRef    *inputs.SecretRef `yaml:"secretRef"`
	CreateBucket bool              `yaml:"createBucket"`
	// MassDeletion sets the store's mass-deletion breaker.
	MassDeletion inputs.MassDeletion `yaml:"massDeletion"`
}

// OCIStateStore is render's own kind (Kratix has no OCI store): a base
// repository in an OCI registry, each destination published as the artifact
// <repository>/<destination path>. Its secret holds username and password,
// or token, and optionally ca.crt.
type OCIStateStore struct {
	Name       string `yaml:"-"`
	File       string `yaml:"-"`
	Registry   string `yaml:"registry"`
	Repository string `yaml:"repository"`
	// Tag is the moving tag of every destination artifact ("latest").
	Tag       string            `yaml:"tag"`
	Insecure  bool              `yaml:"insecure"`
	SecretRef *inputs.SecretRef `yaml:"secretRef"`
	// Create lets the first write start a store in a repository that has none.
	Create bool `yaml:"create"`
	// Source is org.opencontainers.image.source on the artifacts.
	Source string `yaml:"source"`
	// Author is added to each write's provenance.
	Author string `yaml:"author"`
	// MassDeletion sets the store's mass-deletion breaker.
	MassDeletion inputs.MassDeletion `yaml:"massDeletion"`
}

// Meta implements inputs.StoreSpec.
func (s *GitStateStore) Meta() inputs.StoreMeta {
	return inputs.StoreMeta{Kind: "GitStateStore", Name: s.Name, File: s.File, Path: s.Path, SecretRef: s.SecretRef, MassDeletion: s.MassDeletion}
}

// Meta implements inputs.StoreSpec.
func (s *BucketStateStore) Meta() inputs.StoreMeta {
	return inputs.StoreMeta{Kind: "BucketStateStore", Name: s.Name, File: s.File, Path: s.Path, SecretRef: s.SecretRef, MassDeletion: s.MassDeletion}
}

// Meta implements inputs.StoreSpec. An OCI store has no folder of its own.
func (s *OCIStateStore) Meta() inputs.StoreMeta {
	return inputs.StoreMeta{Kind: "OCIStateStore", Name: s.Name, File: s.File, SecretRef: s.SecretRef, MassDeletion: s.MassDeletion}
}

// Location implements inputs.StoreSpec: the repository (however its URL
// is spelled) and branch.
func (s *GitStateStore) Location() (string, string) {
	return fmt.Sprintf("repository %s, branch %s", repoKey(s.URL), s.Branch), inputs.TrimFolder(s.Path)
}

// Location implements inputs.StoreSpec: the bucket and its endpoint.
func (s *BucketStateStore) Location() (string, string) {
	host := strings.ToLower(s.Endpoint)
	if _, rest, ok := strings.Cut(host, "://"); ok {
		host = rest
	}
	return fmt.Sprintf("bucket %s at %s", s.BucketName, strings.TrimSuffix(host, "/")), inputs.TrimFolder(s.Path)
}

// Location implements inputs.StoreSpec: the base repository.
func (s *OCIStateStore) Location() (string, string) {
	return fmt.Sprintf("repository %s/%s", strings.ToLower(s.Registry), s.Repository), ""
}

// Check refuses an author name or email git does not take: a line break,
// another control character or an angle bracket. The error names the
// field.
func (a GitAuthor) Check() error {
	for _, f := range [][2]string{{"name", a.Name}, {"email", a.Email}} {
		if inputs.UnsafeInAuthor(f[1]) {
			return fmt.Errorf("spec.gitAuthor.%s holds a line break, another control character or an angle bracket, which git does not take in an author or committer", f[0])
		}
	}
	return nil
}

// repoKey names a git repository the same way however its URL is spelled:
// https://Git.example.com/org/repo.git, ssh://git@git.example.com/org/repo
// and git@git.example.com:org/repo are one repository; a local path is
// made absolute.
func repoKey(raw string) string {
	u := raw
	if strings.HasPrefix(u, "file://") || filepath.IsAbs(u) {
		abs, err := filepath.Abs(strings.TrimPrefix(u, "file://"))
		if err != nil {
			return raw
		}
		return strings.TrimSuffix(abs, "/")
	}
	if !strings.Contains(u, "://") { // scp-like: [user@]host:path
		if host, p, ok := strings.Cut(u, ":"); ok {
			if _, h, ok := strings.Cut(host, "@"); ok {
				host = h
			}
			u = "ssh://" + host + "/" + strings.TrimPrefix(p, "/")
		}
	}
	pu, err := url.Parse(u)
	if err != nil || pu.Host == "" {
		return raw
	}
	p := strings.TrimSuffix(strings.TrimSuffix(pu.Path, "/"), ".git")
	return strings.ToLower(pu.Hostname() + p)
}
