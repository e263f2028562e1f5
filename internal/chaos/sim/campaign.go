package sim

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/render-dev/render/internal/chaos"
)

// Stats sums the trials of one store.
type Stats struct {
	Kind       chaos.Kind
	Trials     int
	Failed     int // trials with a violation
	Violations int
	Writers    int
	Injected   map[string]int
	Virtual    time.Duration // the trials' virtual time, summed
	Took       time.Duration // wall time of the store's campaign
	// CPU is the processor time this process and its children (git)
	// spent during the store's campaign; the servers' own (MinIO, the
	// registry) is not in it.
	CPU         time.Duration
	FailedSeeds []uint64
	mu          sync.Mutex
}

func (s *Stats) add(tr *Trial) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Trials++
	s.Writers += len(tr.Schedule.Writers)
	if s.Injected == nil {
		s.Injected = map[string]int{}
	}
	for k, n := range tr.Injected {
		s.Injected[k] += n
	}
	s.Virtual += tr.Virtual
	if tr.Failed() {
		s.Failed++
		s.Violations += len(tr.Violations)
		s.FailedSeeds = append(s.FailedSeeds, tr.Schedule.Seed)
	}
}

// faultColumns are the table's columns of faults, in order.
var faultColumns = []string{string(Refuse), string(Lost), string(Cut), string(Latency), string(Stall), "pause", "stop", string(Death), "restart", "foreign", "short deadline"}

// Table prints stats as the campaign's table.
func Table(stats []*Stats) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-9s %7s %8s", "store", "trials", "writers")
	for _, k := range faultColumns {
		fmt.Fprintf(&b, " %*s", max(len(k), 6), k)
	}
	fmt.Fprintf(&b, " %10s %8s %9s %9s %9s\n", "violations", "failed", "virtual", "time", "cpu")
	for _, s := range stats {
		fmt.Fprintf(&b, "%-9s %7d %8d", s.Kind, s.Trials, s.Writers)
		for _, k := range faultColumns {
			fmt.Fprintf(&b, " %*d", max(len(k), 6), s.Injected[k])
		}
		fmt.Fprintf(&b, " %10d %8d %9s %9s %9s\n", s.Violations, s.Failed, s.Virtual.Round(time.Minute), s.Took.Round(time.Second), s.CPU.Round(time.Second))
	}
	for _, s := range stats {
		if len(s.FailedSeeds) > 0 {
			slices.Sort(s.FailedSeeds)
			fmt.Fprintf(&b, "%s: failed seeds %v\n", s.Kind, s.FailedSeeds)
		}
	}
	return b.String()
}

// Campaign is the trials of one store against one server.
type Campaign struct {
	Kind chaos.Kind
	Size Size
	Opts Options
	srv  server
	// alone is held for writing by a trial that restarts the server, and
	// for reading by every other.
	alone sync.RWMutex
}

// NewCampaign starts kind's server for t.
func NewCampaign(t testing.TB, kind chaos.Kind, size Size, opts Options) *Campaign {
	t.Helper()
	installGit()
	return &Campaign{Kind: kind, Size: size, Opts: opts, srv: newServer(t, kind)}
}

// Generate draws the schedule of seed for the campaign's store.
func (c *Campaign) Generate(seed uint64) Schedule { return Generate(seed, c.Kind, c.Size) }

// Run runs one schedule.
func (c *Campaign) Run(t testing.TB, s Schedule) *Trial {
	if s.Restart != nil {
		c.alone.Lock()
		defer c.alone.Unlock()
	} else {
		c.alone.RLock()
		defer c.alone.RUnlock()
	}
	return runTrial(t, c.srv, s, c.Opts)
}

// RunAll runs schedules, parallel at a time, until every one ran or the
// deadline (when not zero) passed; each trial goes to done as it ends.
func (c *Campaign) RunAll(t testing.TB, scheds []Schedule, parallel int, deadline time.Time, done func(*Trial)) {
	next := make(chan Schedule)
	var wg sync.WaitGroup
	for range max(parallel, 1) {
		wg.Go(func() {
			for s := range next {
				done(c.Run(t, s))
			}
		})
	}
	for _, s := range scheds {
		if !deadline.IsZero() && time.Now().After(deadline) {
			break
		}
		next <- s
	}
	close(next)
	wg.Wait()
}
