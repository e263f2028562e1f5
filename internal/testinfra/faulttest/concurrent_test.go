package faulttest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/render-dev/render/internal/testinfra/testenv"
)

// TestSixteenWriters starts 16 render processes at once, each a different
// workload, all writing one Gitea branch and one MinIO bucket (one git
// destination and one S3 destination each). All must exit 0, and then the
// branch and the bucket must hold every workload's files and record, and
// the branch one commit per render, none forced over another.
func TestSixteenWriters(t *testing.T) {
	t.Parallel()
	const writers, docs = 16, 5
	g := testenv.Gitea(t)
	m := testenv.MinIO(t)
	repo := g.CreateRepoInfo(t, "sixteen")
	bucket := m.CreateBucket(t, "sixteen")
	platform := []string{
		gitStore("gitea", repo.CloneURL, g.AdminUser(), g.AdminToken()),
		bucketStore("minio", m.Endpoint(), bucket, m.AccessKey(), m.SecretKey()),
		destination("worker-git", "GitStateStore", "gitea"),
		destination("worker-s3", "BucketStateStore", "minio"),
	}
	var ws []*workflow
	for i := range writers {
		w := newWorkflow(t, fmt.Sprintf("writer-%02d", i))
		w.setPlatform(t, platform...)
		w.docs(t, 0, docs, "v1")
		ws = append(ws, w)
	}
	ps := make([]*process, writers)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A deadline well past the default: this test checks that every
			// writer lands, and on a loaded two-core machine sixteen Gitea
			// pushes in a row can take longer than the default 2 minutes.
			ps[i] = start(t, w, "-o", "json", "--retry-deadline", "10m")
		}()
	}
	wg.Wait()
	for i, p := range ps {
		if res := p.wait(t, 11*time.Minute); res.code != 0 {
			t.Errorf("writer %d: %s", i, res)
		}
	}
	took := time.Since(t0)
	if t.Failed() {
		t.FailNow()
	}

	got := remoteTree(t, repo.CloneURL, g.AdminUser(), g.AdminToken())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	objs, err := listBucket(ctx, m.Client(t), bucket, "clusters/")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		rec := ".render/workloads/promise/" + w.promise + "/configure.json"
		if _, ok := got.files["clusters/"+rec]; !ok {
			t.Errorf("git: the record of %s is missing", w.promise)
		}
		if _, ok := objs[rec]; !ok {
			t.Errorf("S3: the record of %s is missing", w.promise)
		}
		for i := range docs {
			f := fmt.Sprintf("dependencies/%s/configure/5058f/doc-%05d.yaml", w.promise, i)
			if _, ok := got.files["clusters/worker-git/"+f]; !ok {
				t.Errorf("git: worker-git/%s is missing", f)
			}
			if _, ok := objs["worker-s3/"+f]; !ok {
				t.Errorf("S3: worker-s3/%s is missing", f)
			}
		}
	}
	if commits := countCommits(t, repo.CloneURL, g.AdminUser(), g.AdminToken()); commits != writers {
		t.Errorf("the branch has %d commits, want %d (one per render)", commits, writers)
	}
	attempts := map[string]int{}
	for _, p := range ps {
		for _, line := range strings.Split(p.res.stdout, "\n") {
			var n int
			if _, err := fmt.Sscanf(strings.TrimSpace(line), `"attempts": %d`, &n); err == nil {
				attempts[fmt.Sprint(n)]++
			}
		}
	}
	t.Logf("16 writers landed in %v; store writes by attempts needed: %v", took.Round(time.Millisecond), attempts)
}

func countCommits(t *testing.T, url, user, password string) int {
	t.Helper()
	r, err := git.Clone(memory.NewStorage(), nil, &git.CloneOptions{
		URL: url, Auth: &githttp.BasicAuth{Username: user, Password: password},
		ReferenceName: plumbing.NewBranchReferenceName("main"), SingleBranch: true,
	})
	if err != nil {
		t.Fatalf("clone: %v", err)
	}
	ref, err := r.Head()
	if err != nil {
		t.Fatal(err)
	}
	iter, err := r.Log(&git.LogOptions{From: ref.Hash()})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	iter.ForEach(func(*object.Commit) error { n++; return nil })
	return n
}
