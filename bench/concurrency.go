package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
)

// Scenario 5: 16 render processes started at once, each a different
// workload (a promise workflow of 20 documents) going to two destinations:
// one on a Gitea branch, one in a MinIO bucket, the same branch and bucket
// for all 16. Every process must exit 0, and afterwards the branch and the
// bucket must hold every workload's files and record. The figure is the
// time from the first start to the last exit.
func concurrency(ctx context.Context, b *bench) ([]*Row, error) {
	const writers, docs = 16, 20
	var totals, serial, gitAttempts, s3Attempts []float64
	for run := range min(b.runs, 3) {
		r, err := b.createRepo("concurrency", true)
		if err != nil {
			return nil, err
		}
		bucket, err := b.createBucket(ctx, "concurrency")
		if err != nil {
			return nil, err
		}
		plat := b.gitStore("gitea", r.CloneURL) + b.bucketStore("minio", bucket) + fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata: {name: worker-git, labels: {env: bench}}
spec: {stateStoreRef: %s}
---
apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata: {name: worker-s3, labels: {env: bench}}
spec: {stateStoreRef: %s}
`, gitRef("gitea"), bucketRef("minio"))
		var ws []*workflow
		for i := range writers {
			w, err := newWorkflow(filepath.Join(b.work, "conc", fmt.Sprint(run)), fmt.Sprintf("conc-%02d", i), docs, plat)
			if err != nil {
				return nil, err
			}
			ws = append(ws, w)
		}
		var wg sync.WaitGroup
		errs := make([]error, writers)
		procs := make([]proc, writers)
		start := make(chan struct{})
		for i, w := range ws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				procs[i], errs[i] = b.render(ctx, w, "-o", "json")
			}()
		}
		b.quiesce()
		t0 := time.Now()
		close(start)
		wg.Wait()
		elapsed := time.Since(t0)
		maxGit, maxS3 := 0, 0
		for i, err := range errs {
			if err != nil {
				return nil, fmt.Errorf("run %d, writer %d: %w", run+1, i, err)
			}
			var rep struct {
				Stores []struct {
					Store    string `json:"store"`
					Attempts int    `json:"attempts"`
				} `json:"stores"`
			}
			if err := json.Unmarshal([]byte(procs[i].Stdout), &rep); err != nil {
				return nil, fmt.Errorf("writer %d: report: %v", i, err)
			}
			for _, s := range rep.Stores {
				if strings.HasPrefix(s.Store, "Git") {
					maxGit = max(maxGit, s.Attempts)
				} else {
					maxS3 = max(maxS3, s.Attempts)
				}
			}
		}
		if err := b.checkAllLanded(ctx, r, bucket, ws, filepath.Join(b.work, "conc", fmt.Sprint(run), "check")); err != nil {
			return nil, fmt.Errorf("run %d: %w", run+1, err)
		}
		// The same 16 renders one after another, into a new branch and bucket.
		d, err := b.serialBaseline(ctx, ws)
		if err != nil {
			return nil, err
		}
		b.log("concurrency run %d: 16 writers landed in %v (most attempts: git %d, s3 %d); one after another: %v",
			run+1, elapsed.Round(time.Millisecond), maxGit, maxS3, d.Round(time.Millisecond))
		totals = append(totals, ms(elapsed))
		serial = append(serial, ms(d))
		gitAttempts = append(gitAttempts, float64(maxGit))
		s3Attempts = append(s3Attempts, float64(maxS3))
	}
	t := newRow("", "16 renders at once, all landed (binary)", "ms", totals)
	t.Note = "16 processes, each a workload of 20 documents to one git and one S3 destination; time from the first start to the last exit; every workload's files and record checked in both stores"
	return []*Row{
		t.target("all land", true),
		newRow("", "the same 16 renders one after another", "ms", serial),
		newRow("", "most attempts of one writer, git", "n", gitAttempts),
		newRow("", "most attempts of one writer, S3", "n", s3Attempts),
	}, nil
}

// checkAllLanded checks that the branch and the bucket hold every
// workflow's documents and record.
func (b *bench) checkAllLanded(ctx context.Context, r repo, bucket string, ws []*workflow, dir string) error {
	tree, err := b.readTree(ctx, r, dir)
	if err != nil {
		return err
	}
	objs := map[string]bool{}
	for o := range b.minio.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			return o.Err
		}
		objs[o.Key] = true
	}
	for _, w := range ws {
		rec := path.Join("clusters/.render/workloads/promise", w.promise, "configure.json")
		if _, ok := tree[rec]; !ok {
			return fmt.Errorf("git: the record of %s is missing", w.promise)
		}
		if !objs[rec] {
			return fmt.Errorf("S3: the record of %s is missing", w.promise)
		}
		for i := range w.docs {
			f := fmt.Sprintf("dependencies/%s/configure/5058f/doc-%05d.yaml", w.promise, i)
			if string(tree["clusters/worker-git/"+f]) != string(doc(w.promise, i, "v1")) {
				return fmt.Errorf("git: clusters/worker-git/%s is missing or wrong", f)
			}
			if !objs["clusters/worker-s3/"+f] {
				return fmt.Errorf("S3: clusters/worker-s3/%s is missing", f)
			}
		}
	}
	return nil
}

// serialBaseline runs the workflows one after another into a new
// repository and bucket.
func (b *bench) serialBaseline(ctx context.Context, ws []*workflow) (time.Duration, error) {
	r, err := b.createRepo("serial", true)
	if err != nil {
		return 0, err
	}
	bucket, err := b.createBucket(ctx, "serial")
	if err != nil {
		return 0, err
	}
	old, err := os.ReadFile(ws[0].platform)
	if err != nil {
		return 0, err
	}
	plat := b.gitStore("gitea", r.CloneURL) + b.bucketStore("minio", bucket) + string(old[strings.Index(string(old), "apiVersion: platform.kratix.io/v1alpha1\nkind: Destination"):])
	b.quiesce()
	t0 := time.Now()
	for _, w := range ws {
		if err := writeAtomic(w.platform, []byte(plat)); err != nil {
			return 0, err
		}
		if _, err := b.render(ctx, w); err != nil {
			return 0, err
		}
	}
	return time.Since(t0), nil
}
