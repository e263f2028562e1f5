package gitstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/render-dev/render/statestore"
)

// LocalPath reports whether u names a repository on this machine, and its
// absolute path: file:///abs/path, an absolute path, or file://rel/path and
// ./rel/path, which are resolved from the current folder.
func LocalPath(u string) (string, bool) {
	var p string
	switch {
	case strings.HasPrefix(u, "file://"):
		var err error
		if p, err = url.PathUnescape(strings.TrimPrefix(u, "file://")); err != nil {
			return "", false
		}
	case strings.HasPrefix(u, "/"), strings.HasPrefix(u, "./"), strings.HasPrefix(u, "../"):
		p = u
	default:
		return "", false
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", false
	}
	return abs, true
}

// localRepo writes a bare repository on this machine in place.
type localRepo struct {
	dir    string
	branch plumbing.ReferenceName
	st     *filesystem.Storage
	warn   func(msg string, args ...any)
	warned bool
}

// staleLock is how old a ref lock whose owner cannot be checked must be
// before it is taken to be left by a writer that died: the locked section
// is a read and a rename, so a lock this old is never a live one. A lock
// whose owner is a process on this host that is gone is taken over at
// once (lockfile.go).
const staleLock = 30 * time.Second

// exists reports whether the repository folder exists and is not empty. A
// missing folder whose parent is missing too is ErrNotFound: a mistyped
// path is an error, not a new repository.
func (l *localRepo) exists() (bool, error) {
	entries, err := os.ReadDir(l.dir)
	switch {
	case err == nil:
		return len(entries) > 0, nil
	case !errors.Is(err, os.ErrNotExist):
		return false, fmt.Errorf("open repository: %w", err)
	}
	if _, perr := os.Stat(filepath.Dir(l.dir)); perr != nil {
		return false, fmt.Errorf("%w: repository %s (its parent folder does not exist)", statestore.ErrNotFound, l.dir)
	}
	return false, nil
}

// create makes a bare repository whose HEAD names the store's branch, so
// the embedded default needs no set-up. Only a write creates it: reading a
// missing repository (a dry run) sees an empty one and leaves no trace.
func (l *localRepo) create() error {
	if err := os.Mkdir(l.dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create repository: %w", err)
	}
	r, err := git.PlainInit(l.dir, true)
	if errors.Is(err, git.ErrRepositoryAlreadyExists) {
		return nil // another writer was first
	}
	if err != nil {
		return fmt.Errorf("create repository: %w", err)
	}
	return r.Storer.SetReference(plumbing.NewSymbolicReference(plumbing.HEAD, l.branch))
}

// open opens the existing repository. A fresh storage is opened on every
// read, so packs written by other processes are seen.
//
// A repository with a work tree is written only on a branch that is not
// checked out there, as git push writes it (receive.denyCurrentBranch):
// moving the checked-out branch under a work tree leaves the work tree
// and index showing the whole change undone, and the next commit made
// there would undo it.
func (l *localRepo) open() (*filesystem.Storage, error) {
	gitDir, work := l.dir, ""
	if fi, err := os.Stat(filepath.Join(l.dir, ".git")); err == nil && fi.IsDir() {
		gitDir, work = filepath.Join(l.dir, ".git"), l.dir
	} else if err == nil {
		return nil, fmt.Errorf("%s is a linked work tree of another repository (its .git is a file): give the store a bare repository (git clone --bare)", l.dir)
	}
	if _, err := os.Stat(filepath.Join(gitDir, "objects")); err != nil {
		return nil, fmt.Errorf("%s is not a git repository", l.dir)
	}
	st := filesystem.NewStorage(osfs.New(gitDir), cache.NewObjectLRUDefault())
	if work == "" && filepath.Base(gitDir) == ".git" {
		if cfg, err := st.Config(); err == nil && !cfg.Core.IsBare {
			work = filepath.Dir(gitDir)
		}
	}
	if work != "" {
		if head, err := st.Reference(plumbing.HEAD); err == nil && head.Type() == plumbing.SymbolicReference && head.Target() == l.branch {
			return nil, fmt.Errorf("repository %s has branch %s checked out in the work tree %s: render moves a branch as git push does, and git refuses to move a checked-out branch (the work tree would show the change undone); give the store a bare repository (git clone --bare), or a branch that is not checked out",
				l.dir, l.branch.Short(), work)
		}
	}
	return st, nil
}

// readBranch reads the branch from st: zero when the repository has no
// such ref (the first write creates it). A ref that exists but holds no
// commit id (an empty or cut-off file: a torn write) is damage, reported
// naming it; taken for a missing branch, it would make the write a new
// root commit and drop the branch's history and every other workload.
func (l *localRepo) readBranch(st *filesystem.Storage) (plumbing.Hash, error) {
	damaged := func(what string) error {
		return fmt.Errorf("the ref %s of repository %s %s: the repository is damaged (a write cut off?), and render writes nothing to it: restore the ref (git update-ref %s <commit>)",
			l.branch, l.dir, what, l.branch)
	}
	// go-git reads an empty loose ref as no ref at all, and a cut-off id
	// as one padded with zeros: the loose file is checked first.
	file := filepath.Join(st.Filesystem().Root(), filepath.FromSlash(l.branch.String()))
	switch data, err := os.ReadFile(file); {
	case err == nil && len(data) == 0:
		return plumbing.ZeroHash, damaged("is an empty file")
	case err == nil:
		if id := strings.TrimSpace(string(data)); !plumbing.IsHash(id) || plumbing.NewHash(id).IsZero() {
			return plumbing.ZeroHash, damaged(fmt.Sprintf("holds %.60q, not a commit id", id))
		}
	case !errors.Is(err, os.ErrNotExist):
		return plumbing.ZeroHash, fmt.Errorf("read branch %s: %w", l.branch, err)
	}
	ref, err := st.Reference(l.branch)
	switch {
	case errors.Is(err, plumbing.ErrReferenceNotFound):
		return plumbing.ZeroHash, nil
	case err != nil:
		return plumbing.ZeroHash, fmt.Errorf("read branch %s: %w", l.branch, err)
	case ref.Type() != plumbing.HashReference || ref.Hash().IsZero():
		return plumbing.ZeroHash, damaged("does not hold a commit id")
	}
	return ref.Hash(), nil
}

func (l *localRepo) head(_ context.Context, _ bool) (plumbing.Hash, storer.EncodedObjectStorer, error) {
	ok, err := l.exists()
	if err != nil {
		return plumbing.ZeroHash, nil, err
	}
	if !ok {
		l.st = nil
		return plumbing.ZeroHash, memory.NewStorage(), nil
	}
	st, err := l.open()
	if err != nil {
		return plumbing.ZeroHash, nil, err
	}
	l.st = st
	tip, err := l.readBranch(st)
	if err != nil {
		return plumbing.ZeroHash, nil, err
	}
	return tip, st, nil
}

// publish writes the new objects, then moves the branch from old to commit
// the way git itself does: create "<ref>.lock" exclusively, check the
// branch still points at old, write the new id to the lock and rename it
// over the ref. Readers see the old commit or the new one, never a mix.
func (l *localRepo) publish(_ context.Context, objs storer.EncodedObjectStorer, old, commit plumbing.Hash) error {
	ov := objs.(*overlay)
	if l.st == nil {
		// The repository did not exist when this update was planned.
		if err := l.create(); err != nil {
			return err
		}
		st, err := l.open()
		if err != nil {
			return err
		}
		l.st = st
		ov.EncodedObjectStorer = st
	}
	if err := ov.flush(); err != nil {
		return err
	}
	refFile := filepath.Join(l.st.Filesystem().Root(), filepath.FromSlash(l.branch.String()))
	if err := os.MkdirAll(filepath.Dir(refFile), 0o755); err != nil {
		return err
	}
	lock := refFile + ".lock"
	f, err := os.OpenFile(lock, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, os.ErrExist) && l.takeOver(lock) {
		f, err = os.OpenFile(lock, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	}
	if errors.Is(err, os.ErrExist) {
		return errStale // someone else is moving the branch right now
	}
	if err != nil {
		return fmt.Errorf("lock branch: %w", err)
	}
	done := false
	defer func() {
		if !done {
			// Remove the lock only while it is still this one: a waiter
			// that took it over may have made a new one.
			if stillMine(f, lock) {
				os.Remove(lock)
			}
			f.Close()
		}
	}()
	// Say who holds the lock, until the commit id replaces this line.
	if _, err := f.WriteString(thisProcess().line()); err != nil {
		return fmt.Errorf("lock branch: %w", err)
	}
	// Read the ref afresh from disk, under the lock.
	st, err := l.open()
	if err != nil {
		return err
	}
	cur, err := l.readBranch(st)
	if err != nil {
		return err
	}
	if cur != old {
		return errStale
	}
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("write branch: %w", err)
	}
	if _, err := f.WriteAt([]byte(commit.String()+"\n"), 0); err != nil {
		return fmt.Errorf("write branch: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write branch: %w", err)
	}
	if !stillMine(f, lock) {
		// Taken over by a waiter that judged this writer dead: moving
		// the branch now could publish someone else's lock.
		return errStale
	}
	if err := os.Rename(lock, refFile); err != nil {
		return fmt.Errorf("move branch: %w", err)
	}
	done = true
	f.Close()
	return nil
}

func (l *localRepo) close() error { return nil }

// server is nil: a repository on this machine has no server.
func (l *localRepo) server() *remoteRepo { return nil }
