package engine

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/render-dev/render/internal/forge"
	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/internal/storekind"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/wait"
)

// Pull-request actions (PullRequestReport.Action).
const (
	// PROpened: a pull request was opened.
	PROpened = "opened"
	// PRUpdated: the open pull request's branch, title and body were updated.
	PRUpdated = "updated"
	// PRClosed: nothing differs from the base branch any more: the open
	// pull request was closed and its branch deleted.
	PRClosed = "closed"
	// PRNone: nothing differs from the base branch, and no pull request is open.
	PRNone = "none"
	// PRDeclined: the same change's pull request was closed without being
	// merged; render does not open it again.
	PRDeclined = "declined"
	// PRDirect: the write changed no destination the store's
	// destinationSelector picks, and went to the branch directly.
	PRDirect = "direct"
	// PRWould: a dry run; a real render would propose the change.
	PRWould = "would-propose"
)

// Pull-request outcomes after the wait (PullRequestReport.Outcome).
const (
	PRMerged      = "merged"
	PRStillOpen   = "open"
	PRClosedByHim = "closed-unmerged"
)

// PullRequestReport is what pull-request mode did in one store.
type PullRequestReport struct {
	Action string
	// Branch is render's branch for the workload; Base the store's branch.
	Branch, Base string
	Number       int64
	URL          string
	// Merge is "merged" or "scheduled" when autoMerge asked the forge to
	// merge, with what the forge answered.
	Merge string
	// Waited says render waited (spec.pullRequest.wait), and Outcome how
	// the pull request stood when the wait ended.
	Waited  bool
	Outcome string
}

// prSetup is one store's pull-request mode, resolved before anything is
// written.
type prSetup struct {
	spec   *storekind.PullRequest
	client *forge.Gitea
	base   string
	// labels of the store's destinations, by destination path.
	labels map[string]map[string]string
}

// pullRequests resolves every store's pull-request mode: the forge, its
// repository and the token. What is missing or wrong is bad input,
// naming the store and the field, before any store is contacted.
func (e *Engine) pullRequests(p *inputs.Platform, refs []renderer.StoreRef) (map[renderer.StoreRef]*prSetup, error) {
	out := map[renderer.StoreRef]*prSetup{}
	for _, ref := range refs {
		m, err := e.opts.Kinds.PullRequests(p, ref, e.storeOptions())
		if err != nil {
			return nil, err
		}
		if m == nil {
			continue
		}
		s := &prSetup{spec: m.Spec, client: m.Forge, base: m.Base, labels: map[string]map[string]string{}}
		for _, d := range p.Destinations {
			if d.Store == ref {
				s.labels[d.Path] = d.Labels
			}
		}
		out[ref] = s
	}
	return out, nil
}

// selects reports whether a write with these per-destination diffs goes
// through a pull request. A write with no change does too: it settles the
// pull request (closes it) rather than the branch.
func (s *prSetup) selects(diffs []DestinationDiff) bool {
	if !s.spec.Selective() || len(diffs) == 0 {
		return true
	}
	for _, d := range diffs {
		if s.spec.Selects(s.labels[d.Path]) {
			return true
		}
	}
	return false
}

// ownDiff is d without the shared files (the canaries, which go with
// every write to every destination of the store): what the workloads
// themselves change.
func ownDiff(d statestore.Diff, us []statestore.Update) statestore.Diff {
	shared := map[string]bool{}
	for _, u := range us {
		for p := range u.Shared {
			shared[p] = true
		}
	}
	keep := func(l []string) []string {
		var out []string
		for _, p := range l {
			if !shared[p] {
				out = append(out, p)
			}
		}
		return out
	}
	return statestore.Diff{Added: keep(d.Added), Changed: keep(d.Changed), Deleted: keep(d.Deleted)}
}

// publishPR writes one store's updates in pull-request mode: it proposes
// them on render's branch for the workload, and opens, updates or closes
// the pull request; then, as the store asks, merges it and waits for the
// merge. wait is the render's own context (a stop ends the wait); pub is
// the publish's.
func (e *Engine) publishPR(wait, pub context.Context, p *inputs.Platform, ref renderer.StoreRef, st statestore.Store, us []statestore.Update, key string, pr *prSetup) StoreReport {
	t0 := time.Now()
	sr := StoreReport{Store: ref, Name: st.String()}
	// Declared, not discovered: pr is set only for a store whose kind
	// declared pull requests (storekind.Capabilities.PullRequests), and
	// such a kind's stores are Proposers; a store that is not one is a
	// kind that broke its declaration (see statestore.Proposer).
	gs, ok := st.(statestore.Proposer)
	if !ok {
		sr.PullRequest = &PullRequestReport{Base: pr.base}
		sr.Err = fmt.Errorf("%s: pull requests need a store that proposes changes (a git store)", st)
		return sr
	}
	rep := &PullRequestReport{Branch: gs.ProposalBranch(key), Base: pr.base}
	sr.PullRequest = rep
	fail := func(op string, err error) StoreReport {
		sr.Err = &statestore.StoreError{Store: st.String(), Op: op, Err: err}
		sr.Duration = time.Since(t0)
		return sr
	}
	sort.SliceStable(us, func(i, j int) bool { return us[i].Workload < us[j].Workload })
	if pr.spec.Selective() {
		// Where would the write go? Planned on the base, written nowhere.
		dry := append([]statestore.Update(nil), us...)
		for i := range dry {
			dry[i].DryRun = true
		}
		res, err := gs.ApplyAll(pub, dry)
		if err != nil {
			sr.Err = e.annotate(ref, err)
			return sr
		}
		if !pr.selects(splitByDestination(p, ref, ownDiff(res.Diff, us))) {
			res, err := gs.ApplyAll(pub, us)
			sr.Result, sr.Err = res, e.annotate(ref, err)
			sr.Destinations = splitByDestination(p, ref, res.Diff)
			rep.Action = PRDirect
			if err == nil {
				// What a pull request proposed is superseded by the write.
				if err := e.closeStale(pub, gs, pr, rep); err != nil {
					return fail("pull request", err)
				}
			}
			sr.Duration = time.Since(t0)
			return sr
		}
	}
	prop, err := gs.Propose(pub, rep.Branch, us)
	e.log.Debug("proposed", "store", ref.String(), "branch", rep.Branch, "updated", prop.Updated, "took", time.Since(t0).String())
	sr.Result = prop.Result
	sr.Destinations = splitByDestination(p, ref, prop.Diff)
	if err != nil {
		sr.Err = e.annotate(ref, err)
		sr.Duration = time.Since(t0)
		return sr
	}
	c := pr.client
	open, err := c.FindOpen(pub, pr.base, rep.Branch)
	if err != nil {
		return fail("pull request", err)
	}
	if !prop.Updated {
		rep.Action = PRNone
		if err := e.closeStale(pub, gs, pr, rep); err != nil {
			return fail("pull request", err)
		}
		sr.Duration = time.Since(t0)
		return sr
	}
	msg, err := us[0].MessageFor(prop.Diff)
	if err != nil {
		return fail("commit message", err)
	}
	digest := changeDigest(us, prop.Diff)
	title := msg.Subject
	body := prBody(st.String(), prop, sr.Destinations, digest)
	if open != nil {
		got, err := c.Edit(pub, open.Number, title, body, "")
		if err != nil {
			return fail("pull request", err)
		}
		rep.Action, rep.Number, rep.URL = PRUpdated, got.Number, got.HTMLURL
	} else {
		last, err := c.LastClosed(pub, pr.base, rep.Branch)
		if err != nil {
			return fail("pull request", err)
		}
		if last != nil && !last.Merged && bodyDigest(last.Body) == digest {
			// Someone closed this very change without merging it: say so,
			// and do not propose it again until it changes.
			rep.Action, rep.Number, rep.URL, rep.Outcome = PRDeclined, last.Number, last.HTMLURL, PRClosedByHim
			sr.Duration = time.Since(t0)
			return sr
		}
		got, err := c.Create(pub, pr.base, rep.Branch, title, body)
		if err != nil {
			return fail("pull request", err)
		}
		rep.Action, rep.Number, rep.URL = PROpened, got.Number, got.HTMLURL
	}
	e.log.Debug("pull request", "store", ref.String(), "action", rep.Action, "number", rep.Number, "took", time.Since(t0).String())
	if pr.spec.AutoMerge {
		scheduled, err := e.merge(pub, c, rep.Number, prop.Revision, pr.spec.MergeStyle)
		if err != nil {
			return fail("merge pull request", err)
		}
		rep.Merge = PRMerged
		if scheduled {
			rep.Merge = "scheduled"
		}
	}
	if pr.spec.Wait > 0 {
		rep.Waited = true
		out, err := waitMerged(wait, c, rep.Number, pr.spec.Wait)
		if err != nil {
			return fail("wait for the pull request", err)
		}
		rep.Outcome = out
	}
	sr.Duration = time.Since(t0)
	return sr
}

// closeStale closes the workload's open pull request, if there is one:
// the base branch already holds what the workload wants. Its branch goes
// too.
func (e *Engine) closeStale(ctx context.Context, gs statestore.Proposer, pr *prSetup, rep *PullRequestReport) error {
	open, err := pr.client.FindOpen(ctx, pr.base, rep.Branch)
	if err != nil || open == nil {
		return err
	}
	body := fmt.Sprintf("Closed by render: %s already holds this workload's files; there is nothing left to propose.\n\n%s", pr.base, closedMarker)
	if _, err := pr.client.Edit(ctx, open.Number, open.Title, body, "closed"); err != nil {
		return err
	}
	if rep.Action != PRDirect {
		rep.Action = PRClosed
	}
	rep.Number, rep.URL = open.Number, open.HTMLURL
	return gs.DeleteBranch(ctx, rep.Branch)
}

// merge asks the forge to merge n at head, trying again while the forge
// is still checking whether it can (Gitea answers 405 "try again later"
// right after a push), every mergePoll, for up to a minute or the render's
// retry deadline.
func (e *Engine) merge(ctx context.Context, c *forge.Gitea, n int64, head, style string) (bool, error) {
	within := wait.Within(ctx, time.Minute)
	for try := 1; ; try++ {
		scheduled, err := c.Merge(ctx, n, head, style)
		var se *forge.StatusError
		if errors.As(err, &se) && se.Code == 409 && strings.Contains(strings.ToLower(se.Msg), "scheduled") {
			return true, nil // an earlier render scheduled it already
		}
		checking := errors.As(err, &se) && se.Code == 405 && strings.Contains(strings.ToLower(se.Msg), "try again later")
		if err == nil || !checking {
			return scheduled, err
		}
		if werr := mergePoll.Pause(within, try, nil); errors.Is(werr, statestore.ErrDeadline) {
			return scheduled, err
		} else if werr != nil {
			return false, werr
		}
	}
}

var (
	// mergePoll is how often merge asks again: every 500ms.
	mergePoll = wait.Policy{First: 500 * time.Millisecond, Growth: 1}
	// mergedPoll is how often waitMerged looks: from 500ms, doubling, up
	// to 5s.
	mergedPoll = wait.Policy{First: 500 * time.Millisecond, Limit: 5 * time.Second}
)

// waitMerged polls pull request n until it is merged or closed, or until
// d has passed or ctx is done; it returns how it stood then. d is the
// user's (the store's pullRequest.wait), not bounded by the render's retry
// deadline; its timeout is on the render's clock.
func waitMerged(ctx context.Context, c *forge.Gitea, n int64, d time.Duration) (string, error) {
	ctx, cancel := wait.WithTimeout(ctx, d)
	defer cancel()
	for poll := 1; ; poll++ {
		got, err := c.Get(ctx, n)
		switch {
		case err != nil && ctx.Err() != nil:
			return PRStillOpen, nil
		case err != nil:
			return "", err
		case got.Merged:
			return PRMerged, nil
		case !got.Open():
			return PRClosedByHim, nil
		}
		if wait.Sleep(ctx, mergedPoll.Delay(poll)) != nil {
			return PRStillOpen, nil
		}
	}
}

const (
	digestPrefix = "<!-- render-change: "
	closedMarker = "<!-- render-closed -->"
)

// changeDigest identifies a proposed change whatever the base's tip: the
// workloads' files and what the plan does with them.
func changeDigest(us []statestore.Update, d statestore.Diff) string {
	h := sha256.New()
	for _, u := range us {
		fmt.Fprintf(h, "workload %s\n", u.Workload)
		paths := make([]string, 0, len(u.Files))
		for p := range u.Files {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		for _, p := range paths {
			fmt.Fprintf(h, "file %s %x\n", p, sha256.Sum256(u.Files[p]))
		}
		for _, a := range u.Aggregates {
			fmt.Fprintf(h, "aggregate %s %x\n", a.Target, sha256.Sum256(a.Contribution))
		}
		fmt.Fprintf(h, "record %t\n", u.Record != nil)
	}
	for _, l := range [][]string{d.Added, d.Changed, d.Deleted} {
		s := append([]string(nil), l...)
		sort.Strings(s)
		fmt.Fprintf(h, "%q\n", s)
	}
	return fmt.Sprintf("%x", h.Sum(nil)[:12])
}

// bodyDigest is the change digest a pull request's body carries ("" for
// one render closed itself, or none).
func bodyDigest(body string) string {
	if strings.Contains(body, closedMarker) {
		return ""
	}
	_, rest, ok := strings.Cut(body, digestPrefix)
	if !ok {
		return ""
	}
	d, _, _ := strings.Cut(rest, " ")
	return d
}

// prBody is the pull request's description: the per-destination diff, as
// --dry-run prints it, in Markdown.
func prBody(store string, prop statestore.Proposal, diffs []DestinationDiff, digest string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "render proposes this change to `%s`, planned on `%s` (%d added, %d changed, %d deleted).\n",
		store, short12(prop.Base), len(prop.Added), len(prop.Changed), len(prop.Deleted))
	for _, d := range diffs {
		fmt.Fprintf(&b, "\n#### destination %s (`%s`)\n\n```diff\n", d.Destination, d.Path)
		for _, f := range d.Added {
			fmt.Fprintf(&b, "+ %s\n", f)
		}
		for _, f := range d.Changed {
			fmt.Fprintf(&b, "~ %s\n", f)
		}
		for _, f := range d.Deleted {
			fmt.Fprintf(&b, "- %s\n", f)
		}
		b.WriteString("```\n")
	}
	fmt.Fprintf(&b, "\nA later render of the workload updates this pull request (its branch is force-pushed).\n\n%s%s -->\n", digestPrefix, digest)
	return b.String()
}

func short12(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
