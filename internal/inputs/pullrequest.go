package inputs

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/render-dev/render/renderer"
)

// PullRequest is a GitStateStore's pull-request mode: render writes a
// workload's change to a branch of its own and opens (or updates) a pull
// request for it on the forge, instead of moving the store's branch.
type PullRequest struct {
	// DestinationSelector, when set, limits the mode to writes that change a
	// destination whose labels it matches; other writes go to the branch
	// directly. Unset: every write of the store.
	DestinationSelector *renderer.Selector `yaml:"destinationSelector"`
	// Forge is the forge's kind; gitea is the only one (and the default).
	Forge string `yaml:"forge"`
	// APIURL is the forge's API root, e.g. https://git.example.com/api/v1.
	// By default it is derived from spec.url (http and https URLs only).
	APIURL string `yaml:"apiURL"`
	// AutoMerge asks the forge to merge the pull request: once its checks
	// succeed, or at once when it has none.
	AutoMerge bool `yaml:"autoMerge"`
	// MergeStyle is how the forge merges: merge (default), rebase,
	// rebase-merge, squash or fast-forward-only.
	MergeStyle string `yaml:"mergeStyle"`
	// Wait, when positive, makes render wait up to this long for the pull
	// request to be merged.
	Wait time.Duration `yaml:"wait"`

	selector labels.Selector
}

// Selects reports whether a destination with these labels is written
// through a pull request.
func (pr *PullRequest) Selects(l map[string]string) bool {
	if pr == nil {
		return false
	}
	if pr.selector == nil {
		return true
	}
	return pr.selector.Matches(labels.Set(l))
}

// Selective reports whether the mode applies to some destinations only.
func (pr *PullRequest) Selective() bool { return pr != nil && pr.selector != nil }

// Forge is where a store's pull requests go: the API root and the
// repository.
type Forge struct {
	APIURL      string
	Owner, Repo string
}

var mergeStyles = map[string]bool{"merge": true, "rebase": true, "rebase-merge": true, "squash": true, "fast-forward-only": true}

// checkPullRequest validates spec.pullRequest and fills its defaults.
func (s *GitStateStore) checkPullRequest() error {
	pr := s.PullRequest
	if pr == nil {
		return nil
	}
	switch pr.Forge {
	case "":
		pr.Forge = "gitea"
	case "gitea":
	default:
		return fmt.Errorf("spec.pullRequest.forge %q is unknown: use gitea", pr.Forge)
	}
	if pr.MergeStyle == "" {
		pr.MergeStyle = "merge"
	}
	if !mergeStyles[pr.MergeStyle] {
		return fmt.Errorf("spec.pullRequest.mergeStyle %q is unknown: use merge, rebase, rebase-merge, squash or fast-forward-only", pr.MergeStyle)
	}
	if pr.Wait < 0 {
		return fmt.Errorf("spec.pullRequest.wait %s is negative", pr.Wait)
	}
	if sel := pr.DestinationSelector; sel != nil && !sel.Empty() {
		if _, err := renderer.CheckSelector(*sel); err != nil {
			return fmt.Errorf("spec.pullRequest.destinationSelector: %v", err)
		}
		ls, err := metav1.LabelSelectorAsSelector(&metav1.LabelSelector{MatchLabels: sel.MatchLabels, MatchExpressions: sel.MatchExpressions})
		if err != nil {
			return fmt.Errorf("spec.pullRequest.destinationSelector: %v", err)
		}
		pr.selector = ls
	}
	if _, err := s.Forge(); err != nil {
		return err
	}
	if s.AuthMethod == "" || s.SecretRef == nil {
		return errors.New("spec.pullRequest needs the store's spec.secretRef (and authMethod): the forge's API token comes from that secret (key token, or basicAuth's username and password)")
	}
	return nil
}

// Forge works out where the store's pull requests go: spec.pullRequest.apiURL,
// or the API root of the http(s) URL's server
// (http(s)://host[:port][/prefix]/owner/repo(.git) gives
// http(s)://host[:port][/prefix]/api/v1), and the owner and repository from
// the URL's last two path segments. A store whose forge cannot be known (a
// repository on this machine, an ssh URL without apiURL) is an error naming
// the field.
func (s *GitStateStore) Forge() (Forge, error) {
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
