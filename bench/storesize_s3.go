package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/internal/testinfra/storegen"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/s3store"
)

// Scenario 8: store size on S3, the bucket twin of scenario 7. A cold
// one-shot render of one new resource request into a MinIO bucket whose
// store already holds 0, 10,000 or 100,000 workloads in render's own
// format: internal/testinfra/storegen's workloads (records, claims, placement index)
// spread over 100 destinations, plus each workload's completeness marker
// and each destination's canaries. The request matches every destination,
// so the spread strategy weighs all 100.
//
// The stores are written with s3store.Seed (PUTs in parallel, no renders)
// into a MinIO of this scenario's own, whose data folder is kept per machine
// outside the repository (minio-storesize in the bench cache, see
// benchCache) and reused when a store of that size and generator version is
// complete there: generating 100,000 workloads (about 400,000 objects)
// takes a long while, once. Each measured render's workload is removed
// afterwards (a tombstone stays), so the kept stores do not grow.
//
// Reported per size: wall time and peak RSS of the render process, and its
// requests (counted by a proxy in front of MinIO). Targets (issue 13): time
// at most 2x the empty store's, peak RSS at most 100 MB, requests no more
// than into the empty store. The first render of one more generated
// workload is also made with s3store.Apply alone (no engine), its requests
// counted in its transport: they must equal the empty store's exactly.
func storeSizeS3(ctx context.Context, b *bench) ([]*Row, error) {
	sizes := []int{0, 10000, 100000}
	if b.quick {
		sizes = []int{0, 10000}
	}
	if len(b.sizes) > 0 {
		sizes = b.sizes
	}
	srv, err := startStoreSizeMinIO(ctx, b)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	addr, c, stopProxy, err := countingProxy(srv.endpoint)
	if err != nil {
		return nil, err
	}
	defer stopProxy()
	proxied := *b.env
	proxied.minioEndpoint = addr

	var rows []*Row
	var base struct{ time, reqs, direct float64 }
	for _, n := range sizes {
		bucket, err := srv.seeded(ctx, b, n)
		if err != nil {
			return rows, err
		}
		var plat strings.Builder
		plat.WriteString(proxied.bucketStore("minio", bucket))
		for i := range storeSizeDests {
			fmt.Fprintf(&plat, "apiVersion: platform.kratix.io/v1alpha1\nkind: Destination\nmetadata:\n  name: %s\n  labels: {env: bench}\nspec:\n  stateStoreRef: %s\n---\n", storegen.Destination(i), bucketRef("minio"))
		}
		var times, rss, reqs []float64
		var last map[string]int
		// The first render is a warm-up (it creates the canaries of an
		// empty store, and warms MinIO's caches); it is not counted.
		for run := range b.runs + 1 {
			name := fmt.Sprintf("size%d-%s", n, uniqueName("p"))
			w, err := newWorkflow(filepath.Join(b.work, "storesize-s3", fmt.Sprint(n)), name, 1, plat.String())
			if err != nil {
				return rows, err
			}
			w.resource = "new-request"
			b.quiesce()
			c.reset()
			p, err := b.renderRSS(ctx, w)
			if err != nil {
				return rows, fmt.Errorf("%d workloads: %w", n, err)
			}
			m := c.snapshot()
			if err := srv.remove(ctx, bucket, statestore.WorkloadKey("resource", name, "team", w.resource, "configure")); err != nil {
				return rows, err
			}
			if run == 0 {
				continue
			}
			times = append(times, ms(p.Wall))
			rss = append(rss, float64(p.MaxRSSKB)/1024)
			reqs = append(reqs, float64(total(m)))
			last = m
			b.log("store size s3, %d workloads, run %d: %v, peak RSS %.0f MB, requests %s",
				n, run, p.Wall.Round(time.Millisecond), float64(p.MaxRSSKB)/1024, describeCounts(m))
		}
		t := newRow("", fmt.Sprintf("s3: cold render of one workload into %d workloads", n), "ms", times)
		r := newRow("", fmt.Sprintf("s3: peak RSS, one workload into %d workloads", n), "MB", rss)
		q := newRow("", fmt.Sprintf("s3: requests, one workload into %d workloads", n), "req", reqs)
		q.Note = "requests of the last run: " + describeCounts(last)
		r.target("<= 100MB", r.Max <= 100)
		if n == 0 {
			base.time, base.reqs = t.Median, q.Median
		} else {
			t.target(fmt.Sprintf("<= 2x empty (%.0fms)", 2*base.time), t.Median <= 2*base.time)
			q.target(fmt.Sprintf("<= empty (%.0f)", base.reqs), q.Median <= base.reqs)
		}
		rows = append(rows, t, r, q)
		more, err := srv.direct(ctx, b, bucket, n, &base.direct)
		if err != nil {
			return rows, err
		}
		rows = append(rows, more...)
	}
	return rows, nil
}

// direct measures s3store.Apply alone, without the engine: the first
// render of one more generated workload (of the same shape as the kept
// ones) into the bucket, requests counted in Config.Transport; the
// workload is removed afterwards.
func (s *storeSizeMinIO) direct(ctx context.Context, b *bench, bucket string, n int, empty *float64) ([]*Row, error) {
	c := &counter{n: map[string]int{}}
	st, err := s3store.New(s3store.Config{
		Name: "BucketStateStore/storesize", Endpoint: s.endpoint, Bucket: bucket, Path: "clusters",
		Region: "us-east-1", Insecure: true, AccessKeyID: s.ak, SecretAccessKey: s.sk,
		Transport: &countingTransport{base: http.DefaultTransport.(*http.Transport).Clone(), c: c},
	})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var times, reqs []float64
	var last map[string]int
	for run := range b.runs + 1 {
		u := storegen.Update(storegen.Spec{Workloads: n, Destinations: storeSizeDests}, 1_000_000+run)
		c.reset()
		t0 := time.Now()
		if _, err := st.Apply(ctx, u); err != nil {
			return nil, err
		}
		d := time.Since(t0)
		m := c.snapshot()
		if _, err := st.Apply(ctx, statestore.Update{Workload: u.Workload}); err != nil {
			return nil, err
		}
		if run == 0 {
			continue // warm-up
		}
		times, reqs, last = append(times, ms(d)), append(reqs, float64(total(m))), m
	}
	t := newRow("", fmt.Sprintf("s3store.Apply alone: one workload into %d workloads", n), "ms", times)
	q := newRow("", fmt.Sprintf("s3store.Apply alone: requests, one workload into %d workloads", n), "req", reqs)
	q.Note = "counted in s3store.Config.Transport; requests of the last run: " + describeCounts(last)
	if n == 0 {
		*empty = q.Median
	} else {
		q.target(fmt.Sprintf("= empty (%.0f)", *empty), q.Median == *empty)
	}
	return []*Row{t, q}, nil
}

// storeSizeVersion names the generator's output: a kept store made by
// another version of the generator is made again.
const storeSizeVersion = "v2"

// storeSizeDests is how many destinations the generated workloads and the
// measured request spread over.
const storeSizeDests = 100

// storeSizeMinIO is the scenario's own MinIO, on the kept data folder.
type storeSizeMinIO struct {
	endpoint string
	cmd      *exec.Cmd
	done     chan error
	client   *minio.Client
	ak, sk   string
}

// startStoreSizeMinIO starts the MinIO binary scripts/testservers.sh
// cached, on a free port, with the kept data folder, and waits (at most a
// minute) until it is ready.
func startStoreSizeMinIO(ctx context.Context, b *bench) (*storeSizeMinIO, error) {
	cache := os.Getenv("RENDER_CACHE_DIR")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, err
		}
		cache = filepath.Join(home, ".cache", "render")
	}
	bins, _ := filepath.Glob(filepath.Join(cache, "bin", "minio-*"))
	var bin string
	for _, p := range bins {
		if !strings.HasPrefix(filepath.Base(p), ".") {
			bin = p
		}
	}
	if bin == "" {
		return nil, fmt.Errorf("no MinIO binary under %s/bin: run scripts/testservers.sh build", cache)
	}
	kept, err := benchCache()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(kept, "minio-storesize")
	for _, d := range []string{"data", "home"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	cln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	console := cln.Addr().String()
	cln.Close()
	logf, err := os.Create(filepath.Join(dir, "minio.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "server", "--quiet", "--address", addr, "--console-address", console, filepath.Join(dir, "data"))
	cmd.Env = append(os.Environ(), "HOME="+filepath.Join(dir, "home"), "MINIO_ROOT_USER="+b.minioAK,
		"MINIO_ROOT_PASSWORD="+b.minioSK, "MINIO_UPDATE=off", "MINIO_CI_CD=1", "MINIO_BROWSER=off")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &storeSizeMinIO{endpoint: addr, cmd: cmd, done: make(chan error, 1), ak: b.minioAK, sk: b.minioSK}
	go func() { s.done <- cmd.Wait() }()
	b.log("store size s3: MinIO on %s with the kept data in %s", addr, dir)
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get("http://" + addr + "/minio/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-s.done:
			return nil, fmt.Errorf("MinIO on the kept data ended before it was ready (%v); see %s", err, filepath.Join(dir, "minio.log"))
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("MinIO on the kept data was not ready within a minute; see %s", filepath.Join(dir, "minio.log"))
		}
	}
	s.client, err = minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(b.minioAK, b.minioSK, ""), Region: "us-east-1"})
	if err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// stop ends MinIO: SIGTERM, then SIGKILL after 15 s.
func (s *storeSizeMinIO) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// open returns a store client of bucket on this MinIO.
func (s *storeSizeMinIO) open(bucket string, concurrency int) (*s3store.Store, error) {
	return s3store.New(s3store.Config{
		Name: "BucketStateStore/storesize", Endpoint: s.endpoint, Bucket: bucket, Path: "clusters",
		Region: "us-east-1", Insecure: true, AccessKeyID: s.ak, SecretAccessKey: s.sk, Concurrency: concurrency,
		RetryDeadline: 10 * time.Minute, // generating and cleaning up, on a machine that may be loaded
	})
}

// seededKey marks a bucket whose store the generator finished.
const seededKey = "bench-seeded"

// seeded returns the bucket holding n workloads, generating it first
// unless a complete one is kept.
func (s *storeSizeMinIO) seeded(ctx context.Context, b *bench, n int) (string, error) {
	return s.seededSpec(ctx, b, storegen.Spec{Workloads: n, Destinations: storeSizeDests})
}

// seededSpec returns the bucket holding the store spec describes,
// generating it first unless a complete one is kept.
func (s *storeSizeMinIO) seededSpec(ctx context.Context, b *bench, spec storegen.Spec) (string, error) {
	n := spec.Workloads
	bucket := fmt.Sprintf("storesize-%d-%s", n, storeSizeVersion)
	if spec.Destinations != storeSizeDests {
		bucket = fmt.Sprintf("storesize-%d-d%d-%s", n, spec.Destinations, storeSizeVersion)
	}
	ok, err := s.client.BucketExists(ctx, bucket)
	if err != nil {
		return "", err
	}
	if ok {
		if _, err := s.client.StatObject(ctx, bucket, seededKey, minio.StatObjectOptions{}); err == nil {
			b.log("store size s3: reusing the kept store of %d workloads (bucket %s)", n, bucket)
			return bucket, nil
		}
	} else if err := s.client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		return "", err
	}
	st, err := s.open(bucket, 64)
	if err != nil {
		return "", err
	}
	defer st.Close()
	t0 := time.Now()
	for i := range spec.Destinations {
		// The destinations' canaries, which render writes once per
		// destination and never again (shared files, owned by nobody).
		for _, c := range []struct{ path, data string }{
			{layout.CanaryDependencies, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kratix-worker-system\n"},
			{layout.CanaryResources, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kratix-info\n  namespace: kratix-worker-system\n"},
		} {
			key := "clusters/" + storegen.Destination(i) + "/" + c.path
			if _, err := s.client.PutObject(ctx, bucket, key, strings.NewReader(c.data), int64(len(c.data)), minio.PutObjectOptions{DisableMultipart: true}); err != nil {
				return "", err
			}
		}
	}
	// Each batch done is noted in the bucket, so that generation cut short
	// (on a loaded machine it takes hours) starts again where it stopped.
	const batch = 2000
	for from := 0; from < n; from += batch {
		done := fmt.Sprintf("%s-%d", seededKey, from)
		if _, err := s.client.StatObject(ctx, bucket, done, minio.StatObjectOptions{}); err == nil {
			continue
		}
		var us []statestore.Update
		for i := from; i < min(n, from+batch); i++ {
			us = append(us, storegen.Update(spec, i))
		}
		if err := st.Seed(ctx, us); err != nil {
			return "", err
		}
		if _, err := s.client.PutObject(ctx, bucket, done, strings.NewReader("done"), 4, minio.PutObjectOptions{}); err != nil {
			return "", err
		}
		b.log("store size s3: generated %d of %d workloads (%v)", min(n, from+batch), n, time.Since(t0).Round(time.Second))
	}
	if _, err := s.client.PutObject(ctx, bucket, seededKey, strings.NewReader(storeSizeVersion), int64(len(storeSizeVersion)), minio.PutObjectOptions{}); err != nil {
		return "", err
	}
	return bucket, nil
}

// remove deletes a measured workload from the kept store (its record
// becomes a tombstone).
func (s *storeSizeMinIO) remove(ctx context.Context, bucket, key string) error {
	st, err := s.open(bucket, 0)
	if err != nil {
		return err
	}
	defer st.Close()
	res, err := st.Apply(ctx, statestore.Update{Workload: key, Message: statestore.Message{Subject: "bench: remove " + key}})
	if err == nil && !res.Updated {
		err = errors.New("the measured workload was not in the store")
	}
	if err != nil {
		return fmt.Errorf("remove %s: %w", key, err)
	}
	return nil
}
