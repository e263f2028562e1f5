package gitstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/sideband"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
)

// A remote clone is partial when the server allows it (git's partial
// clone: the "filter" capability, and wants of any object it holds, which
// Gitea, GitHub and GitLab all allow). A fetch then brings the branch tip's
// commit alone, and a render fetches each tree and blob it looks at the
// first time it looks, a folder level at a time (see treeSnap.Prefetch).
// So a render pays for the folders on the paths it touches, not for the
// size of the repository: in a store of 100,000 workloads it reads a few
// dozen trees. A server without these capabilities is cloned as before:
// the tip, whole, at depth 1.

// Whether a store is large is decided from the server's first answer,
// never from who wrote last. A store is large when a whole fetch of its
// tip brings more than largeStore objects. Each clone first fetches the tip
// commit with the store's top folders (probe: one request), and reads the
// store partially when any of these says it is large:
//
//   - the file sizeFile in the store's .render folder, which a writer that
//     found the store large writes (and every later commit keeps, since
//     no other tool touches .render): another writer's commit at the tip
//     (a person's fix, Kratix, a bot) cannot hide it;
//   - the load summary (load.go), whose file names count the resources on
//     each destination: more than largeResources in all;
//   - the trailer largeTrailer on the tip commit, which render's commits
//     carried before sizeFile existed (and still carry, for older readers).
//
// A store render has not written yet (no .render folder: a repository
// Kratix wrote, the first render of a migration) has no such record, and
// its top folders say little about its size: it is read partially too,
// unless the probe brought all of it. It is large when more than
// largeFrontier files and folders lie below the top folders the probe
// brought (Kratix's layout has three per destination: about 30
// destinations or more), or else when, at its first commit, an estimate
// from the folders the render read says so (see estimateObjects). Other
// stores are fetched whole, as before: one request instead of one per
// folder level, and a writer that then finds more than largeStore objects
// marks the store large.
const (
	largeStore     = 10_000
	largeResources = largeStore / 10 // a resource is about ten objects: files, folders, record, claim, index entry
	largeFrontier  = largeStore / 100
	largeTrailer   = "Render-Store-Size"
	largeValue     = "large"
)

// sizeFile is where a store says it is large, relative to the store's
// path; it holds largeValue.
var sizeFile = path.Join(layout.MetaDir, "store-size")

// sizeData is sizeFile's content.
var sizeData = []byte(largeValue + "\n")

type fetchMode int

const (
	modeUndecided fetchMode = iota
	modeWhole
	modePartial
)

// storeSize is what the probe says about a store's size.
type storeSize int

const (
	sizeSmall   storeSize = iota
	sizeLarge             // the store says so (sizeFile, the summary, the trailer)
	sizeUnknown           // render never wrote it: estimated at the first commit
)

// probe decides how to fetch: it fetches the branch tip's commit and the
// store's top folders alone (on a server that allows partial clones) into
// a scratch store, and judges the store's size from them.
func (r *remoteRepo) probe(ctx context.Context) (fetchMode, error) {
	mode := modeWhole
	r.unknown = false
	err := r.retry(ctx, func() error {
		sess, adv, done, err := r.advertise(ctx)
		if err != nil || adv == nil {
			return err
		}
		defer done()
		r.caps = adv.Capabilities
		r.partial = partialAllowed(adv.Capabilities)
		all, err := adv.AllReferences()
		if err != nil {
			return err
		}
		tip, ok := all[r.branch]
		if !ok || tip.Type() != plumbing.HashReference {
			return nil
		}
		if !r.partial {
			// Whole, in this same session: one advertisement, not two.
			return r.takeWhole(ctx, sess, adv, false)
		}
		scratch := memory.NewStorage()
		req := packp.NewUploadPackRequestFromCapabilities(adv.Capabilities)
		req.Wants = []plumbing.Hash{tip.Hash()}
		req.Depth = packp.DepthCommits(1)
		req.Filter = r.topFilter()
		_ = req.Capabilities.Set(capability.Shallow)
		_ = req.Capabilities.Set(capability.Filter)
		if err := r.receiveInto(ctx, sess, req, scratch); err != nil {
			return err
		}
		r.requests++
		c, err := object.GetCommit(scratch, tip.Hash())
		if err != nil {
			return err
		}
		size, err := r.judge(scratch, c)
		if err != nil {
			return err
		}
		if size == sizeSmall {
			// Whole, in this same session: the advertisement above
			// serves the whole fetch too (a request less than fetching
			// anew, which every render into a small store would pay). On
			// ssh the probe's request ended the session: the fetch opens
			// another.
			return r.takeWhole(ctx, sess, adv, true)
		}
		// A large store, or one of unknown size: what the probe fetched
		// is the start of the partial clone, and the requests waiting
		// come now.
		mode = modePartial
		r.large, r.unknown = size == sizeLarge, size == sizeUnknown
		for h, o := range scratch.ObjectStorage.Objects {
			if r.st.HasEncodedObject(h) != nil {
				if _, err := r.st.SetEncodedObject(o); err != nil {
					return err
				}
			}
		}
		if err := r.takeAdvertised(ctx, sess, adv, true); err != nil {
			return err
		}
		r.fetched = true
		return nil
	})
	return mode, err
}

// judge says how large the store at tip commit c is, from the objects the
// probe fetched (st).
func (r *remoteRepo) judge(st storer.EncodedObjectStorer, c *object.Commit) (storeSize, error) {
	if markedLarge(c.Message) {
		return sizeLarge, nil
	}
	t := newTreeSnap(st, c.TreeHash, strings.Trim(r.cfg.Path, "/"))
	meta, err := t.entry(t.full(layout.MetaDir))
	if err != nil {
		return sizeSmall, err
	}
	if meta == nil || meta.Mode != filemode.Dir {
		switch n := missing(st, c.TreeHash); {
		case n == 0:
			return sizeSmall, nil // nothing more to fetch: an empty or nearly empty repository
		case n > largeFrontier:
			return sizeLarge, nil
		}
		return sizeUnknown, nil
	}
	if e, err := t.entry(t.full(sizeFile)); err == nil && isFile(e) {
		if data, err := readBlob(st, e.Hash); err == nil && strings.TrimSpace(string(data)) == largeValue {
			return sizeLarge, nil
		}
	}
	n, err := bookkeeping.CountsTotal(t)
	if err != nil {
		return sizeSmall, err
	}
	if n > largeResources {
		return sizeLarge, nil
	}
	return sizeSmall, nil
}

// missing counts the entries of tree h's folders that st holds whose
// objects st lacks: what the probe left for later, below the top folders.
// A folder met in several places counts in each (every destination's
// canary folder is the same tree, and a fetch level by level asks for it
// below each destination all the same); the walk is bounded by what the
// probe brought.
func missing(st storer.EncodedObjectStorer, h plumbing.Hash) int {
	tr, err := object.GetTree(st, h)
	if err != nil {
		return 1
	}
	n := 0
	for _, e := range tr.Entries {
		switch {
		case e.Mode == filemode.Submodule:
		case st.HasEncodedObject(e.Hash) != nil:
			n++
		case e.Mode == filemode.Dir:
			n += missing(st, e.Hash)
		}
	}
	return n
}

// isLarge reports whether the commits this clone makes mark the store as
// large (sizeFile, and the trailer): the probe or a whole fetch found it
// large, or, for a store render had not written, the folders read since
// suggest more than largeStore objects (estimateObjects).
func (r *remoteRepo) isLarge() bool {
	if !r.large && r.unknown && r.mode == modePartial {
		if tip := r.tip(); !tip.IsZero() {
			if root, err := rootTree(r.st, tip); err == nil && estimateObjects(r.st, root, map[plumbing.Hash]float64{}) > largeStore {
				r.large = true
			}
		}
	}
	return r.large
}

// estimateObjects estimates how many objects a whole fetch of tree h would
// bring, from the trees of it that st holds (a partial clone holds those
// the render looked at, and the top folders): a folder counts itself, its
// files, and each of its sub-folders as large as the largest of them that
// st holds (one object when st holds none). So it errs on the large side,
// which costs a few requests more per render where erring on the small
// side would cost a whole fetch; and one folder of 10,000 requests the
// render looked through is enough to call the store large.
func estimateObjects(st storer.EncodedObjectStorer, h plumbing.Hash, memo map[plumbing.Hash]float64) float64 {
	if n, ok := memo[h]; ok {
		return n
	}
	n := 1.0
	tr, err := object.GetTree(st, h)
	if err == nil {
		dirs, biggest := 0, 1.0
		for _, e := range tr.Entries {
			if e.Mode != filemode.Dir {
				n++
				continue
			}
			dirs++
			if st.HasEncodedObject(e.Hash) == nil {
				biggest = max(biggest, estimateObjects(st, e.Hash, memo))
			}
		}
		n += float64(dirs) * biggest
	}
	memo[h] = n
	return n
}

// topFilter is the filter of a partial clone's tip fetch: the commit and
// the trees of the store's top (the root, the folders down to the store's
// path, the store's folder itself: one entry per destination and .render),
// and one level more: each destination's first folders and .render's
// (the records', the claims', the index's and the load summary's folders,
// which are small), which every render looks through, and the files in
// them (sizeFile). Each level less would be one request more, a round trip
// to the server that costs more than these few kilobytes.
func (r *remoteRepo) topFilter() packp.Filter {
	depth := 3
	if p := strings.Trim(r.cfg.Path, "/"); p != "" && p != "." {
		depth += len(strings.Split(p, "/"))
	}
	return packp.FilterTreeDepth(uint64(depth))
}

// markedLarge reports whether a commit message carries the large-store
// trailer.
func markedLarge(msg string) bool {
	for _, l := range strings.Split(msg, "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == largeTrailer && strings.TrimSpace(v) == largeValue {
			return true
		}
	}
	return false
}

// maxKeptObjects and maxKeptBytes bound what a kept clone (watch mode)
// holds: past either, the next fetch starts again from an empty store, and
// the render fetches again what it looks at.
const (
	maxKeptObjects = 50_000
	maxKeptBytes   = 64 << 20
)

// tooBig reports whether the clone outgrew its bounds.
func (r *remoteRepo) tooBig() bool {
	objs := r.st.ObjectStorage.Objects
	if len(objs) > maxKeptObjects {
		return true
	}
	if len(objs) < 1000 {
		return false
	}
	var n int64
	for _, o := range objs {
		n += o.Size()
	}
	return n > maxKeptBytes
}

// lazyObjects is a partial clone's object store for one render: objects
// the clone lacks are fetched from the server when asked for.
type lazyObjects struct {
	storer.EncodedObjectStorer // the clone's store
	r                          *remoteRepo
	ctx                        context.Context
}

func (l *lazyObjects) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	o, err := l.EncodedObjectStorer.EncodedObject(t, h)
	if !errors.Is(err, plumbing.ErrObjectNotFound) || l.r.mode != modePartial {
		return o, err
	}
	if err := l.r.fetchObjects(l.ctx, []plumbing.Hash{h}); err != nil {
		return nil, fmt.Errorf("fetch object %s: %w", h, err)
	}
	return l.EncodedObjectStorer.EncodedObject(t, h)
}

// fetchMissing fetches, in one request, those of hs the clone lacks.
func (l *lazyObjects) fetchMissing(hs []plumbing.Hash) error {
	if l.r.mode != modePartial {
		return nil
	}
	var want []plumbing.Hash
	seen := map[plumbing.Hash]bool{}
	for _, h := range hs {
		if h.IsZero() || seen[h] || l.EncodedObjectStorer.HasEncodedObject(h) == nil {
			continue
		}
		seen[h] = true
		want = append(want, h)
	}
	return l.r.fetchObjects(l.ctx, want)
}

// batchFetcher is an object store that can fetch many missing objects in
// one request.
type batchFetcher interface {
	fetchMissing(hs []plumbing.Hash) error
}

// uploadSession opens a session to fetch from the server. An http(s)
// session is stateless and is kept for the render's later fetches; the
// others (ssh) carry one request each.
func (r *remoteRepo) uploadSession() (transport.UploadPackSession, error) {
	if r.up != nil {
		return r.up, nil
	}
	ep, err := transport.NewEndpoint(r.cfg.URL)
	if err != nil {
		return nil, err
	}
	ep.CaBundle, ep.InsecureSkipTLS = r.cfg.CABundle, r.cfg.InsecureSkipTLS
	cli, err := client.NewClient(ep)
	if err != nil {
		return nil, err
	}
	sess, err := cli.NewUploadPackSession(ep, r.cfg.Auth)
	if err != nil {
		return nil, err
	}
	if ep.Protocol == "http" || ep.Protocol == "https" {
		r.up = sess
	}
	return sess, nil
}

// fetchObjects fetches exactly the objects want (trees without what is
// below them) into the clone, in one request.
func (r *remoteRepo) fetchObjects(ctx context.Context, want []plumbing.Hash) error {
	if len(want) == 0 {
		return nil
	}
	err := r.fetchFiltered(ctx, want, nil, r.st)
	if err == nil {
		r.objectsFetched += len(want)
	}
	return err
}

// fetchFiltered fetches want, with haves have, without trees below the
// wanted objects' own (filter tree:0), into st, in one request on the
// upload session (the listing's, over http), retrying what a network may
// break. A server that does not filter is errNoFilter.
func (r *remoteRepo) fetchFiltered(ctx context.Context, want, have []plumbing.Hash, st storer.Storer) error {
	if r.caps != nil && !partialAllowed(r.caps) {
		return errNoFilter // known: no session opened to learn it again
	}
	err := r.retry(ctx, func() error {
		sess, err := r.uploadSession()
		if err != nil {
			return err
		}
		if r.up == nil {
			defer sess.Close()
		}
		if r.caps == nil {
			// This clone's first fetch met an empty repository, whose
			// advertisement it did not keep; this session's says whether
			// the server filters (read once per session: the fetch below
			// would read it anyway).
			adv, err := sess.AdvertisedReferencesContext(ctx)
			if err != nil {
				return err
			}
			r.caps = adv.Capabilities
		}
		if !partialAllowed(r.caps) {
			return errNoFilter
		}
		req := packp.NewUploadPackRequestFromCapabilities(r.caps)
		req.Wants, req.Haves = want, have
		req.Filter = packp.FilterTreeDepth(0)
		_ = req.Capabilities.Set(capability.Filter)
		return r.receiveInto(ctx, sess, req, st)
	})
	if err == nil {
		r.requests++
	}
	return err
}

// receive sends req and stores the packfile that answers it.
func (r *remoteRepo) receive(ctx context.Context, sess transport.UploadPackSession, req *packp.UploadPackRequest) error {
	return r.receiveInto(ctx, sess, req, r.st)
}

// receiveInto sends req and stores the packfile that answers it in st.
func (r *remoteRepo) receiveInto(ctx context.Context, sess transport.UploadPackSession, req *packp.UploadPackRequest, st storer.Storer) error {
	req.Capabilities.Delete(capability.MultiACK)
	req.Capabilities.Delete(capability.MultiACKDetailed)
	_ = req.Capabilities.Set(capability.NoProgress)
	resp, err := sess.UploadPack(ctx, req)
	if errors.Is(err, transport.ErrEmptyUploadPackRequest) {
		return nil
	}
	if err != nil {
		return err
	}
	defer resp.Close()
	if st == storer.Storer(r.st) && len(resp.Shallows) > 0 {
		// A fetch at depth 1: the commits whose parents the clone lacks,
		// which a later fetch tells the server (see fetchWhole).
		if err := r.addShallow(resp.Shallows); err != nil {
			return err
		}
	}
	var rd io.Reader = resp
	switch {
	case req.Capabilities.Supports(capability.Sideband64k):
		rd = sideband.NewDemuxer(sideband.Sideband64k, resp)
	case req.Capabilities.Supports(capability.Sideband):
		rd = sideband.NewDemuxer(sideband.Sideband, resp)
	}
	cr := &countingReader{r: rd}
	err = packfile.UpdateObjectStorage(st, cr)
	r.bytesFetched += cr.n
	return err
}

// addShallow adds hs to the clone's shallow commits.
func (r *remoteRepo) addShallow(hs []plumbing.Hash) error {
	have, err := r.st.Shallow()
	if err != nil {
		return err
	}
	for _, h := range hs {
		if !slices.Contains(have, h) {
			have = append(have, h)
		}
	}
	return r.st.SetShallow(have)
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// partialAllowed reports whether a server's capabilities allow a partial
// clone: filters, and wants of objects that are not ref tips.
func partialAllowed(caps *capability.List) bool {
	return caps.Supports(capability.Filter) && caps.Supports(capability.AllowReachableSHA1InWant)
}

// fetchTips brings the branch tip and the group-commit requests waiting on
// it (their commits only, on a partial clone) and forgets refs the server
// no longer has. A missing branch or an empty repository is an empty tip.
func (r *remoteRepo) fetchTips(ctx context.Context) error {
	if r.tooBig() {
		r.reset()
	}
	return r.retry(ctx, func() error {
		sess, adv, done, err := r.advertise(ctx)
		if err != nil {
			return err
		}
		if adv == nil {
			if r.sawRefs() {
				return errNoAdvertisement
			}
			r.setRefs(nil)
			return nil
		}
		defer done()
		return r.takeAdvertised(ctx, sess, adv, false)
	})
}

// advertise opens an upload session and reads the server's refs. An empty
// repository is a nil advertisement, not an error. done closes a session
// that is not kept (see uploadSession).
func (r *remoteRepo) advertise(ctx context.Context) (transport.UploadPackSession, *packp.AdvRefs, func(), error) {
	sess, err := r.uploadSession()
	if err != nil {
		return nil, nil, nil, err
	}
	done := func() {
		if r.up == nil {
			sess.Close()
		}
	}
	adv, err := sess.AdvertisedReferencesContext(ctx)
	if errors.Is(err, transport.ErrEmptyRemoteRepository) {
		done()
		return nil, nil, nil, nil
	}
	if err != nil {
		done()
		return nil, nil, nil, err
	}
	return sess, adv, done, nil
}

// takeWhole is the whole fetch of a small store (see fetchWhole) in a
// session whose advertisement the probe has read already: the tip at depth
// 1, everything in it, and the requests waiting, in one request. used says
// the session has carried a request already (see takeAdvertised).
func (r *remoteRepo) takeWhole(ctx context.Context, sess transport.UploadPackSession, adv *packp.AdvRefs, used bool) error {
	before := len(r.st.ObjectStorage.Objects)
	r.whole = true
	defer func() { r.whole = false }()
	if err := r.takeAdvertised(ctx, sess, adv, used); err != nil {
		return err
	}
	r.wholeFetched += len(r.st.ObjectStorage.Objects) - before
	if len(r.st.ObjectStorage.Objects) > largeStore {
		r.large = true
	}
	r.fetched = true
	return nil
}

// takeAdvertised fetches what an advertisement shows that the clone lacks
// (the tip's commit and top trees, the requests whole) and takes its refs.
// A session that is not http carries one request: used says sess has
// carried one already, and each request after that opens a session of its
// own (the server ends an ssh upload-pack after its first answer, and a
// second request on it fails with EOF).
func (r *remoteRepo) takeAdvertised(ctx context.Context, sess transport.UploadPackSession, adv *packp.AdvRefs, used bool) error {
	{
		var err error
		r.caps = adv.Capabilities
		r.partial = partialAllowed(adv.Capabilities)
		all, err := adv.AllReferences()
		if err != nil {
			return err
		}
		refs := map[plumbing.ReferenceName]plumbing.Hash{}
		var want, reqs []plumbing.Hash
		for name, ref := range all {
			if ref.Type() != plumbing.HashReference {
				continue
			}
			if name != r.branch && (r.space == "" || !strings.HasPrefix(name.String(), r.space)) {
				continue
			}
			refs[name] = ref.Hash()
			switch {
			case r.st.HasEncodedObject(ref.Hash()) == nil:
			case name == r.branch:
				want = append(want, ref.Hash())
			default:
				reqs = append(reqs, ref.Hash())
			}
		}
		// The tip alone (on a partial clone), then the requests whole:
		// they are small, and whoever fetches them is about to fold them.
		partial := r.partial && !r.whole
		if !partial {
			want, reqs = append(want, reqs...), nil
		}
		for i, w := range [][]plumbing.Hash{want, reqs} {
			if len(w) == 0 {
				continue
			}
			if used && r.up == nil {
				if sess, err = r.uploadSession(); err != nil {
					return err
				}
				defer sess.Close()
			}
			used = true
			req := packp.NewUploadPackRequestFromCapabilities(adv.Capabilities)
			req.Wants = w
			req.Depth = packp.DepthCommits(1)
			_ = req.Capabilities.Set(capability.Shallow)
			if partial && i == 0 {
				req.Filter = r.topFilter()
				_ = req.Capabilities.Set(capability.Filter)
			}
			if err := r.receive(ctx, sess, req); err != nil {
				return err
			}
			r.requests++
		}
		r.setRefs(refs)
		if len(refs) > 0 {
			r.everSawRefs = true
		}
		return nil
	}
}

// setRefs makes the clone's refs those of the server: the branch tip
// under its remote-tracking name, and the requests.
func (r *remoteRepo) setRefs(refs map[plumbing.ReferenceName]plumbing.Hash) {
	if h, ok := refs[r.branch]; ok {
		_ = r.st.SetReference(plumbing.NewHashReference(r.tracked, h))
	} else {
		_ = r.st.RemoveReference(r.tracked)
	}
	if r.space == "" {
		return
	}
	for name := range r.st.ReferenceStorage {
		if strings.HasPrefix(name.String(), r.space) {
			if _, ok := refs[name]; !ok {
				_ = r.st.RemoveReference(name)
			}
		}
	}
	for name, h := range refs {
		if name != r.branch {
			_ = r.st.SetReference(plumbing.NewHashReference(name, h))
		}
	}
}

// FetchStats says what a store fetched from a remote server since it was
// opened: requests for packs, objects asked for one by one, objects whole
// fetches brought, and the bytes of the packs received one by one and by
// the first look at the tip (a whole fetch's bytes are not counted). A
// local repository fetches nothing.
type FetchStats = statestore.FetchStats

// FetchStats reports what the store fetched so far.
func (s *Store) FetchStats() FetchStats {
	r := s.repo.server()
	if r == nil {
		return FetchStats{}
	}
	return FetchStats{Requests: r.requests, Objects: r.objectsFetched, Whole: r.wholeFetched, Bytes: r.bytesFetched, Partial: r.mode == modePartial}
}
