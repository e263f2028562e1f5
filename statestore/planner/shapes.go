package planner

import (
	"path"

	"github.com/render-dev/render/statestore"
)

// A snapshot whose paths form a tree, as a file system's do, declares it
// (statestore.SnapshotCapabilities.TreeShaped: git, an OCI layer, the
// memory store; an Overlay declares what its base does): a path is a
// file, a folder or nothing, so a file cannot be written where a folder
// is, nor below a file. Looking a path's folders up and listing it are
// cheap there, and the planner checks every path it adds (see
// BlockedError). A flat store (S3) is not checked by the planner: a key
// and the keys below it are different objects there, and looking them up
// costs a listing per path. MinIO accepts both but lists only the upper
// one, hiding the lower from readers that list the bucket (Flux's Bucket
// source), so the S3 backend refuses such a write itself, with a
// BlockedError, from what its listings show (docs/design.md, "S3", "Keys
// in the way").

// shapes checks, on a tree-shaped snapshot, that the paths a plan adds
// are neither below a file nor a folder, unless what is in the way is the
// workload's own and the plan removes it (a file of the workload that
// becomes a folder).
type shapes struct {
	snap     statestore.Snapshot
	workload string
	on       bool
	// gone reports whether the plan removes path f: the workload owns it
	// and no longer wants it.
	gone   func(f string) bool
	wants  func(f string) bool // the plan writes f
	owners func() (map[string]string, error)
	files  map[string]bool // folders of added paths already looked up: is it a file
}

func newShapes(snap statestore.Snapshot, workload string, gone, wants func(string) bool, owners func() (map[string]string, error)) *shapes {
	return &shapes{snap: snap, workload: workload, on: snap.Capabilities().TreeShaped, gone: gone, wants: wants, owners: owners, files: map[string]bool{}}
}

// check returns a *BlockedError when p, which the plan adds, cannot be
// written as a file.
func (s *shapes) check(p string) error {
	if !s.on {
		return nil
	}
	for dir := path.Dir(p); dir != "." && dir != "/"; dir = path.Dir(dir) {
		if s.wants(dir) { // the update itself wants a file and a file below it
			return &statestore.BlockedError{Path: p, Blocker: dir, File: dir, Owner: s.workload}
		}
		isFile, seen := s.files[dir]
		if !seen {
			exists, _, err := s.snap.Compare(dir, nil)
			if err != nil {
				return err
			}
			isFile, s.files[dir] = exists, exists
		}
		if isFile && !s.gone(dir) {
			return s.blocked(&statestore.BlockedError{Path: p, Blocker: dir, File: dir})
		}
	}
	below, err := s.snap.List(p)
	if err != nil {
		return err
	}
	for _, f := range below {
		if !s.gone(f) {
			return s.blocked(&statestore.BlockedError{Path: p, Blocker: p, Folder: true, File: f})
		}
	}
	return nil
}

// blocked names the owner of what is in the way.
func (s *shapes) blocked(e *statestore.BlockedError) error {
	idx, err := s.owners()
	if err != nil {
		return err
	}
	e.Owner = idx[e.File]
	return e
}
