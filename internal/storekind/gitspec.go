package storekind

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/render-dev/render/internal/inputs"
)

// The GitStateStore kind's spec type: what its documents hold under spec,
// decoded by package inputs into the value the kind makes
// (inputs.StoreDocument.New), then checked by checkGit.

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

// Meta implements inputs.StoreSpec.
func (s *GitStateStore) Meta() inputs.StoreMeta {
	return inputs.StoreMeta{Kind: "GitStateStore", Name: s.Name, File: s.File, Path: s.Path, SecretRef: s.SecretRef, MassDeletion: s.MassDeletion}
}

// Location implements inputs.StoreSpec: the repository (however its URL
// is spelled) and branch.
func (s *GitStateStore) Location() (string, string) {
	return fmt.Sprintf("repository %s, branch %s", repoKey(s.URL), s.Branch), inputs.TrimFolder(s.Path)
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
