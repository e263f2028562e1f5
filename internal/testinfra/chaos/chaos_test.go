package chaos

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/render-dev/render/internal/testinfra/testenv"
)

var (
	flagSeeds    = flag.Int("seeds", 0, "run this many seeds per store, from -first (the long campaign); 0: the short list")
	flagFirst    = flag.Uint64("first", 1, "the first seed of -seeds")
	flagSeed     = flag.Uint64("seed", 0, "replay this one seed")
	flagStore    = flag.String("store", "", "only this store: git-http, git-ssh, s3 or oci")
	flagDuration = flag.Duration("duration", 0, "stop starting trials after this long, per store (0: no limit)")
)

// shortSeeds are the seeds `make test` runs per store. Each found a bug
// once, or covers a kind of fault the others do not.
var shortSeeds = map[Kind][]uint64{
	GitHTTP: {1, 2, 3},
	GitSSH:  {1, 2, 3},
	S3:      {1, 2, 3, 80, 70015}, // 80: a removal killed half-way left a record that looked committed; 70015: a delete whose response was cut
	OCI:     {1, 2, 3},
}

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveRenderBinary()
	os.Exit(code)
}

// TestCampaign runs the fault campaign: for each store, the trials of a
// list of seeds against its real server behind a fault proxy, each checked
// by the checker. A failing trial prints its seed, its schedule, what each
// render did and said, and every violation.
func TestCampaign(t *testing.T) {
	var stats []*Stats
	for _, kind := range Kinds {
		if *flagStore != "" && string(kind) != *flagStore {
			continue
		}
		st := &Stats{Kind: kind}
		stats = append(stats, st)
		t.Run(string(kind), func(t *testing.T) {
			c := NewCampaign(t, kind, testenv.RenderBinary(t))
			seeds := shortSeeds[kind]
			switch {
			case *flagSeed != 0:
				seeds = []uint64{*flagSeed}
			case *flagSeeds > 0:
				seeds = nil
				for i := range *flagSeeds {
					seeds = append(seeds, *flagFirst+uint64(i))
				}
			}
			began := time.Now()
			for n, seed := range seeds {
				if *flagDuration > 0 && time.Since(began) > *flagDuration {
					t.Logf("%s: -duration %v reached after %d trials", kind, *flagDuration, n)
					break
				}
				tr := c.Run(t, seed)
				st.add(tr)
				if tr.Failed() {
					t.Errorf("%s seed %d: %d violations\n%s", kind, seed, len(tr.Violations), tr.Report())
				} else if testing.Verbose() {
					t.Logf("%s seed %d: ok (%d renders, %v)", kind, seed, len(tr.Runs), tr.Took.Round(time.Millisecond))
				}
			}
		})
	}
	fmt.Print(Table(stats))
}
