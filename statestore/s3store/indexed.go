package s3store

import (
	"context"
	"errors"
	"path"
	"sort"

	"github.com/minio/minio-go/v7"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
)

// ensureIndexed makes sure, before a write plans on snap, that the store
// has the placement index's marker (bookkeeping.IndexMarker), so that no
// plan of a workload ever includes the marker or another workload's index
// entries and claims. It reports whether it wrote any file besides the
// marker: snap does not show those, and the write must take a fresh
// snapshot.
//
// The planner adds the marker, and a store's migration, to the write that
// finds the store without it. On S3, where writers of different workloads
// do not take turns, that made every writer that started before the
// marker existed (all of them, in a fresh bucket) race to create it:
// every writer but one lost its first attempt on it, and a lost attempt
// left the marker named in its record's intent, for the next attempt to
// delete as the workload's own (issue 39). Here, the marker is made by a
// step of its own, where losing the race to create it is fine.
//
// A writer of this version makes the marker exist before it writes any
// record (here, or an earlier writer did). So when the records folder is
// listed first and the marker looked up after, and the marker is still
// missing, every record that listing showed was written by a render that
// predates the index (see indexVerdict). A bucket with no record needs
// nothing more than the marker (one PUT, conditioned on its absence).
// Records that predate the index are migrated first (their index entries
// and claims, each created only where missing, as the planner would
// have), from the view's listing of every record or a new one, followed by
// one more look at the marker (kept says snap is a view older than the
// write, the caller's view: another writer may have made the
// marker since).
func (s *Store) ensureIndexed(ctx context.Context, snap *snapshot, kept bool) (bool, error) {
	v, err := snap.indexVerdict()
	switch {
	case err != nil:
		return false, err
	case v == verdictMarker:
		return false, nil
	case v == verdictEmpty:
		// No record when the records folder was listed, after the marker
		// was found missing: nothing to migrate. A record written since
		// was written by a render that made the marker first, and then
		// the marker's creation fails, as it should.
		return false, s.createMarker(ctx, snap)
	}
	// The records, listed before the marker is looked at: the view's own
	// listing when it made one (a render reads every record of a store
	// without the marker), or a new one.
	var recs *snapshot
	snap.mu.Lock()
	if snap.deepCovered(statestore.RecordsDir) {
		recs = snap
	}
	snap.mu.Unlock()
	if recs != nil || kept {
		// The view is older than this write: somebody may have made the
		// marker since it looked.
		if o, ok, err := s.look(ctx, bookkeeping.IndexMarker); err != nil || ok {
			if ok {
				snap.indexed(o)
			}
			return false, err
		}
	}
	if recs == nil {
		recs = s.newSnapshot(ctx)
		if err := recs.listDeep(statestore.RecordsDir); err != nil {
			return false, err
		}
		if o, ok, err := s.look(ctx, bookkeeping.IndexMarker); err != nil || ok {
			if ok {
				snap.indexed(o)
			}
			return false, err
		}
	}
	wrote, err := s.migrate(ctx, recs)
	if err != nil {
		return false, err
	}
	return wrote, s.createMarker(ctx, snap)
}

// createMarker writes the index marker, where nothing exists yet, and
// makes snap show it.
func (s *Store) createMarker(ctx context.Context, snap *snapshot) error {
	data := bookkeeping.IndexMarkerData()
	etag, err := s.put(ctx, bookkeeping.IndexMarker, data, cond{})
	switch {
	case errors.Is(err, errChanged):
		etag = "" // made by another writer meanwhile: the store has it
	case err != nil:
		return err
	}
	snap.indexed(object{etag: etag, size: int64(len(data))})
	return nil
}

// What a snapshot found out about the placement index (indexVerdict).
const (
	verdictUnknown = iota
	// verdictMarker: the index marker exists.
	verdictMarker
	// verdictEmpty: the marker was missing, and the records folder, listed
	// after that, held no record: nothing predates the index.
	verdictEmpty
	// verdictLegacy: the records folder held records, and the marker was
	// still missing once they were listed: they predate the index.
	verdictLegacy
)

// hasIndex is the snapshot's Indexed, which its Capabilities declare
// (bookkeeping.Indexed asks it): a store counts as indexed when it has
// the marker or no record at all (see indexVerdict).
func (sn *snapshot) hasIndex() (bool, error) {
	v, err := sn.indexVerdict()
	return v != verdictLegacy, err
}

// indexVerdict tells, once per snapshot, whether the store has the index:
// the marker, looked up; when it is missing, whether the records folder
// holds any record (one short listing), and if it does, the marker looked
// at once more. A render of this version makes the marker before it writes
// any record (ensureIndexed), so records listed with the marker missing
// after them predate the index; and a bucket that holds no record yet
// needs no migration, and is read as an indexed one (its renders read
// their own few paths, not every record some other render of a burst
// of first renders has just written).
func (sn *snapshot) indexVerdict() (int, error) {
	sn.mu.Lock()
	v := sn.verdict
	sn.mu.Unlock()
	if v != verdictUnknown {
		return v, nil
	}
	o, ok, err := sn.lookup(bookkeeping.IndexMarker)
	switch {
	case err != nil:
		return v, err
	case ok && !o.tomb:
		v = verdictMarker
	case sn.empty:
		v = verdictEmpty
	default:
		// The listing that looked the marker up went on, in the same
		// page, past the records folder's place (the marker's name sorts
		// before it): it tells whether the folder holds a record, and
		// no request of its own is needed. Both answers come from one
		// response, of a listing made in key order: the marker's
		// absence is seen first, as below.
		any, known := sn.folderKnown(statestore.RecordsDir, bookkeeping.IndexMarker)
		if !known {
			any, err = sn.s.anyRecord(sn.ctx)
			if err != nil {
				return v, err
			}
		}
		v = verdictEmpty
		if any {
			o, ok, err := sn.s.look(sn.ctx, bookkeeping.IndexMarker)
			if err != nil {
				return verdictUnknown, err
			}
			v = verdictLegacy
			if ok {
				sn.indexed(o)
				v = verdictMarker
			}
		}
	}
	sn.mu.Lock()
	defer sn.mu.Unlock()
	if sn.verdict == verdictUnknown {
		sn.verdict = v
	}
	return sn.verdict, nil
}

// anyRecord reports whether the records folder holds any object (a
// tombstone counts: its workload was written once).
func (s *Store) anyRecord(ctx context.Context) (bool, error) {
	fetchOwner := false
	var any bool
	err := s.retry(ctx, func() error {
		any = false
		opts := minio.ListObjectsOptions{Prefix: s.listPrefix() + statestore.RecordsDir + "/", Recursive: true, MaxKeys: 1, FetchOwner: &fetchOwner}
		for o := range s.client.ListObjectsIter(ctx, s.cfg.Bucket, opts) {
			if o.Err != nil {
				return o.Err
			}
			any = true
			break
		}
		return ctx.Err()
	})
	return any, err
}

// migrate writes the index entries and claims of every record recs listed
// (bookkeeping.Migration) that are missing, each conditioned on its
// absence (another writer migrating the store at the same time may make it
// first), and reports whether it wrote any.
func (s *Store) migrate(ctx context.Context, recs *snapshot) (bool, error) {
	var paths []string
	recs.mu.Lock()
	for _, p := range recs.paths(statestore.RecordsDir) {
		if o, _, _ := recs.obj(p); isRecordPath(p) && !o.tomb {
			paths = append(paths, p)
		}
	}
	recs.mu.Unlock()
	if len(paths) == 0 {
		return false, nil
	}
	if err := recs.prefetch(paths); err != nil {
		return false, err
	}
	files, err := bookkeeping.Migration(recs)
	if err != nil {
		return false, err
	}
	delete(files, bookkeeping.IndexMarker)
	todo := make([]string, 0, len(files))
	for p := range files {
		todo = append(todo, p)
	}
	sort.Strings(todo)
	if err := recs.lookAll(todo, nil); err != nil {
		return false, err
	}
	var jobs []func(context.Context) error
	for _, p := range todo {
		if o, ok, err := recs.lookup(p); err != nil {
			return false, err
		} else if ok && !o.tomb {
			continue
		}
		jobs = append(jobs, func(ctx context.Context) error {
			_, err := s.put(ctx, p, files[p], cond{})
			if errors.Is(err, errChanged) {
				return nil // another writer migrating the store made it
			}
			return err
		})
	}
	return len(jobs) > 0, writeAll(ctx, s.cfg.Concurrency, jobs)
}

// look lists whether p exists now, on a snapshot of its own.
func (s *Store) look(ctx context.Context, p string) (object, bool, error) {
	o, ok, err := s.newSnapshot(ctx).lookup(p)
	return o, ok && !o.tomb, err
}

// indexed makes the snapshot show the index marker as o, whatever it
// answered before: the write that owns the snapshot made sure the store
// has it (see ensureIndexed). No plan reads or writes the marker.
func (sn *snapshot) indexed(o object) {
	sn.mu.Lock()
	sn.objs[bookkeeping.IndexMarker] = o
	sn.markFolder(path.Dir(bookkeeping.IndexMarker)) // render's own folder holds it
	sn.mu.Unlock()
}
