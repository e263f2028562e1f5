package s3store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/minio/minio-go/v7"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
	"github.com/render-dev/render/statestore/planner"
)

// loadDir holds the load summaries, one object per destination named in
// the placement index (see docs/design.md, "Load summaries").
var loadDir = path.Join(layout.MetaDir, "load")

// errUnreadable marks a load summary this render cannot read.
var errUnreadable = errors.New("unreadable load summary")

// loadPath is the load summary of destination d.
func loadPath(d string) string { return path.Join(loadDir, d+".json") }

// loadFormat is the summaries' format; a newer one is not read (the
// destination's index entries are listed instead).
const loadFormat = 1

// loadSummary is what a load summary object holds: the resource index
// entries of one destination d (.render/placed/<d>/resource/<flavour>/<name>)
// as name -> flavour folder, and the changes under way there: by the nonce
// of the Apply making them, the entry names of each workload it may add
// or remove. Until a change is folded in, readers decide those names from
// the workload's record.
type loadSummary struct {
	Format  int                            `json:"format"`
	Entries map[string]string              `json:"entries"`
	Pending map[string]map[string][]string `json:"pending,omitempty"`
}

func (l *loadSummary) encode() []byte {
	data, err := json.Marshal(l)
	if err != nil {
		panic(err) // only strings
	}
	return append(data, '\n')
}

func decodeLoad(p string, data []byte) (*loadSummary, error) {
	var l loadSummary
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, fmt.Errorf("load summary %s: %w", p, err)
	}
	if l.Format != loadFormat {
		return nil, fmt.Errorf("load summary %s: format %d is not %d", p, l.Format, loadFormat)
	}
	if l.Entries == nil {
		l.Entries = map[string]string{}
	}
	if l.Pending == nil {
		l.Pending = map[string]map[string][]string{}
	}
	return &l, nil
}

// resourceEntries returns rec's resource index entries on each
// destination, as name -> flavour folder (nothing for a nil record).
func resourceEntries(rec *statestore.Record) map[string]map[string]string {
	out := map[string]map[string]string{}
	for p := range bookkeeping.IndexPaths(rec) {
		d, flavour, name, ok := splitResourceEntry(p)
		if !ok {
			continue
		}
		if out[d] == nil {
			out[d] = map[string]string{}
		}
		out[d][name] = flavour
	}
	return out
}

// splitResourceEntry splits .render/placed/<d>/resource/<flavour>/<name>.
func splitResourceEntry(p string) (d, flavour, name string, ok bool) {
	rel, ok := strings.CutPrefix(p, bookkeeping.IndexDir+"/")
	parts := strings.Split(rel, "/")
	if !ok || len(parts) != 4 || parts[1] != "resource" {
		return "", "", "", false
	}
	return parts[0], parts[2], parts[3], true
}

// counts returns how many entries l holds by flavour folder, with the
// entries pending changes name decided by their workloads' records (recs,
// by workload key; a missing or nil one holds nothing).
func (l *loadSummary) counts(d string, recs map[string]*statestore.Record) map[string]int {
	members := maps.Clone(l.Entries)
	for _, change := range l.Pending {
		for _, names := range change {
			for _, n := range names {
				delete(members, n)
			}
		}
	}
	for _, change := range l.Pending {
		for w, names := range change {
			mine := resourceEntries(recs[w])[d]
			for _, n := range names {
				if fl, ok := mine[n]; ok {
					members[n] = fl
				}
			}
		}
	}
	out := map[string]int{}
	for _, fl := range members {
		out[fl]++
	}
	return out
}

// getObject reads p as it is now, with its ETag; a missing p is errNoKey.
func (s *Store) getObject(ctx context.Context, p string) ([]byte, string, error) {
	var data []byte
	var etag string
	err := s.retry(ctx, func() error {
		rc, info, _, err := minio.Core{Client: s.client}.GetObject(ctx, s.cfg.Bucket, s.key(p), minio.GetObjectOptions{})
		if err != nil {
			return err
		}
		defer rc.Close()
		etag = trimETag(info.ETag)
		data, err = io.ReadAll(rc)
		return err
	})
	return data, etag, err
}

// readLoad reads d's load summary as it is now: nil when there is none.
// A summary this render cannot read (a newer format, or damaged) is an
// error wrapping errUnreadable: readers list the destination instead, and
// writers refuse to change its entries.
func (s *Store) readLoad(ctx context.Context, d string) (*loadSummary, string, error) {
	data, etag, err := s.getObject(ctx, loadPath(d))
	if errors.Is(err, errNoKey) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	l, err := decodeLoad(loadPath(d), data)
	if err != nil {
		return nil, "", fmt.Errorf("%w (delete it, and render rebuilds it from the placement index): %w", err, errUnreadable)
	}
	return l, etag, nil
}

// currentRecord reads workload's record as it is now (nil when there is
// none, or a tombstone).
func (s *Store) currentRecord(ctx context.Context, workload string) (*statestore.Record, error) {
	p := statestore.RecordPath(workload)
	data, _, err := s.getObject(ctx, p)
	if errors.Is(err, errNoKey) || err == nil && isTombstone(p, int64(len(data))) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rec, err := statestore.DecodeRecord(p, data)
	if err != nil {
		return nil, err
	}
	if rec.Workload == "" {
		rec.Workload = workload
	}
	return &rec, nil
}

// listEntries lists d's resource index entries (one request per 1,000):
// what a destination with no load summary is counted from.
func (s *Store) listEntries(ctx context.Context, d string) (map[string]string, error) {
	dir := path.Join(bookkeeping.IndexDir, d, "resource")
	sn, err := s.list(ctx, dir)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for p, o := range sn.objs {
		if o.tomb {
			continue
		}
		rest := strings.TrimPrefix(p, dir+"/")
		if flavour, name, ok := strings.Cut(rest, "/"); ok && !strings.Contains(name, "/") {
			out[name] = flavour
		}
	}
	return out, nil
}

// loadCounts counts the resource entries of each of dests, by flavour
// folder: from its load summary and the records of the workloads with a
// change pending there, or, for a destination with no summary, from a
// listing of its entries, which the Store keeps so that its next write
// creates the summary (see createSummaries).
func (s *Store) loadCounts(ctx context.Context, dests []string) (map[string]map[string]int, error) {
	var mu sync.Mutex
	sums := map[string]*loadSummary{}
	listed := map[string]map[string]string{}  // no summary: one is made on the next write
	counted := map[string]map[string]string{} // an unreadable summary: left alone
	jobs := make([]func(context.Context) error, 0, len(dests))
	for _, d := range dests {
		jobs = append(jobs, func(ctx context.Context) error {
			l, _, err := s.readLoad(ctx, d)
			unreadable := errors.Is(err, errUnreadable)
			if err != nil && !unreadable {
				return err
			}
			var entries map[string]string
			if l == nil {
				if entries, err = s.listEntries(ctx, d); err != nil {
					return err
				}
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case l != nil:
				sums[d] = l
			case unreadable:
				counted[d] = entries
			default:
				listed[d] = entries
			}
			return nil
		})
	}
	if err := parallel(ctx, s.cfg.Concurrency, jobs); err != nil {
		return nil, err
	}
	workloads := map[string]bool{}
	for _, l := range sums {
		for _, change := range l.Pending {
			for w := range change {
				workloads[w] = true
			}
		}
	}
	recs := map[string]*statestore.Record{}
	jobs = jobs[:0]
	for w := range workloads {
		jobs = append(jobs, func(ctx context.Context) error {
			rec, err := s.currentRecord(ctx, w)
			if err != nil {
				return err
			}
			mu.Lock()
			recs[w] = rec
			mu.Unlock()
			return nil
		})
	}
	if err := parallel(ctx, s.cfg.Concurrency, jobs); err != nil {
		return nil, err
	}
	out := map[string]map[string]int{}
	for d, l := range sums {
		out[d] = l.counts(d, recs)
	}
	for _, m := range []map[string]map[string]string{listed, counted} {
		for d, entries := range m {
			out[d] = (&loadSummary{Entries: entries}).counts(d, nil)
		}
	}
	s.listedMu.Lock()
	if s.listed == nil {
		s.listed = map[string]map[string]string{}
	}
	maps.Copy(s.listed, listed)
	s.listedMu.Unlock()
	return out, nil
}

// loadChanges returns the entry names, by destination and by workload,
// whose presence a plan may change: the workload's own entries on each
// destination where they differ between the record before (old) and the
// plan's (added, removed or moved to another flavour folder), and the
// entries of other workloads a store that predates the index gains by
// this write (each names its workload).
func loadChanges(workload string, old *statestore.Record, plan planner.Plan) map[string]map[string][]string {
	sets := map[string]map[string]map[string]bool{}
	add := func(d, w, n string) {
		if sets[d] == nil {
			sets[d] = map[string]map[string]bool{}
		}
		if sets[d][w] == nil {
			sets[d][w] = map[string]bool{}
		}
		sets[d][w][n] = true
	}
	before, after := resourceEntries(old), resourceEntries(plan.Record)
	for d := range setOf(append(slices.Collect(maps.Keys(before)), slices.Collect(maps.Keys(after))...)) {
		if maps.Equal(before[d], after[d]) {
			continue
		}
		for n := range before[d] {
			add(d, workload, n)
		}
		for n := range after[d] {
			add(d, workload, n)
		}
	}
	for _, op := range plan.Ops {
		d, _, n, ok := splitResourceEntry(op.Path)
		if !ok || op.Delete {
			continue
		}
		if w := strings.TrimSpace(string(op.Data)); w != "" && w != workload {
			add(d, w, n)
		}
	}
	out := map[string]map[string][]string{}
	for d, byW := range sets {
		out[d] = map[string][]string{}
		for w, names := range byW {
			out[d][w] = sortedSet(names)
		}
	}
	return out
}

// loadState is what one write, or one batch of writes (ApplyAll),
// announced in load summaries, and what its writes committed. A batch
// announces the changes of all its updates at once, before any of them
// writes, and settles them at once after the last: its writes of different
// workloads then do not take turns on the summaries they all change.
type loadState struct {
	// nonce names the pending changes in summaries.
	nonce string
	// mu guards what follows; announcing holds it throughout, so that
	// the writes of a batch widen one announcement in turn.
	mu        sync.Mutex
	announced map[string]map[string][]string // by destination and workload (see announce)
	sums      map[string]writtenSummary      // as announce wrote them
	// done holds, by workload, the record a write committed (nil: the
	// workload was removed).
	done map[string]*statestore.Record
}

func newLoadState() *loadState {
	return &loadState{nonce: nonce(), announced: map[string]map[string][]string{}, sums: map[string]writtenSummary{}, done: map[string]*statestore.Record{}}
}

// committed notes that workload's write committed rec.
func (ls *loadState) committed(workload string, rec *statestore.Record) {
	ls.mu.Lock()
	ls.done[workload] = rec
	ls.mu.Unlock()
}

// announce adds (or widens) the pending change of ls in the summary of
// each destination of changes, before any index entry is written: from
// then until settle, readers count the names it gives from the records. A
// missing summary is created from a listing of the destination's entries,
// conditionally on its still being missing (a writer that keeps summaries
// creates one before it changes an entry, so the listing misses none of
// theirs).
func (s *Store) announce(ctx context.Context, ls *loadState, changes map[string]map[string][]string) error {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	want := map[string]map[string][]string{}
	for d, byW := range changes {
		merged := map[string][]string{}
		grew := false
		for w, names := range ls.announced[d] {
			merged[w] = names
		}
		for w, names := range byW {
			if !isSubset(names, merged[w]) {
				merged[w] = sortedSet(setOf(append(slices.Clone(merged[w]), names...)))
				grew = true
			}
		}
		if grew {
			want[d] = merged
		}
	}
	if len(want) == 0 {
		return nil
	}
	var mu sync.Mutex
	jobs := make([]func(context.Context) error, 0, len(want))
	for d, change := range want {
		jobs = append(jobs, func(ctx context.Context) error {
			l, etag, err := s.updateLoad(ctx, d, func(l *loadSummary) error {
				l.Pending[ls.nonce] = change
				return nil
			})
			if err == nil {
				mu.Lock()
				ls.announced[d] = change
				ls.sums[d] = writtenSummary{l, etag}
				mu.Unlock()
			}
			return err
		})
	}
	return writeAll(ctx, s.cfg.Concurrency, jobs)
}

// settle folds the pending changes of ls into the summaries: each
// announced name is set from its workload's record as it is now (read
// after the summary, whoever committed it), and the announcement is
// removed. When the summary is still the version the announcement wrote,
// and every workload of the change had its write committed, their records
// are the ones committed: any later commit that changes those entries
// announces first, which would have changed the summary; so the fold is
// then written without reading anything. It is best effort: a change left
// pending (this writer died, or the summary kept changing) is still
// counted right, from the records, by every reader; it costs each reader
// one GET per workload of the change, and stays, since only the write that
// made an announcement settles it.
func (s *Store) settle(ctx context.Context, ls *loadState) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if len(ls.announced) == 0 {
		return
	}
	fold := func(l *loadSummary, d string, change map[string][]string, rec func(w string) (*statestore.Record, error)) error {
		for w, names := range change {
			r, err := rec(w)
			if err != nil {
				return err
			}
			for _, n := range names {
				delete(l.Entries, n)
			}
			for n, fl := range resourceEntries(r)[d] {
				if slices.Contains(names, n) {
					l.Entries[n] = fl
				}
			}
		}
		delete(l.Pending, ls.nonce)
		return nil
	}
	allDone := func(change map[string][]string) bool {
		for w := range change {
			if _, ok := ls.done[w]; !ok {
				return false
			}
		}
		return true
	}
	var mu sync.Mutex
	jobs := make([]func(context.Context) error, 0, len(ls.announced))
	for d, change := range ls.announced {
		jobs = append(jobs, func(ctx context.Context) error {
			if a, ok := ls.sums[d]; ok && allDone(change) {
				l := a.l.clone()
				_ = fold(l, d, change, func(w string) (*statestore.Record, error) { return ls.done[w], nil })
				_, err := s.put(ctx, loadPath(d), l.encode(), cond{exists: true, etag: a.etag})
				if !errors.Is(err, errChanged) {
					if err == nil {
						mu.Lock()
						delete(ls.announced, d)
						mu.Unlock()
					}
					return err
				}
			}
			_, _, err := s.updateLoad(ctx, d, func(l *loadSummary) error {
				return fold(l, d, change, func(w string) (*statestore.Record, error) { return s.currentRecord(ctx, w) })
			})
			if err == nil {
				mu.Lock()
				delete(ls.announced, d)
				mu.Unlock()
			}
			return err
		})
	}
	_ = writeAll(ctx, s.cfg.Concurrency, jobs)
}

// writtenSummary is a summary as an Apply wrote it, with its new ETag.
type writtenSummary struct {
	l    *loadSummary
	etag string
}

func (l *loadSummary) clone() *loadSummary {
	out := &loadSummary{Format: l.Format, Entries: maps.Clone(l.Entries), Pending: map[string]map[string][]string{}}
	for k, v := range l.Pending {
		out.Pending[k] = maps.Clone(v)
	}
	return out
}

// updateLoad changes d's summary with change, conditionally on the
// version change saw, until a write succeeds. A missing summary is made
// from a listing of d's entries first.
func (s *Store) updateLoad(ctx context.Context, d string, change func(*loadSummary) error) (*loadSummary, string, error) {
	p := loadPath(d)
	// Every render that places, moves or removes a resource on d writes
	// the summary twice: it may lose more races than its record does.
	policy := s.Policy
	policy.MaxAttempts *= 4
	var l *loadSummary
	var etag string
	err := policy.Conflicts(ctx, "other renders kept changing the load summary "+p, func(int) error {
		var err error
		if l, etag, err = s.readLoad(ctx, d); err != nil {
			return err
		}
		c := cond{exists: l != nil, etag: etag}
		if l == nil {
			entries, err := s.listEntries(ctx, d)
			if err != nil {
				return err
			}
			l = &loadSummary{Format: loadFormat, Entries: entries, Pending: map[string]map[string][]string{}}
		}
		if err := change(l); err != nil {
			return err
		}
		etag, err = s.put(ctx, p, l.encode(), c)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	return l, etag, nil
}

// createSummaries writes the summaries of the destinations this Store
// counted from a listing, each only where none exists yet. The listing may
// be older than the write: no writer that keeps summaries changed those
// entries meanwhile, since it would have created the summary first.
// Failures are not errors: the destination is listed again next time.
func (s *Store) createSummaries(ctx context.Context) {
	s.listedMu.Lock()
	listed := s.listed
	s.listed = nil
	s.listedMu.Unlock()
	if len(listed) == 0 {
		return
	}
	jobs := make([]func(context.Context) error, 0, len(listed))
	for d, entries := range listed {
		jobs = append(jobs, func(ctx context.Context) error {
			l := &loadSummary{Format: loadFormat, Entries: entries}
			_, err := s.put(ctx, loadPath(d), l.encode(), cond{})
			if errors.Is(err, errChanged) {
				return nil // somebody made it first
			}
			return err
		})
	}
	_ = writeAll(ctx, s.cfg.Concurrency, jobs)
}

func isSubset(names, of []string) bool {
	set := setOf(of)
	for _, n := range names {
		if !set[n] {
			return false
		}
	}
	return true
}

// SummaryLoad answers bookkeeping.ReadLoad for every destination of dests
// (see loadCounts). The counts include the excluded workload's own
// entries, which ReadLoad takes away.
func (sn *snapshot) SummaryLoad(dests []string) (map[string]map[string]int, []string, error) {
	if sn.empty {
		return map[string]map[string]int{}, nil, nil
	}
	if err := sn.fetchLoad(dests); err != nil {
		return nil, nil, err
	}
	sn.mu.Lock()
	defer sn.mu.Unlock()
	out := map[string]map[string]int{}
	for _, d := range dests {
		if c := sn.load[d]; len(c) > 0 {
			out[d] = maps.Clone(c)
		}
	}
	return out, nil, nil
}

var _ bookkeeping.LoadSummarizer = (*snapshot)(nil)

// fetchLoad counts the entries of the destinations of dests not counted
// yet by this snapshot.
func (sn *snapshot) fetchLoad(dests []string) error {
	sn.mu.Lock()
	var todo []string
	for _, d := range dests {
		if _, ok := sn.load[d]; !ok && !slices.Contains(todo, d) {
			todo = append(todo, d)
		}
	}
	sn.mu.Unlock()
	if len(todo) == 0 {
		return nil
	}
	counts, err := sn.s.loadCounts(sn.ctx, todo)
	if err != nil {
		return err
	}
	sn.mu.Lock()
	defer sn.mu.Unlock()
	for _, d := range todo {
		if _, ok := sn.load[d]; !ok {
			sn.load[d] = counts[d]
		}
	}
	return nil
}
