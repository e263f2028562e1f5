package s3store

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/minio/minio-go/v7"

	"github.com/render-dev/render/statestore"
)

// object is one listed object.
type object struct {
	etag string // without quotes
	size int64
	tomb bool // a removed workload's record: read as absent
}

// snapshot is one listing of the store (or of a folder of it). It
// implements statestore.Snapshot: Compare answers from the listing, ReadFile
// fetches the listed version of an object (once; contents are cached).
type snapshot struct {
	s    *Store
	ctx  context.Context
	objs map[string]object // by path relative to the store

	mu    sync.Mutex
	cache map[string][]byte
}

var _ statestore.Snapshot = (*snapshot)(nil)

func (s *Store) emptySnapshot(ctx context.Context) *snapshot {
	return &snapshot{s: s, ctx: ctx, objs: map[string]object{}, cache: map[string][]byte{}}
}

// listPrefix is the key prefix of every object of the store.
func (s *Store) listPrefix() string {
	if s.prefix == "" {
		return ""
	}
	return s.prefix + "/"
}

// list lists every object below dir ("" for the whole store) with one
// recursive listing (one request per 1,000 objects).
func (s *Store) list(ctx context.Context, dir string) (*snapshot, error) {
	base := s.listPrefix()
	q := base
	if dir != "" {
		q += dir + "/"
	}
	snap := s.emptySnapshot(ctx)
	fetchOwner := false
	err := s.retry(ctx, func() error {
		objs := map[string]object{}
		var first error
		// The channel must be drained to its end, errors included.
		for o := range s.client.ListObjects(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: q, Recursive: true, FetchOwner: &fetchOwner}) {
			if o.Err != nil {
				if first == nil {
					first = o.Err
				}
				continue
			}
			rel := strings.TrimPrefix(o.Key, base)
			if rel == "" || strings.HasSuffix(rel, "/") {
				continue // folder placeholders some tools create
			}
			objs[rel] = object{etag: trimETag(o.ETag), size: o.Size, tomb: isTombstone(rel, o.Size)}
		}
		if first == nil {
			snap.objs = objs
		}
		return first
	})
	if err != nil {
		return nil, err
	}
	return snap, nil
}

func trimETag(etag string) string { return strings.ToLower(strings.Trim(etag, `"`)) }

// isMultipart reports whether etag is a multipart upload's ETag, which is
// not the MD5 of the content.
func isMultipart(etag string) bool { return strings.Contains(etag, "-") }

func md5hex(data []byte) string {
	sum := md5.Sum(data)
	return hex.EncodeToString(sum[:])
}

func isRecordPath(p string) bool {
	return strings.HasPrefix(p, statestore.RecordsDir+"/") && strings.HasSuffix(p, ".json")
}

// Compare answers from the listing: a single-part object's ETag is the MD5
// of its content. Only a multipart object of the right size is read, and
// a record, whose stored form carries a revision (see sealRecord) and
// which the planner has always read before comparing it.
func (sn *snapshot) Compare(p string, data []byte) (exists, equal bool, err error) {
	o, ok := sn.objs[p]
	if !ok || o.tomb {
		return false, false, nil
	}
	if data == nil { // the planner only asks whether p exists
		return true, o.size == 0, nil
	}
	if isRecordPath(p) {
		stored, err := sn.ReadFile(p)
		if err != nil {
			return true, false, err
		}
		return true, bytes.Equal(unsealRecord(stored), data), nil
	}
	if o.size != int64(len(data)) {
		return true, false, nil
	}
	if !isMultipart(o.etag) {
		return true, o.etag == md5hex(data), nil
	}
	stored, err := sn.ReadFile(p)
	if err != nil {
		return true, false, err
	}
	return true, bytes.Equal(stored, data), nil
}

// ReadFile returns the listed version of p. An object that changed or
// vanished since the listing fails with an error wrapping ErrConflict.
func (sn *snapshot) ReadFile(p string) ([]byte, error) {
	o, ok := sn.objs[p]
	if !ok || o.tomb {
		return nil, fmt.Errorf("%s: %w", p, statestore.ErrNotFound)
	}
	sn.mu.Lock()
	data, ok := sn.cache[p]
	sn.mu.Unlock()
	if ok {
		return data, nil
	}
	data, err := sn.s.get(sn.ctx, p, o.etag)
	if errors.Is(err, errNoKey) {
		err = errChanged
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	sn.mu.Lock()
	sn.cache[p] = data
	sn.mu.Unlock()
	return data, nil
}

// prefetch reads paths into the cache, with the store's concurrency.
func (sn *snapshot) prefetch(paths []string) error {
	jobs := make([]func(context.Context) error, 0, len(paths))
	for _, p := range paths {
		jobs = append(jobs, func(context.Context) error {
			_, err := sn.ReadFile(p)
			return err
		})
	}
	return parallel(sn.ctx, sn.s.cfg.Concurrency, jobs)
}

// List returns every file below dir, sorted. Tombstones are not files.
func (sn *snapshot) List(dir string) ([]string, error) {
	pre := ""
	if dir != "" && dir != "." {
		pre = strings.TrimSuffix(dir, "/") + "/"
	}
	var out []string
	for p, o := range sn.objs {
		if !o.tomb && strings.HasPrefix(p, pre) {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out, nil
}

// etag returns the listed ETag of p ("" when absent), tombstones included:
// it is what a conditional write of p is conditioned on.
func (sn *snapshot) etag(p string) string { return sn.objs[p].etag }

// get reads p, exactly in version etag when etag is not empty.
func (s *Store) get(ctx context.Context, p, etag string) ([]byte, error) {
	var data []byte
	err := s.retry(ctx, func() error {
		opts := minio.GetObjectOptions{}
		if etag != "" {
			if err := opts.SetMatchETag(etag); err != nil {
				return err
			}
		}
		rc, _, _, err := minio.Core{Client: s.client}.GetObject(ctx, s.cfg.Bucket, s.key(p), opts)
		if err != nil {
			return err
		}
		defer rc.Close()
		data, err = io.ReadAll(rc)
		return err
	})
	return data, err
}
