package gitstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore"
)

// A request ref anyone can push is input: the next render that leads
// folds only a well-formed request, planned on its workload's state in
// the store, that takes over nothing but its own workload's Kratix files.
// Every other one is deleted with a warning, never folded; an honest
// request waiting beside them still lands. Fails on main before this
// change: the request without a base and the one adopting postgres's
// folders were folded ("promise evil" commits), and postgres's files on
// both destinations deleted.
func TestForgedRequestsAreNeverFolded(t *testing.T) {
	url := "file://" + bareRepo(t, "")
	var mu sync.Mutex
	var warnings []string
	open := func() *Store {
		return mustNewRemote(t, Config{URL: url, Path: "clusters", Warn: func(msg string, args ...any) {
			mu.Lock()
			warnings = append(warnings, fmt.Sprint(append([]any{msg}, args...)...))
			mu.Unlock()
		}})
	}
	ctx := context.Background()
	pg := map[string]string{"d1/dependencies/postgres/p/5058f/cm.yaml": "pg 1\n", "d2/dependencies/postgres/p/5058f/cm.yaml": "pg 2\n"}
	u := statestore.Update{Workload: "promise/postgres/p", Files: map[string][]byte{}, Message: statestore.Message{Subject: "render: configure promise postgres"},
		Record: &statestore.Record{Type: "promise", Promise: "postgres", Pipeline: "p", Placements: []statestore.Placement{{Group: ".", Destinations: []string{"d1", "d2"}}}}}
	for p, c := range pg {
		u.Files[p] = []byte(c)
	}
	if _, err := open().Apply(ctx, u); err != nil {
		t.Fatal(err)
	}

	space := pendingSpace("main", "clusters")
	evil := []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: evil}\n")
	forge := func(workload, ref string, req map[string]any) string {
		t.Helper()
		if ref == "" {
			ref = pendingRef(space, workload).String()
		}
		req["workload"] = workload
		req["subject"] = "render: configure promise evil"
		if _, ok := req["files"]; !ok {
			req["files"] = map[string]string{"d1/dependencies/" + strings.ReplaceAll(strings.TrimPrefix(workload, "promise/"), "/", "-") + "/e.yaml": testenv.BlobID(evil)}
		}
		if err := testenv.ForgeRequest(url, nil, ref, req, evil); err != nil {
			t.Fatalf("forge %s: %v", ref, err)
		}
		return ref
	}
	forged := []string{
		// No base: it does not say what it was planned on.
		forge("promise/evil/nobase", "", map[string]any{"record": map[string]any{"type": "promise"}}),
		// Takes over postgres's folders on two destinations.
		forge("promise/evil/x", "", map[string]any{"base": "none", "record": map[string]any{"type": "promise"},
			"adopt": map[string]any{"folders": []string{"d1/dependencies/postgres/p", "d2/dependencies/postgres/p"}}}),
		// Under another workload's ref.
		forge("promise/evil/y", pendingRef(space, "promise/postgres/p").String(), map[string]any{"base": "none", "record": map[string]any{"type": "promise"}}),
		// Writes a claim into render's own folder, as a canary.
		forge("promise/evil/z", "", map[string]any{"base": "none", "record": map[string]any{"type": "promise"},
			"shared": map[string]string{".render/objects/00/00.json": testenv.BlobID(evil)}}),
		// Not a request at all.
		forge("promise/evil/w", "", map[string]any{"base": "none", "files": map[string]string{"d1/w.yaml": "not-a-blob-id"}}),
	}
	// An honest request waits beside them, left by a writer that died.
	good := statestore.Update{Workload: "promise/good/p", Files: map[string][]byte{"d1/dependencies/good/p/5058f/g.yaml": []byte("good\n")},
		Record: &statestore.Record{Type: "promise", Promise: "good", Pipeline: "p"}, Message: statestore.Message{Subject: "render: configure promise good"},
		Basis: &statestore.Basis{}}
	if err := PublishRequest(ctx, open(), good); err != nil {
		t.Fatal(err)
	}

	// An unrelated render leads.
	live := statestore.Update{Workload: "promise/live/p", Files: map[string][]byte{"d1/dependencies/live/p/5058f/l.yaml": []byte("live\n")},
		Record: &statestore.Record{Type: "promise", Promise: "live", Pipeline: "p"}, Message: statestore.Message{Subject: "render: configure promise live"}}
	res, err := open().Apply(ctx, live)
	if err != nil || !res.Updated {
		t.Fatalf("live: %+v, %v", res, err)
	}

	snap, err := open().Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for p, c := range pg {
		if got, err := snap.ReadFile(p); err != nil || string(got) != c {
			t.Errorf("postgres's %s = %q, %v: a forged request took it over", p, got, err)
		}
	}
	for _, p := range []string{"d1/dependencies/good/p/5058f/g.yaml", "d1/dependencies/live/p/5058f/l.yaml"} {
		if _, err := snap.ReadFile(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	files, err := snap.List("")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.Contains(f, "evil") || strings.HasPrefix(f, ".render/objects/00/") {
			t.Errorf("a forged request's file landed: %s", f)
		}
	}
	refs := remoteRefs(t, url)
	for _, ref := range forged {
		if slices.Contains(refs, ref) {
			t.Errorf("forged request %s is still there", ref)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, ref := range forged {
		found := false
		for _, w := range warnings {
			found = found || strings.Contains(w, ref)
		}
		if !found {
			t.Errorf("no warning names %s: %q", ref, warnings)
		}
	}
}

func remoteRefs(t *testing.T, url string) []string {
	t.Helper()
	rem := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{url}})
	list, err := rem.List(&git.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range list {
		if r.Type() == plumbing.HashReference {
			out = append(out, r.Name().String())
		}
	}
	return out
}

// requestFault's rules, one by one.
func TestRequestFault(t *testing.T) {
	space := pendingSpace("main", "")
	ok := statestore.Update{Workload: "promise/pg/p", Files: map[string][]byte{"d/dependencies/pg/p/5058f/a.yaml": nil},
		Shared: map[string][]byte{"d/dependencies/kratix-canary-namespace.yaml": nil}, Record: &statestore.Record{},
		Adopt: &statestore.Adoption{Folders: []string{"d/dependencies/pg/p"}}}
	ref := pendingRef(space, ok.Workload)
	if err := requestFault(ref, space, ok, "none", nil); err != nil {
		t.Fatalf("a request render writes: %v", err)
	}
	for name, c := range map[string]struct {
		change func(u *statestore.Update) (ref plumbing.ReferenceName, base string, readErr error)
		want   string
	}{
		"unreadable": {func(u *statestore.Update) (plumbing.ReferenceName, string, error) {
			return ref, "none", fmt.Errorf("request 1234: object not found")
		}, "object not found"},
		"no base": {func(u *statestore.Update) (plumbing.ReferenceName, string, error) { return ref, "", nil }, "which state"},
		"another's ref": {func(u *statestore.Update) (plumbing.ReferenceName, string, error) {
			return pendingRef(space, "promise/other/p"), "none", nil
		}, "whose requests are at"},
		"workload leaves the records": {func(u *statestore.Update) (plumbing.ReferenceName, string, error) {
			u.Workload = "../../x"
			return pendingRef(space, u.Workload), "none", nil
		}, "not a workload key"},
		"record of another": {func(u *statestore.Update) (plumbing.ReferenceName, string, error) {
			u.Record = &statestore.Record{Workload: "promise/other/p"}
			return ref, "none", nil
		}, "its record is workload promise/other/p's"},
		"file in render's folder": {func(u *statestore.Update) (plumbing.ReferenceName, string, error) {
			u.Files = map[string][]byte{".render/workloads/promise/other/p.json": nil}
			return ref, "none", nil
		}, ".render/workloads/promise/other/p.json"},
		"canary in render's folder": {func(u *statestore.Update) (plumbing.ReferenceName, string, error) {
			u.Shared = map[string][]byte{"d/.render/complete/x.json": nil}
			return ref, "none", nil
		}, "d/.render/complete/x.json"},
		"a ledger": {func(u *statestore.Update) (plumbing.ReferenceName, string, error) {
			u.Files = map[string][]byte{"flat/.kratix/ns-pg-db-instance-abcde.flat-5058f.yaml": nil}
			return ref, "none", nil
		}, ".kratix"},
		"an aggregated file in render's folder": {func(u *statestore.Update) (plumbing.ReferenceName, string, error) {
			u.Aggregates = []statestore.Aggregate{{Target: ".render/index.json"}}
			return ref, "none", nil
		}, ".render/index.json"},
		"a path no store holds": {func(u *statestore.Update) (plumbing.ReferenceName, string, error) {
			u.Files = map[string][]byte{"d/../../etc/passwd": nil}
			return ref, "none", nil
		}, "not clean"},
		"another's folders": {func(u *statestore.Update) (plumbing.ReferenceName, string, error) {
			u.Adopt = &statestore.Adoption{Folders: []string{"d/dependencies/postgres/p"}}
			return ref, "none", nil
		}, "d/dependencies/postgres/p"},
		"another's ledgers": {func(u *statestore.Update) (plumbing.ReferenceName, string, error) {
			u.Adopt = &statestore.Adoption{Ledgers: []statestore.LedgerMatch{{Dir: "flat/.kratix", Namespace: "ns", Work: "postgres-p", Destination: "flat"}}}
			return ref, "none", nil
		}, "not Kratix's ledgers of workload promise/pg/p"},
	} {
		t.Run(name, func(t *testing.T) {
			u := ok
			r, base, readErr := c.change(&u)
			err := requestFault(r, space, u, base, readErr)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want one saying %q", err, c.want)
			}
		})
	}
}
