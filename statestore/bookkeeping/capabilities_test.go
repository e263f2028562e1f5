package bookkeeping

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/render-dev/render/statestore"
)

// capSnap is a snapshot of files that declares whichever of Indexed and
// SummaryLoad a test gives it, and records what it is asked.
type capSnap struct {
	files       map[string][]byte
	indexed     func() (bool, error)
	summaryLoad func(dests []string) (map[string]map[string]int, []string, error)
	lists       []string
	compares    []string
}

func (s *capSnap) Compare(p string, data []byte) (bool, bool, error) {
	s.compares = append(s.compares, p)
	b, ok := s.files[p]
	return ok, ok && string(b) == string(data), nil
}

func (s *capSnap) ReadFile(p string) ([]byte, error) {
	if b, ok := s.files[p]; ok {
		return b, nil
	}
	return nil, fmt.Errorf("%s: %w", p, statestore.ErrNotFound)
}

func (s *capSnap) List(dir string) ([]string, error) {
	s.lists = append(s.lists, dir)
	var out []string
	for p := range s.files {
		if strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out, nil
}

func (s *capSnap) Capabilities() statestore.SnapshotCapabilities {
	return statestore.SnapshotCapabilities{Indexed: s.indexed, SummaryLoad: s.summaryLoad}
}

// placedSnap holds the records and index entries of three resources: two
// gold ones on east (r/1, r/2), one without a flavour on west (r/3).
func placedSnap() *capSnap {
	s := &capSnap{files: map[string][]byte{IndexMarker: IndexMarkerData()}}
	for _, r := range []struct{ workload, flavour, dest string }{{"r/1", "gold", "east"}, {"r/2", "gold", "east"}, {"r/3", "", "west"}} {
		rec := &statestore.Record{Workload: r.workload, Type: "resource", Flavour: r.flavour,
			Placements: []statestore.Placement{{Group: ".", Destinations: []string{r.dest}}}}
		s.files[statestore.RecordPath(r.workload)] = rec.Encode()
		for p, data := range IndexPaths(rec) {
			s.files[p] = data
		}
	}
	return s
}

// A snapshot that declares no SummaryLoad has every destination's entries
// listed; one that declares it is asked first, and only the destinations
// it cannot answer for are listed. The excluded workload's entries are
// left out either way.
func TestReadLoadUsesDeclaredSummary(t *testing.T) {
	dests := []string{"east", "west", "north"}

	plain := placedSnap()
	l, err := ReadLoad(plain, dests, "r/1")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(l.Total, l.ByFlavour) != "map[east:1 west:1] map[gold:map[east:1]]" {
		t.Fatalf("load from the entries: %v %v", l.Total, l.ByFlavour)
	}
	if want := LoadPaths(dests); !reflect.DeepEqual(plain.lists, want) {
		t.Fatalf("listed %v, want every destination's entries %v", plain.lists, want)
	}

	// The summary's counts differ from the entries on purpose: the load
	// must be the summary's where it answers.
	summarised := placedSnap()
	var asked []string
	summarised.summaryLoad = func(ds []string) (map[string]map[string]int, []string, error) {
		asked = append(asked, ds...)
		return map[string]map[string]int{"east": {"gold": 5, "_": 1}}, []string{"west"}, nil
	}
	l, err = ReadLoad(summarised, dests, "r/1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(asked, dests) {
		t.Fatalf("SummaryLoad asked for %v, want %v", asked, dests)
	}
	// east: 5 gold less r/1's own, and 1 without a flavour; west listed.
	if fmt.Sprint(l.Total, l.ByFlavour) != "map[east:5 west:1] map[gold:map[east:4]]" {
		t.Fatalf("load with a summary: %v %v", l.Total, l.ByFlavour)
	}
	if want := LoadPaths([]string{"west"}); !reflect.DeepEqual(summarised.lists, want) {
		t.Fatalf("listed %v, want only what the summary cannot answer for %v", summarised.lists, want)
	}

	failing := placedSnap()
	boom := errors.New("summary unreadable")
	failing.summaryLoad = func([]string) (map[string]map[string]int, []string, error) { return nil, nil, boom }
	if _, err := ReadLoad(failing, dests, ""); !errors.Is(err, boom) {
		t.Fatalf("ReadLoad with a failing summary: %v, want %v", err, boom)
	}
}

// A snapshot that declares Indexed answers whether its store has the
// index; for any other, the marker is looked up.
func TestIndexedUsesDeclaredAnswer(t *testing.T) {
	for _, marker := range []bool{true, false} {
		s := placedSnap()
		if !marker {
			delete(s.files, IndexMarker)
		}
		got, err := Indexed(s)
		if err != nil || got != marker {
			t.Fatalf("marker %v: Indexed %v, %v", marker, got, err)
		}
		if !reflect.DeepEqual(s.compares, []string{IndexMarker}) {
			t.Fatalf("marker %v: looked up %v, want the marker", marker, s.compares)
		}

		// The declared answer is the opposite of the marker's: it wins,
		// and the marker is not looked up.
		s.compares = nil
		s.indexed = func() (bool, error) { return !marker, nil }
		if got, err := Indexed(s); err != nil || got != !marker {
			t.Fatalf("marker %v, declared %v: Indexed %v, %v", marker, !marker, got, err)
		}
		if len(s.compares) > 0 {
			t.Fatalf("a snapshot that declares Indexed had %v looked up", s.compares)
		}
	}
	s := placedSnap()
	boom := errors.New("listing failed")
	s.indexed = func() (bool, error) { return false, boom }
	if _, err := Indexed(s); !errors.Is(err, boom) {
		t.Fatalf("Indexed with a failing answer: %v, want %v", err, boom)
	}
}
