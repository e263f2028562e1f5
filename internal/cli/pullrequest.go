package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/render-dev/render/internal/engine"
)

// jsonPullRequest is a store's pull request in the JSON report.
type jsonPullRequest struct {
	Action  string `json:"action"`
	Branch  string `json:"branch"`
	Base    string `json:"base"`
	Number  int64  `json:"number,omitempty"`
	URL     string `json:"url,omitempty"`
	Merge   string `json:"merge,omitempty"`
	Waited  bool   `json:"waited,omitempty"`
	Outcome string `json:"outcome,omitempty"`
}

func pullRequestJSON(p *engine.PullRequestReport) *jsonPullRequest {
	if p == nil {
		return nil
	}
	return &jsonPullRequest{Action: p.Action, Branch: p.Branch, Base: p.Base, Number: p.Number, URL: p.URL, Merge: p.Merge, Waited: p.Waited, Outcome: p.Outcome}
}

// writePullRequest prints what a store's pull-request mode did, after the
// store's own line.
func writePullRequest(w io.Writer, s engine.StoreReport) {
	p := s.PullRequest
	if p == nil || s.Err != nil {
		return
	}
	r := s.Result
	switch p.Action {
	case engine.PRWould:
		fmt.Fprintf(w, "  would propose it in a pull request from %s into %s\n", p.Branch, p.Base)
	case engine.PROpened, engine.PRUpdated:
		fmt.Fprintf(w, "  pull request #%d %s: %s into %s (%d added, %d changed, %d deleted): %s\n", p.Number, p.Action, p.Branch, p.Base, len(r.Added), len(r.Changed), len(r.Deleted), p.URL)
	case engine.PRClosed:
		fmt.Fprintf(w, "  pull request #%d closed: %s already holds the change: %s\n", p.Number, p.Base, p.URL)
	case engine.PRNone:
		fmt.Fprintf(w, "  no pull request: nothing differs from %s\n", p.Base)
	case engine.PRDirect:
		if p.Number != 0 {
			fmt.Fprintf(w, "  written directly (no destination of spec.pullRequest.destinationSelector changes); pull request #%d closed: %s\n", p.Number, p.URL)
		}
	}
	switch p.Merge {
	case engine.PRMerged:
		fmt.Fprintf(w, "  merged by the forge at once (autoMerge)\n")
	case "scheduled":
		fmt.Fprintf(w, "  the forge merges it once its checks succeed (autoMerge)\n")
	}
	if p.Waited && p.Outcome == engine.PRMerged {
		fmt.Fprintf(w, "  pull request #%d is merged\n", p.Number)
	}
}

// writeStorePR is a store's line in pull-request mode, in place of
// "wrote …" (nothing moved the store's branch).
func writeStorePR(w io.Writer, s engine.StoreReport) bool {
	p := s.PullRequest
	if p == nil || s.Err != nil {
		return false
	}
	switch p.Action {
	case engine.PROpened, engine.PRUpdated:
		fmt.Fprintf(w, "%s: proposed %s on branch %s (planned on %s)\n", s.Store, short(s.Result.Revision), p.Branch, p.Base)
	case engine.PRClosed, engine.PRNone:
		fmt.Fprintf(w, "%s: up to date\n", s.Store)
	case engine.PRDeclined:
		fmt.Fprintf(w, "%s: not proposed again\n", s.Store)
	default:
		return false
	}
	return true
}

// pullRequestExit is the exit error for pull requests that did not end
// well: closed without being merged (exit 1; reported once, never opened
// again for the same change), or still open when the wait ended (exit 5).
func pullRequestExit(rep *engine.Report) error {
	var closed, open []string
	for _, s := range rep.Stores {
		p := s.PullRequest
		if p == nil || s.Err != nil {
			continue
		}
		switch {
		case p.Action == engine.PRDeclined:
			closed = append(closed, fmt.Sprintf("%s: pull request #%d (%s) was closed without being merged; render does not open the same change again (change the workflow's output, or reopen it): %s", s.Store, p.Number, p.Branch, p.URL))
		case p.Outcome == engine.PRClosedByHim:
			closed = append(closed, fmt.Sprintf("%s: pull request #%d (%s) was closed without being merged while render waited: %s", s.Store, p.Number, p.Branch, p.URL))
		case p.Waited && p.Outcome == engine.PRStillOpen:
			open = append(open, fmt.Sprintf("%s: pull request #%d (%s) is still open: the wait (spec.pullRequest.wait) ended before it was merged: %s", s.Store, p.Number, p.Branch, p.URL))
		}
	}
	if len(closed) > 0 {
		return &ExitError{Code: ExitStoreFailed, Err: errors.New(strings.Join(closed, "\nrender: "))}
	}
	if len(open) > 0 {
		return &ExitError{Code: ExitPullRequestOpen, Err: errors.New(strings.Join(open, "\nrender: "))}
	}
	return nil
}

// logPullRequest logs what a store's pull-request mode did (watch mode).
// A pull request closed without being merged is a warning, logged on each
// render that finds it; it is not retried.
func logPullRequest(log *slog.Logger, s engine.StoreReport) {
	p := s.PullRequest
	if p == nil || s.Err != nil {
		return
	}
	args := []any{"store", s.Store.String(), "action", p.Action, "branch", p.Branch, "base", p.Base}
	if p.Number != 0 {
		args = append(args, "number", p.Number, "url", p.URL)
	}
	if p.Merge != "" {
		args = append(args, "merge", p.Merge)
	}
	if p.Outcome != "" {
		args = append(args, "outcome", p.Outcome)
	}
	if p.Action == engine.PRDeclined || p.Outcome == engine.PRClosedByHim {
		log.Warn("pull request closed without being merged; the same change is not proposed again", args...)
		return
	}
	log.Info("pull request", args...)
}
