package statestore

import (
	"errors"
	"fmt"
	"path"

	"github.com/render-dev/render/internal/layout"
)

// Sentinel errors every backend wraps, so callers can test with errors.Is.
var (
	// ErrNotFound means the repository, branch or bucket does not exist and
	// the store was not asked to create it, or a file does not exist.
	ErrNotFound = errors.New("not found")
	// ErrUnreachable means the store could not be reached before the deadline.
	ErrUnreachable = errors.New("store unreachable")
	// ErrAuth means the store refused the credentials.
	ErrAuth = errors.New("authentication failed")
	// ErrConflict means concurrent writers kept winning until the retry budget ran out,
	// or a file the update wants belongs to another workload.
	ErrConflict = errors.New("conflict")
	// ErrRejected means the server refused the write for a reason of its own
	// (a pre-receive hook, a protected branch); the message carries its text.
	ErrRejected = errors.New("write rejected")
)

// ErrStale is wrapped by StaleError.
var ErrStale = errors.New("stale update")

// StaleError is an update planned on a store whose record of the workload
// changed since the update was computed (Update.Basis). Trying it again
// does not help (Classify: permanent); computing it again from a fresh
// read does.
type StaleError struct {
	Workload string
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("%v: workload %s changed in the store after this render read it", ErrStale, e.Workload)
}

// Is makes a StaleError an ErrStale.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// StoreError wraps a backend error with the store's name, so the CLI can
// print one line naming the store.
type StoreError struct {
	Store string
	Op    string
	Err   error
}

func (e *StoreError) Error() string { return fmt.Sprintf("%s: %s: %v", e.Store, e.Op, e.Err) }
func (e *StoreError) Unwrap() error { return e.Err }

// Redacted returns an error whose text is msg, which the caller has made
// free of credentials, and whose chain is err's, so errors.Is and errors.As
// still see what happened.
func Redacted(msg string, err error) error { return &redactedError{msg: msg, err: err} }

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// OwnedError says an update wants what another workload already has: a
// path its record owns, or a Kubernetes object it writes to the same
// section of the same destination (Flux builds a section as one
// kustomization, so the duplicate would break it for every workload
// there). It wraps ErrConflict, but it is not a race: retrying cannot help,
// and the CLI reports it as bad input.
type OwnedError struct {
	// Owner is the other workload's key.
	Owner string
	// Path is the path in dispute, for a path another workload owns.
	Path string
	// Object is this workload's object, and OwnerObject the other
	// workload's, for a duplicate object (nil otherwise).
	Object, OwnerObject *Object
}

func (e *OwnedError) Error() string {
	if e.Object == nil {
		return fmt.Sprintf("%v: %s belongs to workload %s", ErrConflict, e.Path, e.Owner)
	}
	o := e.Object
	where := path.Join(o.Destination, sectionDir(o.Section))
	msg := fmt.Sprintf("%v: %s (from %s) is already written by workload %s", ErrConflict, o, objectFile(*o), e.Owner)
	if e.OwnerObject != nil {
		msg += fmt.Sprintf(" (from %s)", objectFile(*e.OwnerObject))
	}
	return msg + fmt.Sprintf(" to %s; Flux builds them together, so its build would fail for every workload there", where)
}

func (e *OwnedError) Unwrap() error { return ErrConflict }

func sectionDir(section string) string {
	if section == "" || section == "." {
		return "."
	}
	return section
}

func objectFile(o Object) string {
	f := path.Join(o.Destination, o.File)
	if o.Source != "" && o.Source != f {
		return o.Source + ", at " + f
	}
	return f
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

// ErrDeadline is wrapped by the error a wait returns when the render's
// retry deadline would pass during it (see statestore/wait).
var ErrDeadline = errors.New("retry deadline passed")
