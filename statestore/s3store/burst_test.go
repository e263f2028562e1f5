package s3store

import (
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
	"github.com/render-dev/render/statestore/planner"
)

// putLog records every PUT: its path relative to the store and its
// response's status.
type putLog struct {
	base http.RoundTripper
	mu   sync.Mutex
	puts []loggedPut
}

type loggedPut struct {
	path   string
	status int
}

func (l *putLog) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.base.RoundTrip(r)
	if r.Method == http.MethodPut {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		_, rel, _ := strings.Cut(r.URL.Path, "/"+testPath+"/")
		l.mu.Lock()
		l.puts = append(l.puts, loggedPut{rel, status})
		l.mu.Unlock()
	}
	return resp, err
}

func (l *putLog) take() []loggedPut {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.puts
	l.puts = nil
	return out
}

// sharedPut reports whether p is an object every write of a destination
// makes sure of where it found none: Kratix's canaries and the load
// summaries' bases.
func sharedPut(p string) bool {
	if strings.HasSuffix(p, "/"+layout.CanaryDependencies) || strings.HasSuffix(p, "/"+layout.CanaryResources) {
		return true
	}
	for _, d := range loadDests {
		if p == bookkeeping.LedgerPath(d) {
			return true
		}
	}
	return false
}

// burstUpdate is what a render of resource name writes: its files on dest,
// Kratix's canaries of every destination (renderer.Plan.Canaries), and a
// view that read the update's paths and weighed the load of every
// candidate destination (the engine's placement), as a render's write is
// given.
func burstUpdate(t *testing.T, s *Store, name, dest string) (statestore.Update, error) {
	u := flavouredUpdate("team", name, dest, "", 1)
	u.Shared = map[string][]byte{}
	for _, d := range loadDests {
		maps.Copy(u.Shared, resourceUpdate("team", name, d, 1).Shared)
	}
	snap, err := s.Snapshot(testCtx(t))
	if err != nil {
		return u, err
	}
	statestore.Prefetch(snap, planner.UpdateHint(u))
	if _, err := bookkeeping.ReadLoad(snap, loadDests, u.Workload); err != nil {
		return u, err
	}
	u.View = snap
	return u, nil
}

// TestBurstPutsOnlyCreationsMore (issue 39): renders of different
// workloads at once make no more PUTs each than one after another, but
// for the objects of a destination every render makes sure of where it
// found none: Kratix's canaries (two per destination) and the load
// summaries' bases (one). Every render of a burst into fresh
// destinations looked before any of them wrote those, so each writes
// every one of them, If-None-Match: one PUT lands, the others are refused
// (412). Scenario 5's one-file requests on four destinations made 20.0
// PUTs per render at once against 8.75 one after another: 11.25 more, all
// of them these (8 canaries and 4 bases each, against once per bucket),
// none a renewal of an intent's lease. Into destinations that hold them,
// a burst makes exactly the PUTs of the same writes one after another.
// (The folds one write in eight makes after settling are left out: a
// fold may make a missing base too, which would make the counts depend
// on the writes' random nonces.)
func TestBurstPutsOnlyCreationsMore(t *testing.T) {
	m := testenv.MinIO(t)
	const writers = 12
	shared := 3 * len(loadDests) // two canaries and a base per destination
	type tally struct {
		own, records, shared int
		byPath               map[string][]int
	}
	count := func(what string, puts []loggedPut) tally {
		c := tally{byPath: map[string][]int{}}
		for _, p := range puts {
			c.byPath[p.path] = append(c.byPath[p.path], p.status)
			switch {
			case sharedPut(p.path):
				c.shared++
			case strings.HasPrefix(p.path, statestore.RecordsDir+"/"):
				// An intent, a renewal of its lease (a write slower than
				// leaseRenew), the commit.
				c.records++
			default:
				c.own++
			}
			if !sharedPut(p.path) && p.status != http.StatusOK {
				t.Errorf("%s: PUT %s: status %d, want only writes of the writes' own objects that land", what, p.path, p.status)
			}
		}
		if c.records < 2*writers {
			t.Errorf("%s: %d PUTs of records for %d writes, want at least an intent and a commit each", what, c.records, writers)
		}
		return c
	}
	// sharedOnce checks that each shared object was written by one PUT
	// that landed, and any others refused.
	sharedOnce := func(what string, c tally) {
		n := 0
		for p, sts := range c.byPath {
			if !sharedPut(p) {
				continue
			}
			n++
			if countOf(sts, http.StatusOK) != 1 || countOf(sts, http.StatusPreconditionFailed) != len(sts)-1 {
				t.Errorf("%s: %s written %v, want one PUT that lands, the others refused", what, p, sts)
			}
		}
		if n != shared {
			t.Errorf("%s: %d shared objects written, want %d", what, n, shared)
		}
	}
	// bucket is a bucket with the index marker, and no canary and no load
	// summary yet (the benchmark's holds a workload of 3,000 files too).
	bucket := func(name string) (Config, *putLog) {
		cfg := minioConfig(m, m.CreateBucket(t, name))
		if err := open(t, cfg).Seed(testCtx(t), nil); err != nil {
			t.Fatal(err)
		}
		log := &putLog{base: http.DefaultTransport}
		cfg.Transport = log
		return cfg, log
	}
	store := func(cfg Config) (*Store, error) {
		s, err := New(cfg)
		if err == nil {
			s.foldEvery = 1 << 30
		}
		return s, err
	}
	burst := func(cfg Config, prefix string) {
		atOnce(t, writers, "the writers", func(i int) error {
			s, err := store(cfg)
			if err != nil {
				return err
			}
			defer s.Close()
			u, err := burstUpdate(t, s, fmt.Sprintf("%s%02d", prefix, i), loadDests[i%len(loadDests)])
			if err != nil {
				return err
			}
			res, err := s.Apply(testCtx(t), u)
			if err == nil && res.Attempts != 1 {
				err = fmt.Errorf("%s: %d attempts, want 1", u.Workload, res.Attempts)
			}
			return err
		})
	}

	// One after another: each shared object is written once, by the
	// first write.
	scfg, slog := bucket("serial")
	for i := range writers {
		s, err := store(scfg)
		if err != nil {
			t.Fatal(err)
		}
		u, err := burstUpdate(t, s, fmt.Sprintf("s%02d", i), loadDests[i%len(loadDests)])
		if err != nil {
			t.Fatal(err)
		}
		applyOK(t, s, u)
		s.Close()
	}
	serial := count("one after another", slog.take())
	sharedOnce("one after another", serial)
	if serial.shared != shared {
		t.Errorf("one after another: %d PUTs of shared objects, want %d", serial.shared, shared)
	}

	// At once into fresh destinations: the same PUTs of the writes' own
	// objects; each shared object written by every writer that found it
	// missing, landing once.
	fcfg, flog := bucket("fresh")
	burst(fcfg, "f")
	fresh := count("at once", flog.take())
	sharedOnce("at once", fresh)
	if fresh.own != serial.own || fresh.shared > writers*shared {
		t.Errorf("at once: %d PUTs of the writes' own objects and %d of shared ones, want %d and at most %d",
			fresh.own, fresh.shared, serial.own, writers*shared)
	}

	// At once again, other workloads into the same destinations, which
	// now hold their canaries and summaries: the PUTs of the same writes
	// one after another.
	burst(fcfg, "g")
	again := count("at once into destinations that hold them", flog.take())
	if again.shared != 0 || again.own != serial.own {
		t.Errorf("at once into destinations that hold their canaries and summaries: %d PUTs of the writes' own objects and %d of shared ones, want %d and none",
			again.own, again.shared, serial.own)
	}
	per := func(c tally) string {
		return fmt.Sprintf("%.2f (own objects %.2f, records %.2f, canaries and bases %.2f)", float64(c.own+c.records+c.shared)/writers,
			float64(c.own)/writers, float64(c.records)/writers, float64(c.shared)/writers)
	}
	t.Logf("PUTs per write of %d: one after another %s; at once into fresh destinations %s; at once into destinations that hold them %s",
		writers, per(serial), per(fresh), per(again))
}

func countOf(xs []int, x int) int {
	n := 0
	for _, y := range xs {
		if y == x {
			n++
		}
	}
	return n
}
