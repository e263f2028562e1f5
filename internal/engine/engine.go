// Package engine runs one render end to end, as a few named steps (see
// Render): it loads and validates every input, reads what the stores
// remember, calls the pure renderer, guards and applies one update per
// store. A render, a drain and a prune-misscheduled run their store
// reads, plans and writes as passes of one operation driver (see
// operation.go), with one rule for a write another writer made stale,
// and end with the same guard and publish steps. Store clients come from their kinds (internal/storekind); the
// engine holds them between renders, so watch mode keeps its clones. It
// prints nothing; the CLI reports.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/render-dev/render/internal/fluxcheck"
	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/internal/secrets"
	"github.com/render-dev/render/internal/storekind"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
	"github.com/render-dev/render/statestore/driver"
	"github.com/render-dev/render/statestore/planner"
)

// Options configure an Engine. The CLI fills them from flags.
type Options struct {
	OutputDir, MetadataDir, InputDir string
	Platform                         []string
	SecretsDir                       string
	// Identity holds the workflow identity flags that were set, by flag name
	// (workflow-type, action, promise, pipeline, name, namespace).
	Identity map[string]string
	Getenv   func(string) string
	DryRun   bool
	// AllowMassDeletion turns the mass-deletion breaker off for every store.
	AllowMassDeletion bool
	// CommitTemplate, when set, is the commit message template for every
	// git store (read from CommitTemplateFile), in place of spec.commit.template.
	CommitTemplate, CommitTemplateFile string
	// Hydrate builds output folders holding a kustomization.yaml into plain
	// manifests before scheduling.
	Hydrate  bool
	Strategy renderer.Strategy
	// FlavourKey is the label on the resource request that names its flavour.
	FlavourKey string
	// NoInheritedSelector stops resource workflows from inheriting the
	// root selector their promise workflow left: Kratix's behaviour since
	// v0.67.0. By default they inherit it, as Kratix's documentation says.
	NoInheritedSelector bool
	// RetryDeadline is each render's one retry budget: from the render's
	// start, every wait of every store (an unreachable server, a busy
	// branch or bucket) stops once it has passed.
	RetryDeadline time.Duration
	Version       string
	Seed          uint64
	// Transport, when set, carries every HTTP request of the S3 and OCI
	// store clients the engine opens, in place of each client's own (the
	// in-process fault campaign, internal/testinfra/chaos/sim, injects its faults
	// there). Git's connections go through go-git's protocol registry.
	Transport http.RoundTripper
	Log       *slog.Logger
	// OnPhase, when set, is told when a render enters each phase
	// (PhaseReading, PhasePlanning, PhasePublishing).
	OnPhase func(phase string)
	// Kinds are the kinds of state store the platform may define, each
	// checking its spec and building its client; nil is
	// storekind.Default (git, S3 and OCI).
	Kinds *storekind.Registry
}

// Engine renders; it may be used for many renders, one at a time.
type Engine struct {
	opts   Options
	log    *slog.Logger
	mu     sync.Mutex
	stores map[renderer.StoreRef]keptStore
}

type keptStore struct {
	key    string
	store  statestore.Store
	secret string // the secret its credentials come from, for messages
}

// annotate adds what the user needs to act on a store error: which secret
// was refused.
func (e *Engine) annotate(ref renderer.StoreRef, err error) error {
	if err == nil || !errors.Is(err, statestore.ErrAuth) {
		return err
	}
	e.mu.Lock()
	secret := e.stores[ref].secret
	e.mu.Unlock()
	if secret == "" {
		return fmt.Errorf("%w (the store has no secretRef: set authMethod and secretRef)", err)
	}
	return fmt.Errorf("%w (credentials from secret %s)", err, secret)
}

// New makes an Engine.
func New(opts Options) *Engine {
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.FlavourKey == "" {
		opts.FlavourKey = "flavour"
	}
	if opts.Strategy == "" {
		opts.Strategy = renderer.Spread
	}
	if opts.Kinds == nil {
		opts.Kinds = storekind.Default
	}
	return &Engine{opts: opts, log: opts.Log, stores: map[renderer.StoreRef]keptStore{}}
}

// Close releases every kept store client.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	for ref, k := range e.stores {
		errs = append(errs, k.store.Close())
		delete(e.stores, ref)
	}
	return errors.Join(errs...)
}

// Report is what a render did.
type Report struct {
	Workflow renderer.Workflow
	Plan     *renderer.Plan
	// Static is the plan of the Promise's static dependencies (promise
	// workflows only).
	Static   *renderer.Plan
	Stores   []StoreReport
	DryRun   bool
	Duration time.Duration
	Files    int // files read from the output
	// Stopped is set when a stop was asked (WithStop) while the render was
	// publishing: the publish went on, and Stores says how each ended.
	Stopped bool
	// MassDeletion is the breaker's verdict on a dry run that a real
	// render would refuse (a real render returns it as its error).
	MassDeletion *bookkeeping.MassDeletionError
	// Secrets says what the render does with each Secret it writes
	// (encrypted, kept, written as it is), never a value.
	Secrets []secrets.Note
}

// StoreReport is one store's outcome.
type StoreReport struct {
	Store  renderer.StoreRef
	Name   string // the store's own description (URL, branch or bucket)
	Result statestore.Result
	Err    error
	// Duration is how long the store's write (or its failed read) took.
	Duration time.Duration
	// Destinations maps destination name to its share of the diff.
	Destinations []DestinationDiff
	// PullRequest is what pull-request mode did (spec.pullRequest), or nil.
	PullRequest *PullRequestReport
	// Uploads is true when the store's kind writes by uploading objects
	// (S3, OCI), not by committing (storekind.Capabilities).
	Uploads bool
}

// DestinationDiff is the part of a store's diff inside one destination,
// with paths relative to the destination.
type DestinationDiff struct {
	Destination string
	Path        string
	statestore.Diff
}

// Groups returns every group the render scheduled: the workflow's, then
// (promise workflows) the static dependencies'.
func (r *Report) Groups() []renderer.Group {
	var out []renderer.Group
	for _, p := range []*renderer.Plan{r.Plan, r.Static} {
		if p != nil {
			out = append(out, p.Groups...)
		}
	}
	return out
}

// Unscheduled returns the groups no matching destination can take (see
// renderer.Group.Unscheduled: those kept where they no longer match
// included, unless another destination matches them), static
// dependencies too.
func (r *Report) Unscheduled() []renderer.Group {
	var out []renderer.Group
	for _, g := range r.Groups() {
		if g.Unscheduled() {
			out = append(out, g)
		}
	}
	return out
}

// Misscheduled counts, per destination, the groups that stay on it
// although it no longer matches them.
func (r *Report) Misscheduled() map[string]int {
	out := map[string]int{}
	for _, g := range r.Groups() {
		for _, d := range g.Misscheduled {
			out[d]++
		}
	}
	return out
}

// Failed returns the stores that failed.
func (r *Report) Failed() []StoreReport { return failedStores(r.Stores) }

// BadInput returns the store failures that are bad input rather than a
// store's fault: a path or a Kubernetes object another workload already
// has in that store (statestore.OwnedError), or a path of another
// workload's in the way of the workflow's file (a statestore.BlockedError
// the workflow's file names can fix), found when the update was planned
// on what the store finally held, or a commit message template that
// failed on the planned diff (a renderer.InputError). The CLI exits 2 for
// them.
func (r *Report) BadInput() []StoreReport {
	var out []StoreReport
	for _, s := range r.Stores {
		var oe *statestore.OwnedError
		var ie *renderer.InputError
		var be *statestore.BlockedError
		if errors.As(s.Err, &oe) || errors.As(s.Err, &ie) || errors.As(s.Err, &be) && be.BadInput() {
			out = append(out, s)
		}
	}
	return out
}

// WroteNothing reports whether no store was written (or, with DryRun,
// would be).
func (r *Report) WroteNothing() bool {
	for _, s := range r.Stores {
		if s.Result.Updated {
			return false
		}
	}
	return true
}

// Inputs is everything loaded from disk for one render.
type Inputs struct {
	Platform  *inputs.Platform
	Input     renderer.Input
	Object    *inputs.Object
	Selectors []renderer.SelectorEntry
	// Control is the workflow's workflow-control.yaml (nil when absent).
	Control *inputs.WorkflowControl
}

// Load reads and validates every input. Its errors are InputErrors, or
// ctx's error once ctx is done.
func (e *Engine) Load(ctx context.Context) (*Inputs, error) {
	o := e.opts
	plat, err := inputs.LoadPlatform(o.Kinds, o.Platform, o.SecretsDir)
	if err != nil {
		return nil, err
	}
	obj, err := inputs.LoadObject(o.InputDir)
	if err != nil {
		return nil, err
	}
	wf := inputs.Identity(o.Getenv, o.Identity, obj)
	if pr := plat.Promises[wf.Promise]; pr != nil && wf.Type == renderer.ResourceWorkflow {
		// Kratix files every resource of such a Promise under its
		// pipeline namespace.
		wf.FolderNamespace = pr.PipelineNamespace
	}
	if err := renderer.ValidateWorkflow(wf); err != nil {
		return nil, err
	}
	in := renderer.Input{Workflow: wf, Destinations: plat.Destinations, Strategy: o.Strategy, Seed: o.Seed}
	if pr := plat.Promises[wf.Promise]; pr != nil {
		in.Promise = pr
	}
	control, err := inputs.LoadWorkflowControl(o.MetadataDir)
	if err != nil {
		return nil, err
	}
	if wf.Type == renderer.ResourceWorkflow && obj != nil {
		in.Flavour = obj.Labels[o.FlavourKey]
	}
	res := &Inputs{Platform: plat, Object: obj, Control: control}
	if wf.Action == renderer.Delete {
		res.Input = in
		return res, nil
	}
	sels, selFile, err := inputs.LoadSelectors(o.MetadataDir)
	if err != nil {
		return nil, err
	}
	out, err := inputs.ScanOutputContext(ctx, o.OutputDir)
	if err != nil {
		return nil, err
	}
	if o.Hydrate {
		if out.Files, err = fluxcheck.Hydrate(ctx, out.Files); err != nil {
			return nil, err
		}
	}
	in.Selectors, in.SelectorsFile = sels, selFile
	in.Output, in.OutputDirs = out.Files, out.Dirs
	res.Input = in
	res.Selectors = sels
	return res, nil
}

// kustomizeWarnings logs what kustomize would print on stderr (deprecated
// fields), once per folder and message for one render.
func (e *Engine) kustomizeWarnings() func(dir, msg string) {
	var mu sync.Mutex
	seen := map[[2]string]bool{}
	return func(dir, msg string) {
		mu.Lock()
		defer mu.Unlock()
		if seen[[2]string{dir, msg}] {
			return
		}
		seen[[2]string{dir, msg}] = true
		e.log.Warn("kustomize warning", "warning", msg, "folder", dir)
	}
}

// open returns a client per store, reusing kept ones whose configuration
// is unchanged.
func (e *Engine) open(p *inputs.Platform, refs []renderer.StoreRef) (map[renderer.StoreRef]statestore.Store, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[renderer.StoreRef]statestore.Store{}
	for _, ref := range refs {
		s, key, err := e.openStore(p, ref)
		if err != nil {
			return nil, err
		}
		if kept, ok := e.stores[ref]; ok && kept.key == key {
			s.Close()
			out[ref] = kept.store
			continue
		}
		if kept, ok := e.stores[ref]; ok {
			kept.store.Close()
		}
		e.stores[ref] = keptStore{key: key, store: s, secret: secretName(p, ref)}
		out[ref] = s
	}
	return out, nil
}

// otherObjects gathers what other workloads recorded writing, by
// workload, from the records the render read: every record of a store that
// predates the placement index (the others answer through claims: see
// bookkeeping.CheckClaims).
func otherObjects(recs map[renderer.StoreRef][]statestore.Record, key string) map[string][]fluxcheck.Object {
	out := map[string][]fluxcheck.Object{}
	for _, rs := range recs {
		for _, r := range rs {
			if r.Workload != key {
				out[r.Workload] = append(out[r.Workload], r.Objects...)
			}
		}
	}
	return out
}

// viewRecords is every record the views read, once each, by store.
func viewRecords(views map[renderer.StoreRef]*storeView) map[renderer.StoreRef][]statestore.Record {
	out := map[renderer.StoreRef][]statestore.Record{}
	for ref, v := range views {
		seen := map[string]bool{}
		add := func(r statestore.Record) {
			if !seen[r.Workload] {
				seen[r.Workload] = true
				out[ref] = append(out[ref], r)
			}
		}
		if v.facts.Own != nil {
			add(*v.facts.Own)
		}
		for _, rs := range [][]statestore.Record{v.facts.Promise, v.facts.Siblings, v.facts.All} {
			for _, r := range rs {
				add(r)
			}
		}
	}
	return out
}

// viewSnaps is each store's snapshot.
func viewSnaps(views map[renderer.StoreRef]*storeView) map[renderer.StoreRef]statestore.Snapshot {
	out := map[renderer.StoreRef]statestore.Snapshot{}
	for ref, v := range views {
		out[ref] = v.snap
	}
	return out
}

// secretName names the secret a store's credentials come from, for
// messages.
func secretName(p *inputs.Platform, ref renderer.StoreRef) string {
	if s := p.Store(ref); s != nil {
		return storekind.SecretName(s)
	}
	return ""
}

func storeRefs(p *inputs.Platform) []renderer.StoreRef {
	seen := map[renderer.StoreRef]bool{}
	var refs []renderer.StoreRef
	for _, d := range p.Destinations {
		if !seen[d.Store] {
			seen[d.Store] = true
			refs = append(refs, d.Store)
		}
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].String() < refs[j].String() })
	return refs
}

// storeView is what one render read from one store: a snapshot, kept for
// later lookups, and the facts found in it.
type storeView struct {
	name  string
	snap  statestore.Snapshot
	facts bookkeeping.Facts
}

// readViews takes a snapshot of every store, in parallel, and looks up
// what the render of workload key (of promise) needs in each. On a store
// with the placement index this reads a few paths, whatever the store's
// size (see bookkeeping.ReadFacts).
func (e *Engine) readViews(ctx context.Context, stores map[renderer.StoreRef]statestore.Store, key, promise string, hints map[renderer.StoreRef]statestore.Hint) (map[renderer.StoreRef]*storeView, map[renderer.StoreRef]error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	views := map[renderer.StoreRef]*storeView{}
	failed := map[renderer.StoreRef]error{}
	for ref, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := readView(ctx, s, key, promise, hints[ref])
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed[ref] = err
				return
			}
			views[ref] = v
		}()
	}
	wg.Wait()
	return views, failed
}

func readView(ctx context.Context, s statestore.Store, key, promise string, hint statestore.Hint) (*storeView, error) {
	// A view is one moment of the store: a record that another writer
	// changed between the listing and its read (an S3 writer rewrites its
	// record once for its intent and once to commit) is a lost race, and
	// the view is taken again, a few times.
	var v *storeView
	policy := driver.RetryPolicy{Limit: 500 * time.Millisecond, MaxAttempts: 5}
	err := policy.Conflicts(ctx, "the store kept changing while it was read", func(int) error {
		var err error
		v, err = readViewOnce(ctx, s, key, promise, hint)
		return err
	})
	return v, err
}

func readViewOnce(ctx context.Context, s statestore.Store, key, promise string, hint statestore.Hint) (*storeView, error) {
	snap, err := s.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	if key != "" {
		// Everything the render will look at, that can be known before
		// it reads the store, in one go: a lazy snapshot fetches it a
		// folder level per request for all paths at once (a failure is
		// logged at debug level, with the store).
		h := statestore.Hint{Reads: []string{statestore.RecordPath(key)}}
		if promise != "" {
			h.Dirs = append(h.Dirs, path.Join(statestore.RecordsDir, "promise", promise))
		}
		statestore.Prefetch(snap, h.Merge(hint))
	}
	f, err := bookkeeping.ReadFacts(snap, key, promise)
	if err != nil {
		return nil, &statestore.StoreError{Store: s.String(), Op: "read records", Err: err}
	}
	return &storeView{name: s.String(), snap: snap, facts: f}, nil
}

// earlyHints are, per store, the paths the plan made before reading the
// stores would write: what the render will most likely look at. (The index
// folders a spread choice weighs are not in it: a render that keeps its
// placement never reads them.)
func earlyHints(in renderer.Input, early *renderer.Plan, objects []fluxcheck.Object, p *inputs.Platform, key string) map[renderer.StoreRef]statestore.Hint {
	out := map[renderer.StoreRef]statestore.Hint{}
	for _, w := range early.Writes {
		r := &statestore.Record{Type: string(in.Workflow.Type), Flavour: in.Flavour, Placements: placements(early)}
		for _, o := range objects {
			if o.Store == w.Store.String() {
				r.Objects = append(r.Objects, o)
			}
		}
		out[w.Store] = planner.UpdateHint(statestore.Update{Workload: key, Files: w.Files, Shared: w.Shared, Aggregates: aggregates(w.Aggregates), Record: r})
	}
	// A new resource reads the load of the destinations its spread choice
	// weighs, and looks for a folder Kratix may have placed it in: the
	// folders on the way to both (not the load's entries themselves: a
	// resource that keeps its placement never reads them) come along.
	if in.Workflow.Type == renderer.ResourceWorkflow && in.Workflow.Action == renderer.Configure {
		cands := map[string]bool{}
		for _, d := range renderer.LoadCandidates(in, early) {
			cands[d] = true
		}
		nested := workOf(in.Workflow, in.Workflow.Pipeline, false).nested
		for _, d := range p.Destinations {
			h := out[d.Store]
			if cands[d.Name] {
				h.Load = append(h.Load, d.Name)
			}
			if d.Mode == renderer.NestedByMetadata {
				// Listed in full by kratixPlacements when it exists: as a
				// folder (on S3 one listing, not a lookup and a listing).
				h.Dirs = append(h.Dirs, path.Join(d.Path, nested))
			}
			out[d.Store] = h
		}
	}
	return out
}

// applyFacts fills what the renderer needs from the stores' records:
// earlier placements and the promise workflow's selector; from a store that
// predates the index, the load per destination too. It returns the stores
// that hold this workload.
func applyFacts(in *renderer.Input, views map[renderer.StoreRef]*storeView, key string) map[renderer.StoreRef]bool {
	holders := map[renderer.StoreRef]bool{}
	in.Load = renderer.Load{Total: map[string]int{}, ByFlavour: map[string]map[string]int{}}
	counted := map[string]bool{}
	var promiseSelectors []statestore.Record
	seenPromise := map[string]bool{}
	for _, ref := range sortedRefs(views) {
		f := views[ref].facts
		if r := f.Own; r != nil {
			holders[ref] = true
			if in.Previous == nil && len(r.Placements) > 0 {
				in.Previous = map[string][]string{}
				for _, p := range r.Placements {
					in.Previous[p.Group] = p.Destinations
				}
			}
		}
		for _, r := range f.Promise {
			if r.Type == string(renderer.PromiseWorkflow) && r.Promise == in.Workflow.Promise && len(r.DefaultSelector) > 0 && !seenPromise[ref.String()+"\x00"+r.Workload] {
				seenPromise[ref.String()+"\x00"+r.Workload] = true
				promiseSelectors = append(promiseSelectors, r)
			}
		}
		for _, r := range f.All {
			if r.Workload != key && r.Type == string(renderer.ResourceWorkflow) && !counted[r.Workload] {
				counted[r.Workload] = true
				addLoad(&in.Load, r)
			}
		}
	}
	if in.Workflow.Type == renderer.ResourceWorkflow && len(promiseSelectors) > 0 {
		sort.SliceStable(promiseSelectors, func(i, j int) bool { return promiseSelectors[i].Workload < promiseSelectors[j].Workload })
		in.PromiseWorkflowSelector = map[string]string{}
		for _, r := range promiseSelectors {
			for k, v := range r.DefaultSelector {
				if _, ok := in.PromiseWorkflowSelector[k]; !ok {
					in.PromiseWorkflowSelector[k] = v
				}
			}
		}
	}
	return holders
}

// staticPrevious is where the record of the static dependencies (workload
// skey) in any store placed them; nil when no store has one.
func staticPrevious(recs map[renderer.StoreRef][]statestore.Record, skey string) map[string][]string {
	for _, ref := range sortedRefs(recs) {
		for _, r := range recs[ref] {
			if r.Workload == skey && len(r.Placements) > 0 {
				out := map[string][]string{}
				for _, p := range r.Placements {
					out[p.Group] = p.Destinations
				}
				return out
			}
		}
	}
	return nil
}

func addLoad(l *renderer.Load, r statestore.Record) {
	for _, p := range r.Placements {
		for _, d := range p.Destinations {
			l.Total[d]++
			if r.Flavour != "" {
				if l.ByFlavour[r.Flavour] == nil {
					l.ByFlavour[r.Flavour] = map[string]int{}
				}
				l.ByFlavour[r.Flavour][d]++
			}
		}
	}
}

// readLoad adds to in.Load what the indexed stores say about dests: each
// destination's count comes from the store that holds it. Stores that
// predate the index were counted from their records already. It reports
// whether it added any count (a destination with none weighs as it did
// before: the renderer looks its load up, and a missing one is 0).
func (e *Engine) readLoad(ctx context.Context, p *inputs.Platform, views map[renderer.StoreRef]*storeView, dests []string, key string, in *renderer.Input) (bool, error) {
	added := false
	byStore := map[renderer.StoreRef][]string{}
	want := map[string]bool{}
	for _, d := range dests {
		want[d] = true
	}
	for _, d := range p.Destinations {
		if want[d.Name] {
			byStore[d.Store] = append(byStore[d.Store], d.Name)
		}
	}
	for _, ref := range sortedRefs(byStore) {
		v := views[ref]
		if v == nil || v.facts.All != nil {
			continue
		}
		if err := ctx.Err(); err != nil {
			return false, err
		}
		l, err := bookkeeping.ReadLoad(v.snap, byStore[ref], key)
		if err != nil {
			return false, &statestore.StoreError{Store: v.name, Op: "read placements", Err: err}
		}
		for d, n := range l.Total {
			in.Load.Total[d] += n
			added = added || n != 0
		}
		for f, m := range l.ByFlavour {
			if in.Load.ByFlavour[f] == nil {
				in.Load.ByFlavour[f] = map[string]int{}
			}
			for d, n := range m {
				in.Load.ByFlavour[f][d] += n
				added = added || n != 0
			}
		}
	}
	return added, nil
}

func (e *Engine) record(wf renderer.Workflow, in renderer.Input, plan *renderer.Plan, sels []renderer.SelectorEntry) *statestore.Record {
	r := &statestore.Record{
		Type: string(wf.Type), Promise: wf.Promise, Pipeline: wf.Pipeline,
		Placements: placements(plan),
	}
	if wf.Type == renderer.ResourceWorkflow {
		r.Namespace, r.Name, r.Flavour = wf.Namespace, wf.Name, in.Flavour
	}
	if wf.Type == renderer.PromiseWorkflow {
		for _, s := range sels {
			if s.Directory == "" {
				for k, v := range s.MatchLabels {
					if r.DefaultSelector == nil {
						r.DefaultSelector = map[string]string{}
					}
					r.DefaultSelector[k] = v
				}
			}
		}
	}
	return r
}

func workloadKey(w renderer.Workflow) string {
	return statestore.WorkloadKey(string(w.Type), w.Promise, w.Namespace, w.Name, w.Pipeline)
}

func message(w renderer.Workflow, version string) statestore.Message {
	m := statestore.Message{}
	if w.Type == renderer.PromiseWorkflow {
		m.Subject = fmt.Sprintf("render: %s promise %s (pipeline %s)", w.Action, w.Promise, w.Pipeline)
	} else {
		m.Subject = fmt.Sprintf("render: %s resource %s/%s of promise %s (pipeline %s)", w.Action, w.Namespace, w.Name, w.Promise, w.Pipeline)
	}
	add := func(k, v string) {
		if v != "" {
			m.Trailers = append(m.Trailers, statestore.Trailer{Key: k, Value: v})
		}
	}
	add("Render-Workflow-Type", string(w.Type))
	add("Render-Action", string(w.Action))
	add("Render-Promise", w.Promise)
	if w.Type == renderer.ResourceWorkflow {
		add("Render-Resource", w.Name)
		add("Render-Namespace", w.Namespace)
	}
	add("Render-Pipeline", w.Pipeline)
	add("Render-Version", version)
	return m
}

// splitByDestination groups a store's diff by destination folder. Paths in
// no destination the platform names (one it no longer lists) are grouped
// by bookkeeping.DestinationFolder, named by their folder.
func splitByDestination(p *inputs.Platform, ref renderer.StoreRef, d statestore.Diff) []DestinationDiff {
	var out []DestinationDiff
	var dests []string
	names := map[string]string{}
	for _, dest := range p.Destinations {
		if dest.Store == ref {
			dests = append(dests, dest.Path)
			names[dest.Path] = dest.Name
		}
	}
	byFolder := map[string]*DestinationDiff{}
	var order []string
	place := func(list []string, pick func(*DestinationDiff) *[]string) {
		for _, f := range list {
			folder := bookkeeping.DestinationFolder(f, dests)
			dd := byFolder[folder]
			if dd == nil {
				name := names[folder]
				if name == "" {
					name = folder
				}
				dd = &DestinationDiff{Destination: name, Path: folder}
				byFolder[folder] = dd
				order = append(order, folder)
			}
			l := pick(dd)
			*l = append(*l, strings.TrimPrefix(f, folder+"/"))
		}
	}
	place(d.Added, func(dd *DestinationDiff) *[]string { return &dd.Added })
	place(d.Changed, func(dd *DestinationDiff) *[]string { return &dd.Changed })
	place(d.Deleted, func(dd *DestinationDiff) *[]string { return &dd.Deleted })
	// Platform order first, then folders the platform no longer names.
	for _, dest := range p.Destinations {
		if dd := byFolder[dest.Path]; dd != nil && dest.Store == ref {
			out = append(out, *dd)
			delete(byFolder, dest.Path)
		}
	}
	for _, folder := range order {
		if dd := byFolder[folder]; dd != nil {
			out = append(out, *dd)
		}
	}
	return out
}

// logFetched logs, at debug level, what a git store fetched from its
// server so far (requests, objects fetched one by one and whole, bytes),
// and whether it read the store partially.
func logFetched(log *slog.Logger, st statestore.Store) {
	if f := st.Capabilities().FetchStats; f != nil {
		fs := f()
		log.Debug("fetched", "store", st.String(), "requests", fs.Requests, "objects", fs.Objects, "bytes", fs.Bytes, "partial", fs.Partial, "whole", fs.Whole)
	}
}
