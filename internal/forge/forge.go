// Package forge opens, updates, merges and closes pull requests on a git
// forge through its HTTP API. Gitea is the one implemented: a handful of
// JSON endpoints over net/http, each
// request bound by the caller's context. Credentials go only into the
// Authorization header; no error or message carries them, nor the response
// bodies they could be echoed in.
package forge

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/render-dev/render/statestore/wait"
)

// PullRequest is what render reads of a pull request.
type PullRequest struct {
	Number  int64  `json:"number"`
	State   string `json:"state"` // open or closed
	Merged  bool   `json:"merged"`
	Title   string `json:"title"`
	Body    string `json:"body"`
	HTMLURL string `json:"html_url"`
	Head    struct {
		Ref string `json:"ref"`
		SHA string `json:"sha"`
	} `json:"head"`
	Base struct {
		Ref string `json:"ref"`
	} `json:"base"`
}

// Open reports whether the pull request is still open.
func (p *PullRequest) Open() bool { return p.State == "open" }

// Auth is how requests authenticate: a token, or a user name and password.
type Auth struct {
	Token              string
	Username, Password string
}

// Config is one repository on a Gitea server.
type Config struct {
	// APIURL is the API root, e.g. https://git.example.com/api/v1.
	APIURL      string
	Owner, Repo string
	Auth        Auth
	// CABundle adds trusted roots; InsecureSkipTLS turns verification off.
	CABundle        []byte
	InsecureSkipTLS bool
	// Timeout bounds one request (default 30s).
	Timeout time.Duration
}

// Gitea is a client of one repository on a Gitea server.
type Gitea struct {
	cfg  Config
	http *http.Client
}

// ErrNotAllowed is the forge refusing an operation as the repository or
// pull request stands (a merge that is not possible yet, or not allowed).
var ErrNotAllowed = errors.New("not allowed by the forge")

// ErrAuth is the forge refusing the credentials.
var ErrAuth = errors.New("the forge refused the credentials")

// NewGitea makes a client.
func NewGitea(cfg Config) (*Gitea, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if len(cfg.CABundle) > 0 || cfg.InsecureSkipTLS {
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if len(cfg.CABundle) > 0 && !pool.AppendCertsFromPEM(cfg.CABundle) {
			return nil, errors.New("ca.crt holds no PEM certificate")
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, InsecureSkipVerify: cfg.InsecureSkipTLS, MinVersion: tls.VersionTLS12} //nolint:gosec // an explicit, warned-about opt-in
	}
	return &Gitea{cfg: cfg, http: &http.Client{Timeout: cfg.Timeout, Transport: tr}}, nil
}

// String names the repository, with no credentials.
func (g *Gitea) String() string {
	return fmt.Sprintf("%s (%s/%s)", g.cfg.APIURL, g.cfg.Owner, g.cfg.Repo)
}

func (g *Gitea) repoPath() string {
	return "/repos/" + url.PathEscape(g.cfg.Owner) + "/" + url.PathEscape(g.cfg.Repo)
}

// StatusError is a response the forge gave with a status other than the
// one expected. Msg is the forge's own message, when it sent one.
type StatusError struct {
	Method, Path string
	Code         int
	Msg          string
}

func (e *StatusError) Error() string {
	s := fmt.Sprintf("%s %s: HTTP %d", e.Method, e.Path, e.Code)
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	return s
}

// Unwrap classifies the status.
func (e *StatusError) Unwrap() error {
	switch e.Code {
	case http.StatusUnauthorized, http.StatusForbidden:
		return ErrAuth
	case http.StatusMethodNotAllowed, http.StatusConflict:
		return ErrNotAllowed
	}
	return nil
}

// do sends one request and decodes a 2xx answer into out. Errors name the
// method and path (never the credentials), and carry at most the forge's
// "message" field, cut short.
func (g *Gitea) do(ctx context.Context, method, p string, query url.Values, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	u := g.cfg.APIURL + p
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, fmt.Errorf("%s %s: the request cannot be made (check spec.pullRequest.apiURL)", method, p)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	switch a := g.cfg.Auth; {
	case a.Token != "":
		req.Header.Set("Authorization", "token "+a.Token)
	case a.Username != "":
		req.SetBasicAuth(a.Username, a.Password)
	}
	resp, err := g.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL
		}
		return 0, fmt.Errorf("%s %s: %w", method, p, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: reading the answer: %w", method, p, err)
	}
	if resp.StatusCode/100 != 2 {
		var m struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(data, &m)
		msg := strings.Join(strings.Fields(m.Message), " ")
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return resp.StatusCode, &StatusError{Method: method, Path: p, Code: resp.StatusCode, Msg: msg}
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: the answer is not the JSON expected: %v", method, p, err)
		}
	}
	return resp.StatusCode, nil
}

// find lists the pull requests into base in state (open, closed), newest
// first, and returns the first whose head is branch, or nil. maxPages
// bounds the listing.
func (g *Gitea) find(ctx context.Context, base, branch, state string, maxPages int) (*PullRequest, error) {
	for page := 1; page <= maxPages; page++ {
		var prs []PullRequest
		q := url.Values{"state": {state}, "base_branch": {base}, "sort": {"recentupdate"}, "limit": {"50"}, "page": {fmt.Sprint(page)}}
		code, err := g.do(ctx, http.MethodGet, g.repoPath()+"/pulls", q, nil, &prs)
		if code == http.StatusNotFound && page == 1 {
			// Gitea lists no pull requests of a repository it still
			// takes for empty (a branch was just pushed to it).
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		for i := range prs {
			if prs[i].Head.Ref == branch && prs[i].Base.Ref == base {
				return &prs[i], nil
			}
		}
		if len(prs) < 50 {
			return nil, nil
		}
	}
	return nil, nil
}

// FindOpen returns the open pull request from branch into base, or nil.
func (g *Gitea) FindOpen(ctx context.Context, base, branch string) (*PullRequest, error) {
	return g.find(ctx, base, branch, "open", 100)
}

// LastClosed returns the most recently updated closed pull request from
// branch into base among the newest few hundred closed ones, or nil.
func (g *Gitea) LastClosed(ctx context.Context, base, branch string) (*PullRequest, error) {
	return g.find(ctx, base, branch, "closed", 4)
}

// Get reads pull request n.
func (g *Gitea) Get(ctx context.Context, n int64) (*PullRequest, error) {
	var pr PullRequest
	if _, err := g.do(ctx, http.MethodGet, fmt.Sprintf("%s/pulls/%d", g.repoPath(), n), nil, nil, &pr); err != nil {
		return nil, err
	}
	return &pr, nil
}

// Create opens a pull request from branch into base. Right after the
// first push into a repository, Gitea may still take it for empty and
// answer 404 for a while: that is tried again (createPoll), for up to 15
// seconds or the render's retry deadline.
func (g *Gitea) Create(ctx context.Context, base, branch, title, body string) (*PullRequest, error) {
	in := map[string]any{"base": base, "head": branch, "title": title, "body": body}
	within := wait.Within(ctx, 15*time.Second)
	for try := 1; ; try++ {
		var pr PullRequest
		code, err := g.do(ctx, http.MethodPost, g.repoPath()+"/pulls", nil, in, &pr)
		if err == nil {
			return &pr, nil
		}
		if code != http.StatusNotFound || createPoll.Pause(within, try, nil) != nil {
			return nil, err
		}
	}
}

// createPoll is how Create waits for a new repository: from 200ms,
// doubling, up to 2s.
var createPoll = wait.Policy{First: 200 * time.Millisecond, Limit: 2 * time.Second}

// Edit sets a pull request's title and body, and its state when state is
// not "" (open or closed).
func (g *Gitea) Edit(ctx context.Context, n int64, title, body, state string) (*PullRequest, error) {
	in := map[string]any{"title": title, "body": body}
	if state != "" {
		in["state"] = state
	}
	var pr PullRequest
	if _, err := g.do(ctx, http.MethodPatch, fmt.Sprintf("%s/pulls/%d", g.repoPath(), n), nil, in, &pr); err != nil {
		return nil, err
	}
	return &pr, nil
}

// Merge asks the forge to merge pull request n at head (the commit render
// pushed: a head that moved since is not merged) with style: at once when
// it can, or once its checks succeed. It reports whether the merge was
// scheduled rather than done.
func (g *Gitea) Merge(ctx context.Context, n int64, head, style string) (scheduled bool, err error) {
	in := map[string]any{"Do": style, "head_commit_id": head, "merge_when_checks_succeed": true, "delete_branch_after_merge": true}
	code, err := g.do(ctx, http.MethodPost, fmt.Sprintf("%s/pulls/%d/merge", g.repoPath(), n), nil, in, nil)
	if err != nil {
		return false, err
	}
	return code == http.StatusCreated, nil
}
