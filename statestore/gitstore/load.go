package gitstore

// The load summary: how many resources each destination holds, by flavour,
// readable from one small tree.
//
// The spread strategy weighs every candidate destination by the resources
// placed on it. The placement index (statestore/index.go) holds one entry
// per placement, .render/placed/<destination>/resource/<flavour>/<hash>, so
// counting them means reading every candidate's folders: in a store of
// 100,000 workloads over 100 destinations, 3.5 MB of trees. A git store
// also keeps the counts themselves, in the names of empty files in one
// folder, .render/load/:
//
//	<destination>@<stamp>@<count>@<flavour folder>
//
// one per destination and flavour folder that holds entries ("_" is a
// resource without a flavour), and "<destination>@<stamp>@0@_" for a
// destination whose index holds no resource. A render reads the load of
// every candidate from two trees: .render/load/ and .render/placed/.
//
// The stamp is the start of the id of the destination's index folder
// (.render/placed/<destination>) that the counts were made from, so a
// reader only trusts counts made from exactly the index the tree holds. A
// store written by an older render, or by any other tool that changes the
// index and not the counts, cannot mislead a reader: the counts of the
// destinations whose index changed are stale by their stamp, and the
// reader counts those destinations' entries instead, as it did before the
// summary existed. Every write brings the whole summary up to date (see
// summaryOps): it adds or subtracts the entries its own plan added or
// removed, and counts afresh only a destination whose counts it cannot
// trust (the first write to a store written before the summary counts
// every destination once). The summary is derived data: git's history
// keeps it in step with the index commit by commit, and group commit,
// which re-plans every folded update on the newest tree, applies each
// update's change to the counts in turn.
//
// Only the git store keeps a summary: its writes are serialised by the
// branch, so a count can be read and rewritten safely. An S3 bucket, where
// writers of different workloads do not wait for each other, counts the
// index entries under each candidate's prefix instead.

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
	"github.com/render-dev/render/statestore/planner"
)

// LoadDir holds the load summary, relative to the store's path.
var LoadDir = path.Join(layout.MetaDir, "load")

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

func stampOf(h plumbing.Hash) string { return h.String()[:stampLen] }

func loadName(key, stamp string, count int, flavour string) string {
	return key + "@" + stamp + "@" + strconv.Itoa(count) + "@" + flavour
}

// destLoad is one destination's counts as the summary holds them.
type destLoad struct {
	stamp  string
	counts map[string]int // by flavour folder
	names  []string       // the entries' names
	mixed  bool           // entries with different stamps: not to be trusted
}

// readSummary parses the summary folder; absent, it is empty.
func (t *treeSnap) readSummary() (map[string]*destLoad, error) {
	out := map[string]*destLoad{}
	entries, err := t.subtree(LoadDir)
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
			d = &destLoad{stamp: parts[1], counts: map[string]int{}}
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

// subtree returns the entries directly in the folder at p (relative to the
// store's path), by name; nil when there is no such folder.
func (t *treeSnap) subtree(p string) (map[string]plumbing.Hash, error) {
	e, err := t.entry(t.full(p))
	if err != nil || e == nil || e.Mode != filemode.Dir {
		return nil, err
	}
	tr, err := t.tree(e.Hash)
	if err != nil {
		return nil, err
	}
	out := make(map[string]plumbing.Hash, len(tr.Entries))
	for _, en := range tr.Entries {
		out[en.Name] = en.Hash
	}
	return out, nil
}

// SummaryLoad implements bookkeeping.LoadSummarizer: it returns, by flavour
// folder, the resources placed on those of dests whose counts the summary
// holds for exactly the index in this tree (a destination with no index
// folder holds none), and the destinations it cannot answer for.
func (t *treeSnap) SummaryLoad(dests []string) (map[string]map[string]int, []string, error) {
	statestore.Prefetch(t, statestore.Hint{Paths: []string{bookkeeping.IndexDir, LoadDir}})
	placed, err := t.subtree(bookkeeping.IndexDir)
	if err != nil {
		return nil, nil, err
	}
	sum, err := t.readSummary()
	if err != nil {
		return nil, nil, err
	}
	counts := map[string]map[string]int{}
	var rest []string
	for _, d := range dests {
		h, ok := placed[d]
		if !ok {
			continue
		}
		s := sum[loadKey(d)]
		if s == nil || s.mixed || s.stamp != stampOf(h) {
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

// summaryOps returns the operations that bring after's load summary up to
// date, after is before with ops applied. A store without the placement
// index has no summary.
func summaryOps(before, after *treeSnap, ops []planner.Op) ([]planner.Op, error) {
	indexed, err := bookkeeping.Indexed(after)
	if err != nil || !indexed {
		return nil, err
	}
	placedAfter, err := after.subtree(bookkeeping.IndexDir)
	if err != nil {
		return nil, err
	}
	placedBefore, err := before.subtree(bookkeeping.IndexDir)
	if err != nil {
		return nil, err
	}
	sum, err := after.readSummary()
	if err != nil {
		return nil, err
	}
	// What ops did to each destination's resource entries.
	delta := map[string]map[string]int{}
	seen := map[string]bool{}
	for _, op := range ops {
		e, ok := bookkeeping.ParseIndexPath(op.Path)
		if !ok || !e.Resource() || seen[op.Path] {
			continue
		}
		seen[op.Path] = true
		was, _, err := before.Compare(op.Path, nil)
		if err != nil {
			return nil, err
		}
		is, _, err := after.Compare(op.Path, nil)
		if err != nil {
			return nil, err
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
	for d, h := range placedAfter {
		s := sum[loadKey(d)]
		valid := func(h plumbing.Hash) bool { return s != nil && !s.mixed && s.stamp == stampOf(h) }
		if hb, had := placedBefore[d]; !valid(h) && had && !valid(hb) {
			recount = append(recount, path.Join(bookkeeping.IndexDir, d, "resource"))
		}
	}
	if len(recount) > 0 {
		statestore.Prefetch(after, statestore.Hint{Dirs: recount})
	}
	var out []planner.Op
	keys := map[string]bool{}
	for _, d := range slices.Sorted(maps.Keys(placedAfter)) {
		key := loadKey(d)
		keys[key] = true
		stamp := stampOf(placedAfter[d])
		s := sum[key]
		if s != nil && !s.mixed && s.stamp == stamp {
			continue
		}
		var counts map[string]int
		switch hb, had := placedBefore[d]; {
		case !had:
			// A new destination in the index: ops made all of it.
			counts = map[string]int{}
			for f, n := range delta[d] {
				counts[f] += n
			}
		case had && s != nil && !s.mixed && s.stamp == stampOf(hb):
			counts = map[string]int{}
			for f, n := range s.counts {
				counts[f] = n
			}
			for f, n := range delta[d] {
				counts[f] += n
			}
		default:
			if counts, err = countEntries(after, d); err != nil {
				return nil, err
			}
		}
		if s != nil {
			for _, name := range s.names {
				out = append(out, planner.Op{Path: path.Join(LoadDir, name), Delete: true})
			}
		}
		out = append(out, loadOps(key, stamp, counts)...)
	}
	// Destinations gone from the index lose their counts.
	for key, s := range sum {
		if !keys[key] {
			for _, name := range s.names {
				out = append(out, planner.Op{Path: path.Join(LoadDir, name), Delete: true})
			}
		}
	}
	return out, nil
}

// loadOps writes one destination's counts.
func loadOps(key, stamp string, counts map[string]int) []planner.Op {
	var out []planner.Op
	for _, f := range slices.Sorted(maps.Keys(counts)) {
		if counts[f] > 0 {
			out = append(out, planner.Op{Path: path.Join(LoadDir, loadName(key, stamp, counts[f], f)), Data: []byte{}})
		}
	}
	if len(out) == 0 {
		out = append(out, planner.Op{Path: path.Join(LoadDir, loadName(key, stamp, 0, "_")), Data: []byte{}})
	}
	return out
}

// countEntries counts a destination's resource entries by flavour folder,
// reading its index folder.
func countEntries(t *treeSnap, dest string) (map[string]int, error) {
	dir := path.Join(bookkeeping.IndexDir, dest, "resource")
	paths, err := t.List(dir)
	if err != nil {
		return nil, err
	}
	counts := map[string]int{}
	for _, p := range paths {
		if e, ok := bookkeeping.ParseIndexPath(p); ok && e.Resource() {
			counts[e.Flavour]++
		}
	}
	return counts, nil
}

// WithLoadSummary returns files (paths relative to a store's path, as one
// git tree holds them) with the load summary render keeps beside them, for
// tools that write a store without render (internal/testinfra/storegen). files is not
// changed.
func WithLoadSummary(files map[string][]byte) (map[string][]byte, error) {
	ops := make([]planner.Op, 0, len(files))
	for _, p := range slices.Sorted(maps.Keys(files)) {
		ops = append(ops, planner.Op{Path: p, Data: files[p]})
	}
	snap := newTreeSnap(memory.NewStorage(), plumbing.ZeroHash, "")
	next, err := snap.apply(ops)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(files)+256)
	for p, data := range files {
		out[p] = data
	}
	entries, err := next.subtree(LoadDir)
	if err != nil {
		return nil, err
	}
	for name := range entries {
		out[path.Join(LoadDir, name)] = []byte{}
	}
	return out, nil
}
