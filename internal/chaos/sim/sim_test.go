package sim

import (
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/render-dev/render/internal/chaos"
)

var (
	flagSeeds    = flag.Int("seeds", 0, "run this many seeds per store, from -first (0: the short campaign's count)")
	flagFirst    = flag.Uint64("first", 1, "the first seed")
	flagSeed     = flag.Uint64("seed", 0, "replay this one seed (and shrink it if it fails)")
	flagStore    = flag.String("store", "", "only this store: git-http, git-ssh, s3 or oci")
	flagDuration = flag.Duration("duration", 0, "stop starting trials after this long, per store (0: no limit)")
	flagParallel = flag.Int("parallel", 4, "trials at a time, per store")
	flagWriters  = flag.Int("max-writers", 64, "the most writers a trial draws")
	flagVerbose  = flag.Bool("trials", false, "log every trial")
)

// shortTrials is how many trials per store `make test` runs.
const shortTrials = 100

// TestSimCampaign runs the in-process fault campaign: for each store, the
// trials of a range of seeds against its real server, render's engine in
// this process, each request meeting the fault its seed draws.
func TestSimCampaign(t *testing.T) {
	var stats []*Stats
	for _, kind := range chaos.Kinds {
		if *flagStore != "" && string(kind) != *flagStore {
			continue
		}
		st := &Stats{Kind: kind}
		stats = append(stats, st)
		t.Run(string(kind), func(t *testing.T) {
			c := NewCampaign(t, kind, Size{MaxWriters: *flagWriters}, DefaultOptions)
			n := shortTrials
			if *flagSeeds > 0 {
				n = *flagSeeds
			}
			var seeds []uint64
			if *flagSeed != 0 {
				seeds = []uint64{*flagSeed}
			} else {
				for i := range n {
					seeds = append(seeds, *flagFirst+uint64(i))
				}
			}
			var deadline time.Time
			if *flagDuration > 0 {
				deadline = time.Now().Add(*flagDuration)
			}
			began := time.Now()
			c.RunSeeds(t, seeds, *flagParallel, deadline, func(tr *Trial) {
				st.add(tr)
				if tr.Failed() {
					t.Errorf("%s seed %d: %d violations\n%s", kind, tr.Schedule.Seed, len(tr.Violations), tr.Report())
				} else if *flagVerbose {
					t.Logf("%s seed %d: ok (%d writers, %d renders, %d requests, %v, virtual %v, %d jumps)", kind, tr.Schedule.Seed, len(tr.Schedule.Writers), len(tr.Runs), tr.Requests, tr.Took.Round(time.Millisecond), tr.Virtual.Round(time.Millisecond), tr.Jumps)
				}
				for _, n := range tr.Notes {
					t.Logf("%s seed %d: %s", kind, tr.Schedule.Seed, n)
				}
			})
			st.Took = time.Since(began)
		})
	}
	fmt.Print(Table(stats))
}
