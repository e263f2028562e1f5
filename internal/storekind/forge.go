package storekind

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"

	"github.com/render-dev/render/internal/forge"
)

// Forge is where a store's pull requests go: the API root and the
// repository.
type Forge struct {
	APIURL      string
	Owner, Repo string
}

// ForgeOf works out where the store's pull requests go: spec.pullRequest.apiURL,
// or the API root of the http(s) URL's server
// (http(s)://host[:port][/prefix]/owner/repo(.git) gives
// http(s)://host[:port][/prefix]/api/v1), and the owner and repository from
// the URL's last two path segments. A store whose forge cannot be known (a
// repository on this machine, an ssh URL without apiURL) is an error naming
// the field.
func ForgeOf(s *GitStateStore) (Forge, error) {
	pr := s.PullRequest
	if strings.HasPrefix(s.URL, "/") || strings.HasPrefix(s.URL, "./") || strings.HasPrefix(s.URL, "../") || strings.HasPrefix(s.URL, "file://") {
		return Forge{}, errors.New("spec.pullRequest: spec.url is a repository on this machine, which has no forge to open a pull request on: remove spec.pullRequest, or use the forge's http(s) URL")
	}
	ep, err := transport.NewEndpoint(s.URL)
	if err != nil {
		return Forge{}, errors.New("spec.pullRequest: the repository cannot be told from spec.url")
	}
	segs := strings.Split(strings.Trim(ep.Path, "/"), "/")
	if len(segs) < 2 || segs[len(segs)-1] == "" || segs[len(segs)-2] == "" {
		return Forge{}, errors.New("spec.pullRequest: spec.url does not end in owner/repository, so the forge's repository cannot be known")
	}
	f := Forge{Owner: segs[len(segs)-2], Repo: strings.TrimSuffix(segs[len(segs)-1], ".git")}
	if pr.APIURL != "" {
		u, err := url.Parse(pr.APIURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" {
			return Forge{}, errors.New("spec.pullRequest.apiURL is not an http(s) URL with a host (and no credentials or query)")
		}
		f.APIURL = strings.TrimRight(pr.APIURL, "/")
		return f, nil
	}
	if ep.Protocol != "http" && ep.Protocol != "https" {
		return Forge{}, fmt.Errorf("spec.pullRequest.apiURL is needed: the forge's API cannot be known from a %s URL", ep.Protocol)
	}
	u := url.URL{Scheme: ep.Protocol, Host: ep.Host}
	if ep.Port != 0 {
		u.Host = fmt.Sprintf("%s:%d", ep.Host, ep.Port)
	}
	u.Path = path.Join("/", path.Join(segs[:len(segs)-2]...), "api/v1")
	f.APIURL = u.String()
	return f, nil
}

// checkPullRequest validates spec.pullRequest and fills its defaults: its
// own fields, the forge spec.url leads to, and the credentials the forge's
// API needs.
func checkPullRequest(s *GitStateStore) error {
	pr := s.PullRequest
	if pr == nil {
		return nil
	}
	if err := pr.Check(); err != nil {
		return err
	}
	if _, err := ForgeOf(s); err != nil {
		return err
	}
	if s.AuthMethod == "" || s.SecretRef == nil {
		return errors.New("spec.pullRequest needs the store's spec.secretRef (and authMethod): the forge's API token comes from that secret (key token, or basicAuth's username and password)")
	}
	return nil
}

// openForge builds the client of the forge a GitStateStore in pull-request
// mode (spec.pullRequest) opens its pull requests on: the forge and its
// repository (ForgeOf), and the API token from the store's secret (key
// token, or basicAuth's username and password) with its ca.crt. What is
// missing or wrong is an InputError naming the store and the field,
// before any store is contacted.
func openForge(gs *GitStateStore, v env) (*forge.Gitea, error) {
	f, err := ForgeOf(gs)
	if err != nil {
		return nil, v.bad(err.Error())
	}
	secret, err := v.secret(gs.SecretRef, true)
	if err != nil {
		return nil, err
	}
	var auth forge.Auth
	switch {
	case len(strings.TrimSpace(string(secret["token"]))) > 0:
		auth.Token = strings.TrimSpace(string(secret["token"]))
	case gs.AuthMethod == "basicAuth" && len(secret["username"]) > 0 && len(secret["password"]) > 0:
		auth.Username, auth.Password = strings.TrimSpace(string(secret["username"])), strings.TrimSpace(string(secret["password"]))
	default:
		return nil, v.bad(fmt.Sprintf("spec.pullRequest: secret %s has no key \"token\" (nor basicAuth's username and password) for the forge's API", gs.SecretRef.Name))
	}
	if u, err := url.Parse(f.APIURL); err == nil && u.Scheme == "http" && !loopback(u.Hostname()) && !gs.AllowInsecureHTTP {
		return nil, v.bad("spec.pullRequest: the forge's API " + f.APIURL + " is plain http:// and the token would cross the network unencrypted: use https://, or set spec.allowInsecureHTTP: true to accept that")
	}
	c, err := forge.NewGitea(forge.Config{APIURL: f.APIURL, Owner: f.Owner, Repo: f.Repo, Auth: auth,
		CABundle: secret["ca.crt"], InsecureSkipTLS: gs.InsecureSkipTLSVerify})
	if err != nil {
		return nil, v.bad("spec.pullRequest: " + err.Error())
	}
	return c, nil
}
