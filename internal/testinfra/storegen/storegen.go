// Package storegen builds large state stores in render's own format without
// running a render per workload, for the benchmarks and the tests that need
// a store of 100,000 workloads; and stores in Kratix's layout, as Kratix
// leaves them before render first writes (no records, no index).
//
// Each workload is a resource request whose pipeline wrote one ConfigMap,
// placed on one of the destinations in turn. Its files, record, claims and
// placement-index entries are what planner.PlanUpdate plans for it on an
// empty store, so the generated store is what render itself would have
// written, one render at a time.
package storegen

import (
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/go-git/go-billy/v5/osfs"

	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/gitstore"
	"github.com/render-dev/render/statestore/planner"
)

// Spec describes a generated store.
type Spec struct {
	// Workloads is how many resource requests the store holds.
	Workloads int
	// Destinations is how many destinations they are spread over
	// (dest-000, dest-001, ...); default 100.
	Destinations int
	// Promises is how many promises the requests belong to; default 10.
	Promises int
}

func (s Spec) defaults() Spec {
	if s.Destinations <= 0 {
		s.Destinations = 100
	}
	if s.Promises <= 0 {
		s.Promises = 10
	}
	return s
}

// Destination is the name (and path) of destination i.
func Destination(i int) string { return fmt.Sprintf("dest-%03d", i) }

// Workload is the workload key of request i.
func Workload(s Spec, i int) string {
	s = s.defaults()
	return statestore.WorkloadKey("resource", fmt.Sprintf("promise-%02d", i%s.Promises), "team", fmt.Sprintf("request-%06d", i), "configure")
}

// Update is what render would write for request i (or any other index, for
// a new request), to the destination it is placed on.
func Update(s Spec, i int) statestore.Update {
	s = s.defaults()
	dest := Destination(i % s.Destinations)
	promise := fmt.Sprintf("promise-%02d", i%s.Promises)
	name := fmt.Sprintf("request-%06d", i)
	dir := path.Join("resources", "team", promise, name, "configure", "5058f")
	file := path.Join(dir, "configmap.yaml")
	cm := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: team\ndata:\n  request: %q\n  size: small\n", name, name)
	key := Workload(s, i)
	return statestore.Update{
		Workload:     key,
		Files:        map[string][]byte{path.Join(dest, file): []byte(cm)},
		Destinations: []string{dest},
		Record: &statestore.Record{
			Type: "resource", Promise: promise, Namespace: "team", Name: name, Pipeline: "configure",
			Placements: []statestore.Placement{{Group: ".", Destinations: []string{dest}}},
			Objects: []statestore.Object{{
				APIVersion: "v1", Kind: "ConfigMap", Namespace: "team", Name: name, Section: "resources",
				File: file, Store: "GitStateStore/default", Destination: dest, Source: "configmap.yaml",
			}},
		},
	}
}

// emptySnap is a store with nothing in it.
type emptySnap struct{}

func (emptySnap) Compare(string, []byte) (bool, bool, error) { return false, false, nil }
func (emptySnap) ReadFile(p string) ([]byte, error) {
	return nil, fmt.Errorf("%s: %w", p, statestore.ErrNotFound)
}
func (emptySnap) List(string) ([]string, error) { return nil, nil }
func (emptySnap) Capabilities() statestore.SnapshotCapabilities {
	return statestore.SnapshotCapabilities{}
}

// Files returns every file of the store s describes, by path relative to
// the store's path.
func Files(s Spec) (map[string][]byte, error) {
	s = s.defaults()
	out := map[string][]byte{}
	for i := range s.Workloads {
		plan, err := planner.PlanUpdate(emptySnap{}, Update(s, i))
		if err != nil {
			return nil, err
		}
		for _, op := range plan.Ops {
			out[op.Path] = op.Data
		}
	}
	return out, nil
}

// KratixFiles returns every file of the store s describes as Kratix writes
// it, by path relative to the store's path: each request's ConfigMap in
// its nestedByMetadata folder (the same file Update writes) and each
// destination's canaries, and nothing of render's own (no .render folder).
func KratixFiles(s Spec) map[string][]byte {
	s = s.defaults()
	out := map[string][]byte{}
	for i := range s.Destinations {
		maps.Copy(out, renderer.CanaryFiles(renderer.Destination{Path: Destination(i), Mode: renderer.NestedByMetadata}))
	}
	for i := range s.Workloads {
		maps.Copy(out, Update(s, i).Files)
	}
	return out
}

// WriteGit writes files below prefix as the one commit of branch in a new
// bare repository at dir, as a single packfile, with the load summary render
// keeps in a git store (statestore/gitstore's load.go). dir must not exist. large
// marks the commit as render marks a large store's commits, so renders
// read it partially (see statestore/gitstore's lazy.go).
func WriteGit(dir, branch, prefix string, files map[string][]byte, large bool) error {
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("%s exists", dir)
	}
	// The load summary a git store keeps beside the index, as render's
	// writes keep it.
	files, err := gitstore.WithLoadSummary(files)
	if err != nil {
		return err
	}
	tmp := dir + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(filepath.Join(tmp, "objects", "pack"), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(tmp, "refs", "heads"), 0o755); err != nil {
		return err
	}
	mem := memory.NewStorage()
	var order []plumbing.Hash
	// Each object once in the pack: folders with the same content (the
	// canaries' in every destination) are one tree.
	seen := map[plumbing.Hash]bool{}
	keep := func(h plumbing.Hash) {
		if !seen[h] {
			seen[h] = true
			order = append(order, h)
		}
	}
	put := func(t plumbing.ObjectType, data []byte) (plumbing.Hash, error) {
		o := mem.NewEncodedObject()
		o.SetType(t)
		o.SetSize(int64(len(data)))
		w, err := o.Writer()
		if err != nil {
			return plumbing.ZeroHash, err
		}
		if _, err := w.Write(data); err != nil {
			return plumbing.ZeroHash, err
		}
		_ = w.Close()
		h, err := mem.SetEncodedObject(o)
		if err == nil {
			keep(h)
		}
		return h, err
	}
	// A folder tree of paths, built bottom-up.
	type node struct {
		dirs  map[string]*node
		files map[string]plumbing.Hash
	}
	newNode := func() *node { return &node{dirs: map[string]*node{}, files: map[string]plumbing.Hash{}} }
	root := newNode()
	blobs := map[string]plumbing.Hash{}
	for p, data := range files {
		full := p
		if prefix != "" {
			full = path.Join(prefix, p)
		}
		h, ok := blobs[string(data)]
		if !ok {
			var err error
			if h, err = put(plumbing.BlobObject, data); err != nil {
				return err
			}
			blobs[string(data)] = h
		}
		n := root
		parts := strings.Split(full, "/")
		for _, d := range parts[:len(parts)-1] {
			c := n.dirs[d]
			if c == nil {
				c = newNode()
				n.dirs[d] = c
			}
			n = c
		}
		n.files[parts[len(parts)-1]] = h
	}
	var write func(n *node) (plumbing.Hash, error)
	write = func(n *node) (plumbing.Hash, error) {
		var t object.Tree
		for name, c := range n.dirs {
			h, err := write(c)
			if err != nil {
				return plumbing.ZeroHash, err
			}
			t.Entries = append(t.Entries, object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: h})
		}
		for name, h := range n.files {
			t.Entries = append(t.Entries, object.TreeEntry{Name: name, Mode: filemode.Regular, Hash: h})
		}
		sort.Sort(object.TreeEntrySorter(t.Entries))
		o := mem.NewEncodedObject()
		if err := t.Encode(o); err != nil {
			return plumbing.ZeroHash, err
		}
		h, err := mem.SetEncodedObject(o)
		if err == nil {
			keep(h)
		}
		return h, err
	}
	tree, err := write(root)
	if err != nil {
		return err
	}
	sig := object.Signature{Name: "storegen", Email: "storegen@localhost"}
	// The trailer render's writers leave in a large store (see
	// statestore/gitstore/lazy.go), so renders read it partially.
	msg := fmt.Sprintf("storegen: %d files\n", len(files))
	if large {
		msg += "\nRender-Store-Size: large\n"
	}
	c := &object.Commit{Author: sig, Committer: sig, Message: msg, TreeHash: tree}
	co := mem.NewEncodedObject()
	if err := c.Encode(co); err != nil {
		return err
	}
	commit, err := mem.SetEncodedObject(co)
	if err != nil {
		return err
	}
	keep(commit)

	fs := filesystem.NewStorage(osfs.New(tmp), cache.NewObjectLRUDefault())
	pw, err := fs.PackfileWriter()
	if err != nil {
		return err
	}
	if _, err := packfile.NewEncoder(pw, mem, false).Encode(order, 10); err != nil {
		pw.Close()
		return err
	}
	if err := pw.Close(); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "HEAD"), []byte("ref: refs/heads/"+branch+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "config"), []byte("[core]\n\trepositoryformatversion = 0\n\tbare = true\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "refs", "heads", branch), []byte(commit.String()+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}
