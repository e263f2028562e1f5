package bookkeeping

import (
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/statestore"
)

// The mass-deletion breaker: a write that would empty a destination of
// workload files, or delete more than a configured share of a
// destination's or a store's workload files, is refused before anything is
// written. It counts from what the planner's inputs already say — which
// files each workload owns (FileIndex, from the records) and which files
// the write's updates want — and never walks a store's tree, so the same
// check holds for every backend and can be fed from any index of owners.

// FileIndex is what a store holds as the breaker sees it: the files each
// workload owns, by workload key, as its record lists them (paths relative
// to the store's path).
type FileIndex map[string][]string

// IndexRecords builds the FileIndex of a store's records.
func IndexRecords(recs []statestore.Record) FileIndex {
	idx := make(FileIndex, len(recs))
	for _, r := range recs {
		idx[r.Workload] = append(idx[r.Workload], r.Files...)
	}
	return idx
}

// FileCount is the breaker's count for one destination folder (or, with
// an empty Path, for the whole store): workload files before the write,
// those the write deletes, and those left after it.
type FileCount struct {
	Path    string `json:"path"`
	Before  int    `json:"before"`
	Deleted int    `json:"deleted"`
	After   int    `json:"after"`
}

// CountDeletions counts, per destination folder, the workload files before
// and after the updates of one write to one store. dests are the
// destination paths the platform names in the store.
//
// A workload file is one a record owns, other than render's own files; a
// workload's part of an aggregated file counts as one file of the
// destination holding that file. Canaries and markers are nobody's and are
// not counted. A file under none of dests (its destination left the
// platform) is counted in the folder before its "dependencies" or
// "resources" component, else in its parent folder.
func CountDeletions(before FileIndex, updates []statestore.Update, dests []string) (perDest []FileCount, total FileCount) {
	type fileKey struct{ dest, file string }
	old := map[fileKey]bool{}
	after := map[fileKey]bool{}
	changed := map[string]bool{}
	for _, u := range updates {
		changed[u.Workload] = true
	}
	add := func(set map[fileKey]bool, workload, f string) {
		p := f
		if t, ok := statestore.AggregateTarget(f, workload); ok {
			p = t
		} else if layout.IsMeta(f) {
			return
		}
		set[fileKey{DestinationFolder(p, dests), f}] = true
	}
	for w, files := range before {
		for _, f := range files {
			add(old, w, f)
			if !changed[w] {
				add(after, w, f)
			}
		}
	}
	for _, u := range updates {
		for f := range u.Files {
			add(after, u.Workload, f)
		}
		for _, a := range u.Aggregates {
			if len(a.Contribution) > 0 {
				add(after, u.Workload, statestore.AggregatePath(a.Target, u.Workload))
			}
		}
	}
	counts := map[string]*FileCount{}
	get := func(d string) *FileCount {
		if counts[d] == nil {
			counts[d] = &FileCount{Path: d}
		}
		return counts[d]
	}
	for k := range old {
		c := get(k.dest)
		c.Before++
		total.Before++
		if !after[k] {
			c.Deleted++
			total.Deleted++
		}
	}
	for k := range after {
		get(k.dest).After++
		total.After++
	}
	for _, c := range counts {
		perDest = append(perDest, *c)
	}
	sort.Slice(perDest, func(i, j int) bool { return perDest[i].Path < perDest[j].Path })
	return perDest, total
}

// DestinationFolder is the destination folder holding p: the longest of
// dests that p is under, else (a destination the platform no longer names)
// the folder before p's "dependencies" or "resources" component, else p's
// parent folder.
func DestinationFolder(p string, dests []string) string {
	best := ""
	for _, d := range dests {
		if strings.HasPrefix(p, d+"/") && len(d) > len(best) {
			best = d
		}
	}
	if best != "" {
		return best
	}
	parts := strings.Split(p, "/")
	for i := 1; i < len(parts)-1; i++ {
		if parts[i] == "dependencies" || parts[i] == "resources" {
			return strings.Join(parts[:i], "/")
		}
	}
	return path.Dir(p)
}

// BreakerPolicy is one store's mass-deletion limits.
type BreakerPolicy struct {
	// MaxDestinationPercent refuses a write that deletes more than this
	// share of a destination's workload files; 0 leaves only the default
	// rule (a destination may not be left with no workload files).
	MaxDestinationPercent int
	// MaxStorePercent refuses a write that deletes more than this share of
	// all the store's workload files; 0 is no limit.
	MaxStorePercent int
	// DeleteAction says the write removes its workload on purpose
	// (--action delete): leaving a destination empty is then allowed.
	DeleteAction bool
}

// Trip is one reason the breaker refuses a write.
type Trip struct {
	FileCount
	// Destination names the destination (its path when the platform no
	// longer names it); empty for the store-wide limit.
	Destination string `json:"destination,omitempty"`
	// Rule says which limit: "empty", "destination" or "store".
	Rule    string `json:"rule"`
	Percent int    `json:"percent,omitempty"` // the limit, for "destination" and "store"
}

func (t Trip) String() string {
	switch t.Rule {
	case "store":
		return fmt.Sprintf("the write deletes %d of the store's %d workload files, more than spec.massDeletion.maxStorePercent (%d%%)", t.Deleted, t.Before, t.Percent)
	case "destination":
		return fmt.Sprintf("destination %s (%s) would lose %d of its %d workload files, more than spec.massDeletion.maxDestinationPercent (%d%%)", t.Destination, t.Path, t.Deleted, t.Before, t.Percent)
	}
	return fmt.Sprintf("destination %s (%s) would be left with no workload files (%d of %d deleted)", t.Destination, t.Path, t.Deleted, t.Before)
}

// Check applies p to the counts of one write; names maps destination paths
// to destination names. It returns every limit the write passes, empty
// when the write may go ahead.
func Check(p BreakerPolicy, perDest []FileCount, total FileCount, names map[string]string) []Trip {
	var trips []Trip
	for _, c := range perDest {
		if c.Before == 0 || c.Deleted == 0 {
			continue
		}
		name := names[c.Path]
		if name == "" {
			name = c.Path
		}
		switch {
		case c.After == 0 && !p.DeleteAction:
			trips = append(trips, Trip{FileCount: c, Destination: name, Rule: "empty"})
		case p.MaxDestinationPercent > 0 && c.Deleted*100 > p.MaxDestinationPercent*c.Before:
			trips = append(trips, Trip{FileCount: c, Destination: name, Rule: "destination", Percent: p.MaxDestinationPercent})
		}
	}
	if p.MaxStorePercent > 0 && total.Before > 0 && total.Deleted*100 > p.MaxStorePercent*total.Before {
		trips = append(trips, Trip{FileCount: total, Rule: "store", Percent: p.MaxStorePercent})
	}
	return trips
}

// MassDeletionError is the breaker's verdict on one render or drain: what
// each store's write would delete past its limits, and how to allow it. It
// is an error when Refused: some store's trips are not allowed.
type MassDeletionError struct {
	Stores []StoreTrips
	// DryRun: nothing was to be written anyway; the error is the verdict.
	DryRun bool
}

// StoreTrips are the limits one store's write passes.
type StoreTrips struct {
	Store string `json:"store"` // "GitStateStore/default"
	// Field is where the store allows mass deletion ("spec.massDeletion.allow:
	// true in GitStateStore default (platform/store.yaml)").
	Field string `json:"field"`
	Trips []Trip `json:"trips"`
	// AllowedBy names what let the write through anyway (the flag or the
	// store's field); empty when it is refused.
	AllowedBy string `json:"allowedBy,omitempty"`
}

// Refused reports whether some store's write is refused.
func (e *MassDeletionError) Refused() bool {
	for _, s := range e.Stores {
		if s.AllowedBy == "" {
			return true
		}
	}
	return false
}

func (e *MassDeletionError) Error() string {
	var parts []string
	var fields []string
	for _, s := range e.Stores {
		if s.AllowedBy != "" {
			continue
		}
		for _, t := range s.Trips {
			parts = append(parts, s.Store+": "+t.String())
		}
		fields = append(fields, s.Field)
	}
	verdict := "refused (nothing was written)"
	if e.DryRun {
		verdict = "would be refused"
	}
	return fmt.Sprintf("mass deletion %s: %s; to allow it pass --allow-mass-deletion, or set %s",
		verdict, strings.Join(parts, "; "), strings.Join(fields, ", or "))
}
