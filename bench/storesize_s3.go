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
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/s3store"
)

// Scenario 7: store size on S3. A cold one-shot render of one new workload
// (a promise workflow of one document, into destination worker-00) into a
// MinIO bucket whose store already holds 0, 10,000 or 100,000 workloads in
// render's own format: resource workloads spread over 100 destinations
// (worker-00 to worker-99), each with one file in Kratix's nested layout,
// its claim, its record and its completeness marker (four objects each).
//
// The stores are generated programmatically (s3store.Seed, many PUTs in
// parallel, no renders) into a MinIO of this scenario's own whose data
// folder is kept per machine outside the repository, under
// $RENDER_CACHE_DIR/bench/minio-storesize (default ~/.cache/render), and
// reused when a store of that size and generator version is complete there:
// generating 100,000 workloads (400,000 objects) takes a long while once.
// Each measured render's workload is removed afterwards (a tombstone
// stays), so the kept stores do not grow.
//
// Reported per size: wall time and peak RSS of the render process, and its
// requests (counted by a proxy in front of MinIO). Targets (issue 13): time
// at most 2x the empty store's, peak RSS at most 100 MB, requests no more
// than into the empty store. The same first render of one more generated
// workload is also made with s3store.Apply alone (no engine), its requests
// counted in its transport: they must equal the empty store's exactly.
func storeSizeS3(ctx context.Context, b *bench) ([]*Row, error) {
	sizes := []int{0, 10000, 100000}
	if b.quick {
		sizes = []int{0, 10000}
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
		plat := proxied.bucketStore("minio", bucket) + destinations(1, bucketRef("minio"))
		var times, rss, reqs []float64
		var last map[string]int
		// The first render is a warm-up (it creates the canaries of an
		// empty store, and warms MinIO's caches); it is not counted.
		for run := range b.runs + 1 {
			name := fmt.Sprintf("size%d-%s", n, uniqueName("w"))
			w, err := newWorkflow(filepath.Join(b.work, "storesize", fmt.Sprint(n)), name, 1, plat)
			if err != nil {
				return rows, err
			}
			b.quiesce()
			c.reset()
			p, err := b.renderRSS(ctx, w)
			if err != nil {
				return rows, fmt.Errorf("%d workloads: %w", n, err)
			}
			m := c.snapshot()
			if err := srv.remove(ctx, bucket, name); err != nil {
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
		u := storeSizeWorkload(1_000_000 + run)
		u.Shared = nil
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
const storeSizeVersion = "v1"

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
	dir := filepath.Join(cache, "bench", "minio-storesize")
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
	})
}

// seededKey marks a bucket whose store the generator finished.
const seededKey = "bench-seeded"

// seeded returns the bucket holding n workloads, generating it first
// unless a complete one is kept.
func (s *storeSizeMinIO) seeded(ctx context.Context, b *bench, n int) (string, error) {
	bucket := fmt.Sprintf("storesize-%d-%s", n, storeSizeVersion)
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
	const batch = 2000
	for from := 0; from < n; from += batch {
		var us []statestore.Update
		for i := from; i < min(n, from+batch); i++ {
			us = append(us, storeSizeWorkload(i))
		}
		if err := st.Seed(ctx, us); err != nil {
			return "", err
		}
		b.log("store size s3: generated %d of %d workloads (%v)", min(n, from+batch), n, time.Since(t0).Round(time.Second))
	}
	if _, err := s.client.PutObject(ctx, bucket, seededKey, strings.NewReader(storeSizeVersion), int64(len(storeSizeVersion)), minio.PutObjectOptions{}); err != nil {
		return "", err
	}
	return bucket, nil
}

// storeSizeWorkload is generated workload i: resource r<i> of promise
// storesize in namespace team-<i mod 50>, in destination worker-<i mod 100>,
// one ConfigMap in Kratix's nested layout; the first workload of each
// destination also writes the destination's canaries.
func storeSizeWorkload(i int) statestore.Update {
	ns, name, dest := fmt.Sprintf("team-%02d", i%50), fmt.Sprintf("r%06d", i), fmt.Sprintf("worker-%02d", i%100)
	file := fmt.Sprintf("resources/%s/storesize/%s/configure/5058f/cm.yaml", ns, name)
	u := statestore.Update{
		Workload: statestore.WorkloadKey("resource", "storesize", ns, name, "configure"),
		Files:    map[string][]byte{dest + "/" + file: doc(name, i, "v1")},
		Record: &statestore.Record{
			Type: "resource", Promise: "storesize", Namespace: ns, Name: name, Pipeline: "configure",
			Placements: []layout.Placement{{Group: "default", Destinations: []string{dest}}},
			Objects: []layout.Object{{
				APIVersion: "v1", Kind: "ConfigMap", Namespace: name, Name: fmt.Sprintf("%s-%05d", name, i),
				Section: "resources", File: file, Destination: dest, Source: "cm.yaml",
			}},
		},
		Destinations: []string{dest},
		Message:      statestore.Message{Subject: "bench: generated workload " + name},
	}
	if i < 100 {
		u.Shared = map[string][]byte{
			dest + "/" + layout.CanaryDependencies: []byte("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kratix-worker-system\n"),
			dest + "/" + layout.CanaryResources:    []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kratix-info\n  namespace: kratix-worker-system\n"),
		}
	}
	return u
}

// remove deletes the measured promise workflow's workload from the kept
// store (its record becomes a tombstone).
func (s *storeSizeMinIO) remove(ctx context.Context, bucket, promise string) error {
	st, err := s.open(bucket, 0)
	if err != nil {
		return err
	}
	defer st.Close()
	key := statestore.WorkloadKey("promise", promise, "", "", "configure")
	res, err := st.Apply(ctx, statestore.Update{Workload: key, Message: statestore.Message{Subject: "bench: remove " + key}})
	if err == nil && !res.Updated {
		err = errors.New("the measured workload was not in the store")
	}
	if err != nil {
		return fmt.Errorf("remove %s: %w", key, err)
	}
	return nil
}
