package gitstore

import (
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/memory"
)

// overlay reads from a base object store and keeps new objects in memory,
// so that a render's blobs, trees and commit can be written to a local
// repository as one packfile (or a few loose objects) only once the commit
// is complete. An abandoned attempt leaves nothing behind.
type overlay struct {
	storer.EncodedObjectStorer // the base, for reads and the methods not overridden
	mem                        *memory.ObjectStorage
	added                      []plumbing.Hash
}

func newOverlay(base storer.EncodedObjectStorer) *overlay {
	return &overlay{EncodedObjectStorer: base, mem: &memory.NewStorage().ObjectStorage}
}

func (o *overlay) NewEncodedObject() plumbing.EncodedObject { return &plumbing.MemoryObject{} }

func (o *overlay) SetEncodedObject(obj plumbing.EncodedObject) (plumbing.Hash, error) {
	h := obj.Hash()
	if o.mem.HasEncodedObject(h) == nil {
		return h, nil
	}
	if o.EncodedObjectStorer.HasEncodedObject(h) == nil {
		return h, nil // already in the repository
	}
	if _, err := o.mem.SetEncodedObject(obj); err != nil {
		return h, err
	}
	o.added = append(o.added, h)
	return h, nil
}

func (o *overlay) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	if obj, err := o.mem.EncodedObject(t, h); err == nil {
		return obj, nil
	}
	return o.EncodedObjectStorer.EncodedObject(t, h)
}

func (o *overlay) HasEncodedObject(h plumbing.Hash) error {
	if o.mem.HasEncodedObject(h) == nil {
		return nil
	}
	return o.EncodedObjectStorer.HasEncodedObject(h)
}

func (o *overlay) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	if n, err := o.mem.EncodedObjectSize(h); err == nil {
		return n, nil
	}
	return o.EncodedObjectStorer.EncodedObjectSize(h)
}

// looseLimit is how many new objects are written loose before a packfile is
// cheaper: many small packs slow every later lookup, many loose files slow a
// large first write.
const looseLimit = 256

// flush writes the new objects into the base store.
func (o *overlay) flush() error {
	if len(o.added) == 0 {
		return nil
	}
	if pw, ok := o.EncodedObjectStorer.(storer.PackfileWriter); ok && len(o.added) > looseLimit {
		w, err := pw.PackfileWriter()
		if err != nil {
			return fmt.Errorf("open packfile: %w", err)
		}
		enc := packfile.NewEncoder(w, o.mem, false)
		if _, err := enc.Encode(o.added, 0); err != nil {
			w.Close()
			return fmt.Errorf("write packfile: %w", err)
		}
		if err := w.Close(); err != nil {
			return fmt.Errorf("write packfile: %w", err)
		}
		return nil
	}
	for _, h := range o.added {
		obj, err := o.mem.EncodedObject(plumbing.AnyObject, h)
		if err != nil {
			return err
		}
		if _, err := o.EncodedObjectStorer.SetEncodedObject(obj); err != nil {
			return fmt.Errorf("write object: %w", err)
		}
	}
	return nil
}

// fetchMissing passes a batch fetch to the base (a partial clone's store).
func (o *overlay) fetchMissing(hs []plumbing.Hash) error {
	if bf, ok := o.EncodedObjectStorer.(batchFetcher); ok {
		return bf.fetchMissing(hs)
	}
	return nil
}
