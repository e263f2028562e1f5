// Package storetest is the conformance suite every state store backend must
// pass: write, idempotent rewrite, prune, ownership, shared files,
// aggregation, dry runs, concurrent writers and not-found errors. A
// backend's test file only supplies a Harness.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/wait"
)

// Harness tells the suite how to reach a backend.
type Harness struct {
	// Fresh creates a new, empty backing store (a repository, a bucket) for
	// one test and returns a function that opens a new client of it. Each
	// call of the returned function must give an independent client, as a
	// separate render process would have.
	Fresh func(t *testing.T) func() statestore.Store
	// Missing returns a client of a store that does not exist (a repository
	// or bucket never created). Its Records must fail with ErrNotFound.
	Missing func(t *testing.T) statestore.Store
	// Writers is how many concurrent writers to race (default 64, the many-sidecars load).
	Writers int
	// Pending, for a store whose writers hand an update over after a lost
	// race (git's group commit), leaves u in s as a writer that planned it
	// on s's newest state, handed it over and died would; Fold makes s
	// carry whatever waits, as the next writer to lead would. Both nil for
	// a store without hand-over.
	Pending func(t *testing.T, s statestore.Store, u statestore.Update)
	Fold    func(t *testing.T, s statestore.Store)
	// Parallel runs the cases side by side (t.Parallel, as many at a time
	// as go test's -parallel allows). Each case has a store of its own
	// (Fresh), so they share nothing but the server; a backend whose
	// harness or test changes package state for the whole run (a variable
	// reset by a defer in the test function, which returns before parallel
	// subtests start) must leave it false.
	Parallel bool
}

func update(workload string, files map[string]string) statestore.Update {
	u := statestore.Update{
		Workload: workload,
		Files:    map[string][]byte{},
		Record:   &statestore.Record{Workload: workload, Type: "promise", Promise: "p", Pipeline: "x"},
		Message:  statestore.Message{Subject: "test: " + workload},
	}
	for p, c := range files {
		u.Files[p] = []byte(c)
	}
	return u
}

func configMap(data string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm, namespace: ns}\ndata: {k: " + data + "}\n"
}

// objectUpdate writes one ConfigMap, ns/cm, to a section of a destination,
// in a file of the workload's own, and records it as the engine does.
func objectUpdate(workload, dest, section, data string) statestore.Update {
	file := section + "/" + strings.ReplaceAll(workload, "/", "-") + "/cm.yaml"
	u := update(workload, map[string]string{dest + "/" + file: configMap(data)})
	u.Record.Objects = []statestore.Object{{
		APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "cm",
		Section: section, File: file, Destination: dest, Source: "out/cm.yaml",
	}}
	return u
}

func removal(workload string) statestore.Update {
	return statestore.Update{Workload: workload, Message: statestore.Message{Subject: "test: remove " + workload}}
}

// patient is the context of the suite's reads and writes: the suite
// asserts what a store does, not how fast, and with the cases side by side
// (Harness.Parallel) on a loaded machine one push to Gitea took longer than
// a render's default retry deadline of 2 minutes.
func patient() context.Context {
	return wait.WithRetryDeadline(context.Background(), 10*time.Minute)
}

func apply(t *testing.T, s statestore.Store, u statestore.Update) statestore.Result {
	t.Helper()
	res, err := s.Apply(patient(), u)
	if err != nil {
		t.Fatalf("Apply(%s): %v", u.Workload, err)
	}
	return res
}

// contents reads every non-meta file in the store.
func contents(t *testing.T, s statestore.Store) map[string]string {
	t.Helper()
	snap, err := s.Snapshot(patient())
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	paths, err := snap.List("")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	out := map[string]string{}
	for _, p := range paths {
		if layout.IsMeta(p) {
			continue
		}
		b, err := snap.ReadFile(p)
		if err != nil {
			t.Fatalf("ReadFile(%s): %v", p, err)
		}
		out[p] = string(b)
	}
	return out
}

func records(t *testing.T, s statestore.Store) map[string][]string {
	t.Helper()
	recs, err := s.Records(patient())
	if err != nil {
		t.Fatalf("Records: %v", err)
	}
	out := map[string][]string{}
	for _, r := range recs {
		out[r.Workload] = r.Files
	}
	return out
}

func equal(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got  %v\n want %v", what, got, want)
	}
}

func sorted(s ...string) []string {
	sort.Strings(s)
	if s == nil {
		return []string{}
	}
	return s
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Case is one named behaviour of the suite.
type Case struct {
	Name string
	Run  func(t *testing.T, h Harness)
}

// Cases are every behaviour a store must have, in the order Run runs them.
var Cases = []Case{
	{"Write", testWrite},
	{"IdempotentRewrite", testIdempotentRewrite},
	{"ChangeAndPrune", testChangeAndPrune},
	{"Ownership", testOwnership},
	{"SharedFiles", testSharedFiles},
	{"Aggregates", testAggregates},
	{"DryRun", testDryRun},
	{"ConcurrentWriters", testConcurrentWriters},
	{"DuplicateObject", testDuplicateObject},
	{"DuplicateObjectRace", testDuplicateObjectRace},
	{"SameWorkloadRace", testSameWorkloadRace},
	{"SameWorkloadAmidOthers", testSameWorkloadAmidOthers},
	{"NotFound", testNotFound},
}

// Run runs the whole suite, each case as a subtest of its name.
func Run(t *testing.T, h Harness) {
	if h.Writers == 0 {
		h.Writers = 64
	}
	for _, c := range Cases {
		t.Run(c.Name, func(t *testing.T) {
			if h.Parallel {
				t.Parallel()
			}
			c.Run(t, h)
		})
	}
}

func testWrite(t *testing.T, h Harness) {
	s := h.Fresh(t)()
	defer s.Close()
	res := apply(t, s, update("w/a", map[string]string{"d1/a/one.yaml": "one\n", "d1/a/sub/two.yaml": "two\n"}))
	if !res.Updated {
		t.Fatal("first write reported no change")
	}
	equal(t, "added", res.Added, sorted("d1/a/one.yaml", "d1/a/sub/two.yaml"))
	equal(t, "contents", contents(t, s), map[string]string{"d1/a/one.yaml": "one\n", "d1/a/sub/two.yaml": "two\n"})
	equal(t, "records", records(t, s), map[string][]string{"w/a": sorted("d1/a/one.yaml", "d1/a/sub/two.yaml")})
}

func testIdempotentRewrite(t *testing.T, h Harness) {
	open := h.Fresh(t)
	s := open()
	defer s.Close()
	u := update("w/a", map[string]string{"d1/a/one.yaml": "one\n"})
	first := apply(t, s, u)
	second := apply(t, s, u)
	if second.Updated || len(second.Added)+len(second.Changed)+len(second.Deleted) > 0 {
		t.Fatalf("rewrite of the same files changed the store: %+v", second)
	}
	other := open() // a new process sees the same: nothing to do
	defer other.Close()
	if third := apply(t, other, u); third.Updated {
		t.Fatalf("rewrite from a second client changed the store: %+v", third)
	}
	if first.Revision == "" {
		t.Fatal("a write reported no revision")
	}
}

func testChangeAndPrune(t *testing.T, h Harness) {
	s := h.Fresh(t)()
	defer s.Close()
	apply(t, s, update("w/a", map[string]string{"d1/a/one.yaml": "one\n", "d1/a/two.yaml": "two\n", "d1/a/deep/three.yaml": "3\n"}))
	res := apply(t, s, update("w/a", map[string]string{"d1/a/one.yaml": "ONE\n", "d1/a/four.yaml": "4\n"}))
	equal(t, "added", orEmpty(res.Added), sorted("d1/a/four.yaml"))
	equal(t, "changed", orEmpty(res.Changed), sorted("d1/a/one.yaml"))
	equal(t, "deleted", orEmpty(res.Deleted), sorted("d1/a/deep/three.yaml", "d1/a/two.yaml"))
	equal(t, "contents", contents(t, s), map[string]string{"d1/a/one.yaml": "ONE\n", "d1/a/four.yaml": "4\n"})
}

func testOwnership(t *testing.T, h Harness) {
	open := h.Fresh(t)
	a, b := open(), open()
	defer a.Close()
	defer b.Close()
	apply(t, a, update("w/a", map[string]string{"d1/a/x.yaml": "a\n"}))
	apply(t, b, update("w/b", map[string]string{"d1/b/x.yaml": "b\n", "d2/b/y.yaml": "b\n"}))
	// a's rewrite knows nothing of b and must leave b alone.
	apply(t, a, update("w/a", map[string]string{"d1/a/z.yaml": "a2\n"}))
	equal(t, "contents", contents(t, a), map[string]string{"d1/a/z.yaml": "a2\n", "d1/b/x.yaml": "b\n", "d2/b/y.yaml": "b\n"})
	// A file another workload owns is refused, not taken over.
	_, err := b.Apply(patient(), update("w/b", map[string]string{"d1/a/z.yaml": "stolen\n"}))
	var oe *statestore.OwnedError
	if !errors.Is(err, statestore.ErrConflict) || !errors.As(err, &oe) || oe.Owner != "w/a" {
		t.Fatalf("writing another workload's file: got %v, want an OwnedError naming w/a", err)
	}
	// Removing a workload removes its files and record only.
	res := apply(t, b, removal("w/b"))
	equal(t, "deleted", orEmpty(res.Deleted), sorted("d1/b/x.yaml", "d2/b/y.yaml"))
	equal(t, "contents", contents(t, b), map[string]string{"d1/a/z.yaml": "a2\n"})
	equal(t, "records", records(t, b), map[string][]string{"w/a": sorted("d1/a/z.yaml")})
	if again := apply(t, b, removal("w/b")); again.Updated {
		t.Fatal("removing a removed workload changed the store")
	}
}

func testSharedFiles(t *testing.T, h Harness) {
	s := h.Fresh(t)()
	defer s.Close()
	u := update("w/a", map[string]string{"d1/a/x.yaml": "a\n"})
	u.Shared = map[string][]byte{"d1/canary.yaml": []byte("canary\n")}
	res := apply(t, s, u)
	equal(t, "added", res.Added, sorted("d1/a/x.yaml", "d1/canary.yaml"))
	// Shared files are written only where absent and never owned.
	u2 := update("w/b", map[string]string{"d1/b/x.yaml": "b\n"})
	u2.Shared = map[string][]byte{"d1/canary.yaml": []byte("other canary\n")}
	apply(t, s, u2)
	apply(t, s, removal("w/a"))
	apply(t, s, removal("w/b"))
	equal(t, "contents", contents(t, s), map[string]string{"d1/canary.yaml": "canary\n"})
}

func testAggregates(t *testing.T, h Harness) {
	open := h.Fresh(t)
	a, b := open(), open()
	defer a.Close()
	defer b.Close()
	ua := update("w/a", nil)
	ua.Aggregates = []statestore.Aggregate{{Target: "d1/all.yaml", Contribution: []byte("kind: A\n")}}
	apply(t, a, ua)
	ub := update("w/b", nil)
	ub.Aggregates = []statestore.Aggregate{{Target: "d1/all.yaml", Contribution: []byte("kind: B\n")}}
	apply(t, b, ub)
	// Kratix's bytes: each part as it is, joined by "\n---\n".
	equal(t, "contents", contents(t, a), map[string]string{"d1/all.yaml": "kind: A\n\n---\nkind: B\n"})
	apply(t, a, removal("w/a"))
	equal(t, "contents", contents(t, a), map[string]string{"d1/all.yaml": "kind: B\n"})
	apply(t, b, removal("w/b"))
	equal(t, "contents", contents(t, a), map[string]string{})
}

func testDryRun(t *testing.T, h Harness) {
	s := h.Fresh(t)()
	defer s.Close()
	apply(t, s, update("w/a", map[string]string{"d1/a/one.yaml": "one\n", "d1/a/two.yaml": "two\n"}))
	u := update("w/a", map[string]string{"d1/a/one.yaml": "ONE\n", "d1/a/three.yaml": "3\n"})
	u.DryRun = true
	res := apply(t, s, u)
	equal(t, "added", orEmpty(res.Added), sorted("d1/a/three.yaml"))
	equal(t, "changed", orEmpty(res.Changed), sorted("d1/a/one.yaml"))
	equal(t, "deleted", orEmpty(res.Deleted), sorted("d1/a/two.yaml"))
	equal(t, "contents after dry run", contents(t, s), map[string]string{"d1/a/one.yaml": "one\n", "d1/a/two.yaml": "two\n"})
}

func testConcurrentWriters(t *testing.T, h Harness) {
	open := h.Fresh(t)
	// This asserts that every writer lands, not how fast: on a busy
	// machine N writers may need more than one render's default
	// retry budget between them.
	ctx := wait.WithRetryDeadline(context.Background(), 10*time.Minute)
	want := map[string]string{}
	var wg sync.WaitGroup
	errs := make(chan error, h.Writers)
	for i := range h.Writers {
		p := fmt.Sprintf("shared-dest/w%d/file.yaml", i)
		content := fmt.Sprintf("writer %d\n", i)
		want[p] = content
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := open()
			defer s.Close()
			_, err := s.Apply(ctx, update(fmt.Sprintf("w/%d", i), map[string]string{p: content}))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent writer failed: %v", err)
		}
	}
	s := open()
	defer s.Close()
	equal(t, "contents", contents(t, s), want)
	if got := len(records(t, s)); got != h.Writers {
		t.Fatalf("records: got %d, want %d", got, h.Writers)
	}
}

func testDuplicateObject(t *testing.T, h Harness) {
	open := h.Fresh(t)
	s := open()
	defer s.Close()
	apply(t, s, objectUpdate("w/a", "dest", "resources", "other"))
	// The same object in another section, or another destination, is
	// a different Flux Kustomization's: allowed.
	apply(t, s, objectUpdate("w/b", "dest", "dependencies", "other"))
	apply(t, s, objectUpdate("w/c", "dest2", "resources", "other"))
	// The same object in the same section is refused, naming the owner.
	_, err := s.Apply(patient(), objectUpdate("w/d", "dest", "resources", "other"))
	var oe *statestore.OwnedError
	if !errors.As(err, &oe) || !errors.Is(err, statestore.ErrConflict) || oe.Owner != "w/a" || !strings.Contains(err.Error(), "w/a") {
		t.Fatalf("a duplicate object: got %v, want an OwnedError naming w/a", err)
	}
	if _, ok := contents(t, s)["dest/resources/w-d/cm.yaml"]; ok {
		t.Fatal("the refused duplicate was written")
	}
	// Once its owner stops writing it, another workload may.
	apply(t, s, removal("w/a"))
	apply(t, s, objectUpdate("w/d", "dest", "resources", "other"))
	// A workload rewriting its own object is not a duplicate.
	apply(t, s, objectUpdate("w/d", "dest", "resources", "changed"))
}

func testDuplicateObjectRace(t *testing.T, h Harness) {
	// Issue 16: 16 workloads writing one ConfigMap to one destination,
	// started together, left 7-16 copies. Exactly one may land.
	open := h.Fresh(t)
	n := min(h.Writers, 16)
	ctx := wait.WithRetryDeadline(context.Background(), 10*time.Minute)
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := open()
			defer s.Close()
			<-start
			_, errs[i] = s.Apply(ctx, objectUpdate(fmt.Sprintf("w/%02d", i), "dest", "resources", "data"))
		}()
	}
	close(start)
	wg.Wait()
	winner := ""
	for i, err := range errs {
		var oe *statestore.OwnedError
		switch {
		case err == nil && winner != "":
			t.Fatalf("writers %s and w/%02d both landed the same object", winner, i)
		case err == nil:
			winner = fmt.Sprintf("w/%02d", i)
		case !errors.As(err, &oe) || !errors.Is(err, statestore.ErrConflict):
			t.Fatalf("writer w/%02d: got %v, want an OwnedError", i, err)
		}
	}
	if winner == "" {
		t.Fatal("no writer landed")
	}
	for i, err := range errs {
		var oe *statestore.OwnedError
		if err != nil && errors.As(err, &oe) && oe.Owner != winner {
			t.Fatalf("writer w/%02d: error names %s, want the winner %s: %v", i, oe.Owner, winner, err)
		}
	}
	s := open()
	defer s.Close()
	equal(t, "contents", contents(t, s), map[string]string{
		"dest/resources/" + strings.ReplaceAll(winner, "/", "-") + "/cm.yaml": configMap("data"),
	})
	if got := records(t, s); len(got) != 1 || got[winner] == nil {
		t.Fatalf("records: got %v, want only %s's", got, winner)
	}
}

func testSameWorkloadRace(t *testing.T, h Harness) {
	open := h.Fresh(t)
	one := map[string]string{"d/w/1a.yaml": "1\n", "d/w/1b.yaml": "1\n"}
	two := map[string]string{"d/w/2a.yaml": "2\n", "d/w/2b.yaml": "2\n", "d/w/2c.yaml": "2\n"}
	seed := open()
	apply(t, seed, update("w/same", map[string]string{"d/w/old.yaml": "0\n"}))
	seed.Close()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []error
	for _, files := range []map[string]string{one, two} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := open()
			defer s.Close()
			if _, err := s.Apply(patient(), update("w/same", files)); err != nil {
				mu.Lock()
				failures = append(failures, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("racing writers failed: %v", failures)
	}
	s := open()
	defer s.Close()
	got := contents(t, s)
	if !reflect.DeepEqual(got, one) && !reflect.DeepEqual(got, two) {
		t.Fatalf("two renders of one workload left a mix: %v", got)
	}
}

func testSameWorkloadAmidOthers(t *testing.T, h Harness) {
	// Three renders of one workload race eight renders of others, so
	// that backends which carry several writers' updates in one write
	// (git's group commit) do so: the workload still ends as exactly
	// one of its renders, and every other workload lands.
	open := h.Fresh(t)
	ctx := wait.WithRetryDeadline(context.Background(), 10*time.Minute)
	versions := []map[string]string{
		{"d/same/a.yaml": "1\n", "d/same/b.yaml": "1\n"},
		{"d/same/c.yaml": "2\n"},
		{"d/same/a.yaml": "3\n", "d/same/d.yaml": "3\n", "d/same/e.yaml": "3\n"},
	}
	others := map[string]string{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []error
	run := func(u statestore.Update) {
		defer wg.Done()
		s := open()
		defer s.Close()
		if _, err := s.Apply(ctx, u); err != nil {
			mu.Lock()
			failures = append(failures, err)
			mu.Unlock()
		}
	}
	for i := range 8 {
		p := fmt.Sprintf("d/other-%d/x.yaml", i)
		others[p] = fmt.Sprintf("%d\n", i)
		wg.Add(1)
		go run(update(fmt.Sprintf("w/other-%d", i), map[string]string{p: others[p]}))
	}
	for _, files := range versions {
		wg.Add(1)
		go run(update("w/same", files))
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("racing writers failed: %v", failures)
	}
	s := open()
	defer s.Close()
	got := contents(t, s)
	same := map[string]string{}
	for p, c := range got {
		if strings.HasPrefix(p, "d/same/") {
			same[p] = c
		} else if others[p] != c {
			t.Errorf("%s = %q, want %q", p, c, others[p])
		}
	}
	if len(got)-len(same) != len(others) {
		t.Errorf("other workloads: %d files, want %d", len(got)-len(same), len(others))
	}
	whole := false
	for _, v := range versions {
		whole = whole || reflect.DeepEqual(same, v)
	}
	if !whole {
		t.Fatalf("three renders of one workload left a mix: %v", same)
	}
}

func testNotFound(t *testing.T, h Harness) {
	s := h.Fresh(t)()
	defer s.Close()
	snap, err := s.Snapshot(patient())
	if err != nil {
		t.Fatalf("Snapshot of an empty store: %v", err)
	}
	if _, err := snap.ReadFile("no/such/file.yaml"); !errors.Is(err, statestore.ErrNotFound) {
		t.Fatalf("ReadFile of a missing file: got %v, want ErrNotFound", err)
	}
	if recs, err := s.Records(patient()); err != nil || len(recs) != 0 {
		t.Fatalf("Records of an empty store: %v, %v", recs, err)
	}
	if h.Missing == nil {
		t.Fatal("harness has no Missing store: every backend must show its not-found error")
	}
	m := h.Missing(t)
	defer m.Close()
	_, err = m.Records(context.Background())
	if !errors.Is(err, statestore.ErrNotFound) {
		t.Fatalf("Records of a missing store: got %v, want ErrNotFound", err)
	}
	if err != nil && !containsName(err.Error(), m.String()) {
		t.Fatalf("error %q does not name the store %q", err, m.String())
	}
}

func containsName(msg, name string) bool {
	return name != "" && strings.Contains(msg, name)
}
