package s3store

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/minio/minio-go/v7"

	"github.com/render-dev/render/statestore"
)

// object is one listed object.
type object struct {
	etag string // without quotes
	size int64
	tomb bool // a removed workload's record: read as absent
}

// snapshot is a lazy view of the store. It implements statestore.Snapshot
// and lists only what it is asked about: Compare and ReadFile of a path
// list a range of the folder the path is in (delimited, so sub-folders are
// not descended), starting at the path; List of a folder lists that folder
// recursively. What a listing showed is kept for the snapshot's lifetime, so
// each part of the store is listed at most once, and the requests of a plan
// grow with the folders it touches, not with the store. Contents are read
// on demand, each exactly in the listed version, and kept too.
//
// What a snapshot knows is its own layer (what its listings and reads
// found since it was made or last forked) over base: layers frozen when
// the snapshot, or the one it was forked from, was forked (see fork).
// Every answer about a path is the newest layer's that has one.
type snapshot struct {
	s   *Store
	ctx context.Context
	// empty: the bucket does not exist yet (CreateBucket); nothing is listed.
	empty bool

	mu sync.Mutex
	layer
	// base are the frozen layers below the own one, newest first: the
	// snapshot's own earlier layers (frozen when it was forked), then
	// those it inherited from the snapshot it was forked from, read
	// through the fork's filter (see link).
	base []link
	// verdict is what the snapshot found out about the placement index
	// (see indexVerdict).
	verdict int
	// load holds the counts of the destinations whose load was read, by
	// flavour folder (see summaryLoad).
	load map[string]map[string]int
}

// layer is what some listings and reads of a snapshot found.
type layer struct {
	objs  map[string]object // every object a listing showed, by path relative to the store
	deep  []string          // folders listed recursively in full ("" is the whole store)
	spans map[string][]span // per folder ("" is the store's root): name ranges listed in full
	// points are paths a GET alone answered about (see readPoints).
	points map[string]bool
	cache  map[string][]byte
	// subs are, per folder, listings that ran to the folder's end: each
	// saw every sub-folder named after its start (see folderKnown).
	subs map[string][]subList
	// subSpans are, per folder, ranges of names (a sub-folder's with its
	// trailing slash) in which a delimited listing showed every
	// sub-folder; folders are the folders a listing showed an object
	// below, with every folder above them (see shape).
	subSpans map[string][]span
	folders  map[string]bool
}

func newLayer() layer {
	return layer{objs: map[string]object{}, spans: map[string][]span{}, points: map[string]bool{}, cache: map[string][]byte{}, subs: map[string][]subList{}, subSpans: map[string][]span{}, folders: map[string]bool{}}
}

func (l *layer) isEmpty() bool {
	return len(l.objs) == 0 && len(l.deep) == 0 && len(l.spans) == 0 && len(l.points) == 0 &&
		len(l.cache) == 0 && len(l.subs) == 0 && len(l.subSpans) == 0 && len(l.folders) == 0
}

// covers reports whether the layer's listings showed whether p exists.
func (l *layer) covers(p string) bool {
	for _, d := range l.deep {
		if underDir(p, d) {
			return true
		}
	}
	if l.points[p] {
		return true
	}
	dir, name := folder(p)
	for _, sp := range l.spans[dir] {
		if sp.holds(name) {
			return true
		}
	}
	return false
}

// frozen is a layer that no longer changes, shared by every snapshot
// forked on top of it, with indexes that answer a path without walking
// the layer: a drain's 1,000 writes each start from the view of what
// the drain read, which holds a span per workload in the folders they
// share and a recursively listed folder per workload.
type frozen struct {
	layer
	deepSet  map[string]bool   // deep, as a set
	reach    map[string]*reach // spans, per folder
	subReach map[string]*reach // subSpans, per folder
	keys     []string          // every path of objs, sorted
}

func freeze(l layer) *frozen {
	f := &frozen{layer: l, deepSet: map[string]bool{}, reach: map[string]*reach{}, subReach: map[string]*reach{}}
	for _, d := range l.deep {
		f.deepSet[d] = true
	}
	for dir, sps := range l.spans {
		f.reach[dir] = newReach(sps)
	}
	for dir, sps := range l.subSpans {
		f.subReach[dir] = newReach(sps)
	}
	f.keys = make([]string, 0, len(l.objs))
	for p := range l.objs {
		f.keys = append(f.keys, p)
	}
	sort.Strings(f.keys)
	return f
}

// covers is layer.covers; filtered leaves out what a fork does not
// inherit (see link).
func (f *frozen) covers(p string, filtered bool) bool {
	if filtered && inAggregate(p) {
		return false
	}
	if f.points[p] || f.deepHolds(p, false, filtered) {
		return true
	}
	dir, name := folder(p)
	r := f.reach[dir]
	return r != nil && r.holds(name)
}

// deepHolds reports whether a recursive listing of the layer covered p:
// one of p's folders (and p itself, with self) was listed.
func (f *frozen) deepHolds(p string, self, filtered bool) bool {
	if len(f.deepSet) == 0 {
		return false
	}
	d := p
	if !self {
		d = parentDir(p)
	}
	for {
		if f.deepSet[d] && (!filtered || deepInherited(d)) {
			return true
		}
		if d == "" {
			return false
		}
		d = parentDir(d)
	}
}

// under returns the layer's paths below dir ("" for all), sorted.
func (f *frozen) under(dir string) []string {
	if dir == "" {
		return f.keys
	}
	lo := sort.SearchStrings(f.keys, dir+"/")
	hi := sort.SearchStrings(f.keys, dir+"0") // '0' follows '/'
	return f.keys[lo:hi]
}

// link is a frozen layer as one snapshot reads it: gen is the number of
// forks between the snapshot and the one whose layer it is (0: its own).
// A fork does not inherit what its parent knows of the parts of
// aggregated files (see fork), nor the recursive listings of the whole
// store or of a folder that holds the parts, and an object only when
// what it does inherit covers it; an inherited layer (gen > 0) is read
// so. Links are ordered by gen (a snapshot's own layers are newer than
// what it inherited).
type link struct {
	f   *frozen
	gen int
}

func (l link) filtered() bool { return l.gen > 0 }

// partsFolder is the folder of the parts of aggregated files.
var partsFolder = strings.TrimSuffix(aggregatePrefix, "/")

// inAggregate reports whether p lies in the parts folder.
func inAggregate(p string) bool { return underDir(p, partsFolder) }

// dirInAggregate reports whether folder dir is the parts folder or below it.
func dirInAggregate(dir string) bool { return dir == partsFolder || inAggregate(dir) }

// deepInherited reports whether a fork inherits a recursive listing of
// folder d: not of the whole store, of the parts folder or of a folder
// below or above it, which showed parts.
func deepInherited(d string) bool {
	return d != "" && !dirInAggregate(d) && !underDir(partsFolder, d)
}

// reach answers, for a list of spans of one folder, whether one of them
// holds a name, by a binary search: the spans sorted once by their start,
// with the farthest end among those that start before each.
type reach struct {
	afters []string // sorted
	far    []string // far[i]: the farthest last among spans 0..i
	toEnd  []bool   // toEnd[i]: one of spans 0..i runs to the end
}

func newReach(spans []span) *reach {
	sps := slices.Clone(spans)
	slices.SortFunc(sps, func(a, b span) int { return strings.Compare(a.after, b.after) })
	r := &reach{afters: make([]string, len(sps)), far: make([]string, len(sps)), toEnd: make([]bool, len(sps))}
	for i, sp := range sps {
		r.afters[i] = sp.after
		r.far[i], r.toEnd[i] = sp.last, sp.toEnd
		if i > 0 {
			r.far[i] = max(r.far[i], r.far[i-1])
			r.toEnd[i] = r.toEnd[i] || r.toEnd[i-1]
		}
	}
	return r
}

// holds reports whether one of the spans holds name: of those that start
// before name (the first i), one runs to the end or past name.
func (r *reach) holds(name string) bool {
	i := sort.SearchStrings(r.afters, name)
	return i > 0 && (r.toEnd[i-1] || r.far[i-1] >= name)
}

// subList is what a delimited listing of a folder that reached the
// folder's end showed about its sub-folders: every one whose name (with
// its trailing slash) sorts after after is in names.
type subList struct {
	after string
	names map[string]bool
}

// span is a range of names in one folder that a listing showed in full:
// every object whose name n has after < n and (toEnd or n <= last).
type span struct {
	after, last string
	toEnd       bool
}

func (sp span) holds(name string) bool {
	return name > sp.after && (sp.toEnd || name <= sp.last)
}

var _ statestore.Snapshot = (*snapshot)(nil)

func (s *Store) newSnapshot(ctx context.Context) *snapshot {
	return &snapshot{s: s, ctx: ctx, layer: newLayer(), load: map[string]map[string]int{}}
}

func (s *Store) emptySnapshot(ctx context.Context) *snapshot {
	sn := s.newSnapshot(ctx)
	sn.empty = true
	return sn
}

// fork returns a new snapshot, reading with ctx, that starts from what sn
// has looked up so far: the ranges and folders its listings covered, the
// objects they showed and the contents it read (each exactly in its listed
// version). A write's first attempt plans on it (see write.Snapshot).
//
// Nothing in the parts folder of an aggregated file is inherited: parts
// are looked at only after their file (see lookAll), and the fork's own
// listings are newer than everything it inherits, so a file, inherited or
// not, is still seen before its parts. An empty snapshot (no bucket yet)
// gives nil: the write must look for the bucket itself.
//
// The fork shares what sn knows instead of copying it: sn's own layer is
// frozen (sn goes on with a new one on top of it), and the fork reads
// sn's frozen layers through its filter (see link), so that a fork costs
// the same whatever sn holds. A drain's 1,000 writes each fork the view
// of what the drain read; copying it made the forks most of a drain's CPU.
func (sn *snapshot) fork(ctx context.Context) *snapshot {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	if sn.empty {
		return nil
	}
	if !sn.layer.isEmpty() {
		sn.base = append([]link{{f: freeze(sn.layer)}}, sn.base...)
		sn.layer = newLayer()
	}
	out := sn.s.newSnapshot(ctx)
	out.verdict = sn.verdict
	out.base = make([]link, len(sn.base))
	for i, l := range sn.base {
		out.base[i] = link{f: l.f, gen: l.gen + 1}
	}
	return out
}

// What follows reads the snapshot's layers as one. The caller holds
// sn.mu.

// obj returns p's object, as the newest layer that shows p says, and
// that layer's gen (see link; 0 for the own layer).
func (sn *snapshot) obj(p string) (o object, ok bool, gen int) {
	if o, ok := sn.objs[p]; ok {
		return o, true, 0
	}
	for _, l := range sn.base {
		o, ok := l.f.objs[p]
		if !ok {
			continue
		}
		if l.gen > 0 && !sn.inherits(p, l.gen) {
			return object{}, false, 0
		}
		return o, true, l.gen
	}
	return object{}, false, 0
}

// inherits reports whether a layer gen forks away shows p to this
// snapshot: each fork between them inherited it, which the first of them
// (the farthest) did when what it inherited covered p. What it inherited
// are the layers at least gen forks away; the nearer forks inherited
// those and more.
func (sn *snapshot) inherits(p string, gen int) bool {
	if inAggregate(p) {
		return false
	}
	for _, l := range sn.base {
		if l.gen >= gen && l.f.covers(p, true) {
			return true
		}
	}
	return false
}

// cached returns the content of p read so far, exactly in the version
// obj says: a content read by a snapshot that saw that version, the one
// whose layer shows it or a later one.
func (sn *snapshot) cached(p string) ([]byte, bool) {
	if data, ok := sn.cache[p]; ok {
		return data, true
	}
	_, ok, gen := sn.obj(p)
	if !ok {
		return nil, false
	}
	for _, l := range sn.base {
		if l.gen > gen {
			break
		}
		if data, ok := l.f.cache[p]; ok {
			return data, true
		}
	}
	return nil, false
}

// hasFolder reports whether a listing showed objects below folder dir.
func (sn *snapshot) hasFolder(dir string) bool {
	if sn.folders[dir] {
		return true
	}
	for _, l := range sn.base {
		if l.filtered() && dirInAggregate(dir) {
			break
		}
		if l.f.folders[dir] {
			return true
		}
	}
	return false
}

// subSpansHold reports whether a delimited listing of folder dir showed
// every sub-folder in a range that holds name (with its trailing slash).
func (sn *snapshot) subSpansHold(dir, name string) bool {
	for _, sp := range sn.subSpans[dir] {
		if sp.holds(name) {
			return true
		}
	}
	for _, l := range sn.base {
		if l.filtered() && dirInAggregate(dir) {
			break
		}
		if r := l.f.subReach[dir]; r != nil && r.holds(name) {
			return true
		}
	}
	return false
}

// subLists returns the listings of folder dir that ran to its end, the
// oldest first.
func (sn *snapshot) subLists(dir string) []subList {
	var out []subList
	for i := len(sn.base) - 1; i >= 0; i-- {
		if l := sn.base[i]; !l.filtered() || !dirInAggregate(dir) {
			out = append(out, l.f.subs[dir]...)
		}
	}
	return append(out, sn.subs[dir]...)
}

// paths returns every path the snapshot shows an object at below dir
// ("" for all), tombstones included, sorted.
func (sn *snapshot) paths(dir string) []string {
	var out []string
	for p := range sn.objs {
		if underDir(p, dir) {
			out = append(out, p)
		}
	}
	for _, l := range sn.base {
		out = append(out, l.f.under(dir)...)
	}
	sort.Strings(out)
	out = slices.Compact(out)
	return slices.DeleteFunc(out, func(p string) bool {
		_, ok, _ := sn.obj(p)
		return !ok
	})
}

// listPrefix is the key prefix of every object of the store.
func (s *Store) listPrefix() string {
	if s.prefix == "" {
		return ""
	}
	return s.prefix + "/"
}

// list lists every object below dir ("" for the whole store) with one
// recursive listing (one request per 1,000 objects) into a new snapshot.
func (s *Store) list(ctx context.Context, dir string) (*snapshot, error) {
	sn := s.newSnapshot(ctx)
	if err := sn.listDeep(dir); err != nil {
		return nil, err
	}
	return sn, nil
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

// folder returns p's folder ("" at the store's root) and name.
func folder(p string) (string, string) {
	dir, name := path.Split(p)
	return strings.TrimSuffix(dir, "/"), name
}

// underDir reports whether p is below dir ("" holds everything).
func underDir(p, dir string) bool {
	// Without building dir+"/": a fork asks this of every object its
	// parent showed (a drain's 1,000 writes each fork a view of 10,000s).
	return dir == "" || len(p) > len(dir) && p[len(dir)] == '/' && strings.HasPrefix(p, dir)
}

// covered reports whether a listing already showed whether p exists.
// The caller holds sn.mu.
func (sn *snapshot) covered(p string) bool {
	if sn.empty || sn.layer.covers(p) {
		return true
	}
	agg := inAggregate(p)
	for _, l := range sn.base {
		if l.filtered() && agg {
			break
		}
		if l.f.covers(p, l.filtered()) {
			return true
		}
	}
	return false
}

// pointReads splits h's reads into those read by a GET alone (see
// Prefetch) and the others.
func (sn *snapshot) pointReads(h statestore.Hint) (points, rest []string) {
	if sn.empty {
		return nil, h.Reads
	}
	perDir := map[string]int{}
	for _, list := range [][]string{h.Paths, h.Reads} {
		for _, p := range list {
			d, _ := folder(p)
			perDir[d]++
		}
	}
	sn.mu.Lock()
	defer sn.mu.Unlock()
	for _, p := range h.Reads {
		d, _ := folder(p)
		under := strings.HasPrefix(p, aggregatePrefix) // parts: only after their file (see lookAll)
		for _, dir := range h.Dirs {
			under = under || underDir(p, strings.Trim(dir, "/"))
		}
		if perDir[d] == 1 && !under && !sn.covered(p) {
			points = append(points, p)
		} else {
			rest = append(rest, p)
		}
	}
	return points, rest
}

// readPoints reads each of paths with one GET, in parallel: what the
// snapshot then knows of each (it exists in the version read, with that
// content, or it does not exist) is its answer about the path, as a
// listing's would be.
func (sn *snapshot) readPoints(ctx context.Context, paths []string) error {
	jobs := make([]func(context.Context) error, 0, len(paths))
	for _, p := range paths {
		jobs = append(jobs, func(ctx context.Context) error {
			data, etag, err := sn.s.getObject(ctx, p)
			exists := err == nil
			if errors.Is(err, errNoKey) {
				err = nil
			}
			if err != nil {
				return err
			}
			sn.mu.Lock()
			defer sn.mu.Unlock()
			if sn.covered(p) {
				return nil // a listing answered first
			}
			if exists {
				o := object{etag: etag, size: int64(len(data)), tomb: isTombstone(p, int64(len(data)))}
				sn.objs[p], sn.cache[p] = o, data
				sn.markFolder(path.Dir(p))
			}
			sn.points[p] = true
			return nil
		})
	}
	return parallel(ctx, sn.s.cfg.Concurrency, jobs)
}

// lookup returns p's listed object, listing first if no listing has shown
// whether p exists.
func (sn *snapshot) lookup(p string) (object, bool, error) {
	if err := sn.need([]string{p}); err != nil {
		return object{}, false, err
	}
	sn.mu.Lock()
	defer sn.mu.Unlock()
	o, ok, _ := sn.obj(p)
	return o, ok, nil
}

// need makes sure the snapshot knows whether each of paths exists: the
// paths no listing has covered yet are grouped by folder, and each folder
// is listed from its first such path on (one request per 1,000 names),
// folders in parallel, with the store's concurrency.
func (sn *snapshot) need(paths []string) error {
	sn.mu.Lock()
	byDir := map[string][]string{}
	for _, p := range paths {
		if !sn.covered(p) {
			dir, name := folder(p)
			byDir[dir] = append(byDir[dir], name)
		}
	}
	sn.mu.Unlock()
	if len(byDir) == 0 {
		return nil
	}
	jobs := make([]func(context.Context) error, 0, len(byDir))
	for dir, names := range byDir {
		sort.Strings(names)
		jobs = append(jobs, func(ctx context.Context) error { return sn.listRange(ctx, dir, names) })
	}
	return parallel(sn.ctx, sn.s.cfg.Concurrency, jobs)
}

// listRange lists folder dir, delimited, from just before names[0] until
// it has seen every name of names (sorted) or the folder's end: one request
// while the names are close together (a workload's own folder), which
// render's own layouts make the common case. In a folder where the names
// asked for lie far apart among other workloads' (the claims of a
// workload's 20 objects among the claims of 10,000 workloads), listing
// the whole range between them would list the folder, about 90 µs of
// MinIO's CPU per key: once a page of the listing showed far more other
// names than wanted ones, the rest are looked up by short listings that
// each start just before a wanted name (skipScan).
func (sn *snapshot) listRange(ctx context.Context, dir string, names []string) error {
	pre := sn.folderPrefix(dir)
	last := names[len(names)-1]
	fetchOwner := false
	var rest []string
	err := sn.s.retry(ctx, func() error {
		rest = nil
		// A page of a few names more than asked for: the server lists a
		// whole page however early the client stops reading it.
		page := min(listPage, sparse*len(names)+skipPage)
		opts := minio.ListObjectsOptions{Prefix: pre, StartAfter: before(pre, names[0]), MaxKeys: page, FetchOwner: &fetchOwner}
		found := map[string]object{}
		sp := span{after: strings.TrimPrefix(opts.StartAfter, pre), toEnd: true}
		// subs are the sub-folders the listing showed; toEnd says it
		// reached the folder's end, so that they are all of them after
		// its start (the records folder's, looked at with the index
		// marker: see indexVerdict).
		subs, toEnd := map[string]bool{}, true
		keys, wanted, past := 0, 0, false
		greatest := sp.after
		for o := range sn.s.client.ListObjectsIter(ctx, sn.s.cfg.Bucket, opts) {
			if o.Err != nil {
				return o.Err
			}
			name := strings.TrimPrefix(o.Key, pre)
			keys++
			greatest = max(greatest, name)
			if strings.HasSuffix(name, "/") {
				subs[name] = true
			}
			if past {
				// The rest of a page that already has every wanted
				// name, read for its sub-folders only: the page is
				// here, and reading it costs no request; the next
				// page would.
				if keys%page == 0 {
					toEnd = false
					break
				}
				continue
			}
			if name != "" && !strings.HasSuffix(name, "/") {
				found[name] = object{etag: trimETag(o.ETag), size: o.Size}
			} // else a sub-folder, or a folder placeholder some tools create
			if name > last {
				// A page holds every name of its range, files first and
				// then sub-folders, each sorted: every file up to this
				// name is known.
				sp = span{after: sp.after, last: name}
				past = true
				if keys%page == 0 {
					toEnd = false
					break
				}
				continue
			}
			for wanted < len(names) && names[wanted] <= name {
				wanted++
			}
			if keys%page == 0 && wanted*sparse < keys {
				// A full page, and most of it other workloads' names.
				sp = span{after: sp.after, last: name}
				rest = names[wanted:]
				toEnd = false
				break
			}
		}
		if err := ctx.Err(); err != nil {
			return err // the listing stopped early: it proves nothing
		}
		sn.addSpan(dir, found, sp)
		// Every break above is at a page's end: the pages read hold
		// every name up to the greatest one they showed.
		sn.addSubs(dir, subs, span{after: sp.after, last: greatest, toEnd: toEnd})
		if toEnd {
			sn.mu.Lock()
			sn.subs[dir] = append(sn.subs[dir], subList{after: sp.after, names: subs})
			sn.mu.Unlock()
		}
		return nil
	})
	if err != nil || len(rest) == 0 {
		return err
	}
	return sn.skipScan(ctx, dir, rest)
}

// listPage is the largest page of a listing (S3's default and maximum),
// and sparse how many other names per wanted one make a folder's names
// sparse.
const (
	listPage = 1000
	sparse   = 8
)

// skipPage is the size of skipScan's listings: a few names past the one
// wanted, in case the next wanted name is among them.
const skipPage = 32

// skipScan looks up names (sorted) in folder dir by short listings, each
// from just before the first name no listing has covered yet, in a few
// runs side by side.
func (sn *snapshot) skipScan(ctx context.Context, dir string, names []string) error {
	runs := min(len(names), max(sn.s.cfg.Concurrency/2, 1))
	jobs := make([]func(context.Context) error, 0, runs)
	for i := range runs {
		part := names[i*len(names)/runs : (i+1)*len(names)/runs]
		jobs = append(jobs, func(ctx context.Context) error {
			for len(part) > 0 {
				last, err := sn.listShort(ctx, dir, part[0])
				if err != nil {
					return err
				}
				if last == "" {
					return nil // the folder's end
				}
				for len(part) > 0 && part[0] <= last {
					part = part[1:]
				}
			}
			return nil
		})
	}
	return parallel(ctx, sn.s.cfg.Concurrency, jobs)
}

// listShort lists at most skipPage names of folder dir from just before
// name, and returns the last name it saw ("" when it reached the folder's
// end).
func (sn *snapshot) listShort(ctx context.Context, dir, name string) (string, error) {
	pre := sn.folderPrefix(dir)
	fetchOwner := false
	var last string
	err := sn.s.retry(ctx, func() error {
		opts := minio.ListObjectsOptions{Prefix: pre, StartAfter: before(pre, name), MaxKeys: skipPage, FetchOwner: &fetchOwner}
		found, subs := map[string]object{}, map[string]bool{}
		sp := span{after: strings.TrimPrefix(opts.StartAfter, pre), toEnd: true}
		n := 0
		last = ""
		greatest := sp.after
		for o := range sn.s.client.ListObjectsIter(ctx, sn.s.cfg.Bucket, opts) {
			if o.Err != nil {
				return o.Err
			}
			k := strings.TrimPrefix(o.Key, pre)
			greatest = max(greatest, k)
			if strings.HasSuffix(k, "/") {
				subs[k] = true
			} else if k != "" {
				found[k] = object{etag: trimETag(o.ETag), size: o.Size}
			}
			if n++; n == skipPage {
				sp, last = span{after: sp.after, last: k}, k
				break
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		sn.addSpan(dir, found, sp)
		sn.addSubs(dir, subs, span{after: sp.after, last: greatest, toEnd: sp.toEnd})
		return nil
	})
	return last, err
}

// folderKnown tells, when a listing of dir's parent already showed it,
// whether folder dir holds any object: a delimited listing that reached
// its folder's end from before dir's name on showed every sub-folder
// there, and dir among them exactly when some object is below it. Only a
// listing that also covered the name from of the same parent folder
// counts: it is the one that answered about from, or a later one (the
// first answer about a path is kept, see add).
func (sn *snapshot) folderKnown(dir, from string) (any, known bool) {
	parent, name := folder(dir)
	name += "/"
	fromDir, fromName := folder(from)
	if fromDir != parent {
		return false, false
	}
	sn.mu.Lock()
	defer sn.mu.Unlock()
	for _, l := range sn.subLists(parent) {
		if name > l.after && fromName > l.after {
			return l.names[name], true
		}
	}
	return false, false
}

// folderPrefix is the key prefix of folder dir's objects.
func (sn *snapshot) folderPrefix(dir string) string {
	pre := sn.s.listPrefix()
	if dir != "" {
		pre += dir + "/"
	}
	return pre
}

// addSpan records what a listing of folder dir showed: found, by name,
// and the range sp it covered.
func (sn *snapshot) addSpan(dir string, found map[string]object, sp span) {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	for name, o := range found {
		p := name
		if dir != "" {
			p = dir + "/" + name
		}
		sn.add(p, o)
	}
	if len(found) > 0 {
		sn.markFolder(dir)
	}
	sn.spans[dir] = append(sn.spans[dir], sp)
}

// addSubs records what a delimited listing of folder dir showed of its
// sub-folders: subs (names with their trailing slash), every one in the
// range sp.
func (sn *snapshot) addSubs(dir string, subs map[string]bool, sp span) {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	for name := range subs {
		if name = strings.TrimSuffix(name, "/"); name != "" {
			sn.markFolder(path.Join(dir, name))
		}
	}
	sn.subSpans[dir] = append(sn.subSpans[dir], sp)
}

// markFolder notes that objects lie below folder dir, and so below every
// folder above it. The caller holds sn.mu.
func (sn *snapshot) markFolder(dir string) {
	for dir != "" && dir != "." && dir != "/" && !sn.hasFolder(dir) {
		sn.folders[dir] = true
		dir = path.Dir(dir)
	}
}

// before returns a key that sorts just before key, for a listing's
// start-after to begin at key: key with its last character decremented when
// that stays printable ASCII, otherwise the folder's prefix itself (the
// listing then starts at the folder's beginning, which is only slower).
func before(prefix, key string) string {
	full := prefix + key
	r, size := utf8.DecodeLastRuneInString(full)
	if key == "" || r <= ' ' || r > '~' || size != 1 {
		return prefix
	}
	return full[:len(full)-1] + string(r-1)
}

// add records a listed object. The first listing that covered p wins,
// whether it showed p or showed that p did not exist, so that every answer
// of one snapshot about p agrees: a later, wider listing (the planner's look
// at every record) must not make a path it already answered about appear,
// or a commit would be conditioned on a version the plan never read. The
// caller holds sn.mu and adds the listing's own coverage only afterwards.
func (sn *snapshot) add(p string, o object) {
	if _, seen, _ := sn.obj(p); seen || sn.covered(p) {
		return
	}
	o.tomb = isTombstone(p, o.size)
	sn.objs[p] = o
}

// listDeep lists every object below dir ("" for the whole store) with one
// recursive listing (one request per 1,000 objects), unless a listing
// already covered it.
func (sn *snapshot) listDeep(dir string) error {
	sn.mu.Lock()
	if sn.empty || sn.deepCovered(dir) {
		sn.mu.Unlock()
		return nil
	}
	sn.mu.Unlock()
	base := sn.s.listPrefix()
	q := base
	if dir != "" {
		q += dir + "/"
	}
	fetchOwner := false
	return sn.s.retry(sn.ctx, func() error {
		found := map[string]object{}
		for o := range sn.s.client.ListObjectsIter(sn.ctx, sn.s.cfg.Bucket, minio.ListObjectsOptions{Prefix: q, Recursive: true, FetchOwner: &fetchOwner}) {
			if o.Err != nil {
				return o.Err
			}
			rel := strings.TrimPrefix(o.Key, base)
			if rel == "" || strings.HasSuffix(rel, "/") {
				continue // folder placeholders some tools create
			}
			found[rel] = object{etag: trimETag(o.ETag), size: o.Size}
		}
		if err := sn.ctx.Err(); err != nil {
			return err // the listing stopped early: it proves nothing
		}
		sn.mu.Lock()
		defer sn.mu.Unlock()
		for p, o := range found {
			sn.add(p, o)
			sn.markFolder(path.Dir(p))
		}
		sn.deep = append(sn.deep, dir)
		return nil
	})
}

// deepCovered reports whether a recursive listing covered all of dir.
// The caller holds sn.mu.
func (sn *snapshot) deepCovered(dir string) bool {
	for _, d := range sn.deep {
		if d == dir || underDir(dir, d) {
			return true
		}
	}
	for _, l := range sn.base {
		if l.f.deepHolds(dir, true, l.filtered()) {
			return true
		}
	}
	return false
}

// Compare answers from the listing: a single-part object's ETag is the MD5
// of its content. Only a multipart object of the right size is read, and
// a record, whose stored form carries a revision (see sealRecord) and
// which the planner has always read before comparing it.
func (sn *snapshot) Compare(p string, data []byte) (exists, equal bool, err error) {
	o, ok, err := sn.lookup(p)
	if err != nil {
		return false, false, err
	}
	if !ok || o.tomb {
		return false, false, nil
	}
	if data == nil { // the planner only asks whether p exists
		return true, o.size == 0, nil
	}
	if isRecordPath(p) {
		stored, err := sn.readRaw(p)
		if err != nil {
			return true, false, err
		}
		// A record with a pending write is rewritten by the next commit,
		// which forgets what it committed or deleted.
		return true, len(storedPending(stored)) == 0 && bytes.Equal(unsealRecord(stored), data), nil
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
// vanished since the listing fails with an error wrapping ErrConflict. A
// record is returned with the paths of its pending write among its files
// (see withPending).
func (sn *snapshot) ReadFile(p string) ([]byte, error) {
	data, err := sn.readRaw(p)
	if err != nil || !isRecordPath(p) {
		return data, err
	}
	return absorbPending(data), nil
}

// readRaw is ReadFile with a record as it is stored.
func (sn *snapshot) readRaw(p string) ([]byte, error) {
	o, ok, err := sn.lookup(p)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	if !ok || o.tomb {
		return nil, fmt.Errorf("%s: %w", p, statestore.ErrNotFound)
	}
	sn.mu.Lock()
	data, ok := sn.cached(p)
	sn.mu.Unlock()
	if ok {
		return data, nil
	}
	data, err = sn.s.get(sn.ctx, p, o.etag)
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
	if err := sn.need(paths); err != nil {
		return err
	}
	jobs := make([]func(context.Context) error, 0, len(paths))
	for _, p := range paths {
		jobs = append(jobs, func(context.Context) error {
			_, err := sn.ReadFile(p)
			if errors.Is(err, statestore.ErrNotFound) {
				return nil
			}
			return err
		})
	}
	return parallel(sn.ctx, sn.s.cfg.Concurrency, jobs)
}

// Prefetch looks up, in parallel and grouped by folder, everything h names
// (see statestore.Hint), reads h.Reads, and counts the load on h.Load
// (see summaryLoad), all at once, so that the lookups that follow cost
// nothing more.
//
// A read that is the only path h names in its folder (a workload's
// record, in a folder of its own) is not listed: one GET says whether it
// exists and what it holds, where a listing and a GET would be two
// requests (see readPoints).
func (sn *snapshot) Prefetch(h statestore.Hint) error {
	points, reads := sn.pointReads(h)
	// Records first, the rest once they are known (see recordFirst): the
	// records h names, read by a GET or listed, and the folders of
	// records it names, side by side; then everything else.
	recPoints, otherPoints := partition(points, isRecordPath)
	recPaths, paths := partition(slices.Concat(h.Paths, reads), isRecordPath)
	recDirs, dirs := partition(h.Dirs, func(d string) bool {
		d = strings.Trim(d, "/")
		return d == statestore.RecordsDir || underDir(d, statestore.RecordsDir)
	})
	look := func(ctx context.Context, points, paths, dirs []string) error {
		return parallel(ctx, 2, []func(context.Context) error{
			func(ctx context.Context) error { return sn.readPoints(ctx, points) },
			func(context.Context) error { return sn.lookAll(paths, dirs) },
		})
	}
	jobs := []func(context.Context) error{func(ctx context.Context) error {
		if err := look(ctx, recPoints, recPaths, recDirs); err != nil {
			return err
		}
		if err := look(ctx, otherPoints, paths, dirs); err != nil {
			return err
		}
		return sn.prefetch(reads)
	}}
	if len(h.Load) > 0 && !sn.empty {
		jobs = append(jobs, func(context.Context) error { return sn.fetchLoad(h.Load) })
	}
	return parallel(sn.ctx, 2, jobs)
}

// Capabilities declares what an S3 snapshot does beyond its lookups: it
// lists lazily, folder by folder, and fetches ahead what a hint names
// (Prefetch); it logs through the store's Config.Debug. It tells whether
// the bucket has the placement index by more than the marker (Indexed:
// see indexed.go), and reads the load from the bucket's ledgers
// (SummaryLoad: see load.go).
func (sn *snapshot) Capabilities() statestore.SnapshotCapabilities {
	return statestore.SnapshotCapabilities{Prefetch: sn.Prefetch, Debug: sn.Debug, Indexed: sn.hasIndex, SummaryLoad: sn.summaryLoad}
}

// partition splits xs into those in and those not in.
func partition(xs []string, in func(string) bool) (yes, no []string) {
	for _, x := range xs {
		if in(x) {
			yes = append(yes, x)
		} else {
			no = append(no, x)
		}
	}
	return yes, no
}

// recordFirst reports whether a write of the workload whose record is at
// recPath may plan on what sn looked up: whether sn looked the record up
// already. A write's plan rests on listings made after its record was
// listed, never before: a write of the workload that the record then
// showed finished (committed, or let go of its lease) had sent every
// upload and delete before, so a listing made after the record shows
// them; one made before may show files that write deleted since, which
// the record owns, and the plan would not upload them again (the
// simulated campaign's s3 seed 15). prepare lists the record on its own,
// before everything else, and Prefetch, by which a render's view is
// read, lists records first; a view that has not looked the record up
// would list it after everything it holds.
func (sn *snapshot) recordFirst(recPath string) bool {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	return sn.covered(recPath)
}

// Debug logs through the store's Config.Debug, when it has one.
func (sn *snapshot) Debug(msg string, args ...any) {
	if sn.s.cfg.Debug != nil {
		sn.s.cfg.Debug(msg, args...)
	}
}

// List returns every file below dir, sorted, listing dir recursively the
// first time. Tombstones are not files.
func (sn *snapshot) List(dir string) ([]string, error) {
	dir = strings.Trim(dir, "/")
	if dir == "." {
		dir = ""
	}
	if err := sn.listDeep(dir); err != nil {
		return nil, err
	}
	sn.mu.Lock()
	defer sn.mu.Unlock()
	return slices.DeleteFunc(sn.paths(dir), func(p string) bool {
		o, _, _ := sn.obj(p)
		return o.tomb
	}), nil
}

// etag returns the listed ETag of p ("" when absent or not looked up),
// tombstones included.
func (sn *snapshot) etag(p string) string {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	o, _, _ := sn.obj(p)
	return o.etag
}

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
