package s3store

import (
	"context"
	"errors"
	"sort"

	"github.com/render-dev/render/statestore"
)

// ensureIndexed makes sure, before a write plans on snap, that the store
// has the placement index's marker (statestore.IndexMarker), so that no
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
// predates the index: those are migrated (their index entries and claims,
// each created only where missing, as the planner would have) before the
// marker is created. In a fresh bucket there are none: the marker alone is
// created, one PUT, conditioned on its absence.
func (s *Store) ensureIndexed(ctx context.Context, snap *snapshot) (bool, error) {
	if o, ok, err := snap.lookup(statestore.IndexMarker); err != nil || ok && !o.tomb {
		return false, err
	}
	if !snap.empty {
		// Somebody may have made it since snap looked.
		if o, ok, err := s.look(ctx, statestore.IndexMarker); err != nil || ok {
			if ok {
				snap.indexed(o)
			}
			return false, err
		}
	}
	wrote := false
	if !snap.empty {
		recs := s.newSnapshot(ctx)
		if err := recs.listDeep(statestore.RecordsDir); err != nil {
			return false, err
		}
		if o, ok, err := s.look(ctx, statestore.IndexMarker); err != nil || ok {
			if ok {
				snap.indexed(o)
			}
			return false, err
		}
		var paths []string
		recs.mu.Lock()
		for p, o := range recs.objs {
			if isRecordPath(p) && !o.tomb {
				paths = append(paths, p)
			}
		}
		recs.mu.Unlock()
		if len(paths) > 0 {
			if err := recs.prefetch(paths); err != nil {
				return false, err
			}
			files, err := statestore.Migration(recs)
			if err != nil {
				return false, err
			}
			delete(files, statestore.IndexMarker)
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
				wrote = true
				jobs = append(jobs, func(ctx context.Context) error {
					_, err := s.put(ctx, p, files[p], cond{})
					if errors.Is(err, errChanged) {
						return nil // another writer migrating the store made it
					}
					return err
				})
			}
			if err := writeAll(ctx, s.cfg.Concurrency, jobs); err != nil {
				return false, err
			}
		}
	}
	data := statestore.IndexMarkerData()
	etag, err := s.put(ctx, statestore.IndexMarker, data, cond{})
	switch {
	case errors.Is(err, errChanged):
		etag = "" // made by another writer meanwhile: the store has it
	case err != nil:
		return false, err
	}
	snap.indexed(object{etag: etag, size: int64(len(data))})
	return wrote, nil
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
	sn.objs[statestore.IndexMarker] = o
	sn.mu.Unlock()
}
