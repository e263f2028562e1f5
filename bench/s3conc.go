package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/render-dev/render/internal/testinfra/storegen"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/s3store"
)

// Scenario 5, S3: N render processes at once, each a different workload
// (a promise workflow of 20 documents) into one destination of one bucket,
// against the same N one after another, in four settings: a fresh bucket
// or one that already holds 10,000 workloads (scenario 8's kept store,
// generated once outside the repository; the destination is one of its
// 100, which holds 100 of them), each quiet and with a busy loop on every
// core (one `sh` spinning per core, at the renders' priority, started
// before the renders and stopped after them: a busy node). Every render
// must exit 0 and land; the figures are the wall times, their ratio
// (target <= 0.7x), and the requests per render by kind, counted by a
// proxy in front of MinIO (target: no more than serial's). In the kept
// store, every run's workloads are removed afterwards (tombstones stay).
// -quick measures the fresh bucket, quiet, only.
func (b *bench) s3Concurrency(ctx context.Context, sizes []int, fresh s3ConcTarget) ([]*Row, error) {
	var rows []*Row
	var failures []error
	oneFile := fresh
	oneFile.name, oneFile.oneFile = "one-file requests beside 3,000 files", true
	targets := []s3ConcTarget{fresh, oneFile}
	loads := []bool{false, true}
	if b.quick {
		loads, targets = loads[:1], targets[:1] // -quick: the fresh bucket, quiet
	} else if os.Getenv("RENDER_BENCH_S3_ONE_FILE_QUIET") != "" {
		loads, targets = loads[:1], targets[1:] // the one-file requests, quiet, only
	} else if big, stop, err := b.s3BigTarget(ctx); err != nil {
		failures = append(failures, fmt.Errorf("s3, 10,000 workloads: %w", err))
	} else {
		defer stop()
		targets = append(targets, big)
	}
	for _, t := range targets {
		for _, busy := range loads {
			for _, n := range sizes {
				var rs []concurrencyRun
				for run := range min(b.runs, 2) {
					r, err := b.s3ConcurrencyRun(ctx, t, busy, n, run)
					if err != nil {
						err = fmt.Errorf("s3, %s, %s, N=%d, run %d: %w", t.name, s3LoadName(busy), n, run+1, err)
						b.log("concurrency %v", err)
						failures = append(failures, err)
						break
					}
					rs = append(rs, r)
				}
				if len(rs) > 0 {
					rows = append(rows, concurrencyRows(fmt.Sprintf("s3 (%s)", t.name), n, busy, rs)...)
				}
				if ctx.Err() != nil {
					return rows, ctx.Err()
				}
			}
		}
	}
	return rows, errors.Join(failures...)
}

func s3LoadName(busy bool) string {
	if busy {
		return "a busy loop per core"
	}
	return "quiet"
}

// s3ConcTarget is where scenario 5's S3 renders write.
type s3ConcTarget struct {
	name     string
	endpoint string // what render talks to: a counting proxy
	cnt      *counter
	client   *minio.Client
	dest     string
	// bucket returns the bucket a run writes into: a new one, or the
	// kept store's.
	bucket func(ctx context.Context, prefix string) (string, error)
	// done removes the workloads a run wrote, when the bucket is kept.
	done func(ctx context.Context, bucket string, keys []string) error
	// oneFile makes the renders resource requests of one file each, over
	// four destinations (each weighs their load, and announces and
	// settles its placement in a load summary), into a bucket that holds
	// a workload of 3,000 files (issue 34's scenario).
	oneFile bool
}

// s3FreshTarget is a new bucket of the test MinIO per run.
func (b *bench) s3FreshTarget(addr string, cnt *counter) s3ConcTarget {
	return s3ConcTarget{name: "fresh bucket", endpoint: addr, cnt: cnt, client: b.minio, dest: "worker-s3",
		bucket: func(ctx context.Context, prefix string) (string, error) { return b.createBucket(ctx, prefix) }}
}

// s3BigTarget is scenario 8's kept store of 10,000 workloads, on its own
// MinIO, behind a counting proxy.
func (b *bench) s3BigTarget(ctx context.Context) (s3ConcTarget, func(), error) {
	srv, err := startStoreSizeMinIO(ctx, b)
	if err != nil {
		return s3ConcTarget{}, nil, err
	}
	bucket, err := srv.seeded(ctx, b, 10000)
	if err != nil {
		srv.stop()
		return s3ConcTarget{}, nil, err
	}
	addr, cnt, stopProxy, err := countingProxy(srv.endpoint)
	if err != nil {
		srv.stop()
		return s3ConcTarget{}, nil, err
	}
	client, err := minio.New(srv.endpoint, &minio.Options{Creds: credentials.NewStaticV4(b.minioAK, b.minioSK, ""), Region: "us-east-1"})
	if err != nil {
		stopProxy()
		srv.stop()
		return s3ConcTarget{}, nil, err
	}
	t := s3ConcTarget{name: "10,000 workloads", endpoint: addr, cnt: cnt, client: client, dest: storegen.Destination(0),
		bucket: func(context.Context, string) (string, error) { return bucket, nil },
		done: func(ctx context.Context, bucket string, keys []string) error {
			st, err := srv.open(bucket, 0)
			if err != nil {
				return err
			}
			defer st.Close()
			var us []statestore.Update
			for _, k := range keys {
				us = append(us, statestore.Update{Workload: k, Message: statestore.Message{Subject: "bench: remove " + k}})
			}
			_, err = st.ApplyAll(ctx, us)
			return err
		}}
	return t, func() { stopProxy(); srv.stop() }, nil
}

// s3ConcurrencyRun is one run: N renders at once, then N others one after
// another, with the busy loop around both when busy is set.
func (b *bench) s3ConcurrencyRun(ctx context.Context, t s3ConcTarget, busy bool, n, run int) (concurrencyRun, error) {
	const docs = 20
	var r concurrencyRun
	tag := fmt.Sprintf("%d%s", run, map[bool]string{false: "q", true: "b"}[busy])
	dir := filepath.Join(b.work, "conc-s3", fmt.Sprintf("%s-%d-%s", slugOf(t.name), n, tag))
	dests := []string{t.dest}
	if t.oneFile {
		dests = []string{t.dest + "-0", t.dest + "-1", t.dest + "-2", t.dest + "-3"}
	}
	platform := func(bucket string) string {
		p := b.bucketStoreAt("minio", t.endpoint, bucket)
		for _, d := range dests {
			p += fmt.Sprintf(`apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata: {name: %s, labels: {env: bench}}
spec: {stateStoreRef: %s}
---
`, d, bucketRef("minio"))
		}
		return p
	}
	// oneFileRequest is a request of its own promise (so that its one
	// document is an object no other request writes), named like it.
	oneFileRequest := func(bucket, name string) (*workflow, error) {
		w, err := newWorkflow(dir, name, 1, platform(bucket))
		if err != nil {
			return nil, err
		}
		w.resource = name
		obj := fmt.Sprintf("apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: %s\n  namespace: team\n", name)
		return w, os.WriteFile(filepath.Join(w.dir, "input", "object.yaml"), []byte(obj), 0o644)
	}
	workflows := func(bucket, prefix string) ([]*workflow, []string, error) {
		var ws []*workflow
		var keys []string
		for i := range n {
			name := fmt.Sprintf("%s%s-%02d", prefix, tag, i)
			if !t.oneFile {
				w, err := newWorkflow(dir, name, docs, platform(bucket))
				if err != nil {
					return nil, nil, err
				}
				ws = append(ws, w)
				keys = append(keys, statestore.WorkloadKey("promise", name, "", "", "configure"))
				continue
			}
			w, err := oneFileRequest(bucket, name)
			if err != nil {
				return nil, nil, err
			}
			ws = append(ws, w)
			keys = append(keys, statestore.WorkloadKey("resource", name, "team", name, "configure"))
		}
		return ws, keys, nil
	}
	prepare := func(bucket, prefix string) error {
		if !t.oneFile {
			return nil
		}
		if err := b.seedBigWorkload(ctx, bucket, dests[0]); err != nil {
			return err
		}
		if os.Getenv("RENDER_BENCH_S3_WARM") == "" {
			return nil
		}
		// One request rendered before the ones counted: it writes Kratix's
		// canaries in every destination and creates the load summaries'
		// bases, which every render of a burst into fresh destinations
		// sees missing and writes (the losers' PUTs refused).
		w, err := oneFileRequest(bucket, prefix+"warm-"+tag)
		if err != nil {
			return err
		}
		if p, err := b.render(ctx, w, "-o", "json"); err != nil {
			return fmt.Errorf("warm-up render: %w (%s)", err, p.Stderr)
		}
		return nil
	}
	var stopLoad func()
	if busy {
		var err error
		if stopLoad, err = busyLoop(ctx); err != nil {
			return r, err
		}
		defer stopLoad()
	}
	bucket, err := t.bucket(ctx, "concurrency")
	if err == nil {
		err = prepare(bucket, "t")
	}
	if err != nil {
		return r, err
	}
	ws, keys, err := workflows(bucket, "t")
	if err != nil {
		return r, err
	}
	t.cnt.take()
	var cpu cpuMeter
	r.together, r.attempts, _, err = b.together(ctx, ws, &cpu, false) // the busy loop is already running
	r.busyTogether, r.loadTogether = cpu.busy, cpu.load
	r.reqTogether = t.cnt.take()
	if err != nil {
		return r, err
	}
	if err := t.check(ctx, bucket, ws, keys); err != nil {
		return r, err
	}
	if t.done != nil {
		if err := t.done(ctx, bucket, keys); err != nil {
			return r, err
		}
	}
	sbucket, err := t.bucket(ctx, "serial")
	if err == nil {
		err = prepare(sbucket, "s")
	}
	if err != nil {
		return r, err
	}
	sws, skeys, err := workflows(sbucket, "s")
	if err != nil {
		return r, err
	}
	t.cnt.take()
	cpu = cpuMeter{}
	r.serial, err = b.serialBaseline(ctx, sws, platform(sbucket), &cpu, false)
	r.busySerial, r.loadSerial = cpu.busy, cpu.load
	r.reqSerial = t.cnt.take()
	if err != nil {
		return r, err
	}
	if err := t.check(ctx, sbucket, sws, skeys); err != nil {
		return r, err
	}
	if t.done != nil {
		if err := t.done(ctx, sbucket, skeys); err != nil {
			return r, err
		}
	}
	slices.Sort(r.attempts)
	b.log("concurrency s3 (%s, %s) N=%d run %d: together %v (%.2f cores busy, load %s), one after another %v (%.2f cores busy, load %s): %.2fx; attempts p50 %d, max %d; requests together %v (%.1f per render), one after another %v (%.1f per render)",
		t.name, s3LoadName(busy), n, run+1, r.together.Round(time.Millisecond), r.busyTogether, r.loadTogether,
		r.serial.Round(time.Millisecond), r.busySerial, r.loadSerial, ms(r.together)/ms(r.serial),
		r.attempts[len(r.attempts)/2], r.attempts[len(r.attempts)-1],
		describeCounts(r.reqTogether), float64(total(r.reqTogether))/float64(n),
		describeCounts(r.reqSerial), float64(total(r.reqSerial))/float64(n))
	return r, nil
}

// checkS3LandedIn checks that the bucket holds every workflow's documents
// in destination dest, and its record.
func checkS3LandedIn(ctx context.Context, c *minio.Client, bucket, dest string, ws []*workflow) error {
	for _, w := range ws {
		objs := map[string]bool{}
		for _, prefix := range []string{
			path.Join("clusters", dest, "dependencies", w.promise) + "/",
			path.Join("clusters/.render/workloads/promise", w.promise) + "/",
		} {
			for o := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
				if o.Err != nil {
					return o.Err
				}
				objs[o.Key] = true
			}
		}
		if rec := path.Join("clusters/.render/workloads/promise", w.promise, "configure.json"); !objs[rec] {
			return fmt.Errorf("S3: the record of %s is missing", w.promise)
		}
		for i := range w.docs {
			f := fmt.Sprintf("clusters/%s/dependencies/%s/configure/5058f/doc-%05d.yaml", dest, w.promise, i)
			if !objs[f] {
				return fmt.Errorf("S3: %s is missing", f)
			}
		}
	}
	return nil
}

// busyLoop starts one spinning shell per core, as other work on a busy
// node would; stop ends them.
func busyLoop(ctx context.Context) (stop func(), err error) {
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			_ = c.Process.Signal(syscall.SIGKILL)
			_ = c.Wait()
		}
	}
	for range runtime.NumCPU() {
		c := exec.CommandContext(ctx, "sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			stop()
			return nil, err
		}
		cmds = append(cmds, c)
	}
	return stop, nil
}

func slugOf(s string) string {
	out := []rune{}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			out = append(out, r)
		default:
			if len(out) > 0 && out[len(out)-1] != '-' {
				out = append(out, '-')
			}
		}
	}
	return string(out)
}

// check checks that every workflow of ws (workloads keys) landed in
// bucket, and, for one-file requests, that nothing is left that a later
// write must clean up: no record names a write under way, no load summary
// holds a change that was not settled.
func (t s3ConcTarget) check(ctx context.Context, bucket string, ws []*workflow, keys []string) error {
	if !t.oneFile {
		return checkS3LandedIn(ctx, t.client, bucket, t.dest, ws)
	}
	read := func(key string) ([]byte, error) {
		o, err := t.client.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
		if err != nil {
			return nil, err
		}
		defer o.Close()
		return io.ReadAll(o)
	}
	for i, w := range ws {
		data, err := read(path.Join("clusters", statestore.RecordPath(keys[i])))
		if err != nil {
			return fmt.Errorf("S3: the record of %s: %w", w.resource, err)
		}
		var rec struct {
			statestore.Record
			Pending []string `json:"s3Pending"`
		}
		if err := json.Unmarshal(data, &rec); err != nil {
			return fmt.Errorf("S3: the record of %s: %w", w.resource, err)
		}
		if len(rec.Pending) > 0 {
			return fmt.Errorf("S3: the record of %s names a write under way: %v", w.resource, rec.Pending)
		}
		if len(rec.Placements) != 1 || len(rec.Placements[0].Destinations) != 1 {
			return fmt.Errorf("S3: %s is placed on %+v", w.resource, rec.Placements)
		}
		f := path.Join("clusters", rec.Placements[0].Destinations[0], "resources/team", w.promise, w.resource, "configure/5058f/doc-00000.yaml")
		if got, err := read(f); err != nil || !bytes.Equal(got, doc(w.promise, 0, "v1")) {
			return fmt.Errorf("S3: %s is missing or wrong (%v)", f, err)
		}
	}
	// The load summaries: every change announced beside a summary was
	// settled (a write's pending object has its settled one beside it),
	// and every change a summary's base holds as under way (a fold found
	// it pending) was settled since.
	kinds := map[string]string{} // "<folder>/<nonce>" -> kinds of its objects
	var bases []string
	for o := range t.client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: "clusters/.render/load/", Recursive: true}) {
		if o.Err != nil {
			return o.Err
		}
		dir, name := path.Split(o.Key)
		if len(name) > 34 && name[32] == '.' {
			kinds[dir+name[:32]] += name[33:34]
		} else if strings.HasSuffix(name, ".json") {
			bases = append(bases, o.Key)
		}
	}
	for nonce, k := range kinds {
		if !strings.Contains(k, "s") {
			return fmt.Errorf("S3: the load summary change %s was never settled", nonce)
		}
	}
	for _, key := range bases {
		data, err := read(key)
		if err != nil {
			return err
		}
		var sum struct {
			Pending map[string]json.RawMessage `json:"pending"`
		}
		if err := json.Unmarshal(data, &sum); err != nil {
			return fmt.Errorf("S3: %s: %w", key, err)
		}
		for nonce := range sum.Pending {
			if !strings.Contains(kinds[strings.TrimSuffix(key, ".json")+"/"+nonce], "s") {
				return fmt.Errorf("S3: the load summary %s holds a change under way after the last render", key)
			}
		}
	}
	return nil
}

// seedBigWorkload writes, as render would have, a promise workflow of
// 3,000 files to destination dest of bucket.
func (b *bench) seedBigWorkload(ctx context.Context, bucket, dest string) error {
	st, err := s3store.New(s3store.Config{Name: "BucketStateStore/seed", Endpoint: b.minioEndpoint, Bucket: bucket, Path: "clusters",
		Region: "us-east-1", Insecure: true, AccessKeyID: b.minioAK, SecretAccessKey: b.minioSK, Concurrency: 32, RetryDeadline: 10 * time.Minute})
	if err != nil {
		return err
	}
	defer st.Close()
	u := statestore.Update{Workload: statestore.WorkloadKey("promise", "big", "", "", "configure"), Files: map[string][]byte{},
		Destinations: []string{dest}, Record: &statestore.Record{Type: "promise", Promise: "big", Pipeline: "configure"}}
	for i := range 3000 {
		u.Files[fmt.Sprintf("%s/dependencies/big/configure/5058f/doc-%05d.yaml", dest, i)] = doc("big", i, "v1")
	}
	return st.Seed(ctx, []statestore.Update{u})
}
