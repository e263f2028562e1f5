package gitstore

import (
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
	"github.com/render-dev/render/statestore/planner"
)

// treeSnap is a statestore.Snapshot over one git tree, below prefix. Trees
// are decoded once and cached, so comparing thousands of paths reads each
// folder of the repository at most once and never reads a blob.
type treeSnap struct {
	s      storer.EncodedObjectStorer
	root   plumbing.Hash // zero for an empty repository
	prefix string        // the store's path inside the repository ("" for the root)
	cache  map[plumbing.Hash]*object.Tree
	debug  func(msg string, args ...any) // the store's Debug, if any
	// large reports whether writes mark the store as large (sizeFile,
	// see lazy.go); nil for a repository on this machine.
	large func() bool
}

func newTreeSnap(s storer.EncodedObjectStorer, root plumbing.Hash, prefix string) *treeSnap {
	return &treeSnap{s: s, root: root, prefix: prefix, cache: map[plumbing.Hash]*object.Tree{}}
}

// newSnap is a view of tree root in s, at the store's path, that logs
// through the store's Debug.
func (s *Store) newSnap(objs storer.EncodedObjectStorer, root plumbing.Hash) *treeSnap {
	t := newTreeSnap(objs, root, s.prefix)
	t.debug = s.cfg.Debug
	if r := s.repo.server(); r != nil {
		t.large = r.isLarge
	}
	return t
}

var _ statestore.Snapshot = (*treeSnap)(nil)

// Capabilities declares what a git snapshot does beyond its lookups:
// on a partial clone, it fetches ahead what a hint names (Prefetch, which
// does nothing on a whole clone), and it logs through the store's Debug.
// A git tree holds a path as a file or a folder, never both (TreeShaped).
// A branch keeps the counts load summary (SummaryLoad: see load.go).
func (t *treeSnap) Capabilities() statestore.SnapshotCapabilities {
	return statestore.SnapshotCapabilities{Prefetch: t.Prefetch, Debug: t.Debug, TreeShaped: true, SummaryLoad: t.summaryLoad}
}

// Debug logs through the store's Debug, when it has one.
func (t *treeSnap) Debug(msg string, args ...any) {
	if t.debug != nil {
		t.debug(msg, args...)
	}
}

func (t *treeSnap) full(p string) string {
	if t.prefix == "" {
		return p
	}
	return path.Join(t.prefix, p)
}

func (t *treeSnap) tree(h plumbing.Hash) (*object.Tree, error) {
	if tr, ok := t.cache[h]; ok {
		return tr, nil
	}
	tr, err := object.GetTree(t.s, h)
	if err != nil {
		return nil, fmt.Errorf("read tree %s: %w", h, err)
	}
	t.cache[h] = tr
	return tr, nil
}

// entry finds the entry at repository path p; nil when absent.
func (t *treeSnap) entry(p string) (*object.TreeEntry, error) {
	if t.root.IsZero() {
		return nil, nil
	}
	cur := t.root
	parts := strings.Split(p, "/")
	for i, name := range parts {
		tr, err := t.tree(cur)
		if err != nil {
			return nil, err
		}
		var found *object.TreeEntry
		for j := range tr.Entries {
			if tr.Entries[j].Name == name {
				found = &tr.Entries[j]
				break
			}
		}
		if found == nil {
			return nil, nil
		}
		if i == len(parts)-1 {
			return found, nil
		}
		if found.Mode != filemode.Dir {
			return nil, nil
		}
		cur = found.Hash
	}
	return nil, nil
}

func isFile(e *object.TreeEntry) bool {
	return e != nil && e.Mode != filemode.Dir && e.Mode != filemode.Submodule
}

func (t *treeSnap) Compare(p string, data []byte) (bool, bool, error) {
	e, err := t.entry(t.full(p))
	if err != nil || !isFile(e) {
		return false, false, err
	}
	return true, e.Hash == plumbing.ComputeHash(plumbing.BlobObject, data), nil
}

func (t *treeSnap) ReadFile(p string) ([]byte, error) {
	e, err := t.entry(t.full(p))
	if err != nil {
		return nil, err
	}
	if !isFile(e) {
		return nil, fmt.Errorf("%s: %w", p, statestore.ErrNotFound)
	}
	return readBlob(t.s, e.Hash)
}

func readBlob(s storer.EncodedObjectStorer, h plumbing.Hash) ([]byte, error) {
	o, err := s.EncodedObject(plumbing.BlobObject, h)
	if err != nil {
		return nil, fmt.Errorf("read blob %s: %w", h, err)
	}
	r, err := o.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

func (t *treeSnap) List(dir string) ([]string, error) {
	var h plumbing.Hash
	full := t.full(dir)
	if full == "" || full == "." {
		h = t.root
	} else {
		e, err := t.entry(full)
		if err != nil {
			return nil, err
		}
		if e == nil || e.Mode != filemode.Dir {
			return nil, nil
		}
		h = e.Hash
	}
	if h.IsZero() {
		return nil, nil
	}
	var out []string
	var walk func(h plumbing.Hash, rel string) error
	walk = func(h plumbing.Hash, rel string) error {
		tr, err := t.tree(h)
		if err != nil {
			return err
		}
		for _, e := range tr.Entries {
			p := path.Join(rel, e.Name)
			if e.Mode == filemode.Dir {
				if err := walk(e.Hash, p); err != nil {
					return err
				}
			} else if isFile(&e) {
				out = append(out, p)
			}
		}
		return nil
	}
	if err := walk(h, dir); err != nil {
		return nil, err
	}
	sort.Strings(out)
	return out, nil
}

// editNode is one path's pending changes: a file written or deleted
// (leaf), and changes below it as a folder (children). A path may be both
// when a workload's folder becomes a file: its old files are deleted and
// the file takes the folder's place.
type editNode struct {
	children map[string]*editNode
	blob     plumbing.Hash // set for a file write
	del      bool          // a file delete
	leaf     bool
}

// writes reports whether n or anything below it writes a file.
func (n *editNode) writes() bool {
	if n.leaf && !n.del {
		return true
	}
	for _, c := range n.children {
		if c.writes() {
			return true
		}
	}
	return false
}

// applyOps writes the blobs and trees for ops on top of base (zero for an
// empty repository) and returns the new root tree. Only the folders on the
// paths of ops are rewritten, so the cost follows the change, not the size
// of the repository.
func (t *treeSnap) applyOps(ops []planner.Op) (plumbing.Hash, error) {
	root := &editNode{children: map[string]*editNode{}}
	for _, op := range ops {
		n := root
		parts := strings.Split(t.full(op.Path), "/")
		for _, name := range parts[:len(parts)-1] {
			c := n.children[name]
			if c == nil {
				c = &editNode{}
				n.children[name] = c
			}
			if c.children == nil {
				c.children = map[string]*editNode{}
			}
			n = c
		}
		name := parts[len(parts)-1]
		leaf := n.children[name]
		if leaf == nil {
			leaf = &editNode{}
			n.children[name] = leaf
		}
		leaf.leaf, leaf.del, leaf.blob = true, op.Delete, plumbing.ZeroHash
		if !op.Delete {
			h, err := writeObject(t.s, plumbing.BlobObject, op.Data)
			if err != nil {
				return plumbing.ZeroHash, err
			}
			leaf.blob = h
		}
	}
	h, _, err := t.writeTree(t.root, root, "")
	return h, err
}

// blocked is the error for a write at repository path p that the tree
// cannot take: a file stands at the folder at (or, folder, a folder at
// p). The planner refuses these first (SnapshotCapabilities.TreeShaped), naming
// the owner; what reaches the tree is render's own bookkeeping (the load
// summary) or a plan that did not look. Paths are made store-relative.
func (t *treeSnap) blocked(p, at string, folder bool) error {
	rel := func(s string) string {
		if t.prefix == "" {
			return s
		}
		return strings.TrimPrefix(s, t.prefix+"/")
	}
	return &statestore.BlockedError{Path: strings.TrimSuffix(rel(p), "/"), Blocker: rel(at), File: rel(at), Folder: folder}
}

func (t *treeSnap) writeTree(base plumbing.Hash, n *editNode, at string) (plumbing.Hash, bool, error) {
	entries := map[string]object.TreeEntry{}
	if !base.IsZero() {
		tr, err := t.tree(base)
		if err != nil {
			return plumbing.ZeroHash, false, err
		}
		for _, e := range tr.Entries {
			entries[e.Name] = e
		}
	}
	for name, c := range n.children {
		p := path.Join(at, name)
		old, had := entries[name]
		if c.leaf && c.del && had && old.Mode != filemode.Dir {
			// A file deleted; a folder of that name may take its place.
			delete(entries, name)
			had = false
		}
		switch {
		case c.leaf && c.del && len(c.children) == 0:
		case c.leaf && !c.del:
			below := &editNode{children: c.children}
			if below.writes() {
				return plumbing.ZeroHash, false, t.blocked(p+"/", p, false)
			}
			if had && old.Mode == filemode.Dir {
				// The folder may give way only if the deletes below
				// empty it: a file never replaces others' files.
				_, empty, err := t.writeTree(old.Hash, below, p)
				if err != nil {
					return plumbing.ZeroHash, false, err
				}
				if !empty {
					return plumbing.ZeroHash, false, t.blocked(p, p, true)
				}
			}
			entries[name] = object.TreeEntry{Name: name, Mode: filemode.Regular, Hash: c.blob}
		default:
			var sub plumbing.Hash
			if had {
				if old.Mode != filemode.Dir {
					return plumbing.ZeroHash, false, t.blocked(p+"/", p, false)
				}
				sub = old.Hash
			}
			h, empty, err := t.writeTree(sub, c, p)
			if err != nil {
				return plumbing.ZeroHash, false, err
			}
			if empty {
				delete(entries, name)
			} else {
				entries[name] = object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: h}
			}
		}
	}
	if len(entries) == 0 {
		return plumbing.ZeroHash, true, nil
	}
	list := make([]object.TreeEntry, 0, len(entries))
	for _, e := range entries {
		list = append(list, e)
	}
	// Git orders entries by name, comparing a folder as if it ended in "/".
	sort.Slice(list, func(i, j int) bool { return gitName(list[i]) < gitName(list[j]) })
	tr := &object.Tree{Entries: list}
	obj := t.s.NewEncodedObject()
	if err := tr.Encode(obj); err != nil {
		return plumbing.ZeroHash, false, err
	}
	h, err := t.s.SetEncodedObject(obj)
	if err != nil {
		return plumbing.ZeroHash, false, fmt.Errorf("write tree: %w", err)
	}
	t.cache[h] = tr
	return h, false, nil
}

func gitName(e object.TreeEntry) string {
	if e.Mode == filemode.Dir {
		return e.Name + "/"
	}
	return e.Name
}

func writeObject(s storer.EncodedObjectStorer, typ plumbing.ObjectType, data []byte) (plumbing.Hash, error) {
	obj := s.NewEncodedObject()
	obj.SetType(typ)
	obj.SetSize(int64(len(data)))
	w, err := obj.Writer()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if _, err := w.Write(data); err != nil {
		return plumbing.ZeroHash, err
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, err
	}
	h, err := s.SetEncodedObject(obj)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("write object: %w", err)
	}
	return h, nil
}

var errNoSuchCommit = errors.New("no such commit")

// rootTree returns the tree of commit c (zero hash for no commit).
func rootTree(s storer.EncodedObjectStorer, c plumbing.Hash) (plumbing.Hash, error) {
	if c.IsZero() {
		return plumbing.ZeroHash, nil
	}
	commit, err := object.GetCommit(s, c)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("%w %s: %v", errNoSuchCommit, c, err)
	}
	return commit.TreeHash, nil
}

// apply writes ops on top of t and returns a view of the result that
// shares t's cache of decoded folders.
func (t *treeSnap) apply(ops []planner.Op) (*treeSnap, error) {
	root, err := t.applyOps(ops)
	if err != nil {
		return nil, err
	}
	next := newTreeSnap(t.s, root, t.prefix)
	next.cache, next.debug, next.large = t.cache, t.debug, t.large
	// The load summary follows the index (see load.go).
	extra, err := summaryOps(t, next, ops)
	if err != nil {
		return nil, fmt.Errorf("load summary: %w", err)
	}
	// A large store says so where every later commit keeps it (lazy.go).
	if t.large != nil && t.large() {
		if exists, same, err := next.Compare(sizeFile, sizeData); err != nil {
			return nil, err
		} else if !exists || !same {
			extra = append(extra, planner.Op{Path: sizeFile, Data: sizeData})
		}
	}
	if len(extra) == 0 {
		return next, nil
	}
	if root, err = next.applyOps(extra); err != nil {
		return nil, err
	}
	final := newTreeSnap(t.s, root, t.prefix)
	final.cache, final.debug, final.large = t.cache, t.debug, t.large
	return final, nil
}

// rootOrEmpty is t's root tree, or git's empty tree (written to s) when
// every file is gone.
func (t *treeSnap) rootOrEmpty(s storer.EncodedObjectStorer) plumbing.Hash {
	if !t.root.IsZero() {
		return t.root
	}
	h, err := writeObject(s, plumbing.TreeObject, nil)
	if err != nil {
		return plumbing.ZeroHash
	}
	return h
}

// Prefetch fetches, on a partial clone, the trees on the way to h's paths,
// the trees below h's folders and the blobs of h's reads, a folder level at
// a time: a few requests in all, instead of one per folder. On a full
// clone it does nothing.
func (t *treeSnap) Prefetch(h statestore.Hint) error {
	bf, ok := t.s.(batchFetcher)
	if !ok || t.root.IsZero() {
		return nil
	}
	type walk struct {
		tree  plumbing.Hash
		parts []string // the path's rest below tree
		read  bool     // fetch the blob at the end
		dir   bool     // fetch every tree below the end
	}
	var level []walk
	add := func(ps []string, read, dir bool) {
		for _, p := range ps {
			full := t.full(p)
			var parts []string
			if full != "" && full != "." {
				parts = strings.Split(full, "/")
			}
			level = append(level, walk{tree: t.root, parts: parts, read: read, dir: dir})
		}
	}
	if len(h.Load) > 0 {
		// The load comes from the summary (load.go): two trees. The
		// index folders of the destinations weighed come along (small
		// trees, one or two per destination): the chosen one's is
		// written, and its flavour folder is then one level away.
		add([]string{bookkeeping.IndexDir, LoadDir}, false, false)
		add(bookkeeping.LoadPaths(h.Load), false, false)
	}
	add(h.Paths, false, false)
	add(h.Reads, true, false)
	add(h.Dirs, false, true)
	var blobs []plumbing.Hash // found on the level before: fetched with this one
	for len(level) > 0 || len(blobs) > 0 {
		want := blobs
		blobs = nil
		for _, w := range level {
			if _, ok := t.cache[w.tree]; !ok {
				want = append(want, w.tree)
			}
		}
		if err := bf.fetchMissing(want); err != nil {
			return err
		}
		var next []walk
		seen := map[plumbing.Hash]bool{}
		for _, w := range level {
			tr, err := t.tree(w.tree)
			if err != nil {
				return err
			}
			if len(w.parts) == 0 {
				if w.dir {
					for _, e := range tr.Entries {
						if e.Mode == filemode.Dir && !seen[e.Hash] {
							seen[e.Hash] = true
							next = append(next, walk{tree: e.Hash, dir: true})
						}
					}
				}
				continue
			}
			for _, e := range tr.Entries {
				if e.Name != w.parts[0] {
					continue
				}
				switch {
				case e.Mode == filemode.Dir:
					next = append(next, walk{tree: e.Hash, parts: w.parts[1:], read: w.read, dir: w.dir})
				case len(w.parts) == 1 && w.read && isFile(&e):
					blobs = append(blobs, e.Hash)
				}
				break
			}
		}
		level = next
	}
	return nil
}
