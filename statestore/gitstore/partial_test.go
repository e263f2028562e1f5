package gitstore_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/render-dev/render/internal/testinfra/storegen"
	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
	"github.com/render-dev/render/statestore/gitstore"
)

// seedGitea pushes a generated store of n workloads to a new Gitea
// repository, below the store path "clusters".
func seedGitea(t *testing.T, g *testenv.GiteaServer, spec storegen.Spec, large bool) string {
	t.Helper()
	files, err := storegen.Files(spec)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "seed.git")
	if err := storegen.WriteGit(dir, "main", "clusters", files, large); err != nil {
		t.Fatal(err)
	}
	u := g.CreateRepo(t, fmt.Sprintf("partial-%d-%v", spec.Workloads, large))
	if out, err := exec.Command("git", "-C", dir, "push", "--quiet", g.AdminAuthURL(u), "main").CombinedOutput(); err != nil {
		t.Fatalf("git push: %v\n%s", err, gitstore.RedactURL(string(out)))
	}
	return u
}

// One render into a large store fetches the tip commit and the folders on
// the paths it touches, a level at a time: the same objects, in the same
// number of requests, in a store of 3,000 workloads as in one of 30. And
// every answer it gives (the placement, the load, the duplicate check) is
// what a full read gives.
func TestPartialFetchIsPartial(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("the git CLI is needed to seed the repository")
	}
	g := testenv.Gitea(t)
	type cost struct {
		stats gitstore.FetchStats
		load  bookkeeping.Load
	}
	render := func(n int) cost {
		spec := storegen.Spec{Workloads: n, Destinations: 3}
		u := seedGitea(t, g, spec, true)
		s := giteaStore(t, g, u, g.AdminUser(), g.AdminToken())
		defer s.Close()
		ctx := context.Background()
		// What the engine does: a snapshot, the facts, the load on the
		// candidates, the claims, then the write.
		snap, err := s.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		u1 := storegen.Update(spec, n) // a new request
		f, err := bookkeeping.ReadFacts(snap, u1.Workload, u1.Record.Promise)
		if err != nil || f.All != nil || f.Own != nil {
			t.Fatalf("facts: %+v, %v (want an indexed store, no record of a new request)", f, err)
		}
		load, err := bookkeeping.ReadLoad(snap, []string{storegen.Destination(0), storegen.Destination(1), storegen.Destination(2)}, u1.Workload)
		if err != nil {
			t.Fatal(err)
		}
		if err := bookkeeping.CheckClaims(snap, u1, nil); err != nil {
			t.Fatal(err)
		}
		u1.Message = statestore.Message{Subject: "one more request"}
		res, err := s.Apply(ctx, u1)
		if err != nil || !res.Updated {
			t.Fatalf("apply: %+v, %v", res, err)
		}
		// A duplicate of an existing request's object is refused from the
		// claim alone.
		dup := storegen.Update(spec, 1)
		dup.Workload = "resource/other/promise-01/copy/configure"
		for p, data := range dup.Files {
			delete(dup.Files, p)
			dup.Files[p+".copy.yaml"] = data
		}
		if err := bookkeeping.CheckClaims(snap, dup, nil); err == nil {
			t.Fatal("a duplicate object was not refused")
		}
		return cost{s.FetchStats(), load}
	}
	small, large := render(30), render(3000)
	t.Logf("30 workloads: %+v; 3,000 workloads: %+v", small.stats, large.stats)
	if !large.stats.Partial {
		t.Fatal("Gitea did not allow a partial clone")
	}
	if large.stats.Requests > small.stats.Requests || large.stats.Objects > small.stats.Objects+2 {
		t.Errorf("the render into 3,000 workloads fetched %+v, into 30 %+v: the cost grows with the store", large.stats, small.stats)
	}
	if large.stats.Objects > 60 {
		t.Errorf("fetched %d objects one by one for a one-file render", large.stats.Objects)
	}
	// Load as a full read counts it: a third of the requests on each of
	// the three destinations.
	for i := range 3 {
		d := storegen.Destination(i)
		if large.load.Total[d] != 1000 || small.load.Total[d] != 10 {
			t.Errorf("load on %s: %d and %d, want 1000 and 10", d, large.load.Total[d], small.load.Total[d])
		}
	}
}

// commitOnTop adds a commit to the branch main of the Gitea repository at
// u with the git CLI, as a person or Kratix would: one file written, with
// no word from render in the message.
func commitOnTop(t *testing.T, g *testenv.GiteaServer, u, file, content string) {
	t.Helper()
	dir := t.TempDir()
	env := append(os.Environ(), "GIT_AUTHOR_NAME=kratix", "GIT_AUTHOR_EMAIL=kratix@example.com",
		"GIT_COMMITTER_NAME=kratix", "GIT_COMMITTER_EMAIL=kratix@example.com", "GIT_INDEX_FILE="+filepath.Join(dir, "index"))
	git := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"--git-dir", filepath.Join(dir, "repo.git")}, args...)...)
		cmd.Env = env
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("git %s: %v\n%s", args[0], err, gitstore.RedactURL(string(stderr)))
		}
		return strings.TrimSpace(string(out))
	}
	git("", "init", "--quiet", "--bare")
	git("", "fetch", "--quiet", "--depth", "1", g.AdminAuthURL(u), "main")
	git("", "read-tree", "FETCH_HEAD")
	blob := git(content, "hash-object", "-w", "--stdin")
	git("", "update-index", "--add", "--cacheinfo", "100644,"+blob+","+file)
	tree := git("", "write-tree")
	commit := git("", "commit-tree", tree, "-p", "FETCH_HEAD", "-m", "Update from: kratix")
	git("", "push", "--quiet", g.AdminAuthURL(u), commit+":refs/heads/main")
}

// tipHas reports whether the tip of main at u holds path p.
func tipHas(t *testing.T, g *testenv.GiteaServer, u, p string) bool {
	t.Helper()
	out, err := exec.Command("git", "ls-remote", g.AdminAuthURL(u), "main").Output()
	if err != nil || len(out) < 40 {
		t.Fatalf("git ls-remote: %v", err)
	}
	dir := t.TempDir()
	for _, args := range [][]string{{"init", "--quiet", "--bare"}, {"fetch", "--quiet", "--depth", "1", "--filter", "blob:none", g.AdminAuthURL(u), "main"}} {
		if out, err := exec.Command("git", append([]string{"--git-dir", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", args[0], err, gitstore.RedactURL(string(out)))
		}
	}
	return exec.Command("git", "--git-dir", dir, "cat-file", "-e", "FETCH_HEAD:"+p).Run() == nil
}

// Whether a store is read partially does not depend on who wrote last: a
// large store whose tip is another tool's commit is read partially (its
// load summary counts its resources), and a small one is still fetched
// whole, in one request after the first look at its top.
func TestForeignTipDoesNotHideALargeStore(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("the git CLI is needed to seed the repository")
	}
	g := testenv.Gitea(t)
	render := func(spec storegen.Spec) gitstore.FetchStats {
		u := seedGitea(t, g, spec, true)                             // render's trailer on its commit...
		commitOnTop(t, g, u, "clusters/README.md", "hand-written\n") // ...hidden by a person's fix
		s := giteaStore(t, g, u, g.AdminUser(), g.AdminToken())
		defer s.Close()
		up := storegen.Update(spec, spec.Workloads)
		up.Message = statestore.Message{Subject: "one more request"}
		if res, err := s.Apply(context.Background(), up); err != nil || !res.Updated {
			t.Fatalf("apply: %+v, %v", res, err)
		}
		return s.FetchStats()
	}
	small, large := render(storegen.Spec{Workloads: 20, Destinations: 3}), render(storegen.Spec{Workloads: 3000, Destinations: 3})
	t.Logf("20 workloads: %+v; 3,000 workloads: %+v", small, large)
	if small.Partial || small.Requests > 2 || small.Whole > 500 {
		t.Errorf("a small store was not fetched whole in one request after the first look: %+v", small)
	}
	if !large.Partial || large.Objects > 60 || large.Bytes > 200<<10 {
		t.Errorf("a large store with another writer's commit at its tip was not read partially: %+v", large)
	}
}

// A repository only Kratix has written (no .render folder, the first render
// of a migration) is read partially, whatever its size. The first render's
// commit says the store is large when its top folders show more than 100
// folders and files below them, or the folders it read suggest more than
// 10,000 objects, so that the next render reads it partially too although
// Kratix wrote the tip again; a small one is fetched whole from then on.
func TestKratixStoreIsReadPartially(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("the git CLI is needed to seed the repository")
	}
	g := testenv.Gitea(t)
	check := func(spec storegen.Spec, wantLarge bool) {
		t.Helper()
		dir := filepath.Join(t.TempDir(), "kratix.git")
		if err := storegen.WriteGit(dir, "main", "clusters", storegen.KratixFiles(spec), false); err != nil {
			t.Fatal(err)
		}
		u := g.CreateRepo(t, fmt.Sprintf("kratix-%d", spec.Workloads))
		if out, err := exec.Command("git", "-C", dir, "push", "--quiet", g.AdminAuthURL(u), "main").CombinedOutput(); err != nil {
			t.Fatalf("git push: %v\n%s", err, gitstore.RedactURL(string(out)))
		}
		apply := func(i int) gitstore.FetchStats {
			t.Helper()
			s := giteaStore(t, g, u, g.AdminUser(), g.AdminToken())
			defer s.Close()
			up := storegen.Update(spec, i)
			up.Message = statestore.Message{Subject: fmt.Sprintf("request %d", i)}
			if res, err := s.Apply(context.Background(), up); err != nil || !res.Updated {
				t.Fatalf("apply: %+v, %v", res, err)
			}
			return s.FetchStats()
		}
		first := apply(spec.Workloads)
		if !first.Partial || first.Objects > 60 {
			t.Errorf("%d workloads: the first render into a store Kratix wrote was not read partially: %+v", spec.Workloads, first)
		}
		if got := tipHas(t, g, u, "clusters/.render/store-size"); got != wantLarge {
			t.Errorf("%d workloads: the first render's commit says the store is large: %v, want %v", spec.Workloads, got, wantLarge)
		}
		commitOnTop(t, g, u, "clusters/dest-000/resources/kratix-note.txt", "still writing\n")
		second := apply(spec.Workloads + 1)
		t.Logf("%d workloads: first render %+v, second %+v", spec.Workloads, first, second)
		if second.Partial != wantLarge {
			t.Errorf("%d workloads: the second render read partially: %v, want %v (%+v)", spec.Workloads, second.Partial, wantLarge, second)
		}
	}
	check(storegen.Spec{Workloads: 20, Destinations: 3, Promises: 2}, false)
	// 10,000 requests of one promise on two destinations: 40,000 objects,
	// of which the render reads the folder of the promise's requests.
	check(storegen.Spec{Workloads: 10000, Destinations: 2, Promises: 1}, true)
	// 40 destinations: the top folders alone show 120 folders and files
	// to fetch.
	check(storegen.Spec{Workloads: 40, Destinations: 40, Promises: 2}, true)
}

// A store whose load summary does not show it large (its resources are
// few, or the summary is gone) is fetched whole; a writer that finds more
// than 10,000 objects says so in the store (and in its commit's trailer),
// and the next writer reads it partially, whoever wrote the tip since.
func TestLargeStoresAreMarked(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("the git CLI is needed to seed the repository")
	}
	g := testenv.Gitea(t)
	open := func(u string) *gitstore.Store { return giteaStore(t, g, u, g.AdminUser(), g.AdminToken()) }
	apply := func(s *gitstore.Store, spec storegen.Spec, i int) {
		u := storegen.Update(spec, i)
		u.Message = statestore.Message{Subject: fmt.Sprintf("request %d", i)}
		if _, err := s.Apply(context.Background(), u); err != nil {
			t.Fatal(err)
		}
	}
	small := storegen.Spec{Workloads: 20, Destinations: 3}
	u := seedGitea(t, g, small, false)
	s := open(u)
	apply(s, small, 20)
	if st := s.FetchStats(); st.Partial {
		t.Errorf("a small store was read partially: %+v", st)
	}
	s.Close()
	if st := func() gitstore.FetchStats { s := open(u); defer s.Close(); apply(s, small, 21); return s.FetchStats() }(); st.Partial {
		t.Errorf("a small store was marked large: %+v", st)
	}
	if tipHas(t, g, u, "clusters/.render/store-size") {
		t.Error("a small store says it is large")
	}

	// 3,000 workloads with only 900 resources in the load summary: the
	// others' entries were removed from it by hand.
	big := storegen.Spec{Workloads: 3000, Destinations: 3}
	files, err := storegen.Files(big)
	if err != nil {
		t.Fatal(err)
	}
	for i := 900; i < 3000; i++ {
		r := storegen.Update(big, i).Record
		r.Workload = storegen.Workload(big, i)
		for p := range bookkeeping.IndexPaths(r) {
			delete(files, p)
		}
	}
	dir := filepath.Join(t.TempDir(), "seed.git")
	if err := storegen.WriteGit(dir, "main", "clusters", files, false); err != nil {
		t.Fatal(err)
	}
	u = g.CreateRepo(t, "partial-few-resources")
	if out, err := exec.Command("git", "-C", dir, "push", "--quiet", g.AdminAuthURL(u), "main").CombinedOutput(); err != nil {
		t.Fatalf("git push: %v\n%s", err, gitstore.RedactURL(string(out)))
	}
	s = open(u)
	apply(s, big, 3000)
	if st := s.FetchStats(); st.Partial {
		t.Errorf("a store that does not show it is large was read partially: %+v", st)
	}
	s.Close()
	commitOnTop(t, g, u, "clusters/README.md", "hand-written\n")
	s = open(u)
	defer s.Close()
	apply(s, big, 3001)
	if st := s.FetchStats(); !st.Partial || st.Objects > 60 {
		t.Errorf("the store the last writer found large was not read partially: %+v", st)
	}
}
