package storekind

import (
	"errors"
	"strings"
	"testing"

	"github.com/render-dev/render/internal/fluxcheck"
	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/renderer"
)

// The ssh user is what go-git's endpoint parsing says, "git" by default:
// an @ in the repository's path is not a user.
func TestSSHUser(t *testing.T) {
	for u, want := range map[string]string{
		"ssh://host/org/repo@v2.git":           "git",
		"ssh://deploy@host/org/repo@v2.git":    "deploy",
		"ssh://host:2222/org/repo.git":         "git",
		"git@github.com:org/state.git":         "git",
		"render@git.example.com:org/state.git": "render",
		"ssh://gitea@127.0.0.1:2222/a/b.git":   "gitea",
	} {
		if got := sshUser(u); got != want {
			t.Errorf("sshUser(%q) = %q, want %q", u, got, want)
		}
	}
}

// Basic auth over plain http:// to another machine is refused unless the
// store says allowInsecureHTTP; loopback and https are fine.
func TestBasicAuthOverPlainHTTP(t *testing.T) {
	secret := map[string][]byte{"username": []byte("render"), "password": []byte("pw-123456")}
	for _, c := range []struct {
		url   string
		allow bool
		ok    bool
	}{
		{"http://gitea:3000/render/state.git", false, false},
		{"http://git.example.com/render/state.git", false, false},
		{"http://gitea:3000/render/state.git", true, true},
		{"https://git.example.com/render/state.git", false, true},
		{"http://127.0.0.1:3000/render/state.git", false, true},
		{"http://localhost:3000/render/state.git", false, true},
		{"http://[::1]:3000/render/state.git", false, true},
	} {
		gs := &GitStateStore{Name: "s", File: "p.yaml", URL: c.url, AuthMethod: "basicAuth", SecretRef: &inputs.SecretRef{Name: "creds"}, AllowInsecureHTTP: c.allow}
		_, err := gitAuth(gs, secret, "GitStateStore s")
		var ie *renderer.InputError
		switch {
		case c.ok && err != nil:
			t.Errorf("%s (allowInsecureHTTP %v): %v", c.url, c.allow, err)
		case !c.ok && (!errors.As(err, &ie) || !strings.Contains(err.Error(), "allowInsecureHTTP") || ie.File != "p.yaml"):
			t.Errorf("%s: err = %v, want an InputError naming p.yaml and allowInsecureHTTP", c.url, err)
		}
	}
}

// Every kind render writes declares the Flux source that reads it, one
// fluxcheck knows (it decides which files Flux serves of a folder), and
// whether its writes are uploads, and whether it writes through pull
// requests: callers ask this, never the kind's name.
func TestKindsDeclareCapabilities(t *testing.T) {
	want := map[string]Capabilities{
		"GitStateStore":    {FluxSource: string(fluxcheck.GitRepository), PullRequests: true},
		"BucketStateStore": {Uploads: true, FluxSource: string(fluxcheck.Bucket)},
		"OCIStateStore":    {Uploads: true, FluxSource: string(fluxcheck.OCIRepository)},
	}
	for name, w := range want {
		if got := Default.Capabilities(name); got != w {
			t.Errorf("%s declares %+v, want %+v", name, got, w)
		}
	}
	if got := Default.Capabilities("NoSuchStore"); got != (Capabilities{}) {
		t.Errorf("an unknown kind declares %+v", got)
	}
}
