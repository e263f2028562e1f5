package faulttest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore/s3store"
)

// downFor is how long a store stays down after the render started.
const downFor = 3 * time.Second

// TestGiteaDownAtStart: Gitea is stopped when the render starts and
// started a few seconds later. A render with a short --retry-deadline
// gives up with exit 1 naming the store; one with the default deadline
// waits, retrying with backoff, and lands.
func TestGiteaDownAtStart(t *testing.T) {
	t.Parallel()
	g := testenv.PrivateGitea(t)
	repo := g.CreateRepoInfo(t, "down")
	w := newWorkflow(t, "down")
	w.docs(t, 0, 20, "v1")
	w.setPlatform(t, gitStore("gitea", repo.CloneURL, g.AdminUser(), g.AdminToken()),
		destination("dev-1", "GitStateStore", "gitea"), destination("dev-2", "GitStateStore", "gitea"))

	g.Stop(t)
	short := mustRender(t, w, 1, "--retry-deadline", "2s")
	if !strings.Contains(short.stderr, "GitStateStore/gitea") || short.took > 30*time.Second {
		t.Errorf("with the store down and --retry-deadline 2s: want exit 1 naming GitStateStore/gitea soon, got %s", short)
	}

	p := start(t, w) // default --retry-deadline 2m
	time.Sleep(downFor)
	if p.exited() {
		t.Fatalf("render gave up while Gitea was down for %v: %s", downFor, p.res)
	}
	g.Start(t)
	res := p.wait(t, 2*time.Minute)
	if res.code != 0 {
		t.Fatalf("render after Gitea came back: %s", res)
	}
	got := remoteTree(t, repo.CloneURL, g.AdminUser(), g.AdminToken())
	for _, d := range []string{"dev-1", "dev-2"} {
		for i := range 20 {
			p := fmt.Sprintf("clusters/%s/dependencies/down/configure/5058f/doc-%05d.yaml", d, i)
			if _, ok := got.files[p]; !ok {
				t.Fatalf("%s missing after the render landed (it took %v)", p, res.took)
			}
		}
	}
	t.Logf("render waited for Gitea and landed in %v", res.took.Round(time.Millisecond))
}

// TestMinIODownAtStart is TestGiteaDownAtStart for a bucket.
func TestMinIODownAtStart(t *testing.T) {
	t.Parallel()
	m := testenv.PrivateMinIO(t)
	bucket := m.CreateBucket(t, "down")
	w := newWorkflow(t, "down")
	w.docs(t, 0, 20, "v1")
	w.setPlatform(t, bucketStore("minio", m.Endpoint(), bucket, m.AccessKey(), m.SecretKey()),
		destination("dev-1", "BucketStateStore", "minio"), destination("dev-2", "BucketStateStore", "minio"))

	m.Stop(t)
	short := mustRender(t, w, 1, "--retry-deadline", "2s")
	if !strings.Contains(short.stderr, "BucketStateStore/minio") || short.took > 30*time.Second {
		t.Errorf("with the store down and --retry-deadline 2s: want exit 1 naming BucketStateStore/minio soon, got %s", short)
	}

	p := start(t, w)
	time.Sleep(downFor)
	if p.exited() {
		t.Fatalf("render gave up while MinIO was down for %v: %s", downFor, p.res)
	}
	m.Start(t)
	res := p.wait(t, 2*time.Minute)
	if res.code != 0 {
		t.Fatalf("render after MinIO came back: %s", res)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	objs, err := listBucket(ctx, m.Client(t), bucket, "clusters/")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"dev-1", "dev-2"} {
		for i := range 20 {
			p := fmt.Sprintf("%s/dependencies/down/configure/5058f/doc-%05d.yaml", d, i)
			if _, ok := objs[p]; !ok {
				t.Fatalf("%s missing after the render landed (it took %v)", p, res.took)
			}
		}
		marked := false
		for p := range objs {
			marked = marked || strings.HasPrefix(p, d+"/"+s3store.MarkerDir+"/")
		}
		if !marked {
			t.Fatalf("%s has no completeness marker", d)
		}
	}
	t.Logf("render waited for MinIO and landed in %v", res.took.Round(time.Millisecond))
}
