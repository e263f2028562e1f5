package gitstore

// A git store's load summary is bookkeeping's counts summary (see
// statestore/bookkeeping/loadcounts.go): the resources on each destination,
// by flavour, in the names of empty files in .render/load/, stamped with
// the id of the destination's index folder they were counted from. A
// branch's writes are serialised, so every commit (a direct write, each
// folded request, a batch, a pull request's commit) brings the counts up
// to date in the commit itself: treeSnap.apply adds what summaryOps
// returns. This file is what the summary needs of a git tree: the ids of
// a folder's entries.

import (
	"maps"
	"path"
	"slices"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/render-dev/render/statestore/bookkeeping"
	"github.com/render-dev/render/statestore/planner"
)

// LoadDir holds the load summary, relative to the store's path.
var LoadDir = bookkeeping.LoadDir

// FolderIDs implements bookkeeping.CountsSnapshot: the entries directly in
// the folder at p (relative to the store's path), by name, with their
// object ids; nil when there is no such folder.
func (t *treeSnap) FolderIDs(p string) (map[string]string, error) {
	e, err := t.entry(t.full(p))
	if err != nil || e == nil || e.Mode != filemode.Dir {
		return nil, err
	}
	tr, err := t.tree(e.Hash)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(tr.Entries))
	for _, en := range tr.Entries {
		out[en.Name] = en.Hash.String()
	}
	return out, nil
}

// summaryLoad is the snapshot's SummaryLoad, which its Capabilities
// declare: the counts summary's answer (see bookkeeping.CountsLoad).
func (t *treeSnap) summaryLoad(dests []string) (map[string]map[string]int, []string, error) {
	return bookkeeping.CountsLoad(t, dests)
}

var _ bookkeeping.CountsSnapshot = (*treeSnap)(nil)

// summaryOps returns the operations that bring after's load summary up to
// date, after being before with ops applied.
func summaryOps(before, after *treeSnap, ops []planner.Op) ([]planner.Op, error) {
	changed := make([]string, 0, len(ops))
	for _, op := range ops {
		changed = append(changed, op.Path)
	}
	remove, write, err := bookkeeping.CountsUpdate(before, after, changed)
	if err != nil {
		return nil, err
	}
	out := make([]planner.Op, 0, len(remove)+len(write))
	for _, p := range remove {
		out = append(out, planner.Op{Path: p, Delete: true})
	}
	for _, p := range write {
		out = append(out, planner.Op{Path: p, Data: []byte{}})
	}
	return out, nil
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
	entries, err := next.FolderIDs(LoadDir)
	if err != nil {
		return nil, err
	}
	for name := range entries {
		out[path.Join(LoadDir, name)] = []byte{}
	}
	return out, nil
}
