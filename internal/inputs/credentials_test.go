package inputs_test

import (
	"encoding/base64"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/internal/redact"
)

// leaked reports which form of secret s shows: as is, a 7-byte prefix (what
// yaml.v3 quotes of a long value), base64 or URL-escaped.
func leaked(s, secret string) string {
	for _, form := range []string{secret, secret[:7], base64.StdEncoding.EncodeToString([]byte(secret)), url.QueryEscape(secret), url.PathEscape(secret)} {
		if strings.Contains(s, form) {
			return form
		}
	}
	return ""
}

// TestCredentialsAreRefusedWithoutBeingPrinted: a Secret mistyped, a
// password or token in a store's URL or endpoint, and malformed URLs are
// exit-2 errors naming the file, the store and the field, which never
// print the secret, even partly.
func TestCredentialsAreRefusedWithoutBeingPrinted(t *testing.T) {
	const pw = "Pa55w0rd-with@and:colon"
	store := func(url string) string {
		return "apiVersion: platform.kratix.io/v1alpha1\nkind: GitStateStore\nmetadata: {name: s}\nspec:\n  url: " + url + "\n"
	}
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"stringData mistyped as a scalar", "apiVersion: v1\nkind: Secret\nmetadata: {name: creds}\nstringData: " + pw + "\n",
			[]string{"a.yaml: document 1", "line 4"}},
		{"data mistyped as a list", "apiVersion: v1\nkind: Secret\nmetadata: {name: creds}\ndata: [" + pw + "]\n",
			[]string{"a.yaml: document 1", "line 4"}},
		{"a value mistyped as a mapping", "apiVersion: v1\nkind: Secret\nmetadata: {name: creds}\nstringData:\n  password: {x: " + pw + "}\n",
			[]string{"a.yaml: document 1"}},
		{"password with @ in an https URL", store("'https://render:" + pw + "@git.example.com/org/state.git'"),
			[]string{"a.yaml: document 1 (GitStateStore s): spec.url holds a password", "secretRef"}},
		{"password escaped in an https URL", store("https://render:" + url.QueryEscape(pw) + "@git.example.com/org/state.git"),
			[]string{"(GitStateStore s): spec.url holds a password"}},
		{"token as the user of an https URL", store("https://" + url.QueryEscape(pw) + "@github.com/org/state.git"),
			[]string{"(GitStateStore s): spec.url holds a user name", "secretRef"}},
		{"password in an ssh URL", store("'ssh://git:" + pw + "@git.example.com/org/state.git'"),
			[]string{"(GitStateStore s): spec.url holds a password"}},
		{"password in an scp-like URL", store("'git:" + pw + "@git.example.com:org/state.git'"),
			[]string{"(GitStateStore s): spec.url holds a password"}},
		{"malformed URL with a password", store("'https://render:" + pw + "@git example.com/x'"),
			[]string{"(GitStateStore s): spec.url is not a valid URL"}},
		{"credentials in a bucket endpoint", "apiVersion: platform.kratix.io/v1alpha1\nkind: BucketStateStore\nmetadata: {name: b}\nspec:\n  endpoint: 'http://AKIAXXXX:" + pw + "@minio:9000'\n  bucketName: x\n",
			[]string{"a.yaml: document 1 (BucketStateStore b): spec.endpoint holds credentials"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, filepath.Join(dir, "a.yaml"), tc.doc)
			_, err := inputs.LoadPlatform(kinds, []string{dir}, "")
			ie := inputErr(t, err, tc.want...)
			if ie == nil {
				return
			}
			if form := leaked(ie.Error(), pw); form != "" {
				t.Errorf("the error prints %q of the password: %v", form, ie)
			}
			if strings.Contains(ie.Error(), "\n") {
				t.Errorf("not one line: %q", ie.Error())
			}
		})
	}
}

// TestMalformedStoreURLs: a URL go-git cannot write to is configuration:
// an InputError naming the file, the store and spec.url, not a store
// failure later.
func TestMalformedStoreURLs(t *testing.T) {
	for u, want := range map[string]string{
		"'http://[::1'":                   "spec.url is not a valid URL",
		"'https://git example.com/x.git'": "spec.url is not a valid URL",
		"ftp://git.example.com/x.git":     `spec.url has the scheme "ftp"`,
		"'https:///x.git'":                "spec.url names no host",
		"'https://host:99999/x.git'":      "spec.url has the port \"99999\", which is not a port number",
		"state.git":                       "spec.url is neither a URL",
		"'https://host/x\tgit'":           "spec.url holds white space",
	} {
		dir := t.TempDir()
		write(t, filepath.Join(dir, "a.yaml"), kratix+"kind: GitStateStore\nmetadata: {name: s}\nspec:\n  url: "+u+"\n")
		_, err := inputs.LoadPlatform(kinds, []string{dir}, "")
		inputErr(t, err, "a.yaml: document 1 (GitStateStore s): "+want)
	}
	for ep, want := range map[string]string{
		"minio:99999": `spec.endpoint has the port "99999"`,
		"minio:http":  `spec.endpoint has the port "http"`,
		":9000":       "spec.endpoint names no host",
	} {
		dir := t.TempDir()
		write(t, filepath.Join(dir, "a.yaml"), kratix+"kind: BucketStateStore\nmetadata: {name: b}\nspec:\n  endpoint: '"+ep+"'\n  bucketName: x\n")
		_, err := inputs.LoadPlatform(kinds, []string{dir}, "")
		inputErr(t, err, "a.yaml: document 1 (BucketStateStore b): "+want)
	}
	for _, ok := range []string{
		"https://git.example.com/org/state.git", "http://127.0.0.1:3000/render/state.git", "ssh://git@host:2222/org/repo@v2.git",
		"git@github.com:org/state.git", "file:///srv/state.git", "file://.demo/state.git", "/srv/state.git", "./state.git",
		"git://host/state.git", "ssh://host/org/repo.git",
	} {
		dir := t.TempDir()
		write(t, filepath.Join(dir, "a.yaml"), kratix+"kind: GitStateStore\nmetadata: {name: s}\nspec:\n  url: "+ok+"\n")
		if _, err := inputs.LoadPlatform(kinds, []string{dir}, ""); err != nil {
			t.Errorf("url %s: %v", ok, err)
		}
	}
}

// TestSecretValuesAreRegisteredForRedaction: every secret value loaded,
// from a document or a mounted folder, is masked in what render prints;
// user names and public material are not.
func TestSecretValuesAreRegisteredForRedaction(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "p", "a.yaml"), "apiVersion: v1\nkind: Secret\nmetadata: {name: doc}\nstringData:\n  password: doc-password-1\n  username: render-user\ndata:\n  token: "+base64.StdEncoding.EncodeToString([]byte("doc-token-2"))+"\n")
	write(t, filepath.Join(dir, "secrets", "mounted", "secretAccessKey"), "mounted-key-3\n")
	write(t, filepath.Join(dir, "secrets", "mounted", "ca.crt"), "public-ca-4")
	if _, err := inputs.LoadPlatform(kinds, []string{filepath.Join(dir, "p")}, filepath.Join(dir, "secrets")); err != nil {
		t.Fatal(err)
	}
	got := redact.String("doc-password-1 doc-token-2 mounted-key-3 render-user public-ca-4")
	if want := redact.Mask + " " + redact.Mask + " " + redact.Mask + " render-user public-ca-4"; got != want {
		t.Errorf("redacted: %q, want %q", got, want)
	}
}
