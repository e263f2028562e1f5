package sim

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/render-dev/render/internal/testinfra/chaos"
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
	// spent during the store's campaign; ServerCPU the campaign's own
	// server processes' (MinIO, the registry).
	CPU, ServerCPU time.Duration
	FailedSeeds    []uint64
	// Phases sums the trials' real time by phase (Trial.Phases), and
	// Real by what their writers did (Trial.Real); Requests counts their
	// requests.
	Phases   map[string]time.Duration
	Real     RealTimes
	Requests int
	mu       sync.Mutex
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
	if s.Phases == nil {
		s.Phases = map[string]time.Duration{}
	}
	for _, p := range tr.Phases {
		s.Phases[p.Name] += p.Took
	}
	s.Real.Waiting += tr.Real.Waiting
	s.Real.Idle += tr.Real.Idle
	s.Real.Busy += tr.Real.Busy
	s.Requests += tr.Requests
	if tr.Failed() {
		s.Failed++
		s.Violations += len(tr.Violations)
		s.FailedSeeds = append(s.FailedSeeds, tr.Schedule.Seed)
	}
}

// phaseNames are a trial's phases (Trial.Phases), in order.
var phaseNames = []string{"store", "setup", "foreign", "writers", "final", "check"}

// faultColumns are the table's columns of faults, in order.
var faultColumns = []string{string(Refuse), string(Lost), string(Cut), string(Latency), string(Stall), "pause", "stop", string(Death), "restart", "foreign", "short deadline"}

// Table prints stats as the campaign's table.
func Table(stats []*Stats) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-9s %7s %8s", "store", "trials", "writers")
	for _, k := range faultColumns {
		fmt.Fprintf(&b, " %*s", max(len(k), 6), k)
	}
	fmt.Fprintf(&b, " %10s %8s %9s %9s %9s %10s\n", "violations", "failed", "virtual", "time", "cpu", "server cpu")
	for _, s := range stats {
		fmt.Fprintf(&b, "%-9s %7d %8d", s.Kind, s.Trials, s.Writers)
		for _, k := range faultColumns {
			fmt.Fprintf(&b, " %*d", max(len(k), 6), s.Injected[k])
		}
		fmt.Fprintf(&b, " %10d %8d %9s %9s %9s %10s\n", s.Violations, s.Failed, s.Virtual.Round(time.Minute), s.Took.Round(time.Second), s.CPU.Round(time.Second), s.ServerCPU.Round(time.Second))
	}
	for _, s := range stats {
		if s.Trials == 0 {
			continue
		}
		n := time.Duration(s.Trials)
		fmt.Fprintf(&b, "%s: per trial %d requests, real time", s.Kind, s.Requests/s.Trials)
		for _, p := range phaseNames {
			if d, ok := s.Phases[p]; ok {
				fmt.Fprintf(&b, " %s %v", p, (d / n).Round(time.Millisecond))
			}
		}
		if all := s.Real.Waiting + s.Real.Idle + s.Real.Busy; all > 0 {
			fmt.Fprintf(&b, "; a request in flight %d%%, all writers asleep %d%%, computing %d%%",
				100*s.Real.Waiting/all, 100*s.Real.Idle/all, 100*s.Real.Busy/all)
		}
		b.WriteByte('\n')
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
	// A trial that draws a restart runs alone on a second server of the
	// same kind, started when the first such trial comes, so that the
	// other trials never meet a restart they did not draw, and never wait
	// for one.
	startMu    sync.Mutex // held while the second server starts
	restartSrv server
	restartMu  sync.Mutex // held by the trial running on it
	t          testing.TB
	// Dir holds the campaign's private servers' folders.
	Dir string
}

// NewCampaign starts kind's server for t.
func NewCampaign(t testing.TB, kind chaos.Kind, size Size, opts Options) *Campaign {
	t.Helper()
	installGit()
	// The test's temporary folders (the private servers' among them) are
	// under one folder.
	return &Campaign{Kind: kind, Size: size, Opts: opts, srv: newServer(t, kind), t: t, Dir: filepath.Dir(t.TempDir())}
}

// Generate draws the schedule of seed for the campaign's store.
func (c *Campaign) Generate(seed uint64) Schedule { return Generate(seed, c.Kind, c.Size) }

// restarter is the server of the trials that restart theirs, started on
// first use. Starting it may fail the test: call it first from the test's
// goroutine (RunAll does).
func (c *Campaign) restarter() server {
	c.startMu.Lock()
	defer c.startMu.Unlock()
	if c.restartSrv == nil {
		c.restartSrv = newServer(c.t, c.Kind)
	}
	return c.restartSrv
}

// Run runs one schedule.
func (c *Campaign) Run(t testing.TB, s Schedule) *Trial {
	if s.Restart != nil {
		srv := c.restarter()
		c.restartMu.Lock()
		defer c.restartMu.Unlock()
		return runTrial(t, srv, s, c.Opts)
	}
	return runTrial(t, c.srv, s, c.Opts)
}

// RunAll runs schedules, parallel at a time, in order, until every one
// ran or the deadline (when not zero) is near: it starts no trial once the
// mean real time of the trials so far would take it past the deadline, so
// that the last trials end about then. Each trial goes to done as it ends.
func (c *Campaign) RunAll(t testing.TB, scheds []Schedule, parallel int, deadline time.Time, done func(*Trial)) {
	free := make(chan struct{}, max(parallel, 1))
	var mu sync.Mutex
	var took time.Duration
	ran := 0
	var wg sync.WaitGroup
	for _, s := range scheds {
		free <- struct{}{}
		if !deadline.IsZero() {
			mu.Lock()
			mean := time.Duration(0)
			if ran > 0 {
				mean = took / time.Duration(ran)
			}
			mu.Unlock()
			if time.Now().Add(mean).After(deadline) {
				break
			}
		}
		if s.Restart != nil {
			c.restarter() // from this goroutine, the test's
		}
		wg.Go(func() {
			defer func() { <-free }()
			tr := c.Run(t, s)
			mu.Lock()
			took += tr.Took
			ran++
			mu.Unlock()
			done(tr)
		})
	}
	wg.Wait()
}
