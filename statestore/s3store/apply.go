package s3store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sync/errgroup"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/statestore"
)

// Apply lists the store once, plans u against the listing and publishes
// the plan: files, deletes, aggregated targets, then the record as the
// commit point, then the destinations' markers. When another writer got
// there first it lists again and re-plans, up to MaxAttempts times with
// jittered backoff. See the package documentation for the guarantees.
func (s *Store) Apply(ctx context.Context, u statestore.Update) (statestore.Result, error) {
	st := &applyState{u: u}
	dests, err := checkUpdate(u)
	if err != nil {
		return st.res, s.wrap("plan", err)
	}
	st.dests = dests
	ctx = statestore.EnsureRetryDeadline(ctx, s.cfg.RetryDeadline)
	for attempt := 1; ; attempt++ {
		st.res.Attempts = attempt
		op, err := s.attempt(ctx, st)
		st.res.Diff = st.diff.result()
		if err == nil {
			return st.res, nil
		}
		if !errors.Is(err, errChanged) || ctx.Err() != nil {
			return st.res, s.wrap(op, err)
		}
		lost := fmt.Errorf("%w: other writers kept changing the bucket", statestore.ErrConflict)
		if s.cfg.MaxAttempts > 0 && attempt >= s.cfg.MaxAttempts {
			return st.res, s.wrap(op, fmt.Errorf("%w; gave up after %d attempts", lost, attempt))
		}
		if err := statestore.Pause(ctx, attempt, retryLimit, lost); err != nil {
			return st.res, s.wrap(op, err)
		}
	}
}

// applyState is what one Apply carries from attempt to attempt.
type applyState struct {
	u     statestore.Update
	dests []string
	res   statestore.Result
	diff  diffSet
	// dirty is set once anything was written: from then on Apply ends
	// only with a successful commit of the record (see the package doc).
	dirty bool
}

// attempt plans and publishes once. It returns the operation that failed.
func (s *Store) attempt(ctx context.Context, st *applyState) (string, error) {
	u := st.u
	snap, err := s.list(ctx, "")
	if errors.Is(err, errNoBucket) && s.cfg.CreateBucket {
		if !u.DryRun {
			if err := s.makeBucket(ctx); err != nil {
				return "create bucket", err
			}
		}
		snap, err = s.emptySnapshot(ctx), nil
	}
	if err != nil {
		return "read", err
	}
	plan, err := statestore.PlanUpdate(snap, u)
	if err != nil {
		return "plan", err
	}
	markers, err := s.staleMarkers(snap, plan, st.dests)
	if err != nil {
		return "read", err
	}
	st.diff.add(plan.Diff)
	recPath := statestore.RecordPath(u.Workload)
	if o := snap.objs[recPath]; !o.tomb {
		st.res.Revision = o.etag
	}
	if !plan.Changed() && !st.dirty && len(markers) == 0 {
		return "", nil
	}
	st.res.Updated = true
	if u.DryRun {
		return "", nil
	}
	w := &written{etags: map[string]string{}, uncertain: map[string]bool{}}
	if plan.Changed() || st.dirty {
		st.dirty = true
		if op, err := s.publish(ctx, snap, plan, u, w); err != nil {
			return op, err
		}
		st.res.Revision = w.etags[recPath]
	}
	if err := s.writeMarkers(ctx, snap, u, markers, w); err != nil {
		return "write marker", err
	}
	return "", nil
}

// written collects what publish wrote: the new ETag of every object put
// ("" for one deleted), and the paths whose outcome is unknown (a shared
// file somebody else created first).
type written struct {
	mu        sync.Mutex
	etags     map[string]string
	uncertain map[string]bool
}

func (w *written) set(p, etag string) {
	w.mu.Lock()
	w.etags[p] = etag
	w.mu.Unlock()
}

// publish writes a plan in the order the package doc describes, the
// record last, conditioned on the record's listed ETag.
func (s *Store) publish(ctx context.Context, snap *snapshot, plan statestore.Plan, u statestore.Update, w *written) (string, error) {
	recPath := statestore.RecordPath(u.Workload)
	owned := map[string]bool{}
	if data, err := snap.ReadFile(recPath); err == nil { // already read by the planner
		if rec, err := statestore.DecodeRecord(recPath, data); err == nil {
			for _, f := range rec.Files {
				owned[f] = true
			}
		}
	}
	var claims, puts, shared, targets []statestore.Op
	var deletes, targetDeletes []string
	for _, op := range plan.Ops {
		_, mine := u.Files[op.Path]
		_, isShared := u.Shared[op.Path]
		switch {
		case op.Path == recPath:
			// committed below
		case op.Delete && owned[op.Path]:
			deletes = append(deletes, op.Path)
		case op.Delete:
			targetDeletes = append(targetDeletes, op.Path)
		case strings.HasPrefix(op.Path, statestore.ClaimsDir+"/"):
			claims = append(claims, op)
		case mine || layout.IsMeta(op.Path):
			puts = append(puts, op)
		case isShared:
			shared = append(shared, op)
		default:
			targets = append(targets, op)
		}
	}

	// 0. Claims on the workload's objects, before anything a reader (Flux)
	// would see: a writer that loses a claim to another workload re-lists,
	// finds the claim taken and fails having written no file of its own.
	jobs := make([]func(context.Context) error, 0, len(claims))
	for _, op := range claims {
		jobs = append(jobs, func(ctx context.Context) error {
			etag, err := s.put(ctx, op.Path, op.Data, snap.cond(op.Path))
			if err == nil {
				w.set(op.Path, etag)
			}
			return err
		})
	}
	if err := parallel(ctx, s.cfg.Concurrency, jobs); err != nil {
		return "write", err
	}
	// 1. The workload's files and aggregate parts, and shared files.
	jobs = make([]func(context.Context) error, 0, len(puts)+len(shared))
	for _, op := range puts {
		jobs = append(jobs, func(ctx context.Context) error {
			etag, err := s.put(ctx, op.Path, op.Data, snap.cond(op.Path))
			if err == nil {
				w.set(op.Path, etag)
			}
			return err
		})
	}
	for _, op := range shared {
		jobs = append(jobs, func(ctx context.Context) error {
			etag, err := s.put(ctx, op.Path, op.Data, cond{})
			switch {
			case errors.Is(err, errChanged): // created by somebody else first: theirs stays
				w.mu.Lock()
				w.uncertain[op.Path] = true
				w.mu.Unlock()
				return nil
			case err == nil:
				w.set(op.Path, etag)
			}
			return err
		})
	}
	if err := parallel(ctx, s.cfg.Concurrency, jobs); err != nil {
		return "write", err
	}
	// 2. Files the workload no longer wants.
	if err := s.remove(ctx, deletes); err != nil {
		return "delete", err
	}
	for _, p := range deletes {
		w.set(p, "")
	}
	// 3. Aggregated targets, rebuilt from the parts as planned.
	jobs = jobs[:0]
	for _, op := range targets {
		jobs = append(jobs, func(ctx context.Context) error {
			etag, err := s.put(ctx, op.Path, op.Data, snap.cond(op.Path))
			if err == nil {
				w.set(op.Path, etag)
			}
			return err
		})
	}
	if err := parallel(ctx, s.cfg.Concurrency, jobs); err != nil {
		return "write", err
	}
	for _, t := range targetDeletes {
		if err := s.remove(ctx, []string{t}); err != nil {
			return "delete", err
		}
		w.set(t, "")
		// A contributor that arrived after the listing wrote its part and
		// then a target that we have just deleted: re-plan to rebuild it.
		parts, err := s.list(ctx, path.Join(layout.MetaDir, "aggregate", t))
		if err != nil {
			return "read", err
		}
		if len(parts.objs) > 0 {
			return "delete", fmt.Errorf("%w: %s gained a contribution while it was deleted", errChanged, t)
		}
	}
	// 4. Commit.
	var data []byte
	if plan.Record != nil {
		data = sealRecord(plan.Record.Encode())
	} else {
		data = tombstone()
	}
	etag, err := s.put(ctx, recPath, data, snap.cond(recPath))
	if err != nil {
		return "commit", err
	}
	w.set(recPath, etag)
	return "", nil
}

// cond is the precondition of a write: If-Match etag when the object
// exists, If-None-Match * when it does not.
type cond struct {
	exists bool
	etag   string
}

// cond returns the precondition that p is still as listed.
func (sn *snapshot) cond(p string) cond {
	o, ok := sn.objs[p]
	return cond{exists: ok, etag: o.etag}
}

// put writes p with a single-part PUT under precondition c. A failed
// precondition is errChanged.
func (s *Store) put(ctx context.Context, p string, data []byte, c cond) (string, error) {
	opts := minio.PutObjectOptions{
		DisableMultipart: true, // the ETag stays the MD5 of the content
		SendContentMd5:   true,
		ContentType:      contentType(p),
	}
	if c.exists {
		opts.SetMatchETag(c.etag)
	} else {
		opts.SetMatchETagExcept("*")
	}
	var etag string
	err := s.retry(ctx, func() error {
		info, err := s.client.PutObject(ctx, s.cfg.Bucket, s.key(p), bytes.NewReader(data), int64(len(data)), opts)
		etag = trimETag(info.ETag)
		return err
	})
	if errors.Is(err, errNoKey) { // If-Match on an object deleted meanwhile
		err = errChanged
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w", p, err)
	}
	if etag == "" {
		etag = md5hex(data)
	}
	return etag, nil
}

func contentType(p string) string {
	switch path.Ext(p) {
	case ".yaml", ".yml":
		return "application/yaml"
	case ".json":
		return "application/json"
	}
	return "application/octet-stream"
}

// remove deletes paths with DeleteObjects, 1,000 per request.
func (s *Store) remove(ctx context.Context, paths []string) error {
	if len(paths) == 0 {
		return nil
	}
	return s.retry(ctx, func() error {
		ch := make(chan minio.ObjectInfo, len(paths))
		for _, p := range paths {
			ch <- minio.ObjectInfo{Key: s.key(p)}
		}
		close(ch)
		var first error
		for e := range s.client.RemoveObjects(ctx, s.cfg.Bucket, ch, minio.RemoveObjectsOptions{}) {
			if e.Err != nil && first == nil {
				first = fmt.Errorf("%s: %w", strings.TrimPrefix(e.ObjectName, s.listPrefix()), e.Err)
			}
		}
		return first
	})
}

func (s *Store) makeBucket(ctx context.Context) error {
	return s.retry(ctx, func() error {
		err := s.client.MakeBucket(ctx, s.cfg.Bucket, minio.MakeBucketOptions{Region: s.cfg.Region})
		switch minio.ToErrorResponse(err).Code {
		case "BucketAlreadyOwnedByYou", "BucketAlreadyExists":
			return nil // created by a concurrent writer
		}
		return err
	})
}

// parallel runs jobs, at most n at a time, and returns the first error;
// the first failure cancels the context the others get.
func parallel(ctx context.Context, n int, jobs []func(context.Context) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(n, 1))
	for _, job := range jobs {
		if gctx.Err() != nil {
			break // a job failed or ctx ended: start no more
		}
		g.Go(func() error { return job(gctx) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

// checkUpdate refuses what this backend cannot store and returns the
// update's destinations, cleaned and sorted.
func checkUpdate(u statestore.Update) ([]string, error) {
	if u.Workload == "" {
		return nil, errors.New("update names no workload")
	}
	reserved := func(p string) error {
		if err := layout.CheckStorePath(p); err != nil {
			return fmt.Errorf("path %q: %w", p, err)
		}
		return nil
	}
	for p := range u.Files {
		if err := reserved(p); err != nil {
			return nil, err
		}
	}
	for p := range u.Shared {
		if err := reserved(p); err != nil {
			return nil, err
		}
	}
	for _, a := range u.Aggregates {
		if err := reserved(a.Target); err != nil {
			return nil, err
		}
	}
	set := map[string]bool{}
	for _, d := range u.Destinations {
		d = strings.Trim(d, "/")
		if err := layout.ValidPath(d); err != nil {
			return nil, fmt.Errorf("destination: %w", err)
		}
		if layout.IsMeta(d) {
			return nil, fmt.Errorf("destination %q is inside render's own folder %s", d, layout.MetaDir)
		}
		set[d] = true
	}
	return sortedSet(set), nil
}

// markerPath is where destination d's marker lives.
func markerPath(d string) string { return d + "/" + MarkerName }

// under reports whether p is below folder d.
func under(p, d string) bool { return strings.HasPrefix(p, d+"/") }

// touchedMarkers returns the update's destinations, and every destination
// that has a marker and in which the plan writes or deletes a file.
func (s *Store) touchedMarkers(snap *snapshot, plan statestore.Plan, dests []string) []string {
	set := map[string]bool{}
	for _, d := range dests {
		set[d] = true
	}
	for p, o := range snap.objs {
		if !isMarker(p) || o.tomb || path.Dir(p) == "." {
			continue
		}
		d := path.Dir(p)
		for _, op := range plan.Ops {
			if under(op.Path, d) {
				set[d] = true
				break
			}
		}
	}
	return sortedSet(set)
}

// staleMarkers returns the destinations whose marker must be written: those
// the plan changes, and those whose marker is missing or does not match
// the listing (one GET per such destination).
func (s *Store) staleMarkers(snap *snapshot, plan statestore.Plan, dests []string) ([]string, error) {
	var out []string
	for _, d := range s.touchedMarkers(snap, plan, dests) {
		touched := false
		for _, op := range plan.Ops {
			if under(op.Path, d) {
				touched = true
				break
			}
		}
		if touched {
			out = append(out, d)
			continue
		}
		mp := markerPath(d)
		if _, ok := snap.objs[mp]; !ok {
			out = append(out, d)
			continue
		}
		data, err := snap.ReadFile(mp)
		if errors.Is(err, errChanged) {
			// Rewritten since the listing, by a writer whose marker
			// describes at least what it listed: leave it to that writer.
			continue
		}
		if err != nil {
			return nil, err
		}
		var m Marker
		if json.Unmarshal(data, &m) != nil || m.Digest != DestinationDigest(snap.etagsUnder(d)) {
			out = append(out, d)
		}
	}
	return out, nil
}

// etagsUnder returns the listed ETags of the objects below folder d, by
// path relative to d.
func (sn *snapshot) etagsUnder(d string) map[string]string {
	out := map[string]string{}
	for p, o := range sn.objs {
		if under(p, d) && !o.tomb {
			out[strings.TrimPrefix(p, d+"/")] = o.etag
		}
	}
	return out
}

// writeMarkers writes the markers of dests, each describing what the
// listing and this update's writes left in the destination. A marker
// written by somebody else since the listing makes it list the destination
// again and describe what is there now.
func (s *Store) writeMarkers(ctx context.Context, snap *snapshot, u statestore.Update, dests []string, w *written) error {
	jobs := make([]func(context.Context) error, 0, len(dests))
	for _, d := range dests {
		jobs = append(jobs, func(ctx context.Context) error {
			etags := snap.etagsUnder(d)
			fresh := false
			for p, etag := range w.etags {
				if !under(p, d) {
					continue
				}
				if etag == "" {
					delete(etags, strings.TrimPrefix(p, d+"/"))
				} else {
					etags[strings.TrimPrefix(p, d+"/")] = etag
				}
			}
			for p := range w.uncertain {
				fresh = fresh || under(p, d)
			}
			c := snap.cond(markerPath(d))
			for attempt := 1; ; attempt++ {
				if fresh {
					ds, err := s.list(ctx, d)
					if err != nil {
						return err
					}
					etags, c = ds.etagsUnder(d), ds.cond(markerPath(d))
					// The marker converges: once one exists that
					// describes this listing, and the listing holds
					// what this render wrote, there is nothing to add.
					if covers(ds, d, w) && markerDescribes(ds, d, etags) {
						return nil
					}
				}
				_, err := s.put(ctx, markerPath(d), encodeMarker(newMarker(d, etags, u)), c)
				if err == nil || !errors.Is(err, errChanged) {
					return err
				}
				lost := fmt.Errorf("%w: other writers kept rewriting the marker", statestore.ErrConflict)
				if s.cfg.MaxAttempts > 0 && attempt >= s.cfg.MaxAttempts {
					return fmt.Errorf("%w; gave up after %d attempts", lost, attempt)
				}
				if err := statestore.Pause(ctx, attempt, retryLimit, lost); err != nil {
					return err
				}
				fresh = true
			}
		})
	}
	return parallel(ctx, s.cfg.Concurrency, jobs)
}

// covers reports whether listing ds holds every write w made below d as w
// made it (a put with its ETag, a delete as absent).
func covers(ds *snapshot, d string, w *written) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for p, etag := range w.etags {
		if !under(p, d) {
			continue
		}
		o, ok := ds.objs[p]
		if etag == "" {
			if ok && !o.tomb {
				return false
			}
			continue
		}
		if !ok || o.tomb || o.etag != etag {
			return false
		}
	}
	return true
}

// markerDescribes reports whether d's marker in ds describes exactly etags.
func markerDescribes(ds *snapshot, d string, etags map[string]string) bool {
	data, err := ds.ReadFile(markerPath(d))
	if err != nil {
		return false
	}
	var m Marker
	return json.Unmarshal(data, &m) == nil && m.Digest == DestinationDigest(etags)
}

// diffSet accumulates the diffs of every attempt of one Apply.
type diffSet struct{ added, changed, deleted map[string]bool }

func (d *diffSet) add(x statestore.Diff) {
	if d.added == nil {
		d.added, d.changed, d.deleted = map[string]bool{}, map[string]bool{}, map[string]bool{}
	}
	for _, p := range x.Added {
		d.added[p] = true
	}
	for _, p := range x.Changed {
		d.changed[p] = true
	}
	for _, p := range x.Deleted {
		d.deleted[p] = true
	}
}

func (d *diffSet) result() statestore.Diff {
	for p := range d.added {
		delete(d.changed, p)
		delete(d.deleted, p)
	}
	for p := range d.changed {
		delete(d.deleted, p)
	}
	return statestore.Diff{Added: sortedSet(d.added), Changed: sortedSet(d.changed), Deleted: sortedSet(d.deleted)}
}

func sortedSet(m map[string]bool) []string {
	if len(m) == 0 {
		return nil
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
