package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/render-dev/render/internal/testinfra/storegen"
)

// Scenario 10: `render drain` (the binary) of a destination holding 1,000
// workloads, in git stores of 10,000 and 100,000 workloads in render's own
// format (1,000 per destination: 10 and 100 destinations), generated as in
// scenario 7 and pushed once to a Gitea repository; each run drains a
// fresh branch holding the generated commit (the same objects: the push is
// instant). The drained destination is cordoned; every one of its 1,000
// resources must move. Reported: wall time, the render's CPU, the servers'
// CPU meanwhile, requests to Gitea (through the counting proxy), peak RSS
// and packfile bytes fetched one by one. Target (issue 28): at most 30s at
// 100,000 workloads, and the same requests in both stores (they move the
// same number of workloads). The same on S3 and OCI: see drainS3 and
// drainOCI; -stores picks the store kinds.
func drainScale(ctx context.Context, b *bench) ([]*Row, error) {
	const perDest = 1000
	sizes := []int{10000, 100000}
	if b.quick {
		sizes = []int{10000}
	}
	if len(b.sizes) > 0 {
		sizes = nil
		for _, s := range b.sizes {
			if s >= perDest {
				sizes = append(sizes, s)
			}
		}
	}
	var rows []*Row
	var failures []error
	if b.wantStore("git") {
		r, err := b.drainGit(ctx, sizes)
		rows = append(rows, r...)
		if err != nil {
			failures = append(failures, err)
		}
	}
	for _, k := range []struct {
		kind string
		run  func(context.Context, []int) ([]*Row, error)
	}{{"s3", b.drainS3}, {"oci", b.drainOCI}} {
		if !b.wantStore(k.kind) || ctx.Err() != nil {
			continue
		}
		r, err := k.run(ctx, sizes)
		rows = append(rows, r...)
		if err != nil {
			failures = append(failures, err)
		}
	}
	return rows, errors.Join(failures...)
}

// drainGit is scenario 10 on git (see drainScale).
func (b *bench) drainGit(ctx context.Context, sizes []int) ([]*Row, error) {
	const perDest = 1000
	cache, err := benchCache()
	if err != nil {
		return nil, err
	}
	addr, cnt, stop, err := countingProxy(strings.TrimPrefix(strings.TrimPrefix(b.giteaURL, "http://"), "https://"))
	if err != nil {
		return nil, err
	}
	defer stop()
	var rows []*Row
	var last []sample
	reqs := map[int]float64{}
	for _, size := range sizes {
		dests := size / perDest
		seed := filepath.Join(cache, fmt.Sprintf("store-git-%d-d%d-v2.git", size, dests))
		if err := b.seedStore(seed, func() (map[string][]byte, error) {
			return storegen.Files(storegen.Spec{Workloads: size, Destinations: dests})
		}, true); err != nil {
			return rows, err
		}
		r, err := b.createRepo(fmt.Sprintf("drain-%d", size), false)
		if err != nil {
			return rows, err
		}
		t0 := time.Now()
		if err := b.git(ctx, "", "--git-dir", seed, "push", "-q", b.authURL(r.CloneURL), "main:main"); err != nil {
			return rows, err
		}
		b.log("drain, %d workloads: pushed in %v", size, time.Since(t0).Round(time.Millisecond))
		u, _ := url.Parse(r.CloneURL)
		u.Host = addr
		root := filepath.Join(b.work, "drain", fmt.Sprint(size))
		var ss []sample
		for run := range b.runs {
			branch := fmt.Sprintf("drain-%d", run)
			if err := b.git(ctx, "", "--git-dir", seed, "push", "-q", b.authURL(r.CloneURL), "main:refs/heads/"+branch); err != nil {
				return rows, err
			}
			var plat strings.Builder
			plat.WriteString(strings.Replace(b.gitStore("gitea", u.String()), "branch: main", "branch: "+branch, 1))
			for i := range dests {
				cordon := ""
				if i == 0 {
					cordon = "\n  unschedulable: true"
				}
				fmt.Fprintf(&plat, "apiVersion: platform.kratix.io/v1alpha1\nkind: Destination\nmetadata:\n  name: %s\n  labels: {env: bench}\nspec:\n  stateStoreRef: %s%s\n---\n", storegen.Destination(i), gitRef("gitea"), cordon)
			}
			dir := filepath.Join(root, fmt.Sprint(run))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return rows, err
			}
			w := &workflow{dir: dir, platform: filepath.Join(dir, "platform.yaml")}
			if err := os.WriteFile(w.platform, []byte(plat.String()), 0o644); err != nil {
				return rows, err
			}
			s, out, err := b.measureArgs(ctx, dir, cnt, "drain", storegen.Destination(0), "--platform", w.platform,
				"--allow-mass-deletion", "-o", "json", "--log-level", "debug")
			if err != nil {
				return rows, err
			}
			var rep struct {
				Moves []json.RawMessage `json:"moves"`
			}
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				return rows, fmt.Errorf("drain's report: %w", err)
			}
			if len(rep.Moves) != perDest {
				return rows, fmt.Errorf("drain moved %d groups, want %d", len(rep.Moves), perDest)
			}
			b.log("drain, %d workloads, run %d: %.0fms, %d requests (%s), %.0fMB", size, run, s.wall, gitRequests(s.requests), describeCounts(s.requests), s.rss)
			ss = append(ss, s)
		}
		os.RemoveAll(root)
		rows = append(rows, sampleRows(fmt.Sprintf("%d workloads: drain of a destination holding %d", size, perDest), ss)...)
		reqs[size] = medianOf(ss, func(s sample) float64 { return float64(gitRequests(s.requests)) })
		last = ss
	}
	if len(sizes) == 0 {
		return rows, nil
	}
	big := sizes[len(sizes)-1]
	wall := medianOf(last, wallOf)
	r := newRow("", fmt.Sprintf("drain of %d workloads, %d-workload store", perDest, big), "ms", []float64{wall})
	rows = append(rows, r.target("<= 30s", wall <= 30000))
	if len(sizes) > 1 {
		small := sizes[0]
		r := newRow("", fmt.Sprintf("drain requests: %d-workload store / %d-workload store", big, small), "x", []float64{reqs[big] / reqs[small]})
		rows = append(rows, r.target("same requests (grow with the workloads moved, not the store)", reqs[big] <= reqs[small]+2))
	}
	return rows, nil
}

// measureArgs runs the binary once with args in dir, once the servers are
// idle, through the RSS wrapper and the counting proxy cnt counts; it
// returns the measure and the binary's stdout.
func (b *bench) measureArgs(ctx context.Context, dir string, cnt *counter, args ...string) (sample, string, error) {
	self, err := os.Executable()
	if err != nil {
		return sample{}, "", err
	}
	rssOut := filepath.Join(b.work, "rss.out")
	os.Remove(rssOut)
	b.quiesce()
	cnt.reset()
	t0, _ := serverTicks()
	p, err := run(ctx, dir, append(os.Environ(), "RENDER_BENCH_RSS_OUT="+rssOut), self, append([]string{rssWrapperArg, b.bin}, args...)...)
	t1, _ := serverTicks()
	if err == nil && p.Code != 0 {
		err = fmt.Errorf("render %s exited %d: %s", args[0], p.Code, b.redact(lastLines(strings.TrimSpace(p.Stderr), 10)))
	}
	if err != nil {
		return sample{}, "", err
	}
	var kb int64
	if data, err := os.ReadFile(rssOut); err == nil {
		fmt.Sscan(string(data), &kb)
	}
	s := sample{wall: ms(p.Wall), cpu: ms(p.CPU), server: float64(t1-t0) * 10, rss: float64(kb) / 1024, requests: cnt.take()}
	if m := fetchedLine.FindStringSubmatch(p.Stderr); m != nil {
		s.fetched = atof(m[2]) / 1024
		s.partial = m[3] == "true"
	}
	return s, p.Stdout, nil
}
