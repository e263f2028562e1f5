package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/render-dev/render/internal/testinfra/storegen"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/ocistore"
)

// Scenario 10 on S3 and OCI: `render drain` (the binary) of a destination
// holding 1,000 workloads, in stores of 10,000 and 100,000 workloads in
// render's own format (internal/testinfra/storegen, 1,000 per destination: 10 and
// 100 destinations), the drained destination cordoned; every one of its
// 1,000 resources must move. Reported as for git: wall time, render's CPU,
// the server's CPU meanwhile, requests by kind (a counting proxy in front
// of the server), peak RSS. Targets (issue 39): at most 30s at 100,000,
// peak RSS at most 200MB, requests that follow the workloads moved (the
// same in both stores).
//
// S3: the stores are kept in scenario 8's MinIO (generated once, outside
// the repository); after each run the drained workloads are written back
// where they were (not measured), so the kept store does not drift.
// OCI: each run drains a store seeded afresh (ocistore.Seed) into a new
// repository of the test registry.
func (b *bench) drainS3(ctx context.Context, sizes []int) ([]*Row, error) {
	const perDest = 1000
	srv, err := startStoreSizeMinIO(ctx, b)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	addr, cnt, stop, err := countingProxy(srv.endpoint)
	if err != nil {
		return nil, err
	}
	defer stop()
	proxied := *b.env
	proxied.minioEndpoint = addr
	var rows []*Row
	reqs := map[int]float64{}
	var last []sample
	for _, size := range sizes {
		dests := size / perDest
		spec := storegen.Spec{Workloads: size, Destinations: dests}
		bucket, err := srv.seededSpec(ctx, b, spec)
		if err != nil {
			return rows, err
		}
		var plat strings.Builder
		plat.WriteString(proxied.bucketStore("minio", bucket))
		writeDestinations(&plat, dests, bucketRef("minio"))
		// putBack writes the drained destination's workloads back where
		// the generator put them (not measured): after each run, for the
		// next, and before the first, in case a run was cut short.
		putBack := func() error {
			t0 := time.Now()
			st, err := srv.open(bucket, 0)
			if err != nil {
				return err
			}
			var us []statestore.Update
			for i := 0; i < size; i += dests {
				us = append(us, storegen.Update(spec, i))
			}
			res, err := st.ApplyAll(ctx, us)
			st.Close()
			if err != nil {
				return fmt.Errorf("s3, %d workloads: putting the drained workloads back: %w", size, err)
			}
			if res.Updated {
				b.log("drain s3, %d workloads: put the %d workloads back in %v", size, len(us), time.Since(t0).Round(time.Millisecond))
			}
			return nil
		}
		if err := putBack(); err != nil {
			return rows, err
		}
		var ss []sample
		for run := range b.runs {
			dir := filepath.Join(b.work, "drain-s3", fmt.Sprint(size), fmt.Sprint(run))
			s, err := b.drainOnce(ctx, dir, plat.String(), cnt, func() (int64, bool) { return procTicks(srv.cmd.Process.Pid) })
			if err != nil {
				return rows, fmt.Errorf("s3, %d workloads: %w", size, err)
			}
			b.log("drain s3, %d workloads, run %d: %.0fms, render CPU %.0fms, MinIO CPU %.0fms, %d requests (%s), %.0fMB", size, run, s.wall, s.cpu, s.server, total(s.requests), describeCounts(s.requests), s.rss)
			ss = append(ss, s)
			if err := putBack(); err != nil {
				return rows, err
			}
		}
		rows = append(rows, sampleRows(fmt.Sprintf("s3, %d workloads: drain of a destination holding %d", size, perDest), ss)...)
		reqs[size] = medianOf(ss, func(s sample) float64 { return float64(total(s.requests)) })
		last = ss
	}
	return append(rows, drainTargets("s3", sizes, last, reqs)...), nil
}

// drainOCI is scenario 10 against the test registry.
func (b *bench) drainOCI(ctx context.Context, sizes []int) ([]*Row, error) {
	const perDest = 1000
	regAddr, user, pass := os.Getenv("RENDER_TEST_REGISTRY_ADDR"), os.Getenv("RENDER_TEST_REGISTRY_USER"), os.Getenv("RENDER_TEST_REGISTRY_PASSWORD")
	if regAddr == "" {
		return nil, fmt.Errorf("RENDER_TEST_REGISTRY_ADDR is unset: the registry of scripts/testservers.sh is not running")
	}
	addr, cnt, stop, err := countingProxy(regAddr)
	if err != nil {
		return nil, err
	}
	defer stop()
	var rows []*Row
	reqs := map[int]float64{}
	var last []sample
	for _, size := range sizes {
		dests := size / perDest
		spec := storegen.Spec{Workloads: size, Destinations: dests}
		t0 := time.Now()
		files, err := storegen.Files(spec)
		if err != nil {
			return rows, err
		}
		var names []string
		for i := range dests {
			names = append(names, storegen.Destination(i))
		}
		b.log("drain oci, %d workloads: generated %d files in %v", size, len(files), time.Since(t0).Round(time.Millisecond))
		var ss []sample
		for run := range b.runs {
			repo := fmt.Sprintf("bench/drain-%d-%d-%d", size, time.Now().Unix(), run)
			st, err := ocistore.Open(ocistore.Config{Registry: regAddr, Repository: repo, Insecure: true, Username: user, Password: pass, Create: true})
			if err != nil {
				return rows, err
			}
			t0 := time.Now()
			if err := st.Seed(ctx, files, names); err != nil {
				return rows, err
			}
			st.Close()
			b.log("drain oci, %d workloads: seeded %s in %v", size, repo, time.Since(t0).Round(time.Millisecond))
			var plat strings.Builder
			fmt.Fprintf(&plat, `apiVersion: render.dev/v1alpha1
kind: OCIStateStore
metadata: {name: registry}
spec:
  registry: %q
  repository: %s
  insecure: true
  secretRef: {name: registry-creds}
---
apiVersion: v1
kind: Secret
metadata: {name: registry-creds}
stringData: {username: %q, password: %q}
---
`, addr, repo, user, pass)
			writeDestinations(&plat, dests, "{kind: OCIStateStore, name: registry}")
			dir := filepath.Join(b.work, "drain-oci", fmt.Sprint(size), fmt.Sprint(run))
			s, err := b.drainOnce(ctx, dir, plat.String(), cnt, registryTicks)
			if err != nil {
				return rows, fmt.Errorf("oci, %d workloads: %w", size, err)
			}
			b.log("drain oci, %d workloads, run %d: %.0fms, render CPU %.0fms, registry CPU %.0fms, %d requests (%s), %.0fMB", size, run, s.wall, s.cpu, s.server, total(s.requests), describeCounts(s.requests), s.rss)
			ss = append(ss, s)
		}
		rows = append(rows, sampleRows(fmt.Sprintf("oci, %d workloads: drain of a destination holding %d", size, perDest), ss)...)
		reqs[size] = medianOf(ss, func(s sample) float64 { return float64(total(s.requests)) })
		last = ss
	}
	return append(rows, drainTargets("oci", sizes, last, reqs)...), nil
}

// writeDestinations adds destinations dest-000... to a platform, all on
// store ref, the first one cordoned.
func writeDestinations(plat *strings.Builder, n int, ref string) {
	for i := range n {
		cordon := ""
		if i == 0 {
			cordon = "\n  unschedulable: true"
		}
		fmt.Fprintf(plat, "apiVersion: platform.kratix.io/v1alpha1\nkind: Destination\nmetadata:\n  name: %s\n  labels: {env: bench}\nspec:\n  stateStoreRef: %s%s\n---\n", storegen.Destination(i), ref, cordon)
	}
}

// drainOnce runs `render drain dest-000` with platform plat, through the
// RSS wrapper and the counting proxy cnt counts, once the servers are
// idle; ticks reads the server's CPU (clock ticks). Every one of the
// destination's 1,000 resources must move.
func (b *bench) drainOnce(ctx context.Context, dir, plat string, cnt *counter, ticks func() (int64, bool)) (sample, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return sample{}, err
	}
	defer os.RemoveAll(dir)
	platform := filepath.Join(dir, "platform.yaml")
	if err := os.WriteFile(platform, []byte(plat), 0o644); err != nil {
		return sample{}, err
	}
	self, err := os.Executable()
	if err != nil {
		return sample{}, err
	}
	rssOut := filepath.Join(dir, "rss.out")
	b.quiesce()
	cnt.reset()
	t0, _ := ticks()
	p, err := run(ctx, dir, append(os.Environ(), "RENDER_BENCH_RSS_OUT="+rssOut), self, rssWrapperArg, b.bin,
		"drain", storegen.Destination(0), "--platform", platform, "--allow-mass-deletion", "-o", "json",
		// The whole run's retry budget (2 minutes by default) also bounds
		// a write's commit; on a loaded machine a drain of 1,000 outlasts
		// it, and the figure to report is the time, against its target.
		"--retry-deadline", "15m")
	t1, _ := ticks()
	if err == nil && p.Code != 0 {
		err = fmt.Errorf("render drain exited %d: %s", p.Code, b.redact(lastLines(strings.TrimSpace(p.Stderr), 10)))
	}
	if err != nil {
		return sample{}, err
	}
	var kb int64
	if data, err := os.ReadFile(rssOut); err == nil {
		fmt.Sscan(string(data), &kb)
	}
	var rep struct {
		Moves []json.RawMessage `json:"moves"`
	}
	if err := json.Unmarshal([]byte(p.Stdout), &rep); err != nil {
		return sample{}, fmt.Errorf("drain's report: %w", err)
	}
	if len(rep.Moves) != 1000 {
		return sample{}, fmt.Errorf("drain moved %d groups, want 1000", len(rep.Moves))
	}
	return sample{wall: ms(p.Wall), cpu: ms(p.CPU), server: float64(t1-t0) * 10, rss: float64(kb) / 1024, requests: cnt.take()}, nil
}

// drainTargets are the target rows of a drain at the largest size, and
// the requests of the largest store against the smallest's.
func drainTargets(kind string, sizes []int, last []sample, reqs map[int]float64) []*Row {
	if len(sizes) == 0 || len(last) == 0 {
		return nil
	}
	big := sizes[len(sizes)-1]
	wall := medianOf(last, wallOf)
	rss := medianOf(last, func(s sample) float64 { return s.rss })
	r := newRow("", fmt.Sprintf("%s: drain of 1000 workloads, %d-workload store", kind, big), "ms", []float64{wall})
	m := newRow("", fmt.Sprintf("%s: drain peak RSS, %d-workload store", kind, big), "MB", []float64{rss})
	rows := []*Row{r.target("<= 30s", wall <= 30000), m.target("<= 200MB", rss <= 200)}
	if len(sizes) > 1 {
		small := sizes[0]
		q := newRow("", fmt.Sprintf("%s: drain requests, %d-workload store / %d-workload store", kind, big, small), "x", []float64{reqs[big] / reqs[small]})
		rows = append(rows, q.target("same requests (grow with the workloads moved, not the store)", reqs[big] <= reqs[small]*1.02+2))
	}
	return rows
}

// procTicks is the CPU time (clock ticks) process pid has used so far.
func procTicks(pid int) (int64, bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0, false
	}
	var u, s int64
	fmt.Sscan(f[11], &u)
	fmt.Sscan(f[12], &s)
	return u + s, true
}

// registryTicks is the test registry's CPU time so far.
func registryTicks() (int64, bool) {
	pid, err := os.ReadFile(os.Getenv("RENDER_TEST_REGISTRY_PIDFILE"))
	if err != nil {
		return 0, false
	}
	var n int
	if _, err := fmt.Sscan(string(pid), &n); err != nil {
		return 0, false
	}
	return procTicks(n)
}
