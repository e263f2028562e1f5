package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sync/errgroup"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
	"github.com/render-dev/render/statestore/driver"
	"github.com/render-dev/render/statestore/planner"
	"github.com/render-dev/render/statestore/wait"
)

// backend is the Store's side of driver.Write: each write of one
// update gets a committer of its own. Writes of a batch (ApplyAll) share
// batch.
type backend struct {
	s     *Store
	batch *batch
}

func (b backend) String() string { return b.s.String() }

// Begin starts the write of one update (the Store's Writer writes a
// batch one update after the other). Besides what planner.ValidateUpdate
// checks, the folder of a destination that holds the completeness markers
// is reserved.
func (b backend) Begin(ctx context.Context, us []statestore.Update) (driver.Committer, error) {
	if len(us) != 1 {
		return driver.Committer{}, driver.InOp("plan", fmt.Errorf("an S3 write takes one update, not %d", len(us)))
	}
	dests, err := destinations(us[0])
	if err != nil {
		return driver.Committer{}, driver.InOp("plan", err)
	}
	w := &write{s: b.s, u: us[0], dests: dests, load: newLoadState(), id: nonce()}
	if b.batch != nil {
		w.load, w.batch = b.batch.load, b.batch
	}
	return driver.Committer{Snapshot: w.Snapshot, Commit: w.Commit, Unfinished: w.Unfinished, Finish: w.Finish}, nil
}

// write is one write of one update, from attempt to attempt: a snapshot
// that lists only the folders the update touches, then files, deletes,
// aggregated targets, the record as the commit point, and the workload's
// markers. See docs/design.md, "S3", for the guarantees.
type write struct {
	s     *Store
	u     statestore.Update
	dests []string
	diff  diffSet
	// dirty is set once anything was written: from then on the write ends
	// only with a successful commit of the record (see docs/design.md, "S3").
	dirty bool
	// load is what this write announced in load summaries: its own, or
	// its batch's (see loadState).
	load *loadState
	// batch is the batch (ApplyAll) this write is one update of, if any.
	batch *batch
	// committed is set once a commit succeeded.
	committed bool
	// undo is the intent to take back when the write fails having
	// uploaded nothing (see takeBack); kept is set once an attempt may
	// have uploaded something, which its intent must go on naming.
	undo *written
	kept bool
	// uploads are the ETags of every upload of this write that succeeded
	// (see written.mine).
	uploads map[string]string
	// id names this write in its intents' leases; hold is its hold on
	// the last intent it named, let go of when it ends without committing
	// (see lease.go).
	id   string
	hold *holder
	// snap and pr are the current attempt's snapshot and what its record
	// said.
	snap *snapshot
	pr   prior
}

// Snapshot lists what the update will be planned against (see prepare).
// The first attempt starts from what the caller's view looked up (the
// view a render read its records from, passed as Update.View; a batch's
// view, see ApplyAll), and lists only what that did not cover; a later
// one, after a lost race, lists afresh. A missing bucket is created here
// when Config.CreateBucket says so (never by a dry run, which plans on an
// empty view).
func (w *write) Snapshot(ctx context.Context, attempt int, view statestore.Snapshot) (statestore.Snapshot, error) {
	s, u := w.s, w.u
	var snap *snapshot
	switch {
	case attempt > 1:
	case w.batch != nil:
		if w.batch.view != nil && !w.batch.after[u.Workload] {
			snap = w.batch.view.fork(ctx)
		}
	default:
		snap = s.viewOf(ctx, view)
	}
	if snap != nil && !snap.recordFirst(statestore.RecordPath(u.Workload)) {
		snap = nil // it would read the record after its listings: list afresh
	}
	kept := snap != nil
	if snap == nil {
		snap = s.newSnapshot(ctx)
	}
	pr, err := s.prepare(snap, u, w.dests)
	if errors.Is(err, errNoBucket) && s.cfg.CreateBucket {
		if !u.DryRun {
			if err := s.makeBucket(ctx); err != nil {
				return nil, driver.InOp("create bucket", err)
			}
		}
		snap = s.emptySnapshot(ctx)
		pr, err = prior{legacy: true}, nil
	}
	if err != nil {
		return nil, failed("read", err)
	}
	if !u.DryRun {
		wrote, err := s.ensureIndexed(ctx, snap, kept)
		if err != nil {
			return nil, failed("write index marker", err)
		}
		if wrote {
			// It migrated other workloads' entries and claims, which
			// snap does not show: plan on a fresh listing.
			snap = s.newSnapshot(ctx)
			if pr, err = s.prepare(snap, u, w.dests); err != nil {
				return nil, failed("read", err)
			}
		}
	}
	w.snap, w.pr = snap, pr
	return snap, nil
}

// Commit publishes the plan, and writes the workload's markers where they
// are missing or out of date. Outcome.Wrote says it wrote (or, with
// DryRun, would write) anything, markers alone included. Outcome.Diff
// is every attempt's diff together: a lost attempt may have written
// already.
func (w *write) Commit(ctx context.Context, ch *driver.Change) (driver.Outcome, error) {
	s, u, snap, pr, plan := w.s, w.u, w.snap, w.pr, ch.Plan
	// A file the bucket's keys leave no room for is refused before
	// anything is written (a dry run says so too).
	if err := w.refuseBlocked(plan); err != nil {
		var be *statestore.BlockedError
		if errors.As(err, &be) {
			return driver.Outcome{}, driver.InOp("plan", err)
		}
		return driver.Outcome{}, failed("read", err)
	}
	out := driver.Outcome{}
	recPath := statestore.RecordPath(u.Workload)
	if o, ok, _ := snap.lookup(recPath); ok && !o.tomb {
		out.Revision = o.etag
	}
	ms, err := s.planMarkers(snap, plan, u, w.dests, pr)
	if err != nil {
		return out, failed("read", err)
	}
	commit := plan.Changed() || w.dirty || len(ms.stale) > 0 ||
		plan.Record != nil && !slices.Equal(pr.markers, w.dests)
	if commit && !u.DryRun {
		if err := w.awaitOtherWrite(ctx, recPath); err != nil {
			return out, err
		}
	}
	w.diff.add(plan.Diff)
	d := w.diff.result()
	out.Diff = &d
	if !commit && len(ms.write) == 0 {
		return out, nil
	}
	out.Wrote = true
	if u.DryRun {
		return out, nil
	}
	if w.uploads == nil {
		w.uploads = map[string]string{}
	}
	wr := &written{etags: map[string]string{}, uncertain: map[string]bool{}, mine: w.uploads, id: w.id}
	committed := snap.etag(recPath)
	// From the first upload to the record that commits them, readers see
	// the write step by step: it is not cut off half-way by a
	// cancellation (see driver.Committer.Unfinished); the retry deadline still
	// bounds it.
	ctx, cancel := driver.Finishing(ctx)
	defer cancel()
	if commit {
		if err := w.publishPlan(ctx, plan, ms.stale, wr); err != nil {
			return out, err
		}
		committed = wr.etags[recPath]
		out.Revision = committed
	}
	if err := s.writeMarkers(ctx, snap, u, ms.write, committed, wr); err != nil {
		return out, failed("write marker", err)
	}
	if commit && pr.legacy && len(w.dests) > 0 {
		if err := w.removeLegacyMarkers(ctx); err != nil {
			return out, failed("delete", err)
		}
	}
	return out, nil
}

// awaitOtherWrite waits for the intent of another write of the workload
// whose lease holds, named in the record at recPath, and then returns a
// *driver.ConflictError: the write plans again, on what the other one
// left (see lease.go). Without such an intent it returns nil at once.
func (w *write) awaitOtherWrite(ctx context.Context, recPath string) error {
	s := w.s
	raw, err := w.snap.readRaw(recPath)
	if err != nil && !errors.Is(err, statestore.ErrNotFound) {
		return failed("read", err)
	}
	l := storedLease(raw)
	if !l.heldFor(w.id, wait.Now(ctx)) {
		return nil
	}
	if s.cfg.Debug != nil {
		s.cfg.Debug("another write of the workload is under way: waiting for its lease", "record", recPath, "until", l.Until.Format(time.RFC3339Nano))
	}
	if err := s.awaitLease(ctx, recPath, w.id, l); err != nil {
		return failed("read", err)
	}
	return &driver.ConflictError{Op: "write", What: "another write of the workload was under way"}
}

// publishPlan announces the plan's changes in the load summaries, publishes
// it (see Store.publish) with stale, the markers to delete, and notes
// what the attempt wr leaves behind: its hold on the intent, and the
// intent to take back should the write end having uploaded nothing (see
// takeBack). From here on the write ends only with a commit of the
// record (dirty). It returns the failed step's error, named (see failed).
func (w *write) publishPlan(ctx context.Context, plan planner.Plan, stale []string, wr *written) error {
	s, u := w.s, w.u
	w.dirty = true
	if err := s.announce(ctx, w.load, loadChanges(u.Workload, w.pr.rec, plan)); err != nil {
		return failed("write load summary", err)
	}
	op, err := s.publish(ctx, w.snap, plan, u, w.dests, stale, wr)
	if wr.hold != nil {
		w.hold = wr.hold
	}
	switch {
	case wr.uploaded:
		w.kept, w.undo = true, nil
	case wr.intent != "" && !w.kept:
		if w.undo != nil {
			wr.prior = w.undo.prior // the record before the first intent
		}
		w.undo = wr
	}
	if err != nil {
		return failed(op, err)
	}
	w.committed = true
	w.load.Committed(u.Workload, plan.Record)
	return nil
}

// removeLegacyMarkers deletes the destinations' old per-destination
// markers, one request for all of them: the record was written before
// per-workload markers, and nobody keeps those up to date any more.
func (w *write) removeLegacyMarkers(ctx context.Context) error {
	old := make([]string, 0, len(w.dests))
	for _, d := range w.dests {
		old = append(old, d+"/"+MarkerName)
	}
	return w.s.remove(ctx, old)
}

// Unfinished reports whether this write has uploaded something that its
// record does not commit yet: Write then finishes it past a cancellation.
func (w *write) Unfinished() bool { return w.dirty && !w.committed }

// Finish takes back or lets go of this write's intent when it did not
// commit (see takeBack and holder.release), settles the load summaries
// this write announced changes in, whatever the outcome, and a write that
// wrote anything creates the summaries its reads lacked.
// A write of a batch leaves the summaries to its batch, which settles
// them once its last write ended (see Store.ApplyAll). It is not cut off
// by a cancellation: a change left pending costs every later reader.
func (w *write) Finish(ctx context.Context) {
	ctx, cancel := driver.Finishing(ctx)
	defer cancel()
	if !w.takeBack(ctx) && !w.committed && w.hold != nil && !w.u.DryRun {
		w.hold.release(ctx)
	}
	if w.batch != nil {
		if w.dirty {
			w.batch.dirty.Store(true)
		}
		return
	}
	w.s.settle(ctx, w.load)
	if w.dirty {
		w.s.createSummaries(ctx)
	}
}

// takeBack restores the workload's record as it was before this write
// named its intent in it, when the write did not commit and uploaded
// nothing (it lost a claim, or found the workload's objects taken): the
// intent would otherwise keep naming paths the workload never wrote, as
// if they were its own. Conditioned on the intent's ETag: a record moved
// since is left as it is. A failure here leaves the intent for the
// workload's next write, which deletes what it does not want. It reports
// whether it tried.
func (w *write) takeBack(ctx context.Context) bool {
	if w.committed || w.kept || w.undo == nil || w.u.DryRun {
		return false
	}
	data := w.undo.prior
	if data == nil {
		data = tombstone()
	}
	recPath := statestore.RecordPath(w.u.Workload)
	ctx, cancel := wait.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := w.s.put(ctx, recPath, data, cond{exists: true, etag: w.undo.intent}); err != nil && w.s.cfg.Debug != nil {
		w.s.cfg.Debug("could not take back a write's intent; the workload's next write will", "record", recPath, "error", err.Error())
	}
	return true
}

// failed names the step of an attempt that failed with err. An object
// that changed under the attempt is a lost race, which driver.Write
// answers by planning again on a fresh listing.
func failed(op string, err error) error {
	if errors.Is(err, errChanged) {
		return &driver.ConflictError{Op: op, What: "other writers kept changing the bucket", Err: err}
	}
	return driver.InOp(op, err)
}

// prior is what the workload's stored record says beyond the record itself.
type prior struct {
	rec *statestore.Record
	// markers are the destinations the record says hold the workload's
	// marker; legacy is set when the record does not say (there is no
	// record, or an older render wrote it).
	markers []string
	legacy  bool
}

// prepare looks up every path the planner will ask snap about for u: the
// record first, on its own (see recordFirst), then, in as few listings as
// possible and in parallel, the files, shared files, aggregated files and
// parts, claims and markers, then (knowing the record) the files the
// workload owned and the markers it had. It returns what the record says.
func (s *Store) prepare(snap *snapshot, u statestore.Update, dests []string) (prior, error) {
	if err := s.locate(snap.ctx); err != nil {
		return prior{}, err
	}
	recPath := statestore.RecordPath(u.Workload)
	// The record first, on its own: what the plan rests on is listed after
	// it (see recordFirst).
	if err := snap.need([]string{recPath}); err != nil {
		return prior{}, err
	}
	paths := []string{recPath, bookkeeping.IndexMarker}
	var dirs []string
	for p := range u.Files {
		paths = append(paths, p)
	}
	for p := range u.Shared {
		paths = append(paths, p)
	}
	for _, a := range u.Aggregates {
		paths = append(paths, a.Target, statestore.AggregatePath(a.Target, u.Workload))
		dirs = append(dirs, aggregateDir(a.Target))
	}
	if u.Record != nil {
		for _, o := range u.Record.Objects {
			paths = append(paths, bookkeeping.ClaimPath(o))
		}
	}
	for _, d := range dests {
		paths = append(paths, MarkerPath(d, u.Workload))
	}
	if err := snap.lookAll(paths, dirs); err != nil {
		return prior{}, err
	}
	var pr prior
	pr.legacy = true
	data, err := snap.ReadFile(recPath)
	switch {
	case errors.Is(err, statestore.ErrNotFound):
		return pr, nil
	case err != nil:
		return pr, err
	}
	rec, err := statestore.DecodeRecord(recPath, data)
	if err != nil {
		return pr, err
	}
	pr.rec = &rec
	markers, says := storedMarkers(data)
	pr.markers, pr.legacy = markers, !says
	paths, dirs = append(paths[:0], rec.Files...), dirs[:0]
	for _, f := range rec.Files {
		if t, ok := strings.CutPrefix(f, layout.MetaDir+"/aggregate/"); ok {
			if t, ok := strings.CutSuffix(t, "/"+u.Workload+".part"); ok {
				paths = append(paths, t)
				dirs = append(dirs, aggregateDir(t))
			}
		}
	}
	for _, d := range pr.markers {
		paths = append(paths, MarkerPath(d, u.Workload))
	}
	return pr, snap.lookAll(paths, dirs)
}

// aggregatePrefix starts the folder of every aggregated file's parts.
var aggregatePrefix = layout.MetaDir + "/aggregate/"

func aggregateDir(target string) string { return aggregatePrefix + target }

// lookAll looks up paths and lists dirs recursively, all in parallel,
// except what lies in the parts folder of an aggregated file: that is
// looked at only once the file itself was. Every writer uploads its part
// before the target, so a target another render wrote is then always seen
// with the parts it was built from; seen before them, it could look like
// a target without parts, which the planner takes for Kratix's (and the
// snapshot keeps the first answer about every path, see add).
func (sn *snapshot) lookAll(paths, dirs []string) error {
	var first, parts []string
	for _, p := range paths {
		if strings.HasPrefix(p, aggregatePrefix) {
			parts = append(parts, p)
		} else {
			first = append(first, p)
		}
	}
	var jobs, later []func(context.Context) error
	for _, d := range dirs {
		list := func(context.Context) error { _, err := sn.List(d); return err }
		if t, ok := strings.CutPrefix(d, aggregatePrefix); ok {
			first = append(first, t)
			later = append(later, list)
		} else {
			jobs = append(jobs, list)
		}
	}
	if len(parts) > 0 {
		later = append(later, func(context.Context) error { return sn.need(parts) })
	}
	jobs = append(jobs, func(ctx context.Context) error {
		if err := sn.need(first); err != nil {
			return err
		}
		return parallel(ctx, sn.s.cfg.Concurrency, later)
	})
	return parallel(sn.ctx, sn.s.cfg.Concurrency, jobs)
}

// markerPlan says which of the workload's markers an attempt writes and
// which it deletes.
type markerPlan struct {
	write []string // destinations whose marker is missing or out of date
	stale []string // marker paths of destinations the workload left
}

// planMarkers decides the marker work: a marker is written where the plan
// changes the destination, or where it is missing or does not describe the
// workload's files as listed (one GET per destination the plan does not
// change); the markers of destinations the record names and the update
// does not are deleted.
func (s *Store) planMarkers(snap *snapshot, plan planner.Plan, u statestore.Update, dests []string, pr prior) (markerPlan, error) {
	var mp markerPlan
	had := pr.markers
	if u.Record == nil {
		// A removed workload keeps no marker anywhere.
		had, dests = append(slices.Clone(had), dests...), nil
	}
	for _, d := range dests {
		touched := false
		for _, op := range plan.Ops {
			touched = touched || under(op.Path, d)
		}
		if touched {
			mp.write = append(mp.write, d)
			continue
		}
		p := MarkerPath(d, u.Workload)
		data, err := snap.ReadFile(p)
		switch {
		case errors.Is(err, statestore.ErrNotFound):
			mp.write = append(mp.write, d)
			continue
		case errors.Is(err, errChanged):
			continue // rewritten since the listing: a writer of this workload is at work
		case err != nil:
			return mp, err
		}
		files, aggs, shared := markerContent(snap, u, d, nil)
		if !newMarker(d, files, aggs, shared, u).sameContent(data) {
			mp.write = append(mp.write, d)
		}
	}
	for _, d := range sortedSet(setOf(had)) {
		if slices.Contains(dests, d) {
			continue
		}
		p := MarkerPath(d, u.Workload)
		if o, ok, err := snap.lookup(p); err != nil {
			return mp, err
		} else if ok && !o.tomb {
			mp.stale = append(mp.stale, p)
		}
	}
	return mp, nil
}

// markerContent returns the ETags of u's files in d, relative to d, as w
// wrote them or else as snap listed them, and u's aggregated and shared
// files in d.
func markerContent(snap *snapshot, u statestore.Update, d string, w *written) (map[string]string, []string, []string) {
	files := map[string]string{}
	for p := range u.Files {
		if !under(p, d) {
			continue
		}
		etag := ""
		if w != nil {
			w.mu.Lock()
			etag = w.etags[p]
			w.mu.Unlock()
		}
		if etag == "" {
			etag = snap.etag(p)
		}
		files[strings.TrimPrefix(p, d+"/")] = etag
	}
	var aggs []string
	for _, a := range u.Aggregates {
		if under(a.Target, d) && len(a.Contribution) > 0 {
			aggs = append(aggs, strings.TrimPrefix(a.Target, d+"/"))
		}
	}
	sort.Strings(aggs)
	var shared []string
	for p := range u.Shared {
		if _, mine := u.Files[p]; under(p, d) && !mine {
			shared = append(shared, strings.TrimPrefix(p, d+"/"))
		}
	}
	sort.Strings(shared)
	return files, aggs, shared
}

// written collects what publish wrote: the new ETag of every object put
// ("" for one deleted), and the paths whose outcome is unknown (a shared
// file somebody else created first).
type written struct {
	mu        sync.Mutex
	etags     map[string]string
	uncertain map[string]bool
	// intent is the ETag of the intent this attempt wrote in the record
	// ("" for none), as last renewed; hold is the attempt's hold on it
	// and id the write's (see write.id); prior is the record it replaced
	// (nil: none, or a tombstone). uploaded is set once an upload may
	// have reached the server (it succeeded, or failed other than on its
	// precondition).
	intent   string
	id       string
	hold     *holder
	prior    []byte
	uploaded bool
	// mine are the ETags of this write's uploads that succeeded, in any
	// attempt, by path: an object listed in that version holds what this
	// process wrote whole, and needs no second upload.
	mine map[string]string
}

// tried notes the outcome of an upload (see uploaded): one refused on its
// precondition reached nothing, unless an earlier try of it failed in
// transit or its lease cut it off (maybeSentError).
func (w *written) tried(err error) {
	var ms *maybeSentError
	if err == nil || !errors.Is(err, errChanged) || errors.As(err, &ms) {
		w.sent()
	}
}

// maybeSentError is a write refused on its precondition after an earlier
// try of it failed in transit, or cut off by the end of its writer's
// lease: that try may have landed (its answer lost), so the write may
// have changed the store. It is still a lost race.
type maybeSentError struct{ err error }

func (e *maybeSentError) Error() string {
	return e.err.Error() + " (an earlier try, or this one, may have landed)"
}
func (e *maybeSentError) Unwrap() error { return e.err }

// sent notes that a change of the store may have reached the server.
func (w *written) sent() {
	w.mu.Lock()
	w.uploaded = true
	w.mu.Unlock()
}

// put is an upload of the write, within its lease (see holder.act).
func (w *written) put(ctx context.Context, s *Store, p string, data []byte, c cond) (string, error) {
	var etag string
	err := w.hold.act(ctx, func(ctx context.Context) error {
		var err error
		etag, err = s.put(ctx, p, data, c)
		return err
	})
	return etag, err
}

// remove is a delete of the write, within its lease.
func (w *written) remove(ctx context.Context, s *Store, paths []string) error {
	if len(paths) == 0 {
		return nil
	}
	return w.hold.act(ctx, func(ctx context.Context) error { return s.remove(ctx, paths) })
}

func (w *written) set(p, etag string) {
	w.mu.Lock()
	w.etags[p] = etag
	if etag != "" {
		w.mine[p] = etag
	}
	w.mu.Unlock()
}

// publish writes a plan in the order docs/design.md ("S3") describes, the
// record last, conditioned on the record's listed ETag. It returns the
// step that failed ("read", "write", "delete" or "commit") with its error.
func (s *Store) publish(ctx context.Context, snap *snapshot, plan planner.Plan, u statestore.Update, dests, staleMarkers []string, w *written) (string, error) {
	p := &publication{s: s, snap: snap, plan: plan, u: u, w: w, recPath: statestore.RecordPath(u.Workload)}
	p.sortOps()
	rec, err := s.storedRecord(snap, p.recPath)
	if err != nil {
		return "read", err
	}
	if err := p.rewriteUncommitted(rec); err != nil {
		return "read", err
	}
	recCond := snap.cond(p.recPath)
	h, op, err := p.nameIntent(ctx, rec, staleMarkers, recCond)
	if err != nil {
		return op, err
	}
	if h != nil {
		defer func() { w.intent = h.cond().etag }() // as last renewed
	}
	if err := p.writeClaims(ctx); err != nil {
		return "write", err
	}
	if err := p.writeFiles(ctx); err != nil {
		return "write", err
	}
	if err := p.deleteUnwanted(ctx, staleMarkers); err != nil {
		return "delete", err
	}
	if op, err := p.rebuildTargets(ctx); err != nil {
		return op, err
	}
	// 4. Commit, on the intent as last renewed.
	if w.hold != nil {
		recCond = w.hold.cond()
	}
	var data []byte
	if plan.Record != nil {
		data = sealRecord(plan.Record.Encode(), dests)
	} else {
		data = tombstone()
	}
	etag, err := s.put(ctx, p.recPath, data, recCond)
	if err != nil {
		return "commit", err
	}
	w.set(p.recPath, etag)
	return "", nil
}

// publication is one attempt's publish of a plan: the plan's operations
// sorted into the steps that write them (see sortOps), and where the
// attempt notes what it wrote.
type publication struct {
	s       *Store
	snap    *snapshot
	plan    planner.Plan
	u       statestore.Update
	w       *written
	recPath string
	// claims are claims on the workload's objects, puts its files and
	// aggregate parts (and render's own files), shared the shared files
	// and targets the aggregated files rebuilt from their parts.
	claims, puts, shared, targets []planner.Op
	// deletes are the files the workload owns and no longer wants;
	// targetDeletes the aggregated files (and files it does not own) the
	// plan deletes.
	deletes, targetDeletes []string
}

// sortOps sorts the plan's operations by the step of publish that writes
// them, so that a reader (Flux) never sees a file before the claim on it,
// nor an aggregated file before its parts. The record is left out: it is
// written last, as the commit.
func (p *publication) sortOps() {
	u := p.u
	owned := map[string]bool{}
	if data, err := p.snap.ReadFile(p.recPath); err == nil { // already read by the planner
		if rec, err := statestore.DecodeRecord(p.recPath, data); err == nil {
			for _, f := range rec.Files {
				owned[f] = true
			}
		}
	}
	// The aggregated files this write rebuilds: every contributor's, never
	// the workload's own, even where its record lists one (an intent
	// written before intents stopped naming them).
	aggregated := map[string]bool{}
	for _, a := range u.Aggregates {
		aggregated[a.Target] = true
	}
	for f := range owned {
		if t, ok := statestore.AggregateTarget(f, u.Workload); ok {
			aggregated[t] = true
		}
	}
	for _, op := range p.plan.Ops {
		_, mine := u.Files[op.Path]
		_, isShared := u.Shared[op.Path]
		switch {
		case op.Path == p.recPath:
			// committed last
		case op.Delete && owned[op.Path] && !aggregated[op.Path]:
			p.deletes = append(p.deletes, op.Path)
		case op.Delete:
			p.targetDeletes = append(p.targetDeletes, op.Path)
		case strings.HasPrefix(op.Path, bookkeeping.ClaimsDir+"/"):
			p.claims = append(p.claims, op)
		case mine || layout.IsMeta(op.Path):
			p.puts = append(p.puts, op)
		case isShared:
			p.shared = append(p.shared, op)
		default:
			p.targets = append(p.targets, op)
		}
	}
}

// rewriteUncommitted adds to the claims and puts the paths the stored
// record rec does not own yet that are listed with the wanted bytes
// already (the planner does not write them). They are written again,
// conditioned on what was listed: they were left by a write that did not
// commit, perhaps an upload cut off in flight, which the server may still
// drop after listing it, or another writer of the workload may still
// change. Written again, they are known to hold the bytes this commit
// names. A path this write uploaded whole itself, in the version listed,
// is left as it is.
func (p *publication) rewriteUncommitted(rec stored) error {
	plan, u := p.plan, p.u
	if plan.Record == nil {
		return nil
	}
	planned := map[string]bool{p.recPath: true}
	for _, op := range plan.Ops {
		planned[op.Path] = true
	}
	for _, f := range plan.Record.Files {
		if rec.files[f] || planned[f] {
			continue
		}
		if o, ok, err := p.snap.lookup(f); err != nil {
			return err
		} else if !ok || o.tomb || o.etag != "" && p.w.mine[f] == o.etag {
			continue
		}
		data, ok := u.Files[f]
		if !ok {
			var err error
			if data, err = p.snap.ReadFile(f); err != nil {
				return err
			}
		}
		op := planner.Op{Path: f, Data: data}
		if strings.HasPrefix(f, bookkeeping.ClaimsDir+"/") {
			p.claims = append(p.claims, op)
		} else {
			p.puts = append(p.puts, op)
		}
	}
	return nil
}

// nameIntent writes the intent: before any upload, the record names what
// this write creates that it does not own yet (see withPending). A write
// that creates nothing new but changes or deletes what the record owns (a
// removal too) names those paths the same way: cut off half-way (SIGKILL,
// its deadline, a connection that broke), it leaves a record that says
// its write did not finish, for the workload's next write, rather than
// one that looks committed while its files are changed or gone (the
// campaign's s3 seed 70015). An intent the record names already (another
// write's, or this write's from an earlier attempt) is named again: every
// attempt that uploads or deletes does so under its own lease (see
// lease.go). The intent is written on recCond, the record as listed.
//
// It returns the hold on the intent (nil when the attempt names none),
// noted in the attempt's written too, or the step that failed with its
// error.
func (p *publication) nameIntent(ctx context.Context, rec stored, staleMarkers []string, recCond cond) (*holder, string, error) {
	plan, u := p.plan, p.u
	pending := setOf(rec.pending)
	for _, op := range slices.Concat(p.claims, p.puts) {
		if !rec.files[op.Path] {
			pending[op.Path] = true
		}
	}
	if len(pending) == 0 && rec.canonical != nil {
		for _, op := range slices.Concat(p.claims, p.puts) {
			pending[op.Path] = true
		}
		for _, f := range p.deletes {
			pending[f] = true
		}
		// A removal that deletes an aggregated file and nothing of its
		// own names its part of the file (which its record lists), never
		// the file: named, the file would pass for the workload's own
		// (the intent is absorbed into the record), and a later attempt
		// would delete it while another workload's part is in it (the
		// simulated campaign's s3 seed 3010).
		if plan.Record == nil {
			for _, t := range p.targetDeletes {
				pending[statestore.AggregatePath(t, u.Workload)] = true
			}
		}
	}
	acts := len(p.claims)+len(p.puts)+len(p.shared)+len(p.deletes)+len(staleMarkers)+len(p.targets)+len(p.targetDeletes) > 0
	if !acts || len(pending) == 0 || rec.canonical == nil && plan.Record == nil {
		return nil, "", nil
	}
	base := rec.canonical
	if base == nil {
		// No record yet: one that names the workload and owns nothing
		// but what is pending.
		base = (&statestore.Record{Workload: u.Workload, Type: plan.Record.Type, Promise: plan.Record.Promise,
			Namespace: plan.Record.Namespace, Name: plan.Record.Name, Pipeline: plan.Record.Pipeline}).Encode()
	}
	var prior []byte
	if rec.canonical != nil {
		var err error
		if prior, err = p.snap.readRaw(p.recPath); err != nil {
			return nil, "read", err
		}
	}
	h, err := p.s.acquire(ctx, p.recPath, p.w.id, sealRecord(base, rec.markers), sortedSet(pending), recCond)
	if err != nil {
		return nil, "write", err
	}
	p.w.hold, p.w.intent, p.w.prior = h, h.etag, prior
	return h, "", nil
}

// writeClaims writes the claims on the workload's objects (step 0), before
// anything a reader (Flux) would see: a writer that loses a claim to
// another workload re-lists, finds the claim taken and fails having
// written no file of its own.
func (p *publication) writeClaims(ctx context.Context) error {
	s, snap, w := p.s, p.snap, p.w
	jobs := make([]func(context.Context) error, 0, len(p.claims))
	for _, op := range p.claims {
		jobs = append(jobs, func(ctx context.Context) error {
			etag, err := w.put(ctx, s, op.Path, op.Data, snap.cond(op.Path))
			w.tried(err)
			if err == nil {
				w.set(op.Path, etag)
			}
			return err
		})
	}
	return writeAll(ctx, s.cfg.Concurrency, jobs)
}

// writeFiles writes the workload's files and aggregate parts, and the
// shared files (step 1). A shared file somebody else created first is
// theirs: it stays, and its outcome is noted as uncertain.
func (p *publication) writeFiles(ctx context.Context) error {
	s, snap, w := p.s, p.snap, p.w
	jobs := make([]func(context.Context) error, 0, len(p.puts)+len(p.shared))
	for _, op := range p.puts {
		jobs = append(jobs, func(ctx context.Context) error {
			etag, err := w.put(ctx, s, op.Path, op.Data, snap.cond(op.Path))
			w.tried(err)
			if err == nil {
				w.set(op.Path, etag)
			}
			return err
		})
	}
	for _, op := range p.shared {
		jobs = append(jobs, func(ctx context.Context) error {
			etag, err := w.put(ctx, s, op.Path, op.Data, cond{})
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
	return writeAll(ctx, s.cfg.Concurrency, jobs)
}

// deleteUnwanted deletes the files the workload no longer wants, and its
// markers in destinations it left, before the commit, which forgets them
// (step 2).
func (p *publication) deleteUnwanted(ctx context.Context, staleMarkers []string) error {
	w := p.w
	deletes := append(p.deletes, staleMarkers...)
	if len(deletes) > 0 {
		w.sent() // a delete cannot be taken back, whatever its answer
	}
	if err := w.remove(ctx, p.s, deletes); err != nil {
		return err
	}
	for _, f := range deletes {
		w.set(f, "")
	}
	return nil
}

// rebuildTargets writes the aggregated targets, rebuilt from the parts as
// planned, and deletes those the plan deletes (step 3). A target that
// gained a contribution while it was deleted is a lost race: the write
// plans again, to rebuild it. It returns the step that failed with its
// error.
func (p *publication) rebuildTargets(ctx context.Context) (string, error) {
	s, snap, w := p.s, p.snap, p.w
	jobs := make([]func(context.Context) error, 0, len(p.targets))
	for _, op := range p.targets {
		jobs = append(jobs, func(ctx context.Context) error {
			etag, err := w.put(ctx, s, op.Path, op.Data, snap.cond(op.Path))
			if err == nil {
				w.set(op.Path, etag)
			}
			return err
		})
	}
	if err := writeAll(ctx, s.cfg.Concurrency, jobs); err != nil {
		return "write", err
	}
	for _, t := range p.targetDeletes {
		w.sent()
		if err := w.remove(ctx, s, []string{t}); err != nil {
			return "delete", err
		}
		w.set(t, "")
		// A contributor that arrived after the listing wrote its part and
		// then a target that we have just deleted: re-plan to rebuild it.
		parts, err := s.list(ctx, aggregateDir(t))
		if err != nil {
			return "read", err
		}
		if len(parts.objs) > 0 {
			return "delete", fmt.Errorf("%w: %s gained a contribution while it was deleted", errChanged, t)
		}
	}
	return "", nil
}

// stored is a workload's record as stored: the files it owns (its pending
// write's aside), the pending paths, its canonical encoding (nil when
// there is none) and the destinations it names markers in.
type stored struct {
	files     map[string]bool
	pending   []string
	canonical []byte
	markers   []string
}

// storedRecord reads the record at recPath as snap listed it.
func (s *Store) storedRecord(snap *snapshot, recPath string) (stored, error) {
	st := stored{files: map[string]bool{}}
	raw, err := snap.readRaw(recPath)
	if errors.Is(err, statestore.ErrNotFound) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	rec, err := statestore.DecodeRecord(recPath, raw)
	if err != nil {
		return st, err
	}
	st.files = setOf(rec.Files)
	st.pending = storedPending(raw)
	st.canonical = rec.Encode()
	st.markers, _ = storedMarkers(raw)
	return st, nil
}

// cond is the precondition of a write: If-Match etag when the object
// exists, If-None-Match * when it does not.
type cond struct {
	exists bool
	etag   string
	// unconditional writes whatever is there (Seed only).
	unconditional bool
}

// cond returns the precondition that p is still as listed.
func (sn *snapshot) cond(p string) cond {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	o, ok, _ := sn.obj(p)
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
	switch {
	case c.unconditional:
	case c.exists:
		opts.SetMatchETag(c.etag)
	default:
		opts.SetMatchETagExcept("*")
	}
	var etag string
	tries := 0
	err := s.retry(ctx, func() error {
		tries++
		info, err := s.client.PutObject(ctx, s.cfg.Bucket, s.key(p), bytes.NewReader(data), int64(len(data)), opts)
		etag = trimETag(info.ETag)
		return err
	})
	if errors.Is(err, errNoKey) { // If-Match on an object deleted meanwhile
		err = errChanged
	}
	if err != nil && tries > 1 && errors.Is(err, errChanged) {
		// An earlier try failed in transit (a connection that broke) and
		// may have landed: the precondition that fails now may be its
		// own doing.
		return "", fmt.Errorf("%s: %w", p, &maybeSentError{err})
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

// writeAll runs write jobs, at most n at a time, and returns the first
// error. Unlike parallel, a failure does not cancel the writes already
// under way; it only stops jobs not yet started. A request cut off in
// flight leaves its object in a state nobody knows. With parallel, 64
// writers against MinIO showed it: one render in a few rounds reported its
// file written (second attempt, record committed) although the file was
// missing afterwards and no delete had been sent, that is, its retry found
// the cut-off upload listed, did not write it again, and MinIO dropped it
// (TestWriteFailureCancelsNoWrite; none in 80 rounds with writeAll).
func writeAll(ctx context.Context, n int, jobs []func(context.Context) error) error {
	var g errgroup.Group
	g.SetLimit(max(n, 1))
	var failed atomic.Bool
	for _, job := range jobs {
		if failed.Load() || ctx.Err() != nil {
			break
		}
		g.Go(func() error {
			err := job(ctx)
			if err != nil {
				failed.Store(true)
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

// parallel runs jobs, at most n at a time, and returns the first error;
// the first failure cancels the context the others get. It is for reads:
// writes go through writeAll.
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

// destinations refuses the paths of u that lie in a destination's marker
// folder, and returns u's destinations, cleaned and sorted.
// planner.ValidateUpdate checks the rest.
func destinations(u statestore.Update) ([]string, error) {
	reserved := func(p string) error {
		if isMarker(p) {
			return fmt.Errorf("path %q: the folder %s of a destination is reserved for render's completeness markers", p, MarkerDir)
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

// under reports whether p is below folder d.
func under(p, d string) bool { return strings.HasPrefix(p, d+"/") }

// writeMarkers writes the workload's markers in dests, after its commit
// (or, when nothing else changed, after the plan found them missing or out
// of date), each describing the workload's files in the destination as
// this render left them. committed is the record's ETag this render
// committed or planned against. A marker is written conditionally on the
// version this render saw; when it changed (another render of the same
// workload), the marker is looked at again, and rewritten only while the
// record is still the one this render committed: a later commit belongs
// to a render that writes its own markers.
func (s *Store) writeMarkers(ctx context.Context, snap *snapshot, u statestore.Update, dests []string, committed string, w *written) error {
	recPath := statestore.RecordPath(u.Workload)
	jobs := make([]func(context.Context) error, 0, len(dests))
	for _, d := range dests {
		jobs = append(jobs, func(ctx context.Context) error {
			p := MarkerPath(d, u.Workload)
			files, aggs, shared := markerContent(snap, u, d, w)
			data := encodeMarker(newMarker(d, files, aggs, shared, u))
			c := snap.cond(p)
			lost := fmt.Sprintf("other renders of workload %s kept rewriting its marker", u.Workload)
			return s.Policy.Conflicts(ctx, lost, func(attempt int) error {
				if attempt > 1 {
					// The marker first, then the record: a render that
					// commits after this look writes the marker after it too.
					fresh := s.newSnapshot(ctx)
					if err := fresh.need([]string{p}); err != nil {
						return err
					}
					if err := fresh.need([]string{recPath}); err != nil {
						return err
					}
					if fresh.etag(recPath) != committed {
						return nil // a later render of the workload committed: its markers win
					}
					c = fresh.cond(p)
				}
				_, err := s.put(ctx, p, data, c)
				return err
			})
		})
	}
	return writeAll(ctx, s.cfg.Concurrency, jobs)
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
