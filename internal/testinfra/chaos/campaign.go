package chaos

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Stats sums the trials of one store.
type Stats struct {
	Kind        Kind
	Trials      int
	Failed      int // trials with a violation
	Violations  int
	Renders     int
	Injected    map[string]int
	Took        time.Duration
	FailedSeeds []uint64
}

func (s *Stats) add(tr *Trial) {
	s.Trials++
	s.Renders += len(tr.Runs)
	if s.Injected == nil {
		s.Injected = map[string]int{}
	}
	for k, n := range tr.Injected {
		s.Injected[k] += n
	}
	if tr.Failed() {
		s.Failed++
		s.Violations += len(tr.Violations)
		s.FailedSeeds = append(s.FailedSeeds, tr.Schedule.Seed)
	}
	s.Took += tr.Took
}

// faultKinds are the columns of the table, in order.
var faultKinds = []string{"reset_peer", "limit_data", "latency", "bandwidth", "timeout", string(Restart), "SIGKILL", "SIGTERM", "SIGSTOP", "busy", "short deadline"}

// Table prints stats as the campaign's table.
func Table(stats []*Stats) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-9s %7s %8s", "store", "trials", "renders")
	for _, k := range faultKinds {
		fmt.Fprintf(&b, " %*s", max(len(k), 6), k)
	}
	fmt.Fprintf(&b, " %10s %8s %9s\n", "violations", "failed", "time")
	for _, s := range stats {
		fmt.Fprintf(&b, "%-9s %7d %8d", s.Kind, s.Trials, s.Renders)
		for _, k := range faultKinds {
			fmt.Fprintf(&b, " %*d", max(len(k), 6), s.Injected[k])
		}
		fmt.Fprintf(&b, " %10d %8d %9s\n", s.Violations, s.Failed, s.Took.Round(time.Second))
	}
	return b.String()
}

// Campaign is the trials of one store against one server.
type Campaign struct {
	Kind Kind
	srv  server
	bin  string
}

// NewCampaign starts kind's server and proxy for t; bin is the render
// binary the trials run.
func NewCampaign(t testing.TB, kind Kind, bin string) *Campaign {
	t.Helper()
	c := &Campaign{Kind: kind, srv: newServer(t, kind), bin: bin}
	t.Cleanup(c.srv.close)
	return c
}

// Run runs the trial of seed.
func (c *Campaign) Run(t testing.TB, seed uint64) *Trial {
	t.Helper()
	return runTrial(t, c.srv, c.bin, Generate(seed, c.Kind))
}
