package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"
)

// Scenario 6: peak RSS of the render binary (the kernel's ru_maxrss of the
// child process, read by a small wrapper process: see rssWrapperArg) writing an output of 10,000 documents (one file each, about
// 1 KiB) to one destination: into a new Gitea repository (cloned into
// memory and pushed), a new MinIO bucket, and a local bare repository.
func memory(ctx context.Context, b *bench) ([]*Row, error) {
	docs := 10000
	if b.quick {
		docs = 2000
	}
	var rows []*Row
	for _, kind := range []string{"gitea", "minio", "local"} {
		var rss, wall []float64
		var w *workflow
		for run := range min(b.runs, 3) {
			var plat string
			switch kind {
			case "gitea":
				r, err := b.createRepo("memory", false)
				if err != nil {
					return rows, err
				}
				plat = b.gitStore("s", r.CloneURL) + destinations(1, gitRef("s"))
			case "minio":
				bucket, err := b.createBucket(ctx, "memory")
				if err != nil {
					return rows, err
				}
				plat = b.bucketStore("s", bucket) + destinations(1, bucketRef("s"))
			case "local":
				plat = localGitStore("s", filepath.Join(b.work, "memory", fmt.Sprintf("local-%d.git", run))) + destinations(1, gitRef("s"))
			}
			var err error
			if w == nil {
				if w, err = newWorkflow(filepath.Join(b.work, "memory", kind), "memory", docs, plat); err != nil {
					return rows, err
				}
			} else if err := writeAtomic(w.platform, []byte(plat)); err != nil {
				return rows, err
			}
			b.quiesce()
			p, err := b.renderRSS(ctx, w)
			if err != nil {
				return rows, err
			}
			rss = append(rss, float64(p.MaxRSSKB)/1024)
			wall = append(wall, ms(p.Wall))
			b.log("memory %s run %d: peak RSS %.0f MB, %v", kind, run+1, float64(p.MaxRSSKB)/1024, p.Wall.Round(time.Millisecond))
		}
		r := newRow("", fmt.Sprintf("peak RSS, %d documents -> %s", docs, kind), "MB", rss)
		rows = append(rows, r.target("<= 150MB", r.Max <= 150),
			newRow("", fmt.Sprintf("time, %d documents -> %s", docs, kind), "ms", wall))
	}
	return rows, nil
}
