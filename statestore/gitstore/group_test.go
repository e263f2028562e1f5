package gitstore_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/gitstore"
)

func groupUpdate(workload string, files map[string]string) statestore.Update {
	u := statestore.Update{
		Workload: workload,
		Files:    map[string][]byte{},
		Shared:   map[string][]byte{"d1/canary.yaml": []byte("canary\n")},
		Record:   &statestore.Record{Workload: workload, Type: "promise", Promise: "p", Pipeline: "x"},
		Message:  statestore.Message{Subject: "render: " + workload, Trailers: []statestore.Trailer{{Key: "Render-Workload", Value: workload}}},
	}
	for p, c := range files {
		u.Files[p] = []byte(c)
	}
	return u
}

// resourceUpdate makes u a resource's, placed on dests (one group).
func resourceUpdate(u statestore.Update, dests ...string) statestore.Update {
	u.Record.Type = "resource"
	u.Record.Placements = []statestore.Placement{{Group: ".", Destinations: dests}}
	return u
}

// TestGroupCommitLandsADeadWritersUpdate: a writer that published its
// pending update and was killed before it could push still gets its update
// landed, by the next writer's push, as a commit of its own with its own
// message, and the pending ref is gone afterwards.
func TestGroupCommitLandsADeadWritersUpdate(t *testing.T) {
	g := testenv.Gitea(t)
	url := g.CreateRepo(t, "group-dead")
	open := func() *gitstore.Store { return giteaStore(t, g, url, g.AdminUser(), g.AdminToken()) }
	ctx := context.Background()

	seed := open()
	if _, err := seed.Apply(ctx, groupUpdate("w/seed", map[string]string{"d1/seed/a.yaml": "seed\n"})); err != nil {
		t.Fatal(err)
	}
	dead := open()
	if err := gitstore.PublishRequest(ctx, dead, resourceUpdate(groupUpdate("w/dead", map[string]string{"d1/dead/a.yaml": "dead\n", "d2/dead/b.yaml": "dead b\n"}), "d1", "d2")); err != nil {
		t.Fatalf("publish the pending update: %v", err)
	}
	if refs := pendingRefs(t, g, url); !slices.Contains(refs, gitstore.RequestRef(dead, "w/dead")) {
		t.Fatalf("pending refs after publishing: %v, want w/dead's", refs)
	}
	dead.Close() // killed: it never pushes the branch

	live := open()
	res, err := live.Apply(ctx, resourceUpdate(groupUpdate("w/live", map[string]string{"d1/live/a.yaml": "live\n"}), "d1"))
	if err != nil || !res.Updated {
		t.Fatalf("live writer: %+v, %v", res, err)
	}
	check := open()
	snap, err := check.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"d1/seed/a.yaml": "seed\n", "d1/live/a.yaml": "live\n", "d1/dead/a.yaml": "dead\n", "d2/dead/b.yaml": "dead b\n", "d1/canary.yaml": "canary\n"} {
		got, err := snap.ReadFile(p)
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", p, got, err, want)
		}
	}
	recs, err := check.Records(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Errorf("records: %d, want 3 (seed, live, dead)", len(recs))
	}
	if refs := pendingRefs(t, g, url); len(refs) != 0 {
		t.Errorf("pending refs after the fold: %v, want none", refs)
	}
	// The load summary counts the folded update as well as the leader's:
	// two resources on d1, one on d2.
	sl := snap.Capabilities().SummaryLoad
	if sl == nil {
		t.Fatal("a git snapshot declares no SummaryLoad")
	}
	counts, rest, err := sl([]string{"d1", "d2"})
	if err != nil || len(rest) > 0 || fmt.Sprint(counts) != "map[d1:map[_:2] d2:map[_:1]]" {
		t.Errorf("load summary after the fold: %v (cannot answer for %v, %v), want d1 2, d2 1", counts, rest, err)
	}
	// One commit per workload, the dead writer's with its own message.
	var subjects []string
	for _, c := range branchLog(t, g, url) {
		subjects = append(subjects, strings.SplitN(c.Message, "\n", 2)[0])
	}
	if want := []string{"render: w/dead", "render: w/live", "render: w/seed"}; strings.Join(subjects, ",") != strings.Join(want, ",") {
		t.Errorf("branch log (newest first) = %q, want %q", subjects, want)
	}
}

// TestGroupCommitNeverFoldsAConflict: a pending update that would take a
// file another workload owns is not folded; it stays for its owner, who
// gets the conflict itself.
func TestGroupCommitNeverFoldsAConflict(t *testing.T) {
	g := testenv.Gitea(t)
	url := g.CreateRepo(t, "group-conflict")
	open := func() *gitstore.Store { return giteaStore(t, g, url, g.AdminUser(), g.AdminToken()) }
	ctx := context.Background()
	if _, err := open().Apply(ctx, groupUpdate("w/owner", map[string]string{"d1/x.yaml": "owner\n"})); err != nil {
		t.Fatal(err)
	}
	if err := gitstore.PublishRequest(ctx, open(), groupUpdate("w/thief", map[string]string{"d1/x.yaml": "stolen\n"})); err != nil {
		t.Fatal(err)
	}
	if _, err := open().Apply(ctx, groupUpdate("w/other", map[string]string{"d1/o.yaml": "o\n"})); err != nil {
		t.Fatal(err)
	}
	snap, err := open().Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := snap.ReadFile("d1/x.yaml"); string(got) != "owner\n" {
		t.Fatalf("d1/x.yaml = %q: a conflicting pending update was folded", got)
	}
	// The conflicting request stays for its owner, and nothing else: a
	// writer that wins the branch leaves no request of its own.
	if refs := pendingRefs(t, g, url); !slices.Contains(refs, gitstore.RequestRef(open(), "w/thief")) || len(refs) != 1 {
		t.Fatalf("pending refs: %v, want the conflicting one left for its owner, alone", refs)
	}
}

func giteaAuth(g *testenv.GiteaServer) *githttp.BasicAuth {
	return &githttp.BasicAuth{Username: g.AdminUser(), Password: g.AdminToken()}
}

func pendingRefs(t *testing.T, g *testenv.GiteaServer, url string) []string {
	t.Helper()
	rem := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{url}})
	refs, err := rem.List(&git.ListOptions{Auth: giteaAuth(g)})
	if err != nil {
		t.Fatalf("ls-remote: %v", err)
	}
	var out []string
	for _, r := range refs {
		if strings.HasPrefix(r.Name().String(), gitstore.PendingRoot) {
			out = append(out, r.Name().String())
		}
	}
	return out
}

func branchLog(t *testing.T, g *testenv.GiteaServer, url string) []*object.Commit {
	t.Helper()
	r, err := git.Clone(memory.NewStorage(), nil, &git.CloneOptions{
		URL: url, Auth: giteaAuth(g), ReferenceName: plumbing.NewBranchReferenceName("main"), SingleBranch: true,
	})
	if err != nil {
		t.Fatalf("clone: %v", err)
	}
	head, err := r.Head()
	if err != nil {
		t.Fatal(err)
	}
	iter, err := r.Log(&git.LogOptions{From: head.Hash()})
	if err != nil {
		t.Fatal(err)
	}
	var out []*object.Commit
	_ = iter.ForEach(func(c *object.Commit) error { out = append(out, c); return nil })
	return out
}
