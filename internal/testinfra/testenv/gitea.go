package testenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

// GiteaServer is a running Gitea test server. Its API is used with HTTP basic
// auth as the admin user.
type GiteaServer struct {
	url      string // without trailing slash
	user     string
	password string
	token    string
	client   *http.Client
	ctl      serverControl
}

// Repo describes a repository created by CreateRepoInfo.
type Repo struct {
	Owner    string // owner login
	Name     string // repository name (unique)
	CloneURL string // http://127.0.0.1:PORT/owner/name.git
	HTMLURL  string
}

// Gitea returns the shared Gitea test server described by the
// RENDER_TEST_GITEA_* variables; it skips the test (fails it when CI=true) if
// they are unset.
func Gitea(t testing.TB) *GiteaServer {
	t.Helper()
	requireEnv(t, "Gitea", giteaVars...)
	return newGitea(os.Getenv)
}

// PrivateGitea starts a Gitea server used only by this test (fresh data, own
// port), stopped and removed when the test ends. Use it for tests that Stop
// the server. It skips/fails like Gitea when the test servers are not set up.
func PrivateGitea(t testing.TB) *GiteaServer {
	t.Helper()
	vars := startPrivate(t, "gitea", "Gitea", giteaVars...)
	return newGitea(func(k string) string { return vars[k] })
}

var giteaVars = []string{EnvGiteaURL, EnvGiteaUser, EnvGiteaPassword, EnvGiteaToken, EnvGiteaPIDFile}

func newGitea(get func(string) string) *GiteaServer {
	return &GiteaServer{
		url:      strings.TrimRight(get(EnvGiteaURL), "/"),
		user:     get(EnvGiteaUser),
		password: get(EnvGiteaPassword),
		token:    get(EnvGiteaToken),
		client:   &http.Client{Timeout: 30 * time.Second},
		ctl:      newServerControl("gitea", get(EnvServersDir), get(EnvGiteaPIDFile)),
	}
}

// URL returns the base URL, e.g. "http://127.0.0.1:34567" (no trailing slash).
func (g *GiteaServer) URL() string { return g.url }

// AdminUser returns the admin user name.
func (g *GiteaServer) AdminUser() string { return g.user }

// AdminPassword returns the admin password. Tests use it where a password
// is the point (creating a token, a password shown nowhere); as a git or API
// credential they use AdminToken, as a store's users do.
func (g *GiteaServer) AdminPassword() string { return g.password }

// AdminToken returns the admin's access token (all scopes), which git over
// HTTP and the API take as the password of basic auth. It is what the tests
// and the benchmark give render and every other client: Gitea checks a
// password with PBKDF2 on every request (about 17 ms more of the server's
// processor per request than a token, which it keeps in a cache of recent
// successes), and a platform's git credential is a token in practice.
func (g *GiteaServer) AdminToken() string { return g.token }

// AuthURL returns rawURL (e.g. a clone URL) with user:password embedded, for
// git clients that take credentials from the URL.
func AuthURL(rawURL, user, password string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		panic(fmt.Sprintf("testenv.AuthURL(%q): %v", rawURL, err))
	}
	u.User = url.UserPassword(user, password)
	return u.String()
}

// AdminAuthURL is AuthURL with the admin's user name and token.
func (g *GiteaServer) AdminAuthURL(rawURL string) string {
	return AuthURL(rawURL, g.user, g.token)
}

// API performs a JSON request against /api/v1+path as the admin user (basic
// auth with the admin's token). body may be nil. If out is non-nil the
// response is decoded into it. It returns the HTTP status code; a transport
// error fails the test, a status code is left to the caller.
func (g *GiteaServer) API(t testing.TB, method, path string, body, out any) int {
	t.Helper()
	return g.apiAs(t, g.user, g.token, method, path, body, out)
}

func (g *GiteaServer) apiAs(t testing.TB, user, password, method, path string, body, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatalf("testenv: gitea %s %s: %v", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, g.url+"/api/v1"+path, rd)
	if err != nil {
		t.Fatalf("testenv: gitea %s %s: %v", method, path, err)
	}
	req.SetBasicAuth(user, password)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := g.client.Do(req)
	if err != nil {
		t.Fatalf("testenv: gitea %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("testenv: gitea %s %s: reading response: %v", method, path, err)
	}
	if out != nil && resp.StatusCode/100 == 2 && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("testenv: gitea %s %s: decoding response: %v\n%s", method, path, err, data)
		}
	}
	if resp.StatusCode/100 != 2 {
		t.Logf("testenv: gitea %s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(data))
	}
	return resp.StatusCode
}

func (g *GiteaServer) mustAPI(t testing.TB, user, password, method, path string, want int, body, out any) {
	t.Helper()
	if code := g.apiAs(t, user, password, method, path, body, out); code != want {
		t.Fatalf("testenv: gitea %s %s: got HTTP %d, want %d", method, path, code, want)
	}
}

type apiRepo struct {
	Name     string `json:"name"`
	CloneURL string `json:"clone_url"`
	HTMLURL  string `json:"html_url"`
	Owner    struct {
		Login string `json:"login"`
	} `json:"owner"`
}

func (r apiRepo) repo() Repo {
	return Repo{Owner: r.Owner.Login, Name: r.Name, CloneURL: r.CloneURL, HTMLURL: r.HTMLURL}
}

// CreateRepo creates an empty (auto_init=false), public repository owned by
// the admin, named UniqueName(name), and returns its HTTP clone URL (without
// credentials; see AdminAuthURL).
func (g *GiteaServer) CreateRepo(t testing.TB, name string) (cloneURL string) {
	t.Helper()
	return g.CreateRepoInfo(t, name).CloneURL
}

// CreateRepoInfo is CreateRepo returning owner, name and URLs.
func (g *GiteaServer) CreateRepoInfo(t testing.TB, name string) Repo {
	t.Helper()
	var r apiRepo
	g.mustAPI(t, g.user, g.token, http.MethodPost, "/user/repos", http.StatusCreated,
		map[string]any{"name": UniqueName(name), "auto_init": false, "private": false}, &r)
	return r.repo()
}

// CreateRepoFor creates an empty public repository named UniqueName(name)
// owned by the existing user owner (via the admin API).
func (g *GiteaServer) CreateRepoFor(t testing.TB, owner, name string) Repo {
	t.Helper()
	var r apiRepo
	g.mustAPI(t, g.user, g.token, http.MethodPost, "/admin/users/"+url.PathEscape(owner)+"/repos",
		http.StatusCreated, map[string]any{"name": UniqueName(name), "auto_init": false, "private": false}, &r)
	return r.repo()
}

// CreateUser creates a regular (non-admin) user named UniqueName(name) with
// the given password (at least 6 characters) and returns the user name.
func (g *GiteaServer) CreateUser(t testing.TB, name, password string) (username string) {
	t.Helper()
	username = UniqueName(name)
	g.mustAPI(t, g.user, g.token, http.MethodPost, "/admin/users", http.StatusCreated, map[string]any{
		"username":             username,
		"email":                username + "@example.invalid",
		"password":             password,
		"must_change_password": false,
		"send_notify":          false,
	}, nil)
	return username
}

// CreateToken creates an API token for user (authenticating with its
// password) and returns it. scopes defaults to "all".
func (g *GiteaServer) CreateToken(t testing.TB, user, password string, scopes ...string) string {
	t.Helper()
	if len(scopes) == 0 {
		scopes = []string{"all"}
	}
	var out struct {
		SHA1 string `json:"sha1"`
	}
	g.mustAPI(t, user, password, http.MethodPost, "/users/"+url.PathEscape(user)+"/tokens",
		http.StatusCreated, map[string]any{"name": UniqueName("token"), "scopes": scopes}, &out)
	if out.SHA1 == "" {
		t.Fatalf("testenv: gitea returned an empty token for %s", user)
	}
	return out.SHA1
}

// AddCollaborator gives user access to owner/repo. permission is "read",
// "write" or "admin".
func (g *GiteaServer) AddCollaborator(t testing.TB, owner, repo, user, permission string) {
	t.Helper()
	g.mustAPI(t, g.user, g.token, http.MethodPut,
		fmt.Sprintf("/repos/%s/%s/collaborators/%s", url.PathEscape(owner), url.PathEscape(repo), url.PathEscape(user)),
		http.StatusNoContent, map[string]any{"permission": permission}, nil)
}

// Stop stops the Gitea server (SIGTERM, then SIGKILL) keeping its data and
// port. If the test does not call Start, the server is restarted when the
// test ends.
func (g *GiteaServer) Stop(t testing.TB) { t.Helper(); g.ctl.stop(t) }

// Start restarts a server stopped by Stop on the same port with the same data
// and waits until it is healthy. It is a no-op if the server is running.
func (g *GiteaServer) Start(t testing.TB) { t.Helper(); g.ctl.start(t) }

// Restart stops the server, waits down and starts it again (same port and
// data), returning what failed instead of failing the test: unlike Stop
// and Start it may be called from any goroutine. Use it on a PrivateGitea.
func (g *GiteaServer) Restart(down time.Duration) error { return g.ctl.restart(down) }
