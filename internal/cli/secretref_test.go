package cli_test

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// credentialServer is a git server that never serves: it notes the user
// names of the Basic credentials it was sent, and answers 401.
func credentialServer(t *testing.T) (url string, users func() []string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, _, ok := r.BasicAuth(); ok {
			mu.Lock()
			seen = append(seen, u)
			mu.Unlock()
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/state.git", func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

func secretDoc(ns, name, user string) string {
	return "apiVersion: v1\nkind: Secret\nmetadata:\n  name: " + name + "\n  namespace: " + ns + "\ndata:\n  username: " + base64.StdEncoding.EncodeToString([]byte(user)) + "\n  password: " + base64.StdEncoding.EncodeToString([]byte(user+"-password")) + "\n"
}

func remoteStore(url, ref string) string {
	return "apiVersion: platform.kratix.io/v1alpha1\nkind: GitStateStore\nmetadata:\n  name: remote\nspec:\n  url: " + url + "\n  branch: main\n  authMethod: basicAuth\n  secretRef: " + ref + "\n"
}

// A secretRef is resolved by namespace and name, exactly: team-b's store
// is never given team-a's Secret of the same name (before, a reference
// whose namespace held no such Secret fell back to any Secret of that
// name, and render sent another team's credentials to the server). It is
// bad input naming the store and the reference, and the server is never
// contacted.
func TestSecretRefResolvesByNamespaceAndName(t *testing.T) {
	url, users := credentialServer(t)
	w := newWorld(t)
	w.file("platform/store.yaml", remoteStore(url, "{name: creds, namespace: team-b}"))
	w.file("platform/destinations.yaml", dest("far", nil, "store=remote"))
	secrets := w.file("platform/secrets.yaml", secretDoc("team-a", "creds", "team-a-bot"))
	wf := w.workflow("wf").setOutput(map[string]string{"cm.yaml": obj("ConfigMap")})
	env := resourceEnv("p", "ns", "r", "pipe")

	r := wf.run(env, "--retry-deadline", "1s")
	if r.code != 2 {
		t.Fatalf("want exit 2 (bad input: no Secret team-b/creds), got %s", r)
	}
	store := filepath.Join(w.platform, "store.yaml")
	for _, want := range []string{store, "GitStateStore remote", "spec.secretRef team-b/creds", "no Secret team-b/creds", "team-a/creds (" + secrets} {
		if !strings.Contains(r.errout, want) {
			t.Errorf("stderr does not say %q:\n%s", want, r.errout)
		}
	}
	if strings.Count(strings.TrimSpace(r.errout), "\n") != 0 {
		t.Errorf("want one line on stderr:\n%s", r.errout)
	}
	if got := users(); len(got) > 0 {
		t.Fatalf("the server was sent credentials of %v", got)
	}

	// The reference's own Secret is the one sent.
	w.file("platform/secrets.yaml", docs(secretDoc("team-a", "creds", "team-a-bot"), secretDoc("team-b", "creds", "team-b-bot")))
	r = wf.run(env, "--retry-deadline", "1s")
	if r.code != 1 {
		t.Fatalf("want exit 1 (the server refuses), got %s", r)
	}
	for _, u := range users() {
		if u != "team-b-bot" {
			t.Fatalf("the server was sent %s's credentials; want team-b-bot only (all: %v)", u, users())
		}
	}
	if len(users()) == 0 {
		t.Fatal("the server was never sent the credentials")
	}
}

// Two Secret documents with one namespace and name are refused, naming
// both files: which one render used would depend on the order it read them.
func TestDuplicateSecretIsRefused(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", dest("dev", nil))
	a := w.file("platform/a.yaml", secretDoc("team-a", "creds", "one"))
	b := w.file("platform/b.yaml", secretDoc("team-a", "creds", "two"))
	// Same name, other namespace: two Secrets, fine.
	w.file("platform/c.yaml", secretDoc("team-b", "creds", "three"))
	wf := w.workflow("wf").setOutput(map[string]string{"cm.yaml": obj("ConfigMap")})
	r := wf.run(resourceEnv("p", "ns", "r", "pipe"))
	if r.code != 2 {
		t.Fatalf("want exit 2, got %s", r)
	}
	for _, want := range []string{a, b, "Secret team-a/creds is defined twice"} {
		if !strings.Contains(r.errout, want) {
			t.Errorf("stderr does not name %q:\n%s", want, r.errout)
		}
	}
	if branchTip(t, w.repo) != "" {
		t.Error("something was written")
	}
	// A reference without a namespace, and a document without one, are
	// both in namespace default.
	w.file("platform/b.yaml", "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\nstringData: {username: x}\n")
	w.file("platform/d.yaml", secretDoc("default", "creds", "four"))
	r = wf.run(resourceEnv("p", "ns", "r", "pipe"))
	if r.code != 2 || !strings.Contains(r.errout, "Secret default/creds is defined twice") {
		t.Fatalf("want the namespace-less Secret taken as default/creds: %s", r)
	}
}

// A mounted Secret (--secrets-dir DIR/<name>/<key>) has no namespace: it
// answers a reference by name, whatever namespace the reference names,
// unless a Secret document has that exact namespace and name.
func TestMountedSecretAnswersByName(t *testing.T) {
	url, users := credentialServer(t)
	w := newWorld(t)
	w.file("platform/store.yaml", remoteStore(url, "{name: creds, namespace: team-b}"))
	w.file("platform/destinations.yaml", dest("far", nil, "store=remote"))
	w.file("secrets/creds/username", "mounted-bot")
	w.file("secrets/creds/password", "mounted-password")
	w.file("platform/secrets.yaml", secretDoc("team-a", "creds", "team-a-bot"))
	wf := w.workflow("wf").setOutput(map[string]string{"cm.yaml": obj("ConfigMap")})
	env := resourceEnv("p", "ns", "r", "pipe")
	mounted := []string{"--secrets-dir", filepath.Join(w.root, "secrets"), "--retry-deadline", "1s"}
	if r := wf.run(env, mounted...); r.code != 1 {
		t.Fatalf("want exit 1 (the server refuses), got %s", r)
	}
	for _, u := range users() {
		if u != "mounted-bot" {
			t.Fatalf("want the mounted Secret's credentials only, got %v", users())
		}
	}
	w.file("platform/secrets.yaml", docs(secretDoc("team-a", "creds", "team-a-bot"), secretDoc("team-b", "creds", "team-b-bot")))
	if r := wf.run(env, mounted...); r.code != 1 {
		t.Fatalf("want exit 1 (the server refuses), got %s", r)
	}
	if got := users(); got[len(got)-1] != "team-b-bot" {
		t.Fatalf("the exact Secret document should win over the mount: %v", got)
	}
}
