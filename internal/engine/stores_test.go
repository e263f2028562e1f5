package engine

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
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
		gs := &inputs.GitStateStore{Name: "s", File: "p.yaml", URL: c.url, AuthMethod: "basicAuth", SecretRef: &inputs.SecretRef{Name: "creds"}, AllowInsecureHTTP: c.allow}
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

// A store's snapshots log at debug level through the render's log, naming
// the store: a failed prefetch says which store fell back to single reads.
func TestStoreDebugLogNamesTheStore(t *testing.T) {
	var logs bytes.Buffer
	e := New(Options{Log: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	dir := t.TempDir()
	p := &inputs.Platform{GitStores: map[string]*inputs.GitStateStore{
		"default": {Name: "default", File: "p.yaml", URL: "file://" + filepath.Join(dir, "state.git")},
	}}
	ref := renderer.StoreRef{Kind: "GitStateStore", Name: "default"}
	st, _, err := e.openStore(p, ref)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	snap, err := st.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	d, ok := snap.(statestore.Debugger)
	if !ok {
		t.Fatalf("a git snapshot (%T) is not a statestore.Debugger", snap)
	}
	d.Debug("prefetch failed: the lookups read one path at a time instead", "error", "server hung up")
	want := `"level":"DEBUG","msg":"prefetch failed: the lookups read one path at a time instead","store":"GitStateStore/default","error":"server hung up"`
	if !strings.Contains(logs.String(), want) {
		t.Errorf("log %q lacks %q", logs.String(), want)
	}
}
