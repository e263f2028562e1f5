package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
)

// Scenario 5: N render processes started at once, each a different
// workload (a promise workflow of 20 documents), all writing one Gitea
// branch (or, separately, one MinIO bucket), for N = 1, 4, 16 and 64. Every
// process must exit 0, and afterwards the branch or bucket must hold every
// workload's files and record. The figure is the time from the first start
// to the last exit, against the same N renders run one after another into a
// fresh branch or bucket; the goal is at most 0.5x that serial time. Both
// runs go through a counting proxy (countingProxy), which reports the
// pushes (git) and PUTs (S3) each way made.
func concurrency(ctx context.Context, b *bench) ([]*Row, error) {
	const docs = 20
	gitAddr, gitc, stopGit, err := countingProxy(strings.TrimPrefix(strings.TrimPrefix(b.giteaURL, "http://"), "https://"))
	if err != nil {
		return nil, err
	}
	defer stopGit()
	s3Addr, s3c, stopS3, err := countingProxy(b.minioEndpoint)
	if err != nil {
		return nil, err
	}
	defer stopS3()
	counters := map[string]*counter{"git": gitc, "s3": s3c}
	addrs := map[string]string{"git": gitAddr, "s3": s3Addr}
	written := map[string]string{"git": "push", "s3": "PUT"}
	plural := map[string]string{"git": "pushes", "s3": "PUTs"}
	sizes := []int{1, 4, 16, 64}
	if b.quick {
		sizes = []int{1, 4, 16}
	}
	var rows []*Row
	for _, kind := range []string{"git", "s3"} {
		for _, n := range sizes {
			var ratios, totals, serial, p50s, maxes, writesTogether, writesSerial []float64
			cnt := counters[kind]
			for run := range min(b.runs, 2) {
				plat, check, err := b.concurrencyTarget(ctx, kind, "concurrency", addrs[kind])
				if err != nil {
					return rows, err
				}
				dir := filepath.Join(b.work, "conc", fmt.Sprintf("%s-%d-%d", kind, n, run))
				var ws []*workflow
				for i := range n {
					w, err := newWorkflow(dir, fmt.Sprintf("conc-%02d", i), docs, plat)
					if err != nil {
						return rows, err
					}
					ws = append(ws, w)
				}
				cnt.take()
				elapsed, attempts, err := b.together(ctx, ws)
				wt := cnt.take()
				if err != nil {
					return rows, fmt.Errorf("%s, N=%d, run %d: %w", kind, n, run+1, err)
				}
				if err := check(ws, filepath.Join(dir, "check")); err != nil {
					return rows, fmt.Errorf("%s, N=%d, run %d: %w", kind, n, run+1, err)
				}
				// The same N renders one after another, into a new branch or bucket.
				splat, _, err := b.concurrencyTarget(ctx, kind, "serial", addrs[kind])
				if err != nil {
					return rows, err
				}
				cnt.take()
				d, err := b.serialBaseline(ctx, ws, splat)
				ws1 := cnt.take()
				if err != nil {
					return rows, err
				}
				slices.Sort(attempts)
				b.log("concurrency %s N=%d run %d: together %v, one after another %v (%.2fx); attempts p50 %d, max %d; requests together %v, one after another %v",
					kind, n, run+1, elapsed.Round(time.Millisecond), d.Round(time.Millisecond), ms(elapsed)/ms(d),
					attempts[len(attempts)/2], attempts[len(attempts)-1], describeCounts(wt), describeCounts(ws1))
				writesTogether = append(writesTogether, float64(wt[written[kind]]))
				writesSerial = append(writesSerial, float64(ws1[written[kind]]))
				ratios = append(ratios, ms(elapsed)/ms(d))
				totals = append(totals, ms(elapsed))
				serial = append(serial, ms(d))
				p50s = append(p50s, float64(attempts[len(attempts)/2]))
				maxes = append(maxes, float64(attempts[len(attempts)-1]))
			}
			what := map[string]string{"git": "one Gitea branch", "s3": "one MinIO bucket"}[kind]
			r := newRow("", fmt.Sprintf("%s: %d renders at once / one after another", kind, n), "x", ratios)
			r.Note = fmt.Sprintf("%d processes, each a workload of 20 documents, into %s; every workload checked", n, what)
			if n > 1 {
				r.target("<= 0.5", r.Median <= 0.5)
			}
			rows = append(rows, r,
				newRow("", fmt.Sprintf("%s: %d renders at once, all landed", kind, n), "ms", totals),
				newRow("", fmt.Sprintf("%s: the same %d one after another", kind, n), "ms", serial),
				newRow("", fmt.Sprintf("%s: attempts per render at N=%d, p50", kind, n), "n", p50s),
				newRow("", fmt.Sprintf("%s: attempts per render at N=%d, max", kind, n), "n", maxes),
				newRow("", fmt.Sprintf("%s: %s at N=%d, all at once", kind, plural[kind], n), "n", writesTogether),
				newRow("", fmt.Sprintf("%s: %s at N=%d, one after another", kind, plural[kind], n), "n", writesSerial))
		}
	}
	return rows, nil
}

// concurrencyTarget makes a fresh branch (kind "git") or bucket ("s3") and
// returns a platform config with one destination on it, and a check that
// every workload landed there.
// via is the address (host:port) of the counting proxy render talks to.
func (b *bench) concurrencyTarget(ctx context.Context, kind, prefix, via string) (string, func([]*workflow, string) error, error) {
	if kind == "git" {
		r, err := b.createRepo(prefix, true)
		if err != nil {
			return "", nil, err
		}
		u, err := url.Parse(r.CloneURL)
		if err != nil {
			return "", nil, err
		}
		u.Host = via
		plat := b.gitStore("gitea", u.String()) + fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata: {name: worker-git, labels: {env: bench}}
spec: {stateStoreRef: %s}
`, gitRef("gitea"))
		return plat, func(ws []*workflow, dir string) error { return b.checkGitLanded(ctx, r, ws, dir) }, nil
	}
	bucket, err := b.createBucket(ctx, prefix)
	if err != nil {
		return "", nil, err
	}
	plat := b.bucketStoreAt("minio", via, bucket) + fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata: {name: worker-s3, labels: {env: bench}}
spec: {stateStoreRef: %s}
`, bucketRef("minio"))
	return plat, func(ws []*workflow, _ string) error { return b.checkS3Landed(ctx, bucket, ws) }, nil
}

// together starts every workflow's render at once and waits for all of
// them; it returns the wall time and each render's store attempts.
func (b *bench) together(ctx context.Context, ws []*workflow) (time.Duration, []int, error) {
	var wg sync.WaitGroup
	errs := make([]error, len(ws))
	procs := make([]proc, len(ws))
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
	var attempts []int
	for i, err := range errs {
		if err != nil {
			return 0, nil, fmt.Errorf("writer %d: %w", i, err)
		}
		var rep struct {
			Stores []struct {
				Attempts int `json:"attempts"`
			} `json:"stores"`
		}
		if err := json.Unmarshal([]byte(procs[i].Stdout), &rep); err != nil {
			return 0, nil, fmt.Errorf("writer %d: report: %v", i, err)
		}
		for _, s := range rep.Stores {
			attempts = append(attempts, s.Attempts)
		}
	}
	if len(attempts) == 0 {
		return 0, nil, fmt.Errorf("no store in any report")
	}
	return elapsed, attempts, nil
}

// checkGitLanded checks that the branch holds every workflow's documents
// and record.
func (b *bench) checkGitLanded(ctx context.Context, r repo, ws []*workflow, dir string) error {
	tree, err := b.readTree(ctx, r, dir)
	if err != nil {
		return err
	}
	for _, w := range ws {
		rec := path.Join("clusters/.render/workloads/promise", w.promise, "configure.json")
		if _, ok := tree[rec]; !ok {
			return fmt.Errorf("git: the record of %s is missing", w.promise)
		}
		for i := range w.docs {
			f := fmt.Sprintf("dependencies/%s/configure/5058f/doc-%05d.yaml", w.promise, i)
			if string(tree["clusters/worker-git/"+f]) != string(doc(w.promise, i, "v1")) {
				return fmt.Errorf("git: clusters/worker-git/%s is missing or wrong", f)
			}
		}
	}
	return nil
}

// checkS3Landed checks that the bucket holds every workflow's documents and
// record.
func (b *bench) checkS3Landed(ctx context.Context, bucket string, ws []*workflow) error {
	objs := map[string]bool{}
	for o := range b.minio.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			return o.Err
		}
		objs[o.Key] = true
	}
	for _, w := range ws {
		rec := path.Join("clusters/.render/workloads/promise", w.promise, "configure.json")
		if !objs[rec] {
			return fmt.Errorf("S3: the record of %s is missing", w.promise)
		}
		for i := range w.docs {
			f := fmt.Sprintf("dependencies/%s/configure/5058f/doc-%05d.yaml", w.promise, i)
			if !objs["clusters/worker-s3/"+f] {
				return fmt.Errorf("S3: clusters/worker-s3/%s is missing", f)
			}
		}
	}
	return nil
}

// serialBaseline runs the workflows one after another with platform plat
// (a fresh branch or bucket).
func (b *bench) serialBaseline(ctx context.Context, ws []*workflow, plat string) (time.Duration, error) {
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
