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
// predates the index. kept says snap is a view older than the write (the
// Store's last Snapshot): the marker is looked at once more first, as
// another writer may have made it since. Those records are migrated
// (their index entries and claims, each created only where missing, as
// the planner would have) before the marker is created. In a fresh bucket there are none: the marker alone is
// created, one PUT, conditioned on its absence.
func (s *Store) ensureIndexed(ctx context.Context, snap *snapshot, kept bool) (bool, error) {
	if o, ok, err := snap.lookup(statestore.IndexMarker); err != nil || ok && !o.tomb {
		return false, err
	}
	wrote := false
	if !snap.empty {
		// The records, listed before the marker is looked at: the view's
		// own listing when it made one (a render reads every record of a
		// store without the marker), or a new one.
		var recs *snapshot
		snap.mu.Lock()
		if snap.deepCovered(statestore.RecordsDir) {
			recs = snap
		}
		snap.mu.Unlock()
		if recs != nil || kept {
			// The view is older than this write: somebody may have made
			// the marker since it looked.
			if o, ok, err := s.look(ctx, statestore.IndexMarker); err != nil || ok {
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
			if o, ok, err := s.look(ctx, statestore.IndexMarker); err != nil || ok {
				if ok {
					snap.indexed(o)
				}
				return false, err
			}
		}
		var err error
		if wrote, err = s.migrate(ctx, recs); err != nil {
			return false, err
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

// migrate writes the index entries and claims of every record recs listed
// (statestore.Migration) that are missing, each conditioned on its
// absence (another writer migrating the store at the same time may make it
// first), and reports whether it wrote any.
func (s *Store) migrate(ctx context.Context, recs *snapshot) (bool, error) {
	var paths []string
	recs.mu.Lock()
	for p, o := range recs.objs {
		if isRecordPath(p) && !o.tomb {
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
	sn.objs[statestore.IndexMarker] = o
	sn.mu.Unlock()
}
