package gitstore_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/render-dev/render/internal/storegen"
	"github.com/render-dev/render/internal/testenv"
	"github.com/render-dev/render/statestore"
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
		load  statestore.Load
	}
	render := func(n int) cost {
		spec := storegen.Spec{Workloads: n, Destinations: 3}
		u := seedGitea(t, g, spec, true)
		s := giteaStore(t, g, u, g.AdminUser(), g.AdminPassword())
		defer s.Close()
		ctx := context.Background()
		// What the engine does: a snapshot, the facts, the load on the
		// candidates, the claims, then the write.
		snap, err := s.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		u1 := storegen.Update(spec, n) // a new request
		f, err := statestore.ReadFacts(snap, u1.Workload, u1.Record.Promise)
		if err != nil || f.All != nil || f.Own != nil {
			t.Fatalf("facts: %+v, %v (want an indexed store, no record of a new request)", f, err)
		}
		load, err := statestore.ReadLoad(snap, []string{storegen.Destination(0), storegen.Destination(1), storegen.Destination(2)}, u1.Workload)
		if err != nil {
			t.Fatal(err)
		}
		if err := statestore.CheckClaims(snap, u1, nil); err != nil {
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
		if err := statestore.CheckClaims(snap, dup, nil); err == nil {
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

// A store whose tip commit does not say it is large is fetched whole, as
// before (one request, not one per folder level). A writer that finds it
// large (more than 10,000 objects) marks its commit, and the next writer
// reads the store partially.
func TestLargeStoresAreMarked(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("the git CLI is needed to seed the repository")
	}
	g := testenv.Gitea(t)
	open := func(u string) *gitstore.Store { return giteaStore(t, g, u, g.AdminUser(), g.AdminPassword()) }
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

	big := storegen.Spec{Workloads: 3000, Destinations: 3}
	u = seedGitea(t, g, big, false) // not marked: fetched whole once
	s = open(u)
	apply(s, big, 3000)
	if st := s.FetchStats(); st.Partial {
		t.Errorf("an unmarked store was read partially: %+v", st)
	}
	s.Close()
	s = open(u)
	defer s.Close()
	apply(s, big, 3001)
	if st := s.FetchStats(); !st.Partial || st.Objects > 60 {
		t.Errorf("the store the last writer found large was not read partially: %+v", st)
	}
}
