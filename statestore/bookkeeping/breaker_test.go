package bookkeeping_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
)

func TestCountDeletionsAndCheck(t *testing.T) {
	idx := bookkeeping.FileIndex{
		"a": {"eu/resources/ns/p/a/x/5058f/1.yaml", "eu/resources/ns/p/a/x/5058f/2.yaml", statestore.AggregatePath("agg/all.yaml", "a"), ".render/objects/ab/cd.json"},
		"b": {"eu/resources/ns/p/b/x/5058f/1.yaml", "gone/dependencies/p/i/5058f/op.yaml", "flat/other/f.yaml"},
	}
	dests := []string{"eu", "agg", "e"}
	tests := []struct {
		name    string
		updates []statestore.Update
		policy  bookkeeping.BreakerPolicy
		counts  string
		trips   []string
	}{
		{
			name:    "nothing deleted",
			updates: []statestore.Update{{Workload: "a", Files: files("eu/resources/ns/p/a/x/5058f/1.yaml", "eu/resources/ns/p/a/x/5058f/2.yaml"), Aggregates: agg("agg/all.yaml")}},
			counts:  "agg 1/0/1, eu 3/0/3, flat/other 1/0/1, gone 1/0/1; store 6/0/6",
		},
		{
			name:    "a leaves eu, b keeps it",
			updates: []statestore.Update{{Workload: "a"}},
			counts:  "agg 1/1/0, eu 3/2/1, flat/other 1/0/1, gone 1/0/1; store 6/3/3",
			trips:   []string{"destination agg (agg) would be left with no workload files (1 of 1 deleted)"},
		},
		{
			name:    "a deleted on purpose",
			updates: []statestore.Update{{Workload: "a"}},
			policy:  bookkeeping.BreakerPolicy{DeleteAction: true},
			counts:  "agg 1/1/0, eu 3/2/1, flat/other 1/0/1, gone 1/0/1; store 6/3/3",
		},
		{
			name:    "shares",
			updates: []statestore.Update{{Workload: "a", Aggregates: agg("agg/all.yaml")}},
			policy:  bookkeeping.BreakerPolicy{MaxDestinationPercent: 50, MaxStorePercent: 30},
			counts:  "agg 1/0/1, eu 3/2/1, flat/other 1/0/1, gone 1/0/1; store 6/2/4",
			trips: []string{
				"destination eu (eu) would lose 2 of its 3 workload files, more than spec.massDeletion.maxDestinationPercent (50%)",
				"the write deletes 2 of the store's 6 workload files, more than spec.massDeletion.maxStorePercent (30%)",
			},
		},
		{
			name:    "a destination the platform lost, a flat file, and a rename",
			updates: []statestore.Update{{Workload: "b", Files: files("eu/resources/ns/p/b/x/5058f/renamed.yaml")}},
			counts:  "agg 1/0/1, eu 3/1/3, flat/other 1/1/0, gone 1/1/0; store 6/3/4",
			trips: []string{
				"destination flat/other (flat/other) would be left with no workload files (1 of 1 deleted)",
				"destination gone (gone) would be left with no workload files (1 of 1 deleted)",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			per, total := bookkeeping.CountDeletions(idx, tc.updates, dests)
			var cs []string
			for _, c := range per {
				cs = append(cs, fmt.Sprintf("%s %d/%d/%d", c.Path, c.Before, c.Deleted, c.After))
			}
			got := strings.Join(cs, ", ") + fmt.Sprintf("; store %d/%d/%d", total.Before, total.Deleted, total.After)
			if got != tc.counts {
				t.Errorf("counts (before/deleted/after):\n got %s\nwant %s", got, tc.counts)
			}
			var trips []string
			for _, tr := range bookkeeping.Check(tc.policy, per, total, map[string]string{"eu": "eu", "agg": "agg"}) {
				trips = append(trips, tr.String())
			}
			if strings.Join(trips, "\n") != strings.Join(tc.trips, "\n") {
				t.Errorf("trips:\n got %q\nwant %q", trips, tc.trips)
			}
		})
	}
}

func files(paths ...string) map[string][]byte {
	m := map[string][]byte{}
	for _, p := range paths {
		m[p] = []byte("x")
	}
	return m
}

func agg(target string) []statestore.Aggregate {
	return []statestore.Aggregate{{Target: target, Contribution: []byte("kind: A\n")}}
}
