package bookkeeping

import (
	"path"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/statestore"
)

// Load summaries: how many resources each destination holds, by flavour,
// which the spread strategy weighs, readable without reading every entry
// of the placement index.
//
// The truth is the index: one entry per placed resource group below
// .render/placed/<destination>/resource/<flavour folder>/. Counting a
// destination's entries costs a read per folder of entries (git) or a
// listing per 1,000 of them (S3), so a store also keeps a summary of them
// in LoadDir, and ReadLoad asks the snapshot for it (a snapshot that keeps
// one declares statestore.SnapshotCapabilities.SummaryLoad) before it
// counts entries. There are two kinds of summary, one per way a
// store orders its writers, both written here and nowhere else:
//
//   - counts (loadcounts.go), for a store whose writes are serialised and
//     whose folders have content ids (a git branch: FolderIDs): the
//     counts themselves, in the names of empty files, stamped with the id
//     of the index folder they were counted from; every write brings them
//     up to date in the same commit (CountsUpdate);
//   - ledgers (loadledger.go), for a store whose writers of different
//     workloads do not take turns (an S3 bucket: LedgerStorage): per
//     destination, a base naming its entries, which only folds write
//     (conditionally), and beside it the objects each write adds around
//     its commit, which only that write writes (Ledgers).
//
// One format cannot serve both. A count can only be trusted where the
// store says which index it was counted from (a folder id) and where no
// two writers change it at once; an S3 bucket has neither, so its summary
// names each entry, which makes every change idempotent, and that costs
// about 30 bytes per resource where a git summary costs one name per
// destination and flavour. A store keeps the kind its backend writes, as
// every earlier version of render wrote it; a store without a summary, or
// with one this render cannot trust or read, is counted from its entries.

// LoadDir holds the load summaries, relative to the store's path.
var LoadDir = path.Join(layout.MetaDir, "load")

// Load counts the resources placed on each of dests, in total and by
// flavour, from an indexed store's entries for those destinations. The
// workload exclude is not counted.
type Load struct {
	Total     map[string]int
	ByFlavour map[string]map[string]int
}

// add counts n resources of flavour folder flavour on d.
func (l Load) add(d, flavour string, n int) {
	if n <= 0 {
		return
	}
	l.Total[d] += n
	if flavour != noFlavour {
		if l.ByFlavour[flavour] == nil {
			l.ByFlavour[flavour] = map[string]int{}
		}
		l.ByFlavour[flavour][d] += n
	}
}

// ReadLoad reads the load on dests from snap's index. It reads entry names
// only, except for exclude's own entries, which it recognises by name. A
// snapshot that keeps a summary of the counts (it declares
// statestore.SnapshotCapabilities.SummaryLoad) answers for the
// destinations it can, and only the others' entries are listed; for a
// snapshot that declares none, every destination's entries are listed.
func ReadLoad(snap statestore.Snapshot, dests []string, exclude string) (Load, error) {
	l := Load{Total: map[string]int{}, ByFlavour: map[string]map[string]int{}}
	mine := map[string]bool{}
	if exclude != "" {
		// Any group name: compare by the entry's content instead would
		// need a read. The workload's own entries are in its record.
		if own, err := statestore.ReadRecord(snap, statestore.RecordPath(exclude)); err != nil {
			return l, err
		} else if own != nil {
			for p := range IndexPaths(own) {
				mine[p] = true
			}
		}
	}
	if summaryLoad := snap.Capabilities().SummaryLoad; summaryLoad != nil {
		counts, rest, err := summaryLoad(dests)
		if err != nil {
			return l, err
		}
		answered := map[string]bool{}
		for _, d := range dests {
			answered[d] = true
		}
		for _, d := range rest {
			answered[d] = false
		}
		// The workload's own entries are counted in the summary: its
		// record names them.
		for p := range mine {
			if e, ok := ParseIndexPath(p); ok && e.Resource() && answered[e.Destination] && counts[e.Destination][e.Flavour] > 0 {
				counts[e.Destination][e.Flavour]--
			}
		}
		for d, byFlavour := range counts {
			for flavour, n := range byFlavour {
				l.add(d, flavour, n)
			}
		}
		dests = rest
	}
	statestore.Prefetch(snap, statestore.Hint{Dirs: LoadPaths(dests)})
	for _, d := range dests {
		paths, err := snap.List(resourceDir(d))
		if err != nil {
			return l, err
		}
		for flavour, n := range countResources(paths, mine) {
			l.add(d, flavour, n)
		}
	}
	return l, nil
}

// LoadPaths is what reading the load on dests from the index entries looks
// at, as Hint paths: each destination's resource folder.
func LoadPaths(dests []string) []string {
	out := make([]string, 0, len(dests))
	for _, d := range dests {
		out = append(out, resourceDir(d))
	}
	return out
}

// resourceDir is the folder of destination d's resource entries.
func resourceDir(d string) string { return path.Join(IndexDir, d, "resource") }

// countResources counts the resource entries among paths by flavour
// folder, those of skip left out.
func countResources(paths []string, skip map[string]bool) map[string]int {
	out := map[string]int{}
	for _, p := range paths {
		if e, ok := ParseIndexPath(p); ok && e.Resource() && !skip[p] {
			out[e.Flavour]++
		}
	}
	return out
}

// CountEntries counts destination d's resource entries in snap by flavour
// folder, reading its index folder: what a load summary must agree with.
func CountEntries(snap statestore.Snapshot, d string) (map[string]int, error) {
	paths, err := snap.List(resourceDir(d))
	if err != nil {
		return nil, err
	}
	return countResources(paths, nil), nil
}

// ResourceEntries returns rec's resource index entries on each
// destination, as entry name -> flavour folder (nothing for a nil record).
func ResourceEntries(rec *statestore.Record) map[string]map[string]string {
	out := map[string]map[string]string{}
	for p := range IndexPaths(rec) {
		e, ok := ParseIndexPath(p)
		if !ok || !e.Resource() {
			continue
		}
		if out[e.Destination] == nil {
			out[e.Destination] = map[string]string{}
		}
		out[e.Destination][e.Name] = e.Flavour
	}
	return out
}
