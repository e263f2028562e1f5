package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/render-dev/render/internal/engine"
)

// Scenario 2: a one-file change into repositories that already hold 0,
// 2,000 and 20,000 files of other workloads, one-shot (a fresh process,
// which clones the repository shallow) and in watch mode (one Engine kept
// in this process, rendering again after each change, as `render --watch`
// does).
//
// The other workloads are real ones: promise workflows of 500 documents
// each, rendered by render into a local repository and pushed to Gitea,
// so the repository also holds their records. The measured workload has 50
// documents; each run rewrites one of them.
func repoSize(ctx context.Context, b *bench) ([]*Row, error) {
	const perWorkload = 500
	sizes := []int{0, 2000, 20000}
	if b.quick {
		sizes = []int{0, 2000}
	}
	root := filepath.Join(b.work, "size")
	seed := filepath.Join(root, "seed.git")
	seedPlat := localGitStore("gitea", seed) + destinations(1, gitRef("gitea"))
	seeded := 0
	var rows []*Row
	watch, watchCPU := map[int]float64{}, map[int]float64{}
	for _, size := range sizes {
		// Grow the local seed repository to size files, then push it.
		for seeded < size {
			w, err := newWorkflow(filepath.Join(root, "others"), fmt.Sprintf("other-%03d", seeded/perWorkload), perWorkload, seedPlat)
			if err != nil {
				return rows, err
			}
			if _, err := b.render(ctx, w); err != nil {
				return rows, fmt.Errorf("seeding: %w", err)
			}
			os.RemoveAll(w.dir)
			seeded += perWorkload
		}
		r, err := b.createRepo(fmt.Sprintf("size-%d", size), false)
		if err != nil {
			return rows, err
		}
		if size > 0 {
			t0 := time.Now()
			if err := b.git(ctx, "", "--git-dir", seed, "push", "-q", b.authURL(r.CloneURL), "main:main"); err != nil {
				return rows, err
			}
			b.log("repository size %d: seeded and pushed (push took %v)", size, time.Since(t0).Round(time.Millisecond))
		}
		plat := b.gitStore("gitea", r.CloneURL) + destinations(1, gitRef("gitea"))
		w, err := newWorkflow(filepath.Join(root, fmt.Sprint(size)), "sizebench", 50, plat)
		if err != nil {
			return rows, err
		}
		if _, err := b.render(ctx, w); err != nil { // the workload's first render
			return rows, err
		}
		version := 1
		change := func() error {
			version++
			return w.writeDoc(version%w.docs, fmt.Sprintf("v%d", version))
		}

		var oneShot, kept, oneShotCPU, keptCPU []float64
		for range b.runs {
			if err := change(); err != nil {
				return rows, err
			}
			b.quiesce()
			p, err := b.render(ctx, w)
			if err != nil {
				return rows, err
			}
			oneShot = append(oneShot, ms(p.Wall))
			oneShotCPU = append(oneShotCPU, ms(p.CPU))
		}

		eng := engine.New(engine.Options{
			OutputDir: w.output(), MetadataDir: filepath.Join(w.dir, "metadata"), InputDir: filepath.Join(w.dir, "input"),
			Platform: []string{w.platform}, Getenv: getenv(renderEnv(w.promise)),
			RetryDeadline: 2 * time.Minute, Version: "bench",
		})
		if _, err := renderOnce(ctx, eng, false); err != nil { // warm: the first render clones
			eng.Close()
			return rows, err
		}
		for range b.runs {
			if err := change(); err != nil {
				eng.Close()
				return rows, err
			}
			b.quiesce()
			c0 := selfCPU()
			d, err := renderOnce(ctx, eng, true)
			if err != nil {
				eng.Close()
				return rows, err
			}
			kept = append(kept, ms(d))
			keptCPU = append(keptCPU, ms(selfCPU()-c0))
		}
		eng.Close()
		b.log("repository size %d: one-shot median %.0fms, watch median %.0fms", size, median(oneShot), median(kept))
		rows = append(rows,
			newRow("", fmt.Sprintf("%d files: one-shot (binary)", size), "ms", oneShot),
			newRow("", fmt.Sprintf("%d files: one-shot, render's CPU", size), "ms", oneShotCPU),
			newRow("", fmt.Sprintf("%d files: watch (kept Engine)", size), "ms", kept),
			newRow("", fmt.Sprintf("%d files: watch, render's CPU", size), "ms", keptCPU))
		watch[size] = median(kept)
		watchCPU[size] = median(keptCPU)
	}
	last := sizes[len(sizes)-1]
	ratio := watch[last] / watch[0]
	r := newRow("", fmt.Sprintf("watch: %d files / empty", last), "x", []float64{ratio})
	r.Note = "ratio of the medians of the watch-mode rows (wall time); each render starts once the servers are idle (see quiesce)"
	cr := newRow("", fmt.Sprintf("watch, render's CPU: %d files / empty", last), "x", []float64{watchCPU[last] / watchCPU[0]})
	rows = append(rows, r.target("<= 1.5x", ratio <= 1.5), cr)
	return rows, nil
}

// getenv looks variables up in an environment list.
func getenv(envv []string) func(string) string {
	m := map[string]string{}
	for _, kv := range envv {
		if k, v, ok := cutEq(kv); ok {
			m[k] = v
		}
	}
	return func(k string) string { return m[k] }
}

func cutEq(kv string) (string, string, bool) {
	for i := range len(kv) {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return "", "", false
}

// renderOnce runs one render on a kept Engine and checks it landed (and,
// with wantCommit, that it wrote).
func renderOnce(ctx context.Context, eng *engine.Engine, wantCommit bool) (time.Duration, error) {
	t0 := time.Now()
	rep, err := eng.Render(ctx)
	d := time.Since(t0)
	if err != nil {
		return d, err
	}
	for _, s := range rep.Stores {
		if s.Err != nil {
			return d, s.Err
		}
		if wantCommit && !s.Result.Updated {
			return d, fmt.Errorf("%s: the change was not written", s.Name)
		}
	}
	return d, nil
}
