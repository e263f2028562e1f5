package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/render-dev/render/internal/engine"
	"github.com/render-dev/render/internal/secrets"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore/bookkeeping"
)

func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}

// writeText prints what a person reads: where each group went, and what
// each store did (or, with --dry-run, would do) per destination.
func writeText(w io.Writer, rep *engine.Report, explain bool) {
	if rep.Plan == nil {
		for _, s := range rep.Stores {
			if s.Err != nil {
				fmt.Fprintf(w, "%s: not written\n", s.Store)
			}
		}
		return
	}
	fmt.Fprintf(w, "%s: %s\n", rep.Workflow.Action, rep.Workflow)
	for _, g := range rep.Plan.Groups {
		fmt.Fprintf(w, "  group %s (%s, %d files, selector %s) -> %s\n", g.Directory, g.ID, len(g.Files), g.Selector, groupDestinations(g))
		if explain || g.Unscheduled() || len(g.Misscheduled) > 0 {
			for _, v := range g.Verdicts {
				fmt.Fprintf(w, "      %s\n", verdictLine(v))
			}
		}
	}
	if st := rep.Static; st != nil {
		for _, g := range st.Groups {
			fmt.Fprintf(w, "  static dependencies (spec.dependencies, selector %s) -> %s\n", g.Selector, groupDestinations(g))
			if explain || g.Unscheduled() || len(g.Misscheduled) > 0 {
				for _, v := range g.Verdicts {
					fmt.Fprintf(w, "      %s\n", verdictLine(v))
				}
			}
		}
	}
	for _, warn := range rep.Plan.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", warn)
	}
	for _, s := range rep.Stores {
		r := s.Result
		switch {
		case s.Err != nil:
			fmt.Fprintf(w, "%s: FAILED\n", s.Store)
			continue
		case !rep.DryRun && writeStorePR(w, s):
		case rep.DryRun && r.Updated:
			fmt.Fprintf(w, "%s: would write %d added, %d changed, %d deleted\n", s.Store, len(r.Added), len(r.Changed), len(r.Deleted))
		case rep.DryRun:
			fmt.Fprintf(w, "%s: nothing would change\n", s.Store)
		case r.Updated:
			fmt.Fprintf(w, "%s: wrote %s (%d added, %d changed, %d deleted)\n", s.Store, short(r.Revision), len(r.Added), len(r.Changed), len(r.Deleted))
		default:
			fmt.Fprintf(w, "%s: up to date\n", s.Store)
		}
		writePullRequest(w, s)
		writeSecrets(w, rep, s.Store)
		if rep.DryRun {
			for _, d := range s.Destinations {
				fmt.Fprintf(w, "  destination %s (%s):\n", d.Destination, d.Path)
				for _, f := range d.Added {
					fmt.Fprintf(w, "    + %s\n", f)
				}
				for _, f := range d.Changed {
					fmt.Fprintf(w, "    ~ %s\n", f)
				}
				for _, f := range d.Deleted {
					fmt.Fprintf(w, "    - %s\n", f)
				}
			}
		}
	}
	writeBreaker(w, rep.MassDeletion)
}

// groupDestinations says where a group went, in the text report.
func groupDestinations(g renderer.Group) string {
	dest := strings.Join(g.Destinations, ", ")
	switch {
	case !g.Placed():
		return "UNSCHEDULED"
	case g.Unscheduled():
		dest += " (UNSCHEDULED: nothing matches; kept where it was placed, misscheduled)"
	case len(g.Misscheduled) > 0 && len(g.Matching()) > 0:
		dest += " (misscheduled on " + strings.Join(g.Misscheduled, ", ") + ": kept where it was placed; matches now: " + strings.Join(g.Matching(), ", ") + ")"
	case len(g.Misscheduled) > 0:
		dest += " (misscheduled on " + strings.Join(g.Misscheduled, ", ") + ": kept where it was placed)"
	}
	switch {
	case g.KeptFrom == renderer.PlacedByKratix:
		dest += " (placed by Kratix, kept)"
	case g.Sticky:
		dest += " (kept from an earlier render)"
	}
	return dest
}

func verdictLine(v renderer.Verdict) string {
	switch {
	case v.Misscheduled:
		return fmt.Sprintf("%-20s kept, misscheduled (placed earlier, no longer matches): %s", v.Destination, v.Reason)
	case v.Reason != "":
		return fmt.Sprintf("%-20s filtered out: %s", v.Destination, v.Reason)
	case v.Chosen && len(v.TiedWith) > 0:
		return fmt.Sprintf("%-20s chosen (score %d, tied with %s: broken by the stable hash of the workload's identity)", v.Destination, v.Score, strings.Join(v.TiedWith, ", "))
	case v.Chosen:
		return fmt.Sprintf("%-20s chosen (score %d)", v.Destination, v.Score)
	default:
		return fmt.Sprintf("%-20s candidate (score %d)", v.Destination, v.Score)
	}
}

// unscheduledLine is the one-line reason a group went nowhere.
func unscheduledLine(g renderer.Group) string {
	var reasons []string
	for _, v := range g.Verdicts {
		if v.Reason != "" {
			reasons = append(reasons, v.Destination+": "+v.Reason)
		}
	}
	if len(reasons) == 0 {
		reasons = append(reasons, "there are no destinations")
	}
	line := fmt.Sprintf("group %s is unscheduled: no destination matches selector %s (%s)", g.Directory, g.Selector, strings.Join(reasons, "; "))
	if g.Placed() {
		line += fmt.Sprintf("; it is kept on %s, where it was placed, as Kratix keeps a misscheduled placement, and nothing was deleted", strings.Join(g.Destinations, ", "))
	}
	return line
}

type jsonVerdict struct {
	Destination string   `json:"destination"`
	Filtered    string   `json:"filtered,omitempty"`
	Reasons     []string `json:"reasons,omitempty"`
	Score       int      `json:"score"`
	Chosen      bool     `json:"chosen"`
	// Misscheduled: chosen because the group was placed there before,
	// although it no longer matches (Filtered says why).
	Misscheduled bool `json:"misscheduled,omitempty"`
	// TiedWith: the chosen destination tied on score with these, and the
	// stable hash decided.
	TiedWith []string `json:"tiedWith,omitempty"`
}

type jsonGroup struct {
	Directory    string   `json:"directory"`
	ID           string   `json:"id"`
	Files        []string `json:"files"`
	Selector     string   `json:"selector"`
	Destinations []string `json:"destinations"`
	Unscheduled  bool     `json:"unscheduled"`
	Kept         bool     `json:"kept"`
	// Misscheduled are the destinations the group stays on although they
	// no longer match it.
	Misscheduled []string `json:"misscheduled"`
	// KeptFrom says who made the placements the group keeps: render or
	// kratix.
	KeptFrom string        `json:"keptFrom,omitempty"`
	Verdicts []jsonVerdict `json:"verdicts"`
}

type jsonDest struct {
	Destination string   `json:"destination"`
	Path        string   `json:"path"`
	Added       []string `json:"added"`
	Changed     []string `json:"changed"`
	Deleted     []string `json:"deleted"`
}

type jsonStore struct {
	Store        string     `json:"store"`
	Description  string     `json:"description"`
	Updated      bool       `json:"updated"`
	Revision     string     `json:"revision,omitempty"`
	Attempts     int        `json:"attempts,omitempty"`
	Error        string     `json:"error,omitempty"`
	Destinations []jsonDest `json:"destinations"`
	// PullRequest is what pull-request mode did (spec.pullRequest).
	PullRequest *jsonPullRequest `json:"pullRequest,omitempty"`
}

type jsonReport struct {
	Workflow struct {
		Type      string `json:"type"`
		Action    string `json:"action"`
		Promise   string `json:"promise"`
		Pipeline  string `json:"pipeline"`
		Name      string `json:"name,omitempty"`
		Namespace string `json:"namespace,omitempty"`
	} `json:"workflow"`
	DryRun bool        `json:"dryRun"`
	Groups []jsonGroup `json:"groups"`
	// Static is the Promise's static dependencies (promise workflows).
	Static   []jsonGroup `json:"static,omitempty"`
	Stores   []jsonStore `json:"stores"`
	Warnings []string    `json:"warnings"`
	// MassDeletion is the breaker's verdict, when some write passes a limit.
	MassDeletion *bookkeeping.MassDeletionError `json:"massDeletion,omitempty"`
	// Secrets says what the render does with each Secret it writes.
	Secrets []jsonSecret `json:"secrets,omitempty"`
}

// jsonSecret is one Secret a render writes: where, and whether it is
// encrypted; never its value.
type jsonSecret struct {
	Store       string `json:"store"`
	Destination string `json:"destination"`
	// File is relative to the destination's folder.
	File   string `json:"file"`
	Secret string `json:"secret"`
	// Action is encrypted (now), kept (unchanged: the stored ciphertext
	// stays), sops (encrypted by the workflow) or plaintext (policy
	// allow).
	Action    string `json:"action"`
	Encrypted bool   `json:"encrypted"`
	// Recipients is how many age recipients it is encrypted to.
	Recipients int `json:"recipients,omitempty"`
}

// writeSecrets prints, under a store's line, what the render does with
// each Secret it writes there.
func writeSecrets(w io.Writer, rep *engine.Report, store renderer.StoreRef) {
	for _, n := range rep.Secrets {
		if n.Store == store {
			fmt.Fprintf(w, "  destination %s: %s\n", n.Destination, n)
		}
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// storeJSON is one store's outcome in the JSON reports (render and drain).
func storeJSON(s engine.StoreReport, dryRun bool) jsonStore {
	js := jsonStore{Store: s.Store.String(), Description: s.Name, Updated: s.Result.Updated, Attempts: s.Result.Attempts, Destinations: []jsonDest{}}
	if s.Result.Updated && !dryRun {
		js.Revision = s.Result.Revision
	}
	if s.Err != nil {
		js.Error = s.Err.Error()
	}
	js.PullRequest = pullRequestJSON(s.PullRequest)
	for _, d := range s.Destinations {
		js.Destinations = append(js.Destinations, jsonDest{Destination: d.Destination, Path: d.Path,
			Added: nonNil(d.Added), Changed: nonNil(d.Changed), Deleted: nonNil(d.Deleted)})
	}
	return js
}

func groupJSON(g renderer.Group) jsonGroup {
	jg := jsonGroup{Directory: g.Directory, ID: g.ID, Files: nonNil(g.Files), Selector: g.Selector.String(),
		Destinations: nonNil(g.Destinations), Unscheduled: g.Unscheduled(), Kept: g.Sticky,
		Misscheduled: nonNil(g.Misscheduled), KeptFrom: g.KeptFrom, Verdicts: []jsonVerdict{}}
	for _, v := range g.Verdicts {
		jg.Verdicts = append(jg.Verdicts, jsonVerdict{Destination: v.Destination, Filtered: v.Reason, Reasons: v.Reasons, Score: v.Score, Chosen: v.Chosen, Misscheduled: v.Misscheduled, TiedWith: v.TiedWith})
	}
	return jg
}

// writeReportJSON writes a render's report as JSON (-o json).
func writeReportJSON(w io.Writer, rep *engine.Report) error {
	var out jsonReport
	out.Workflow.Type, out.Workflow.Action = string(rep.Workflow.Type), string(rep.Workflow.Action)
	out.Workflow.Promise, out.Workflow.Pipeline = rep.Workflow.Promise, rep.Workflow.Pipeline
	out.Workflow.Name, out.Workflow.Namespace = rep.Workflow.Name, rep.Workflow.Namespace
	out.DryRun, out.MassDeletion = rep.DryRun, rep.MassDeletion
	out.Groups, out.Stores, out.Warnings = []jsonGroup{}, []jsonStore{}, []string{}
	if rep.Plan != nil {
		out.Warnings = nonNil(rep.Plan.Warnings)
		for _, g := range rep.Plan.Groups {
			out.Groups = append(out.Groups, groupJSON(g))
		}
	}
	if rep.Static != nil {
		for _, g := range rep.Static.Groups {
			out.Static = append(out.Static, groupJSON(g))
		}
	}
	for _, s := range rep.Stores {
		out.Stores = append(out.Stores, storeJSON(s, rep.DryRun))
	}
	for _, n := range rep.Secrets {
		out.Secrets = append(out.Secrets, jsonSecret{Store: n.Store.String(), Destination: n.Destination, File: n.File,
			Secret: n.Secret, Action: string(n.Action), Encrypted: n.Action != secrets.Plaintext, Recipients: n.Recipients})
	}
	return writeJSON(w, &out)
}
