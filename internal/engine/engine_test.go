package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/internal/storekind"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
	"github.com/render-dev/render/statestore/planner"
)

func rec(workload, typ, promise string, mods ...func(*statestore.Record)) statestore.Record {
	r := statestore.Record{Workload: workload, Type: typ, Promise: promise}
	for _, m := range mods {
		m(&r)
	}
	return r
}

func placed(group string, dests ...string) func(*statestore.Record) {
	return func(r *statestore.Record) {
		r.Placements = append(r.Placements, statestore.Placement{Group: group, Destinations: dests})
	}
}

// memSnap is a statestore.Snapshot over a map of files.
type memSnap map[string][]byte

func (m memSnap) Compare(p string, data []byte) (bool, bool, error) {
	old, ok := m[p]
	return ok, ok && bytes.Equal(old, data), nil
}

func (m memSnap) ReadFile(p string) ([]byte, error) {
	if b, ok := m[p]; ok {
		return b, nil
	}
	return nil, fmt.Errorf("%s: %w", p, statestore.ErrNotFound)
}

func (m memSnap) Capabilities() statestore.SnapshotCapabilities {
	return statestore.SnapshotCapabilities{}
}

func (m memSnap) List(dir string) ([]string, error) {
	var out []string
	for p := range m {
		if strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out, nil
}

// writeRecords fills a store with records: as render writes them today
// (through PlanUpdate, index and all), or as render wrote them before the
// placement index (the records alone).
func writeRecords(t *testing.T, indexed bool, recs ...statestore.Record) memSnap {
	t.Helper()
	m := memSnap{}
	for _, r := range recs {
		if !indexed {
			m[statestore.RecordPath(r.Workload)] = r.Encode()
			continue
		}
		r := r
		plan, err := planner.PlanUpdate(m, statestore.Update{Workload: r.Workload, Record: &r})
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range plan.Ops {
			if op.Delete {
				delete(m, op.Path)
			} else {
				m[op.Path] = op.Data
			}
		}
	}
	return m
}

// What a render learns from the stores is the same whether a store has
// the placement index (a few lookups) or predates it (every record read).
func TestApplyFacts(t *testing.T) {
	for _, indexed := range []bool{false, true} {
		t.Run(fmt.Sprintf("indexed=%v", indexed), func(t *testing.T) { testApplyFacts(t, indexed) })
	}
}

func testApplyFacts(t *testing.T, indexed bool) {
	a := renderer.StoreRef{Kind: "GitStateStore", Name: "a"}
	b := renderer.StoreRef{Kind: "GitStateStore", Name: "b"}
	c := renderer.StoreRef{Kind: "GitStateStore", Name: "c"}
	plat := &inputs.Platform{Destinations: []renderer.Destination{{Name: "d1", Store: a}, {Name: "d2", Store: b}}}
	wf := renderer.Workflow{Type: renderer.ResourceWorkflow, Action: renderer.Configure, Promise: "pg", Pipeline: "x", Name: "me", Namespace: "ns"}
	key := workloadKey(wf)
	flav := func(f string) func(*statestore.Record) { return func(r *statestore.Record) { r.Flavour = f } }
	sel := func(kv ...string) func(*statestore.Record) {
		return func(r *statestore.Record) {
			r.DefaultSelector = map[string]string{}
			for i := 0; i < len(kv); i += 2 {
				r.DefaultSelector[kv[i]] = kv[i+1]
			}
		}
	}
	// Resource "other" is recorded in both stores it is placed in: it
	// counts once per placement.
	other := rec("resource/ns/pg/other/x", "resource", "pg", placed(".", "d1"), placed("backup", "d2"), flav("gold"))
	snaps := map[renderer.StoreRef]memSnap{
		a: writeRecords(t, indexed,
			rec(key, "resource", "pg", placed(".", "d1"), placed("backup", "d1")),
			other,
			rec("promise/pg/b-pipe", "promise", "pg", sel("tier", "silver", "zone", "eu")),
			rec("promise/redis/x", "promise", "redis", sel("tier", "bronze", "leak", "yes")),
		),
		b: writeRecords(t, indexed,
			other,
			rec("promise/pg/a-pipe", "promise", "pg", sel("tier", "gold")),
			rec("resource/ns/redis/r/x", "resource", "redis", placed(".", "d2")),
		),
		c: {},
	}
	views := func(key, promise string) map[renderer.StoreRef]*storeView {
		out := map[renderer.StoreRef]*storeView{}
		for ref, snap := range snaps {
			f, err := bookkeeping.ReadFacts(snap, key, promise)
			if err != nil {
				t.Fatal(err)
			}
			if (f.All != nil) == indexed && len(snap) > 0 {
				t.Fatalf("store %s: read every record: %v, want %v", ref, f.All != nil, !indexed)
			}
			out[ref] = &storeView{name: ref.String(), snap: snap, facts: f}
		}
		return out
	}
	in := renderer.Input{Workflow: wf}
	v := views(key, "pg")
	holders := applyFacts(&in, v, key)
	if _, err := New(Options{}).readLoad(context.Background(), plat, v, []string{"d1", "d2"}, key, &in); err != nil {
		t.Fatal(err)
	}
	if len(holders) != 1 || !holders[a] {
		t.Errorf("holders %v, want only store a", holders)
	}
	if fmt.Sprint(in.Previous) != "map[.:[d1] backup:[d1]]" {
		t.Errorf("previous placements %v", in.Previous)
	}
	// Both of the promise's workflows contribute; on a conflict the first
	// workload in name order wins; another promise's selector never leaks.
	if fmt.Sprint(in.PromiseWorkflowSelector) != "map[tier:gold zone:eu]" {
		t.Errorf("inherited selector %v", in.PromiseWorkflowSelector)
	}
	// Load: "other" counts once per placement (not once per store), this
	// workload not at all, other promises' resources too.
	if fmt.Sprint(in.Load.Total) != "map[d1:1 d2:2]" {
		t.Errorf("total load %v", in.Load.Total)
	}
	if fmt.Sprint(in.Load.ByFlavour) != "map[gold:map[d1:1 d2:1]]" {
		t.Errorf("load by flavour %v", in.Load.ByFlavour)
	}

	// A promise workflow does not inherit anything.
	pin := renderer.Input{Workflow: renderer.Workflow{Type: renderer.PromiseWorkflow, Promise: "pg", Pipeline: "c-pipe"}}
	applyFacts(&pin, views("promise/pg/c-pipe", "pg"), "promise/pg/c-pipe")
	if pin.PromiseWorkflowSelector != nil {
		t.Errorf("a promise workflow inherited %v", pin.PromiseWorkflowSelector)
	}
}

func TestRecordOfAWorkflow(t *testing.T) {
	e := New(Options{})
	plan := &renderer.Plan{Groups: []renderer.Group{
		{Directory: ".", Destinations: []string{"a", "b"}},
		{Directory: "lost"},
	}}
	sels := []renderer.SelectorEntry{
		{Selector: renderer.Selector{MatchLabels: map[string]string{"env": "dev"}}},
		{Directory: "platform", Selector: renderer.Selector{MatchLabels: map[string]string{"role": "platform"}}},
	}
	pw := renderer.Workflow{Type: renderer.PromiseWorkflow, Promise: "pg", Pipeline: "x"}
	r := e.record(pw, renderer.Input{Flavour: "gold"}, plan, sels)
	if fmt.Sprint(r.DefaultSelector) != "map[env:dev]" || r.Name != "" || r.Flavour != "" {
		t.Errorf("promise record: %+v", r)
	}
	if len(r.Placements) != 1 || r.Placements[0].Group != "." || fmt.Sprint(r.Placements[0].Destinations) != "[a b]" {
		t.Errorf("placements: %+v (unscheduled groups are not placements)", r.Placements)
	}
	rw := renderer.Workflow{Type: renderer.ResourceWorkflow, Promise: "pg", Pipeline: "x", Name: "db", Namespace: "ns"}
	r = e.record(rw, renderer.Input{Flavour: "gold"}, plan, sels)
	if r.DefaultSelector != nil || r.Name != "db" || r.Namespace != "ns" || r.Flavour != "gold" || r.Type != "resource" {
		t.Errorf("resource record: %+v", r)
	}
}

func TestMessageTrailers(t *testing.T) {
	m := message(renderer.Workflow{Type: renderer.ResourceWorkflow, Action: renderer.Delete, Promise: "pg", Pipeline: "x", Name: "db", Namespace: "ns"}, "v1.2.3")
	want := "render: delete resource ns/db of promise pg (pipeline x)\n\nRender-Workflow-Type: resource\nRender-Action: delete\nRender-Promise: pg\nRender-Resource: db\nRender-Namespace: ns\nRender-Pipeline: x\nRender-Version: v1.2.3\n"
	if m.String() != want {
		t.Errorf("message:\n%s\nwant:\n%s", m, want)
	}
}

func TestSplitByDestination(t *testing.T) {
	ref := renderer.StoreRef{Kind: "GitStateStore", Name: "s"}
	p := &inputs.Platform{Destinations: []renderer.Destination{
		{Name: "prod", Path: "prod", Store: ref},
		{Name: "prod-eu", Path: "prod-eu", Store: ref},
		{Name: "nested", Path: "regions/eu", Store: ref},
		{Name: "elsewhere", Path: "prod", Store: renderer.StoreRef{Kind: "GitStateStore", Name: "other"}},
		{Name: "idle", Path: "idle", Store: ref},
	}}
	d := statestore.Diff{
		Added:   []string{"prod/a.yaml", "prod-eu/b.yaml", "regions/eu/c.yaml"},
		Changed: []string{"prod-eu/x/y.yaml"},
		Deleted: []string{"prod/old.yaml", "regions/other/z.yaml"},
	}
	got := splitByDestination(p, ref, d)
	var lines []string
	for _, dd := range got {
		lines = append(lines, fmt.Sprintf("%s(%s) +%v ~%v -%v", dd.Destination, dd.Path, dd.Added, dd.Changed, dd.Deleted))
	}
	want := []string{
		"prod(prod) +[a.yaml] ~[] -[old.yaml]",
		"prod-eu(prod-eu) +[b.yaml] ~[x/y.yaml] -[]",
		"nested(regions/eu) +[c.yaml] ~[] -[]",
		// A folder no destination names now (one the platform lost) is
		// listed too, by its folder, so a dry run shows what leaves it.
		"regions/other(regions/other) +[] ~[] -[z.yaml]",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

// --- with a real local repository ----------------------------------------

type fixture struct {
	dir, platform, output, metadata, input string
}

func newFixture(t *testing.T, destinations string) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{dir: dir, platform: filepath.Join(dir, "platform.yaml"), output: filepath.Join(dir, "output"),
		metadata: filepath.Join(dir, "metadata"), input: filepath.Join(dir, "input")}
	store := fmt.Sprintf("apiVersion: platform.kratix.io/v1alpha1\nkind: GitStateStore\nmetadata:\n  name: default\nspec:\n  url: file://%s\n---\n", filepath.Join(dir, "state.git"))
	writeT(t, f.platform, store+destinations)
	for _, d := range []string{f.output, f.metadata, f.input} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func writeT(t *testing.T, p, c string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) engine(ids map[string]string, dryRun bool) *Engine {
	return New(Options{OutputDir: f.output, MetadataDir: f.metadata, InputDir: f.input, Platform: []string{f.platform},
		Identity: ids, Getenv: func(string) string { return "" }, DryRun: dryRun})
}

func dests(names ...string) string {
	var out []string
	for _, n := range names {
		out = append(out, fmt.Sprintf("apiVersion: platform.kratix.io/v1alpha1\nkind: Destination\nmetadata:\n  name: %s\nspec:\n  stateStoreRef: {kind: GitStateStore, name: default}\n", n))
	}
	return strings.Join(out, "---\n")
}

// Resources of one flavour are spread: each goes where its flavour has the
// fewest, counted from the store's records by fresh engines.
func TestSpreadByFlavour(t *testing.T) {
	f := newFixture(t, dests("d1", "d2", "d3"))
	count := map[string]map[string]int{"gold": {}, "silver": {}}
	for i := 0; i < 12; i++ {
		flavour := "gold"
		if i%3 == 2 {
			flavour = "silver"
		}
		writeT(t, filepath.Join(f.input, "object.yaml"), fmt.Sprintf("metadata:\n  name: r%d\n  namespace: ns\n  labels: {flavour: %s}\n", i, flavour))
		writeT(t, filepath.Join(f.output, "db.yaml"), fmt.Sprintf("apiVersion: v1\nkind: DB\nmetadata:\n  name: db-r%d\n", i))
		e := f.engine(map[string]string{"workflow-type": "resource", "promise": "pg", "pipeline": "x"}, false)
		rep, err := e.Render(context.Background())
		e.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Failed()) > 0 {
			t.Fatalf("store failed: %v", rep.Failed()[0].Err)
		}
		count[flavour][rep.Plan.Groups[0].Destinations[0]]++
		// After every render each flavour is balanced to within one.
		for fl, c := range count {
			lo, hi := 1<<30, 0
			for _, d := range []string{"d1", "d2", "d3"} {
				lo, hi = min(lo, c[d]), max(hi, c[d])
			}
			if hi-lo > 1 {
				t.Fatalf("after r%d, %s is not spread: %v", i, fl, c)
			}
		}
	}
}

// Spreading counts the resource's own flavour, not every resource: a
// destination full of silver is still empty for gold.
func TestSpreadCountsOnlyTheFlavour(t *testing.T) {
	f := newFixture(t, strings.ReplaceAll(dests("d1", "d2"), "name: d1\n", "name: d1\n  labels: {only: d1}\n"))
	render := func(name, flavour string) string {
		t.Helper()
		writeT(t, filepath.Join(f.input, "object.yaml"), fmt.Sprintf("metadata:\n  name: %s\n  namespace: ns\n  labels: {flavour: %s}\n", name, flavour))
		writeT(t, filepath.Join(f.output, "db.yaml"), "apiVersion: v1\nkind: DB\nmetadata:\n  name: db-"+name+"\n")
		e := f.engine(map[string]string{"workflow-type": "resource", "promise": "pg", "pipeline": "x"}, false)
		defer e.Close()
		rep, err := e.Render(context.Background())
		if err != nil || len(rep.Failed()) > 0 {
			t.Fatalf("render %s: %v %+v", name, err, rep)
		}
		return rep.Plan.Groups[0].Destinations[0]
	}
	sel := filepath.Join(f.metadata, "destination-selectors.yaml")
	writeT(t, sel, "- matchLabels: {only: d1}\n")
	for i := 0; i < 3; i++ {
		if d := render(fmt.Sprintf("s%d", i), "silver"); d != "d1" {
			t.Fatalf("pinned silver went to %s", d)
		}
	}
	os.Remove(sel)
	g1, g2 := render("g1", "gold"), render("g2", "gold")
	if g1 == g2 {
		t.Errorf("both gold resources went to %s: the spread counted other flavours", g1)
	}
}

// A delete reads neither the output nor the selectors: they may be gone or
// broken by then.
func TestDeleteIgnoresOutputAndSelectors(t *testing.T) {
	f := newFixture(t, dests("d1"))
	ids := map[string]string{"workflow-type": "resource", "promise": "pg", "pipeline": "x", "name": "db", "namespace": "ns"}
	writeT(t, filepath.Join(f.output, "db.yaml"), obj("DB"))
	e := f.engine(ids, false)
	if _, err := e.Render(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.Close()
	writeT(t, filepath.Join(f.output, "db.yaml"), "kind: [\n")
	writeT(t, filepath.Join(f.metadata, "destination-selectors.yaml"), "- nonsense: [\n")
	ids["action"] = "delete"
	e = f.engine(ids, false)
	defer e.Close()
	rep, err := e.Render(context.Background())
	if err != nil {
		t.Fatalf("delete refused: %v", err)
	}
	if len(rep.Stores) != 1 || !rep.Stores[0].Result.Updated || fmt.Sprint(rep.Stores[0].Destinations[0].Deleted) != "[resources/ns/pg/db/x/5058f/db.yaml]" {
		t.Errorf("delete report: %+v", rep.Stores)
	}
}

// Input errors come back as InputErrors with no store contacted.
func TestRenderInputErrorIsInputError(t *testing.T) {
	f := newFixture(t, dests("d1"))
	writeT(t, filepath.Join(f.output, "db.yaml"), obj("DB"))
	writeT(t, filepath.Join(f.metadata, "destination-selectors.yaml"), "- directory: nope\n  matchLabels: {a: b}\n")
	e := f.engine(map[string]string{"workflow-type": "resource", "promise": "pg", "pipeline": "x", "name": "db", "namespace": "ns"}, false)
	defer e.Close()
	rep, err := e.Render(context.Background())
	var ie *renderer.InputError
	if !errors.As(err, &ie) || rep != nil {
		t.Fatalf("want an InputError and no report, got %v %+v", err, rep)
	}
	if _, err := os.Stat(filepath.Join(f.dir, "state.git")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the store was touched: %v", err)
	}
}

// Kept store clients are reused while their configuration is unchanged and
// replaced when it changes (watch mode renders many times).
func TestStoreClientsAreKept(t *testing.T) {
	f := newFixture(t, dests("d1"))
	e := f.engine(nil, false)
	defer e.Close()
	p1, err := inputs.LoadPlatform(storekind.Default, []string{f.platform}, "")
	if err != nil {
		t.Fatal(err)
	}
	ref := renderer.StoreRef{Kind: "GitStateStore", Name: "default"}
	s1, err := e.open(p1, storeRefs(p1))
	if err != nil {
		t.Fatal(err)
	}
	s2, err := e.open(p1, storeRefs(p1))
	if err != nil {
		t.Fatal(err)
	}
	if s1[ref] != s2[ref] {
		t.Error("an unchanged store got a new client")
	}
	inputs.StoresOf[*storekind.GitStateStore](p1)["default"].Branch = "other"
	s3, err := e.open(p1, storeRefs(p1))
	if err != nil {
		t.Fatal(err)
	}
	if s3[ref] == s1[ref] || !strings.Contains(s3[ref].String(), "branch other") {
		t.Errorf("a changed store kept its old client: %s", s3[ref])
	}
	refs := storeRefs(&inputs.Platform{Destinations: []renderer.Destination{{Store: ref}, {Store: renderer.StoreRef{Kind: "GitStateStore", Name: "a"}}, {Store: ref}}})
	names := []string{}
	for _, r := range refs {
		names = append(names, r.String())
	}
	if !sort.StringsAreSorted(names) || len(names) != 2 {
		t.Errorf("store refs %v", names)
	}
}

// obj is a minimal Kubernetes object of the given kind, named after it.
func obj(kind string) string {
	return "apiVersion: v1\nkind: " + kind + "\nmetadata:\n  name: " + strings.ToLower(kind) + "\n"
}

// A path that fits inside the store but not once joined to the store's own
// path is refused before any store is contacted, as S3 would refuse it.
func TestStorePathLengthIsCheckedBeforeAnyStore(t *testing.T) {
	f := newFixture(t, dests("d1"))
	long := strings.Repeat("p/", 200) + "x" // 401 bytes
	store := fmt.Sprintf("apiVersion: platform.kratix.io/v1alpha1\nkind: GitStateStore\nmetadata:\n  name: default\nspec:\n  url: file://%s\n  path: %s\n---\n", filepath.Join(f.dir, "state.git"), long)
	writeT(t, f.platform, store+dests("d1"))
	name := strings.Repeat("n", 200) + ".yaml"
	rel := strings.Repeat("sub/", 100) + name // 600 bytes: fine inside the store
	writeT(t, filepath.Join(f.output, filepath.FromSlash(rel)), obj("DB"))
	e := f.engine(map[string]string{"workflow-type": "promise", "promise": "pg", "pipeline": "x"}, false)
	defer e.Close()
	rep, err := e.Render(context.Background())
	var ie *renderer.InputError
	if !errors.As(err, &ie) || rep != nil || !strings.Contains(err.Error(), "bytes long") {
		t.Fatalf("want an InputError about the length and no report, got %v %+v", err, rep)
	}
	if _, err := os.Stat(filepath.Join(f.dir, "state.git")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the store was touched: %v", err)
	}
}
