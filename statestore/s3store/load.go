package s3store

import (
	"context"
	"errors"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/minio/minio-go/v7"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
	"github.com/render-dev/render/statestore/planner"
)

// A bucket's load summaries are bookkeeping's load ledgers (see
// statestore/bookkeeping/loadledger.go and docs/design.md, "Load
// summaries"): per destination, a base .render/load/<destination>.json
// that only folds write (conditionally), and a folder
// .render/load/<destination>/ of change objects, each written by one
// write only, under a name of its own; writers of different workloads
// never need one object's newest version. This file is their storage:
// GETs and conditional PUTs of one object, a delimited listing of one
// folder, DeleteObjects, a listing of one destination's entries, a record
// as it is now.

// ledgers is the load ledger protocol on this Store's bucket.
func (s *Store) ledgers() bookkeeping.Ledgers {
	return bookkeeping.Ledgers{
		Storage: ledgerStorage{s},
		Reads: func(ctx context.Context, jobs []func(context.Context) error) error {
			return parallel(ctx, s.cfg.Concurrency, jobs)
		},
		Writes: func(ctx context.Context, jobs []func(context.Context) error) error {
			return writeAll(ctx, s.cfg.Concurrency, jobs)
		},
		Listed:    &s.listed,
		FoldAt:    s.foldAt,
		FoldEvery: s.foldEvery,
	}
}

// ledgerStorage is the bucket as bookkeeping.LedgerStorage.
type ledgerStorage struct{ s *Store }

func (l ledgerStorage) ReadObject(ctx context.Context, p string) ([]byte, string, error) {
	data, etag, err := l.s.getObject(ctx, p)
	if errors.Is(err, errNoKey) {
		return nil, "", bookkeeping.ErrNoObject
	}
	return data, etag, err
}

func (l ledgerStorage) WriteObject(ctx context.Context, p string, data []byte, version string) (string, error) {
	c := cond{exists: true, etag: version}
	switch version {
	case bookkeeping.IfAbsent:
		c = cond{}
	case bookkeeping.AnyVersion:
		c = cond{unconditional: true}
	}
	etag, err := l.s.put(ctx, p, data, c)
	if errors.Is(err, errChanged) {
		return "", bookkeeping.ErrVersionMoved
	}
	return etag, err
}

// ListFolder lists the names of the objects directly in dir, delimited
// (one request per 1,000 names).
func (l ledgerStorage) ListFolder(ctx context.Context, dir string) ([]string, error) {
	pre := l.s.listPrefix() + dir + "/"
	fetchOwner := false
	var out []string
	err := l.s.retry(ctx, func() error {
		out = out[:0]
		opts := minio.ListObjectsOptions{Prefix: pre, FetchOwner: &fetchOwner}
		for o := range l.s.client.ListObjectsIter(ctx, l.s.cfg.Bucket, opts) {
			if o.Err != nil {
				return o.Err
			}
			if name := strings.TrimPrefix(o.Key, pre); name != "" && !strings.HasSuffix(name, "/") {
				out = append(out, name)
			}
		}
		return ctx.Err()
	})
	return out, err
}

// DeleteObjects deletes paths (DeleteObjects, 1,000 per request).
func (l ledgerStorage) DeleteObjects(ctx context.Context, paths []string) error {
	return l.s.remove(ctx, paths)
}

// ListEntries lists d's resource index entries (one request per 1,000).
func (l ledgerStorage) ListEntries(ctx context.Context, d string) ([]string, error) {
	sn, err := l.s.list(ctx, bookkeeping.LoadPaths([]string{d})[0])
	if err != nil {
		return nil, err
	}
	var out []string
	for p, o := range sn.objs {
		if !o.tomb {
			out = append(out, p)
		}
	}
	return out, nil
}

// CurrentRecord reads workload's record as it is now (nil when there is
// none, or a tombstone).
func (l ledgerStorage) CurrentRecord(ctx context.Context, workload string) (*statestore.Record, error) {
	p := statestore.RecordPath(workload)
	data, _, err := l.s.getObject(ctx, p)
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

// The write's steps, as its Apply and ApplyAll take them.

type loadState = bookkeeping.LoadState

func newLoadState() *loadState { return bookkeeping.NewLoadState() }

func (s *Store) announce(ctx context.Context, ls *loadState, changes map[string]map[string][]string) error {
	return s.ledgers().Announce(ctx, ls, changes)
}

func (s *Store) settle(ctx context.Context, ls *loadState) { s.ledgers().Settle(ctx, ls) }

func (s *Store) createSummaries(ctx context.Context) { s.ledgers().CreateListed(ctx) }

// loadChanges is bookkeeping.LedgerChanges of a write of workload, whose
// record was old, that makes plan.
func loadChanges(workload string, old *statestore.Record, plan planner.Plan) map[string]map[string][]string {
	added := map[string][]byte{}
	for _, op := range plan.Ops {
		if !op.Delete && strings.HasPrefix(op.Path, bookkeeping.IndexDir+"/") {
			added[op.Path] = op.Data
		}
	}
	return bookkeeping.LedgerChanges(workload, old, plan.Record, added)
}

// summaryLoad is the snapshot's SummaryLoad, which its Capabilities
// declare: it answers bookkeeping.ReadLoad for every destination of dests
// (see bookkeeping.Ledgers.Counts). The counts include the excluded
// workload's own entries, which ReadLoad takes away.
func (sn *snapshot) summaryLoad(dests []string) (map[string]map[string]int, []string, error) {
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
	counts, err := sn.s.ledgers().Counts(sn.ctx, todo)
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
