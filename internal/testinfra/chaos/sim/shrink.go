package sim

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// Shrinking a failing trial. A trial's faults are drawn per request, so a
// failing seed replays with the same draws; its run also lists the faults
// that met a request (Trial.Met). Shrink pins exactly those, then drops
// writers and faults one at a time for as long as the trial still fails
// the same way, and returns the smallest schedule it found: what a
// regression test needs, and what a person reads first.

// rules are the kinds of violation a trial found ("rule 3", "bound", ...).
func rules(tr *Trial) map[string]bool {
	out := map[string]bool{}
	for _, v := range tr.Violations {
		k, _, _ := strings.Cut(v, ":")
		out[k] = true
	}
	return out
}

// Shrink shrinks the failing trial tr. Each candidate runs up to tries
// times; it still fails when one run finds a violation of a kind tr found.
// It returns the smallest failing schedule and its trial, or tr's own when
// even the pinned replay passes.
func (c *Campaign) Shrink(t testing.TB, tr *Trial, tries int, logf func(string, ...any)) (Schedule, *Trial) {
	want := rules(tr)
	fails := func(s Schedule) *Trial {
		for range max(tries, 1) {
			got := c.Run(t, s)
			for k := range rules(got) {
				if want[k] {
					return got
				}
			}
		}
		return nil
	}
	s := tr.Schedule
	s.Pinned = map[int]map[int]Fault{}
	for w, m := range tr.Met {
		s.Pinned[w] = maps.Clone(m)
	}
	best := fails(s)
	if best == nil {
		logf("shrink: the replay with the faults pinned passed: the failure depends on more than the faults (timing)")
		return tr.Schedule, tr
	}
	// Writers, last first: a later writer is more often the extra one.
	for i := len(s.Writers) - 1; i >= 0 && len(s.Writers) > 1; i-- {
		w := s.Writers[i]
		cand := s
		cand.Writers = slices.Delete(slices.Clone(s.Writers), i, i+1)
		for j := range cand.Writers {
			if cand.Writers[j].Repeat == w.ID {
				cand.Writers[j].Repeat = -1
			}
		}
		cand.Pinned = maps.Clone(s.Pinned)
		delete(cand.Pinned, w.ID)
		if got := fails(cand); got != nil {
			s, best = cand, got
			logf("shrink: without writer %d: still fails (%d writers left)", w.ID, len(s.Writers))
		}
	}
	// Then the faults, one at a time.
	for _, w := range sortedKeys(s.Pinned) {
		for _, n := range sortedKeys(s.Pinned[w]) {
			cand := s
			cand.Pinned = maps.Clone(s.Pinned)
			cand.Pinned[w] = maps.Clone(s.Pinned[w])
			delete(cand.Pinned[w], n)
			if got := fails(cand); got != nil {
				s, best = cand, got
				logf("shrink: without writer %d's fault at request %d: still fails", w, n)
			}
		}
	}
	for _, drop := range []func(*Schedule) bool{
		func(s *Schedule) bool { r := s.Restart != nil; s.Restart = nil; return r },
		func(s *Schedule) bool { f := s.Final; s.Final = false; return f },
	} {
		cand := s
		if drop(&cand) {
			if got := fails(cand); got != nil {
				s, best = cand, got
			}
		}
	}
	return s, best
}
