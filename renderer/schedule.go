package renderer

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// ValidateWorkflow checks the workflow identity: every part that becomes a
// folder name must be a Kubernetes name, so none can climb out of its folder.
func ValidateWorkflow(w Workflow) error {
	bad := func(field, msg string) error {
		return &InputError{Where: "workflow identity", Msg: fmt.Sprintf("%s: %s", field, msg)}
	}
	switch w.Type {
	case PromiseWorkflow, ResourceWorkflow:
	case "":
		return bad("workflow type", "missing (set KRATIX_WORKFLOW_TYPE or --workflow-type to promise or resource)")
	default:
		return bad("workflow type", fmt.Sprintf("%q is neither promise nor resource", w.Type))
	}
	switch w.Action {
	case Configure, Delete:
	default:
		return bad("action", fmt.Sprintf("%q is neither configure nor delete", w.Action))
	}
	names := []struct{ field, value, hint string }{
		{"promise", w.Promise, "KRATIX_PROMISE_NAME or --promise"},
		{"pipeline", w.Pipeline, "KRATIX_PIPELINE_NAME or --pipeline"},
	}
	if w.Type == ResourceWorkflow {
		names = append(names,
			struct{ field, value, hint string }{"name", w.Name, "KRATIX_OBJECT_NAME, --name or object.yaml"},
			struct{ field, value, hint string }{"namespace", w.Namespace, "KRATIX_OBJECT_NAMESPACE, --namespace or object.yaml"})
	}
	if w.FolderNamespace != "" {
		if errs := validation.IsDNS1123Label(w.FolderNamespace); len(errs) > 0 {
			return bad("pipeline namespace", fmt.Sprintf("%q is not a valid namespace: %s", w.FolderNamespace, strings.Join(errs, "; ")))
		}
	}
	for _, n := range names {
		if n.value == "" {
			return bad(n.field, "missing (set "+n.hint+")")
		}
		if errs := validation.IsDNS1123Subdomain(n.value); len(errs) > 0 {
			return bad(n.field, fmt.Sprintf("%q is not a valid Kubernetes name: %s", n.value, strings.Join(errs, "; ")))
		}
	}
	return nil
}

func validateSelector(s Selector) error {
	_, err := asSelector(s)
	return err
}

// CheckSelector validates a selector with Kubernetes' rules and returns it
// in kubectl's notation.
func CheckSelector(s Selector) (string, error) {
	sel, err := asSelector(s)
	if err != nil {
		return "", err
	}
	return sel.String(), nil
}

// asSelector builds a Kubernetes label selector with Kubernetes' own
// function and rules (label keys and values, operators, values per operator).
func asSelector(s Selector) (labels.Selector, error) {
	for _, e := range s.MatchExpressions {
		switch e.Operator {
		case metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn, metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist:
		default: // apimachinery's message would not say which operators exist
			return nil, fmt.Errorf("invalid selector: matchExpressions: key %s: operator %q is not In, NotIn, Exists or DoesNotExist", e.Key, e.Operator)
		}
	}
	sel, err := metav1.LabelSelectorAsSelector(&metav1.LabelSelector{MatchLabels: s.MatchLabels, MatchExpressions: s.MatchExpressions})
	if err != nil {
		return nil, fmt.Errorf("invalid selector: %v", err)
	}
	return sel, nil
}

// filter says every reason d cannot take a group with selector s (none if
// it can), so a user who fixes one learns about the next. It follows
// Kratix: matchLabels is equality on every key; a group with no selector
// matches every destination except strict ones that have labels.
func filter(s Selector, d *Destination) []string {
	if s.Empty() {
		if d.StrictMatchLabels && len(d.Labels) > 0 {
			return []string{"strictMatchLabels: the destination has labels and the group has no selector"}
		}
		return nil
	}
	var reasons []string
	keys := make([]string, 0, len(s.MatchLabels))
	for k := range s.MatchLabels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		want := s.MatchLabels[k]
		got, ok := d.Labels[k]
		if !ok {
			reasons = append(reasons, fmt.Sprintf("label %s=%s: the destination has no label %s", k, want, k))
		} else if got != want {
			reasons = append(reasons, fmt.Sprintf("label %s=%s: the destination has %s=%s", k, want, k, got))
		}
	}
	set := labels.Set(d.Labels)
	for _, e := range s.MatchExpressions {
		sel, err := asSelector(Selector{MatchExpressions: []metav1.LabelSelectorRequirement{e}})
		if err != nil {
			reasons = append(reasons, err.Error())
			continue
		}
		if !sel.Matches(set) {
			have := "no label " + e.Key
			if v, ok := d.Labels[e.Key]; ok {
				have = e.Key + "=" + v
			}
			reasons = append(reasons, fmt.Sprintf("expression %s: the destination has %s", sel.String(), have))
		}
	}
	return reasons
}

// cordonReason is the verdict reason of a cordoned destination. A cordon
// turns away new placements only: it never makes a kept placement
// misscheduled.
const cordonReason = "cordoned (spec.unschedulable): takes no new placements"

// mismatch is the reasons in v.Reasons that say the destination no longer
// matches the group (all but a cordon).
func mismatch(v Verdict) []string {
	var out []string
	for _, r := range v.Reasons {
		if r != cordonReason {
			out = append(out, r)
		}
	}
	return out
}

// schedule fills g's verdicts and destinations.
func schedule(in Input, dests []Destination, byName map[string]*Destination, g *Group, plan *Plan, weigh func([]string) error) error {
	var candidates []int
	// One verdict per destination: a drain of 1,000 groups over 100
	// destinations keeps 100,000 of them, and grown by append they took
	// a quarter more.
	g.Verdicts = slices.Grow(g.Verdicts, len(dests))
	for i := range dests {
		d := &dests[i]
		v := Verdict{Destination: d.Name, Reasons: filter(g.Selector, d)}
		if d.Labels[DryRunLabel] == "true" {
			v.Reasons = append(v.Reasons, "label "+DryRunLabel+"=true: Kratix's dry-run destination takes no ordinary workloads")
		}
		if d.Unschedulable && in.Workflow.Type == ResourceWorkflow {
			v.Reasons = append(v.Reasons, cordonReason)
		}
		v.Reason = strings.Join(v.Reasons, "; ")
		if v.Reason == "" {
			candidates = append(candidates, len(g.Verdicts))
		}
		g.Verdicts = append(g.Verdicts, v)
	}
	keptFrom := PlacedByRender
	if in.PreviousByKratix {
		keptFrom = PlacedByKratix
	}
	// keep makes g stay on the earlier placement d (Kratix keeps a
	// WorkPlacement whose destination no longer matches, and labels it
	// misscheduled): its files there are written as on any destination.
	keep := func(d *Destination) {
		g.KeptFrom = keptFrom
		for i := range g.Verdicts {
			v := &g.Verdicts[i]
			if v.Destination != d.Name || v.Chosen {
				continue
			}
			v.Chosen = true
			if !slices.Contains(g.Destinations, d.Name) {
				g.Destinations = append(g.Destinations, d.Name)
			}
			if why := mismatch(*v); len(why) > 0 {
				v.Misscheduled = true
				v.Reasons, v.Reason = why, strings.Join(why, "; ")
				g.Misscheduled = append(g.Misscheduled, d.Name)
				continue
			}
			v.Reason, v.Reasons = "", nil // only cordoned: what is there stays
		}
		sort.Strings(g.Destinations)
		sort.Strings(g.Misscheduled)
	}
	if in.Workflow.Type == PromiseWorkflow {
		// Dependencies go to every matching destination, and stay where
		// an earlier render put them.
		for _, i := range candidates {
			g.Verdicts[i].Chosen = true
			g.Destinations = append(g.Destinations, g.Verdicts[i].Destination)
		}
		for _, name := range in.Previous[g.Directory] {
			if d := byName[name]; d != nil {
				keep(d)
			} else {
				plan.Warnings = append(plan.Warnings, fmt.Sprintf("group %s was placed on destination %s, which no longer exists: its files there are removed", g.Directory, name))
			}
		}
		return nil
	}
	// A placed resource stays where it is while its destination exists.
	if prev := in.Previous[g.Directory]; len(prev) > 0 {
		if d := byName[prev[0]]; d != nil {
			g.Sticky = true
			keep(d)
			return nil
		}
		plan.Warnings = append(plan.Warnings, fmt.Sprintf("group %s was placed on destination %s, which no longer exists: placing it again", g.Directory, prev[0]))
	}
	if len(candidates) == 0 {
		return nil
	}
	key := workloadKey(in.Workflow) + "#" + g.Directory
	var best int
	switch in.Strategy {
	case Random:
		r := rand.New(rand.NewPCG(in.Seed, stableHash(key)))
		best = candidates[r.IntN(len(candidates))]
	default:
		if weigh != nil && len(candidates) > 1 {
			names := make([]string, 0, len(candidates))
			for _, i := range candidates {
				names = append(names, g.Verdicts[i].Destination)
			}
			if err := weigh(names); err != nil {
				return err
			}
		}
		best = -1
		for _, i := range candidates {
			v := &g.Verdicts[i]
			v.Score = load(in, v.Destination)
			if best < 0 || v.Score < g.Verdicts[best].Score ||
				(v.Score == g.Verdicts[best].Score && stableHash(key+"@"+v.Destination) > stableHash(key+"@"+g.Verdicts[best].Destination)) {
				best = i
			}
		}
	}
	g.Verdicts[best].Chosen = true
	g.Destinations = []string{g.Verdicts[best].Destination}
	if in.Strategy != Random {
		for _, i := range candidates {
			if i != best && g.Verdicts[i].Score == g.Verdicts[best].Score {
				g.Verdicts[best].TiedWith = append(g.Verdicts[best].TiedWith, g.Verdicts[i].Destination)
			}
		}
	}
	return nil
}

// Mismatch says every reason destination d does not match a placement
// made with selector s: the reasons a kept placement is misscheduled (a
// cordon is not one). Empty when d matches.
func Mismatch(s Selector, d Destination) []string {
	reasons := filter(s, &d)
	if d.Labels[DryRunLabel] == "true" {
		reasons = append(reasons, "label "+DryRunLabel+"=true: Kratix's dry-run destination takes no ordinary workloads")
	}
	return reasons
}

// load is a candidate's score under the spread strategy: the resources of
// the same flavour it holds, or all resources when there is no flavour.
func load(in Input, dest string) int {
	if in.Flavour != "" {
		return in.Load.ByFlavour[in.Flavour][dest]
	}
	return in.Load.Total[dest]
}

func workloadKey(w Workflow) string {
	return strings.Join([]string{string(w.Type), w.Namespace, w.Promise, w.Name, w.Pipeline}, "/")
}

// stableHash is FNV-1a: the same on every machine and every run, unlike
// Go's map order or math/rand.
func stableHash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// Place schedules one resource group afresh, ignoring earlier placements,
// the way a render would: `render drain` uses it to find a new home for a
// group whose destination is being emptied (that destination passed in
// cordoned). g.Selector must be set; g's verdicts and destinations are
// replaced.
func Place(in Input, g Group) Group {
	in.Previous = nil
	dests := append([]Destination(nil), in.Destinations...)
	sort.Slice(dests, func(i, j int) bool { return dests[i].Name < dests[j].Name })
	byName := map[string]*Destination{}
	for i := range dests {
		byName[dests[i].Name] = &dests[i]
	}
	g.Verdicts, g.Destinations, g.Sticky = nil, nil, false
	_ = schedule(in, dests, byName, &g, &Plan{}, nil) // without weigh it cannot fail
	return g
}

// LoadCandidates returns the destinations whose load decided, or could
// decide, a choice in plan: those a resource group could go to under the
// spread strategy when it had more than one and was not sticky. A caller
// that rendered with no load reads the load of these only and renders
// again; nil means the load plays no part.
func LoadCandidates(in Input, plan *Plan) []string {
	if in.Workflow.Type != ResourceWorkflow || in.Strategy == Random || plan == nil {
		return nil
	}
	seen := map[string]bool{}
	for _, g := range plan.Groups {
		if g.Sticky {
			continue
		}
		var cands []string
		for _, v := range g.Verdicts {
			if v.Reason == "" {
				cands = append(cands, v.Destination)
			}
		}
		if len(cands) < 2 {
			continue
		}
		for _, d := range cands {
			seen[d] = true
		}
	}
	out := make([]string, 0, len(seen))
	for d := range seen {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}
