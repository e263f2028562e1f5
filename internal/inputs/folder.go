package inputs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/render-dev/render/renderer"
)

// folder is one of the folders render reads (the output, metadata, input,
// platform and secrets folders), opened as an os.Root. Every file is opened
// relative to that root by the kernel, one component at a time, so no file
// outside the folder is ever read, whatever happens to the tree while it is
// read: a folder swapped for a link to elsewhere between listing and reading
// gives an error, never the other file.
//
// Links that stay inside the folder are followed, as they were before; an
// absolute link is taken as the path it names inside the folder. A link
// that leads outside is refused with the path of the link.
type folder struct {
	root *os.Root
	dir  string // the folder as given, made absolute: for messages
	real string // dir with its links resolved when it was opened
	what string // "output folder", for messages
}

// errOutside is a link leading out of the folder.
var errOutside = errors.New("link leads outside")

// maxLinks bounds how many links one path may go through, as the kernel's
// ELOOP does.
const maxLinks = 40

// openFolder opens dir as a folder render reads. Its error is the
// operating system's, for the caller to phrase.
func openFolder(dir, what string) (*folder, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		return nil, err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		real = abs
	}
	return &folder{root: root, dir: abs, real: real, what: what}, nil
}

func (f *folder) Close() { f.root.Close() }

// path is the file name of rel (a slash path inside the folder) for messages.
func (f *folder) path(rel string) string {
	if rel == "." || rel == "" {
		return f.dir
	}
	return filepath.Join(f.dir, filepath.FromSlash(rel))
}

func (f *folder) fail(rel, msg string) error {
	return &renderer.InputError{File: f.path(rel), Msg: msg}
}

// inside maps an absolute link target into the folder: the slash path it
// names relative to the folder, or errOutside.
func (f *folder) inside(target string) (string, error) {
	target = filepath.Clean(target)
	for _, base := range []string{f.dir, f.real} {
		if r, err := filepath.Rel(base, target); err == nil && filepath.IsLocal(r) {
			return filepath.ToSlash(r), nil
		} else if err == nil && r == "." {
			return ".", nil
		}
	}
	return "", errOutside
}

// resolve follows the links on the way to rel, component by component,
// inside the folder, and gives the slash path it names there. It only
// decides what to open and how to word an error: the open itself goes
// through the root, so a tree changed after resolve still cannot lead out.
func (f *folder) resolve(rel string) (string, error) {
	done := "" // resolved so far, no links in it
	todo := strings.Split(path.Clean(rel), "/")
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if done == "" {
				return "", errOutside
			}
			done = path.Dir(done)
			if done == "." {
				done = ""
			}
			continue
		}
		next := path.Join(done, c)
		fi, err := f.root.Lstat(next)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			done = next
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("more than %d links", maxLinks)
		}
		target, err := f.root.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			in, err := f.inside(target)
			if err != nil {
				return "", err
			}
			done = ""
			target = in
		}
		todo = append(strings.Split(filepath.ToSlash(target), "/"), todo...)
	}
	if done == "" {
		return ".", nil
	}
	return done, nil
}

// open opens the regular file rel names inside the folder, following links
// that stay inside. Its errors are InputErrors naming rel, except a missing
// file, which matches fs.ErrNotExist.
func (f *folder) open(rel string) (*os.File, error) {
	// Most files are plain files reached through plain folders: the root
	// opens them directly. A path through an absolute link, or one that
	// leads out, fails there and is resolved below to say which it is.
	file, err := f.openRegular(rel, rel)
	var retry *openError
	if !errors.As(err, &retry) {
		return file, err
	}
	name, err := f.resolve(rel)
	if errors.Is(err, errOutside) {
		return nil, f.fail(rel, "link leads outside the "+f.what)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err // the caller decides whether a missing file is wrong
	}
	if err != nil {
		return nil, f.fail(rel, "cannot read: "+cleanErr(err))
	}
	file, err = f.openRegular(rel, name)
	if errors.As(err, &retry) {
		if errors.Is(retry.err, fs.ErrNotExist) {
			return nil, retry.err
		}
		// The tree changed since resolve; say so if it now leads out.
		if _, rerr := f.resolve(rel); errors.Is(rerr, errOutside) {
			return nil, f.fail(rel, "link leads outside the "+f.what)
		}
		return nil, f.fail(rel, "cannot read: "+cleanErr(retry.err))
	}
	return file, err
}

// openError is a failure to open a path through the root.
type openError struct{ err error }

func (e *openError) Error() string { return e.err.Error() }
func (e *openError) Unwrap() error { return e.err }

// openRegular opens name through the root and checks it is a regular file;
// rel is the path asked for, for messages.
func (f *folder) openRegular(rel, name string) (*os.File, error) {
	// O_NONBLOCK: a named pipe opens at once (and is refused below) rather
	// than waiting for a writer; it changes nothing for a regular file.
	file, err := f.root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, &openError{err}
	}
	fi, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, f.fail(rel, "cannot read: "+cleanErr(err))
	}
	if fi.Mode().IsRegular() {
		return file, nil
	}
	file.Close()
	if fi.IsDir() {
		if lfi, err := f.root.Lstat(rel); err != nil || lfi.Mode()&fs.ModeSymlink != 0 || name != path.Clean(rel) {
			return nil, f.fail(rel, "links to folders are not followed: copy the folder into the "+f.what+" instead")
		}
		return nil, f.fail(rel, "is a folder, not a file")
	}
	return nil, f.fail(rel, "not a regular file")
}

// readFile reads the regular file rel names inside the folder. limit > 0
// bounds its size; a larger file is refused naming the limit. A missing
// file (or broken link) gives an error matching fs.ErrNotExist; every other
// error is an InputError naming rel.
func (f *folder) readFile(rel string, limit int64) ([]byte, error) {
	file, err := f.open(rel)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	tooLarge := f.fail(rel, fmt.Sprintf("is larger than %s, the limit for a YAML file", mib(limit)))
	var r io.Reader = file
	if limit > 0 {
		if fi, err := file.Stat(); err == nil && fi.Size() > limit {
			return nil, tooLarge
		}
		r = io.LimitReader(file, limit+1) // it may grow while it is read
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, f.fail(rel, "cannot read: "+cleanErr(err))
	}
	if limit > 0 && int64(len(data)) > limit {
		return nil, tooLarge
	}
	return data, nil
}

// walk calls fn for every entry below the folder, in lexical order, as
// fs.WalkDir does; folders are listed through the root too, so a folder
// swapped for a link to elsewhere is an error, never a listing of the other
// folder. Errors are InputErrors naming the entry.
func (f *folder) walk(fn func(rel string, d fs.DirEntry) error) error {
	return fs.WalkDir(f.root.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			if _, rerr := f.resolve(rel); errors.Is(rerr, errOutside) {
				return f.fail(rel, "link leads outside the "+f.what)
			}
			return f.fail(rel, "cannot read: "+cleanErr(err))
		}
		return fn(rel, d)
	})
}

func mib(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}
