package bookkeeping

// The counts summary: how many resources each destination holds, by
// flavour, readable from one small folder, for a store whose writes are
// serialised and whose folders have content ids (a git branch).
//
// Counting the index entries of every candidate destination means reading
// every candidate's folders: in a store of 100,000 workloads over 100
// destinations, 3.5 MB of git trees. Such a store also keeps the counts
// themselves, in the names of empty files in one folder, LoadDir:
//
//	<destination>@<stamp>@<count>@<flavour folder>
//
// one per destination and flavour folder that holds entries ("_" is a
// resource without a flavour), and "<destination>@<stamp>@0@_" for a
// destination whose index holds no resource. A render reads the load of
// every candidate from two folders: LoadDir and IndexDir.
//
// The stamp is the start of the id of the destination's index folder
// (.render/placed/<destination>) that the counts were made from, so a
// reader only trusts counts made from exactly the index the store holds. A
// store written by an older render, or by any other tool that changes the
// index and not the counts, cannot mislead a reader: the counts of the
// destinations whose index changed are stale by their stamp, and the
// reader counts those destinations' entries instead, as it did before the
// summary existed. Every write brings the whole summary up to date
// (CountsUpdate): it adds or subtracts the entries its own operations
// added or removed, and counts afresh only a destination whose counts it
// cannot trust (the first write to a store written before the summary
// counts every destination once). The summary is derived data: the
// store's history keeps it in step with the index write by write, and a
// writer that applies several updates in turn (git's group commit)
// applies each update's change to the counts in turn.

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/render-dev/render/statestore"
)

// CountsSnapshot is a snapshot that can keep the counts summary: its
// folders have content ids. FolderIDs returns the entries directly in the
// folder dir (relative to the store's path) by name, each with the id of
// its content, which changes whenever anything below it does (a git
// object id); nil when there is no such folder.
type CountsSnapshot interface {
	statestore.Snapshot
	FolderIDs(dir string) (map[string]string, error)
}

// stampLen is how many hex digits of the index folder's id a stamp keeps.
const stampLen = 16

// loadKey is how a destination is named in the summary: its name, or a
// hash of a long or unusual name, so that an entry's name stays a short
// file name on every file system a GitOps agent checks the store out to.
func loadKey(dest string) string {
	if len(dest) <= 100 && !strings.ContainsAny(dest, "@~") {
		return dest
	}
	sum := sha256.Sum256([]byte(dest))
	return "~" + hex.EncodeToString(sum[:16])
}

func stampOf(id string) string { return id[:min(stampLen, len(id))] }

func loadName(key, stamp string, count int, flavour string) string {
	return key + "@" + stamp + "@" + strconv.Itoa(count) + "@" + flavour
}

// destCounts is one destination's counts as the summary holds them.
type destCounts struct {
	stamp  string
	counts map[string]int // by flavour folder
	names  []string       // the entries' names
	mixed  bool           // entries with different stamps: not to be trusted
}

// validFor reports whether c holds counts made from the index folder
// whose id is id.
func (c *destCounts) validFor(id string) bool {
	return c != nil && !c.mixed && c.stamp == stampOf(id)
}

// readCounts parses the summary folder, by destination key; absent, it is
// empty.
func readCounts(snap CountsSnapshot) (map[string]*destCounts, error) {
	out := map[string]*destCounts{}
	entries, err := snap.FolderIDs(LoadDir)
	if err != nil {
		return nil, err
	}
	for name := range entries {
		parts := strings.Split(name, "@")
		if len(parts) != 4 {
			continue
		}
		n, err := strconv.Atoi(parts[2])
		if err != nil || n < 0 {
			continue
		}
		d := out[parts[0]]
		if d == nil {
			d = &destCounts{stamp: parts[1], counts: map[string]int{}}
			out[parts[0]] = d
		}
		if d.stamp != parts[1] {
			d.mixed = true
		}
		d.counts[parts[3]] += n
		d.names = append(d.names, name)
	}
	return out, nil
}

// CountsLoad is the SummaryLoad (statestore.SnapshotCapabilities) of a
// snapshot of a store that keeps the counts summary: it returns, by flavour folder, the resources placed on those
// of dests whose counts the summary holds for exactly the index in snap
// (a destination with no index folder holds none), and the destinations
// it cannot answer for.
func CountsLoad(snap CountsSnapshot, dests []string) (map[string]map[string]int, []string, error) {
	statestore.Prefetch(snap, statestore.Hint{Paths: []string{IndexDir, LoadDir}})
	placed, err := snap.FolderIDs(IndexDir)
	if err != nil {
		return nil, nil, err
	}
	sum, err := readCounts(snap)
	if err != nil {
		return nil, nil, err
	}
	counts := map[string]map[string]int{}
	var rest []string
	for _, d := range dests {
		id, ok := placed[d]
		if !ok {
			continue
		}
		s := sum[loadKey(d)]
		if !s.validFor(id) {
			rest = append(rest, d)
			continue
		}
		for f, n := range s.counts {
			if n > 0 {
				if counts[d] == nil {
					counts[d] = map[string]int{}
				}
				counts[d][f] += n
			}
		}
	}
	return counts, rest, nil
}

// CountsTotal is the number of resources the counts summary in snap names
// in all, whatever their stamps: what a store's size may be judged from
// before anything else is read.
func CountsTotal(snap CountsSnapshot) (int, error) {
	sum, err := readCounts(snap)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, d := range sum {
		for _, c := range d.counts {
			n += c
		}
	}
	return n, nil
}

// CountsUpdate returns what brings after's counts summary up to date,
// after being before with the files at changed (paths relative to the
// store) written or deleted: the summary files to remove, and those to
// write (empty files), to be applied in that order. A store without the
// placement index has no summary.
func CountsUpdate(before, after CountsSnapshot, changed []string) (remove, write []string, err error) {
	indexed, err := Indexed(after)
	if err != nil || !indexed {
		return nil, nil, err
	}
	placedAfter, err := after.FolderIDs(IndexDir)
	if err != nil {
		return nil, nil, err
	}
	placedBefore, err := before.FolderIDs(IndexDir)
	if err != nil {
		return nil, nil, err
	}
	sum, err := readCounts(after)
	if err != nil {
		return nil, nil, err
	}
	// What the change did to each destination's resource entries.
	delta := map[string]map[string]int{}
	seen := map[string]bool{}
	for _, p := range changed {
		e, ok := ParseIndexPath(p)
		if !ok || !e.Resource() || seen[p] {
			continue
		}
		seen[p] = true
		was, _, err := before.Compare(p, nil)
		if err != nil {
			return nil, nil, err
		}
		is, _, err := after.Compare(p, nil)
		if err != nil {
			return nil, nil, err
		}
		if was == is {
			continue
		}
		if delta[e.Destination] == nil {
			delta[e.Destination] = map[string]int{}
		}
		if is {
			delta[e.Destination][e.Flavour]++
		} else {
			delta[e.Destination][e.Flavour]--
		}
	}
	// The destinations that must be counted afresh (no valid counts
	// before or after) are read in one go: on a partial clone, a folder
	// level per request for all of them, not a request per folder.
	var recount []string
	for d, id := range placedAfter {
		s := sum[loadKey(d)]
		if idb, had := placedBefore[d]; !s.validFor(id) && had && !s.validFor(idb) {
			recount = append(recount, d)
		}
	}
	if len(recount) > 0 {
		statestore.Prefetch(after, statestore.Hint{Dirs: LoadPaths(recount)})
	}
	keys := map[string]bool{}
	for _, d := range slices.Sorted(maps.Keys(placedAfter)) {
		key := loadKey(d)
		keys[key] = true
		id := placedAfter[d]
		s := sum[key]
		if s.validFor(id) {
			continue
		}
		var counts map[string]int
		switch idb, had := placedBefore[d]; {
		case !had:
			// A new destination in the index: the change made all of it.
			counts = maps.Clone(delta[d])
		case s.validFor(idb):
			counts = maps.Clone(s.counts)
			for f, n := range delta[d] {
				counts[f] += n
			}
		default:
			if counts, err = CountEntries(after, d); err != nil {
				return nil, nil, err
			}
		}
		if s != nil {
			remove = append(remove, summaryFiles(s)...)
		}
		write = append(write, countFiles(key, stampOf(id), counts)...)
	}
	// Destinations gone from the index lose their counts.
	for key, s := range sum {
		if !keys[key] {
			remove = append(remove, summaryFiles(s)...)
		}
	}
	return remove, write, nil
}

// summaryFiles are the paths of the summary files of s.
func summaryFiles(s *destCounts) []string {
	out := make([]string, 0, len(s.names))
	for _, name := range s.names {
		out = append(out, path.Join(LoadDir, name))
	}
	return out
}

// countFiles are the summary files that hold one destination's counts.
func countFiles(key, stamp string, counts map[string]int) []string {
	var out []string
	for _, f := range slices.Sorted(maps.Keys(counts)) {
		if counts[f] > 0 {
			out = append(out, path.Join(LoadDir, loadName(key, stamp, counts[f], f)))
		}
	}
	if len(out) == 0 {
		out = append(out, path.Join(LoadDir, loadName(key, stamp, 0, "_")))
	}
	return out
}
