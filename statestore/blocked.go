package statestore

import (
	"fmt"
	"path"

	"github.com/render-dev/render/internal/layout"
)

// TreeShaped is a Snapshot of a store whose paths form a tree, as a file
// system's do (git, an OCI layer, the memory store): a path is a file, a
// folder or nothing, so a file cannot be written where a folder is, nor
// below a file. Looking a path's folders up and listing it are cheap
// there, and the planner checks every path it adds (see BlockedError). A
// flat store (S3) is not checked by the planner: a key and the keys below
// it are different objects there, and looking them up costs a listing per
// path. MinIO accepts both but lists only the upper one, hiding the lower
// from readers that list the bucket (Flux's Bucket source), so the S3
// backend refuses such a write itself, with a BlockedError, from what its
// listings show (docs/design.md, "S3", "Keys in the way").
type TreeShaped interface {
	Snapshot
	TreeShaped()
}

// treeShaped reports whether snap, or the snapshot an Overlay lies on, is
// TreeShaped.
func treeShaped(snap Snapshot) bool {
	switch s := snap.(type) {
	case *Overlay:
		return treeShaped(s.base)
	case TreeShaped:
		return true
	}
	return false
}

// BlockedError is a path a plan must write that the store cannot take as
// it is: a file stands where the plan needs a folder, or a folder (with
// files in it) where it needs a file. No other writer caused it and
// reading the store again cannot resolve it, so it is never retried.
// BadInput says whether the workflow's file names can fix it.
type BlockedError struct {
	// Path is the path the plan writes (store-relative).
	Path string
	// Blocker stands in Path's way: a file at one of Path's folders, or
	// (Folder) a folder at Path.
	Blocker string
	Folder  bool
	// File is Blocker, or for a folder the first file in it that the
	// write could not remove.
	File string
	// Owner is the workload whose record owns File; "" when none does.
	Owner string
}

func (e *BlockedError) Error() string {
	what := fmt.Sprintf("%s is a file", e.Blocker)
	need := "needs a folder there"
	if e.Folder {
		what = fmt.Sprintf("%s is a folder", e.Blocker)
		if e.File != "" {
			what += fmt.Sprintf(" holding %s", e.File)
		}
		need = "needs a file there"
	}
	msg := fmt.Sprintf("cannot write %s: %s", e.Path, what)
	switch {
	case e.BadInput():
		return msg + fmt.Sprintf(" of workload %s, and this workload %s (a path is a file or a folder, never both): rename the workflow's file so that it does not take the other workload's path", e.Owner, need)
	case e.Owner != "":
		return msg + fmt.Sprintf(" of workload %s, where render %s: the store is damaged; render writes nothing to it until the path is repaired", e.Owner, need)
	case layout.IsMeta(e.File) || layout.IsMeta(e.Blocker):
		return msg + fmt.Sprintf(" that no workload owns, inside render's own folder %s, and render %s: the store is damaged (written by hand or by another tool); remove %s", layout.MetaDir, need, e.Blocker)
	}
	return msg + fmt.Sprintf(" that no workload owns (written by hand or by another tool), and render %s: the store is damaged; remove %s, or move it out of the way", need, e.Blocker)
}

// BadInput reports whether the workflow can fix the block: the path is
// one of the workload's files, and another workload's file is in its
// way. Otherwise the store is damaged: render's own folder is in the way
// or in it, or what is in the way is no workload's.
func (e *BlockedError) BadInput() bool {
	return e.Owner != "" && !layout.IsMeta(e.Path) && !layout.IsMeta(e.File) && !layout.IsMeta(e.Blocker)
}

// shapes checks, on a TreeShaped snapshot, that the paths a plan adds
// are neither below a file nor a folder, unless what is in the way is the
// workload's own and the plan removes it (a file of the workload that
// becomes a folder).
type shapes struct {
	snap     Snapshot
	workload string
	on       bool
	// gone reports whether the plan removes path f: the workload owns it
	// and no longer wants it.
	gone   func(f string) bool
	wants  func(f string) bool // the plan writes f
	owners func() (map[string]string, error)
	files  map[string]bool // folders of added paths already looked up: is it a file
}

func newShapes(snap Snapshot, workload string, gone, wants func(string) bool, owners func() (map[string]string, error)) *shapes {
	return &shapes{snap: snap, workload: workload, on: treeShaped(snap), gone: gone, wants: wants, owners: owners, files: map[string]bool{}}
}

// check returns a *BlockedError when p, which the plan adds, cannot be
// written as a file.
func (s *shapes) check(p string) error {
	if !s.on {
		return nil
	}
	for dir := path.Dir(p); dir != "." && dir != "/"; dir = path.Dir(dir) {
		if s.wants(dir) { // the update itself wants a file and a file below it
			return &BlockedError{Path: p, Blocker: dir, File: dir, Owner: s.workload}
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
			return s.blocked(&BlockedError{Path: p, Blocker: dir, File: dir})
		}
	}
	below, err := s.snap.List(p)
	if err != nil {
		return err
	}
	for _, f := range below {
		if !s.gone(f) {
			return s.blocked(&BlockedError{Path: p, Blocker: p, Folder: true, File: f})
		}
	}
	return nil
}

// blocked names the owner of what is in the way.
func (s *shapes) blocked(e *BlockedError) error {
	idx, err := s.owners()
	if err != nil {
		return err
	}
	e.Owner = idx[e.File]
	return e
}
