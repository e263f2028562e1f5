package s3store

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
)

// resourceUpdate is one render of resource workflow configure of resource
// ns/name of promise pg, shaped as the engine sends it: two files in the
// workload's own folder of destination dest (Kratix's nested layout), the
// destination's canaries, the two Kubernetes objects claimed, the record.
// version changes one file's content and, from 2 on, adds a third file.
func resourceUpdate(ns, name, dest string, version int) statestore.Update {
	dir := fmt.Sprintf("%s/resources/%s/pg/%s/configure/5058f/", dest, ns, name)
	u := statestore.Update{
		Workload: statestore.WorkloadKey("resource", "pg", ns, name, "configure"),
		Files: map[string][]byte{
			dir + "db.yaml":  fmt.Appendf(nil, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s-db\n  namespace: %s\ndata:\n  version: \"%d\"\n", name, ns, version),
			dir + "job.yaml": fmt.Appendf(nil, "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: %s-backup\n  namespace: %s\n", name, ns),
		},
		Shared: map[string][]byte{
			dest + "/" + layout.CanaryDependencies: []byte("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kratix-worker-system\n"),
			dest + "/" + layout.CanaryResources:    []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kratix-info\n  namespace: kratix-worker-system\n"),
		},
		Record: &statestore.Record{
			Type: "resource", Promise: "pg", Namespace: ns, Name: name, Pipeline: "configure", Flavour: "small",
			Placements: []statestore.Placement{{Group: "default", Destinations: []string{dest}}},
		},
		Destinations: []string{dest},
		Message:      statestore.Message{Subject: "render: resource " + ns + "/" + name, Trailers: []statestore.Trailer{{Key: "Render-Run", Value: fmt.Sprint(version)}}},
	}
	if version >= 2 {
		u.Files[dir+"extra.yaml"] = fmt.Appendf(nil, "apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s-extra\n  namespace: %s\n", name, ns)
	}
	for _, o := range []struct{ v, k, n, f string }{{"v1", "ConfigMap", name + "-db", "db.yaml"}, {"batch/v1", "Job", name + "-backup", "job.yaml"}} {
		u.Record.Objects = append(u.Record.Objects, statestore.Object{
			APIVersion: o.v, Kind: o.k, Namespace: ns, Name: o.n, Section: "resources",
			File: strings.TrimPrefix(dir, dest+"/") + o.f, Destination: dest, Source: o.f,
		})
	}
	return u
}

// listings records the LIST requests' prefixes and delimiters.
type listings struct {
	*counter
	mu   sync.Mutex
	seen []string // "prefix|delimiter"
}

func (l *listings) RoundTrip(r *http.Request) (*http.Response, error) {
	if q := r.URL.Query(); r.Method == http.MethodGet && q.Has("list-type") {
		l.mu.Lock()
		l.seen = append(l.seen, q.Get("prefix")+"|"+q.Get("delimiter"))
		l.mu.Unlock()
	}
	return l.counter.RoundTrip(r)
}

func (l *listings) prefixes() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.seen
	l.seen = nil
	return out
}

// seedBig fills a bucket with about n objects in render's own format:
// workloads of the same shape as resourceUpdate's, half of them in
// destination dev (the one the measured render writes), the rest spread
// over nine others, many in the measured workload's namespace, and 1,200
// files directly in dev/resources/, on both sides of its canary's name.
func seedBig(t *testing.T, cfg Config, n int) {
	t.Helper()
	const perWorkload = 6 // two files, two claims, the record, the marker
	var us []statestore.Update
	flat := statestore.Update{Workload: "promise/flat/configure", Files: map[string][]byte{}, Record: &statestore.Record{Type: "promise", Promise: "flat", Pipeline: "configure"}, Destinations: []string{"dev"}}
	for i := range 1200 {
		name := fmt.Sprintf("a-flat-%04d.yaml", i)
		if i%2 == 1 {
			name = fmt.Sprintf("z-flat-%04d.yaml", i)
		}
		flat.Files["dev/resources/"+name] = fmt.Appendf(nil, "kind: ConfigMap\nmetadata:\n  name: flat-%d\n", i)
	}
	us = append(us, flat)
	for i := range (n - len(flat.Files)) / perWorkload {
		dest := "dev"
		if i%2 == 1 {
			dest = fmt.Sprintf("dest-%d", i%9+1)
		}
		ns := "team"
		if i%3 == 0 {
			ns = fmt.Sprintf("ns-%d", i%40)
		}
		u := resourceUpdate(ns, fmt.Sprintf("r%05d", i), dest, 1)
		if i >= 20 {
			u.Shared = nil // the canaries exist already: do not write them thousands of times
		}
		us = append(us, u)
	}
	t0 := time.Now()
	cfg.Concurrency = 32
	// Seeding is the test's setup, not what it measures: it gets more
	// than testCtx's 2 minutes, which a loaded machine (load 20-30)
	// outlasted writing these thousands of objects.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := open(t, cfg).Seed(ctx, us); err != nil {
		t.Fatal(err)
	}
	t.Logf("seeded %d workloads (about %d objects) in %v", len(us), len(flat.Files)+(len(us)-1)*perWorkload, time.Since(t0).Round(time.Millisecond))
}

// loadCandidates are the destinations seedBig places workloads on.
var loadCandidates = []string{"dev", "dest-1", "dest-2", "dest-3", "dest-4", "dest-5", "dest-6", "dest-7", "dest-8", "dest-9"}

// TestRequestsDoNotGrowWithBucket: the renders of one workload (first,
// unchanged, changed, removed) make exactly as many requests of each kind
// into a bucket of 20,000 objects in render's own format as into one that
// holds only a few workloads, and none of them lists the store or a
// destination: every listing is delimited, or of an aggregated file's parts.
// The first render, which creates folders, makes sure no key stands where
// they go (see shape.go), up to the first folder that holds objects
// already: in the big bucket more of them do (its claims' folders), so it
// may cost fewer LISTs there (12 against 13 in the small one), never more.
// Reading the load of every destination, as a new resource's placement
// does, lists nothing but the folder of changes of each candidate's load
// summary, and costs the same in both.
func TestRequestsDoNotGrowWithBucket(t *testing.T) {
	m := testenv.MinIO(t)
	objects := 20000
	if testing.Short() {
		objects = 5000
	}
	type step struct {
		name   string
		update statestore.Update
	}
	removal := func() statestore.Update {
		u := resourceUpdate("team", "new", "dev", 0)
		return statestore.Update{Workload: u.Workload, Message: u.Message}
	}
	steps := []step{
		{"first render", resourceUpdate("team", "new", "dev", 1)},
		{"unchanged render", resourceUpdate("team", "new", "dev", 1)},
		{"changed render", resourceUpdate("team", "new", "dev", 2)},
		{"dry run", func() statestore.Update { u := resourceUpdate("team", "new", "dev", 3); u.DryRun = true; return u }()},
		{"removal", removal()},
	}
	measure := func(bucket string) []map[string]int {
		cnt := &listings{counter: newCounter()}
		cfg := minioConfig(m, bucket)
		cfg.Transport = cnt
		var out []map[string]int
		for _, st := range steps {
			res, err := open(t, cfg).Apply(testCtx(t), st.update)
			if err != nil {
				t.Fatalf("%s into %s: %v", st.name, bucket, err)
			}
			if want := st.name != "unchanged render"; res.Updated != want {
				t.Fatalf("%s into %s: updated %v", st.name, bucket, res.Updated)
			}
			n, _ := cnt.take()
			for _, l := range cnt.prefixes() {
				prefix, delim, _ := strings.Cut(l, "|")
				if delim != "/" && !strings.HasPrefix(prefix, testPath+"/"+layout.MetaDir+"/aggregate/") {
					t.Errorf("%s into %s listed %q recursively", st.name, bucket, prefix)
				}
			}
			out = append(out, n)
		}
		// What the engine reads before it places a new resource: the
		// load on every candidate, from the load summaries.
		snap, err := open(t, cfg).Snapshot(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bookkeeping.ReadLoad(snap, loadCandidates, ""); err != nil {
			t.Fatalf("load in %s: %v", bucket, err)
		}
		n, _ := cnt.take()
		for _, l := range cnt.prefixes() {
			// The folder of each candidate's summary changes, delimited.
			if prefix, delim, _ := strings.Cut(l, "|"); delim != "/" || !strings.HasPrefix(prefix, testPath+"/"+bookkeeping.LoadDir+"/") {
				t.Errorf("reading the load in %s listed %q", bucket, l)
			}
		}
		return append(out, n)
	}

	small := m.CreateBucket(t, "small")
	seeder := open(t, minioConfig(m, small))
	few := []statestore.Update{resourceUpdate("team", "old", "dev", 1)}
	for _, d := range loadCandidates[1:] {
		few = append(few, resourceUpdate("other", "x-"+d, d, 1))
	}
	if err := seeder.Seed(testCtx(t), few); err != nil {
		t.Fatal(err)
	}
	big := m.CreateBucket(t, "big")
	seedBig(t, minioConfig(m, big), objects)

	want := measure(small)
	got := measure(big)
	steps = append(steps, step{name: "load of every destination"})
	for i, st := range steps {
		t.Logf("%s: %v into a bucket of a few workloads, %v into one of %d objects", st.name, want[i], got[i], objects)
		same := maps.Equal(got[i], want[i])
		if i == 0 {
			// The first render: no more requests of any kind.
			same = maps.EqualFunc(got[i], want[i], func(g, w int) bool { return g <= w })
		}
		if !same {
			t.Errorf("%s: requests %v into a bucket of %d objects, %v into a small one", st.name, got[i], objects, want[i])
		}
	}
	// The big bucket's renders left a whole workload behind, as a reader
	// sees it, until the removal.
	st, err := open(t, minioConfig(m, big)).VerifyDestination(testCtx(t), "dev")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Complete() {
		t.Fatalf("dev after the renders: mismatched %v, %d unnamed", st.Mismatched, len(st.Unnamed))
	}
	for _, mk := range st.Markers {
		if mk.Workload == resourceUpdate("team", "new", "dev", 0).Workload {
			t.Fatalf("the removed workload's marker is still there: %+v", mk)
		}
	}
}
