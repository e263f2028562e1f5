package storekind

import (
	"fmt"
	"time"

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

var mergeStyles = map[string]bool{"merge": true, "rebase": true, "rebase-merge": true, "squash": true, "fast-forward-only": true}

// Check validates spec.pullRequest's own fields and fills their defaults.
// The store's kind (internal/storekind) then checks what the mode needs
// of the rest of the store: a forge that spec.url leads to, and the
// credentials for its API.
func (pr *PullRequest) Check() error {
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
	return nil
}
