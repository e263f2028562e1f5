package ocistore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/driver"
	"github.com/render-dev/render/statestore/planner"
)

var specsVersioned = specs.Versioned{SchemaVersion: 2}

// backend is a Store's side of driver.Write, which gives the Store
// its Apply and ApplyAll (a batch is one new state: one lock, one
// generation, each destination published once).
type backend struct{ s *Store }

func (b backend) String() string { return b.s.name }

// Begin starts one write: it holds no lock yet.
func (b backend) Begin(ctx context.Context, us []statestore.Update) (driver.Committer, error) {
	w := &write{s: b.s}
	return driver.Committer{Snapshot: w.Snapshot, Commit: w.Commit, Revision: revision,
		Lost: w.Lost, Abandon: w.Abandon, Release: w.Release}, nil
}

// write is one write in progress. Its first attempt plans on the state
// read without the lock. Its commit takes the lock and reads the state
// again: when another writer moved it meanwhile, the commit is a lost
// race, and the next attempt plans on the state read under the lock, which
// nobody moves while the write holds it (so it plans at most twice per
// lock). The lock is let go when the write ends (Release), or when its
// lease ran out before the commit.
type write struct {
	s *Store
	// l is the writers' lock, while the write holds it.
	l *lock
	// held is the state read under l.
	held *snapshot
}

// Snapshot is the state read under the lock while the write holds it.
// Otherwise the first attempt plans on the state of the caller's view
// when it passed one (Update.View: for a render, the state its Snapshot
// read, so the manifest is not read twice), and any other attempt reads
// the state as it is now. A first attempt is planned without the lock
// anyway: a plan that changes something is committed only once the lock
// is held and the state read under it is still the one planned on.
func (w *write) Snapshot(ctx context.Context, attempt int, view statestore.Snapshot) (statestore.Snapshot, error) {
	if w.held != nil {
		return w.held, nil
	}
	if sn := w.s.viewOf(ctx, view); sn != nil {
		return sn, nil
	}
	return w.s.snapshot(ctx)
}

// Commit publishes c's plan under the writers' lock: it pushes the
// changed layers, moves the state tag (the commit point), then the
// changed destinations' tags. A plan that changes nothing needs neither
// the lock nor a write, unless a writer died between its commit and its
// destinations' tags: then the lock is taken to repair them (Wrote).
func (w *write) Commit(ctx context.Context, c *driver.Change) (driver.Outcome, error) {
	s := w.s
	sn := c.Snapshot.(*snapshot)
	if c.DryRun {
		return driver.Outcome{}, nil
	}
	if !c.Plan.Changed() && w.l == nil {
		stale, err := s.staleDestinations(ctx, sn.st, s.foldersOf(sn.st, c.Updates))
		if err != nil {
			return driver.Outcome{}, driver.InOp("read", err)
		}
		if len(stale) == 0 {
			return driver.Outcome{View: sn}, nil
		}
	}
	if w.l == nil {
		l, err := s.acquire(ctx)
		if err != nil {
			return driver.Outcome{}, driver.InOp("lock", err)
		}
		w.l = l
	}
	if sn != w.held {
		cur, err := s.snapshot(ctx)
		if err != nil {
			return driver.Outcome{}, driver.InOp("read", err)
		}
		if cur.st.desc.Digest != sn.st.desc.Digest {
			w.held = cur
			return driver.Outcome{}, &driver.ConflictError{Op: "commit", What: "another writer moved the state before this one held the lock"}
		}
		w.held = sn
	}
	st, out := sn.st, driver.Outcome{}
	var changed []string
	if c.Plan.Changed() {
		if err := w.l.valid(ctx); err != nil {
			// Others may hold the lock now: commit nothing, and take it
			// again.
			if rerr := w.release(ctx); rerr != nil {
				s.warn("could not release the writers' lock whose lease ran out", "error", rerr.Error())
			}
			return out, &driver.ConflictError{Op: "commit", What: "the writers' lock lease kept running out", Err: err}
		}
		var err error
		if st, changed, err = s.commit(ctx, sn, c.Plan, c.Message, batch(c.Updates)); err != nil {
			return out, driver.InOp("commit", err)
		}
		out.Revision = st.desc.Digest.String()
	}
	// What the store holds now, for a next write (Result.View).
	out.View = &snapshot{s: s, ctx: ctx, st: st}
	// Publish what this commit changed, and repair what a writer that
	// died after its commit left behind.
	var check []string
	for f := range st.folders {
		if published(f) && !slices.Contains(changed, f) {
			check = append(check, f)
		}
	}
	stale, err := s.staleDestinations(ctx, st, check)
	if err != nil {
		return out, driver.InOp("read", err)
	}
	out.Wrote = len(stale) > 0
	if err := s.publish(ctx, st, append(changed, stale...)); err != nil {
		return out, driver.InOp("publish", err)
	}
	return out, nil
}

// Lost hands nothing over, and has nothing to wait for: a write that lost
// a race under the lock still holds it and plans again at once on the
// state it read there; one whose lease ran out takes the lock again, which
// waits for the writers ahead as long as the retry deadline allows.
func (w *write) Lost(ctx context.Context, c *driver.Change, attempt int, cause error) (driver.Outcome, error) {
	if p := w.s.Policy; p.MaxAttempts > 0 && attempt >= p.MaxAttempts {
		return driver.Outcome{}, p.Wait(ctx, attempt, driver.LostWhat(cause), cause)
	}
	return driver.Outcome{}, nil
}

// Abandon has nothing to take back: Lost handed nothing over.
func (w *write) Abandon(ctx context.Context, c *driver.Change, err error) driver.Outcome {
	return driver.Outcome{}
}

// Release lets the lock go when the write ends. A lock that cannot be
// released is not lost: it is added to the error of a write that failed,
// and logged (Config.Warn) after one that landed.
func (w *write) Release(ctx context.Context, err error) error {
	rerr := w.release(ctx)
	switch {
	case rerr == nil:
	case err != nil:
		err = fmt.Errorf("%w; %w", err, rerr)
	default:
		w.s.warn("the write landed, but the writers' lock could not be released", "error", rerr.Error())
	}
	return err
}

func (w *write) release(ctx context.Context) error {
	l := w.l
	w.l, w.held = nil, nil
	if l == nil {
		return nil
	}
	return l.release(ctx)
}

// batch is the update a batch commits as: the first one's provenance, and
// every update's destinations.
func batch(us []statestore.Update) statestore.Update {
	u := us[0]
	set := map[string]bool{}
	for _, x := range us {
		for _, d := range x.Destinations {
			set[d] = true
		}
	}
	u.Destinations = slices.Sorted(maps.Keys(set))
	return u
}

// foldersOf returns the published folders updates touch in st.
func (s *Store) foldersOf(st *state, us []statestore.Update) []string {
	set := map[string]bool{}
	for _, u := range us {
		for _, d := range u.Destinations {
			if d = strings.Trim(d, "/"); d != "" {
				set[d] = true
			}
		}
		for p := range u.Files {
			set[st.folderFor(p, u.Destinations)] = true
		}
		for p := range u.Shared {
			set[st.folderFor(p, u.Destinations)] = true
		}
		for _, a := range u.Aggregates {
			set[st.folderFor(a.Target, u.Destinations)] = true
		}
	}
	var out []string
	for f := range set {
		if _, ok := st.folders[f]; ok && published(f) {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}

// commit writes plan's files into new layers and moves the state tag,
// with msg and u's provenance. It returns the new state and the published
// folders it changed.
func (s *Store) commit(ctx context.Context, snap *snapshot, plan planner.Plan, msg statestore.Message, u statestore.Update) (*state, []string, error) {
	old := snap.st
	touched := folderChanges(old, plan, u)
	for f := range touched {
		if published(f) {
			if err := s.checkDestination(f); err != nil {
				return nil, nil, err
			}
		}
	}
	next := &state{exists: true, generation: old.generation + 1, folders: maps.Clone(old.folders)}
	changed, err := s.buildLayers(ctx, snap, touched, next)
	if err != nil {
		return nil, nil, err
	}
	if err := s.ensureBlob(ctx, s.base, ocispec.DescriptorEmptyJSON, ocispec.DescriptorEmptyJSON.Data); err != nil {
		return nil, nil, err
	}
	m := s.stateManifest(old, next, msg, u)
	data, err := json.Marshal(m)
	if err != nil {
		return nil, nil, err
	}
	next.desc = ocispec.Descriptor{MediaType: m.MediaType, Digest: digest.FromBytes(data), Size: int64(len(data))}
	if err := s.retry(ctx, func() error { return s.base.PushReference(ctx, next.desc, bytes.NewReader(data), StateTag) }); err != nil {
		return nil, nil, err
	}
	var pub []string
	for _, f := range changed {
		if published(f) {
			pub = append(pub, f)
		}
	}
	return next, pub, nil
}

// folderChange is what a plan changes in one folder: the files it sets,
// with their new bytes, and the files it deletes, both by their name in
// the folder.
type folderChange struct {
	set map[string][]byte
	del map[string]bool
}

// folderChanges sorts plan's operations by the folder (the layer) they
// change, the last operation on a path winning.
func folderChanges(old *state, plan planner.Plan, u statestore.Update) map[string]*folderChange {
	touched := map[string]*folderChange{}
	for _, op := range plan.Ops {
		f := old.folderFor(op.Path, u.Destinations)
		c := touched[f]
		if c == nil {
			c = &folderChange{set: map[string][]byte{}, del: map[string]bool{}}
			touched[f] = c
		}
		if op.Delete {
			delete(c.set, rel(f, op.Path))
			c.del[rel(f, op.Path)] = true
		} else {
			c.set[rel(f, op.Path)] = op.Data
			delete(c.del, rel(f, op.Path))
		}
	}
	return touched
}

// builtLayer is a folder's new layer as buildLayer pushed it, or drop
// when the folder is left empty.
type builtLayer struct {
	f    string
	desc ocispec.Descriptor
	drop bool
}

// buildLayers builds and pushes the new layer of every touched folder, up
// to 4 at a time, and records them in next: a folder left empty has no
// layer any more. It returns the touched folders, sorted.
func (s *Store) buildLayers(ctx context.Context, snap *snapshot, touched map[string]*folderChange, next *state) ([]string, error) {
	var changed []string
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	results := make(chan builtLayer, len(touched))
	for f, c := range touched {
		changed = append(changed, f)
		g.Go(func() error {
			b, err := s.buildLayer(gctx, snap, f, c)
			if err != nil {
				return err
			}
			results <- b
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	close(results)
	for b := range results {
		if b.drop {
			delete(next.folders, b.f)
		} else {
			next.folders[b.f] = b.desc
		}
	}
	// Folders left empty are published empty (Flux then prunes what they
	// held), which the state remembers as folders with no layer.
	slices.Sort(changed)
	return changed, nil
}

// buildLayer applies c to folder f's files as snap holds them, packs the
// result into a layer and pushes its blob (unless the registry has it),
// so that the new state can name it. A small folder is packed in memory,
// a spilled one into a temporary file. A folder c leaves empty is dropped,
// with nothing pushed.
func (s *Store) buildLayer(ctx context.Context, snap *snapshot, f string, c *folderChange) (builtLayer, error) {
	cur, err := snap.files(f)
	if err != nil {
		return builtLayer{}, err
	}
	var files layerFiles
	var data []byte
	var blob *spillBlob
	if mem, ok := cur.(*memFiles); ok || cur == nil {
		// A small layer: its new files in memory, packed there.
		m := map[string][]byte{}
		if mem != nil {
			m = maps.Clone(mem.m)
		}
		for n := range c.del {
			delete(m, n)
		}
		maps.Copy(m, c.set)
		if len(m) == 0 {
			return builtLayer{f: f, drop: true}, nil
		}
		if data, err = packFolder(f, m); err != nil {
			return builtLayer{}, err
		}
		files = newMemFiles(m)
	} else {
		// A spilled one: the changes over it, packed into a
		// temporary file.
		o := newOverlayFiles(cur, c.set, c.del)
		if len(o.names()) == 0 {
			return builtLayer{f: f, drop: true}, nil
		}
		if blob, err = packSpilled(o, folderLevel(f)); err != nil {
			return builtLayer{}, err
		}
		defer blob.file.Close()
		files = o
	}
	desc := ocispec.Descriptor{MediaType: LayerMediaType, Annotations: map[string]string{ocispec.AnnotationTitle: f}}
	if blob != nil {
		desc.Digest, desc.Size = blob.desc.Digest, blob.desc.Size
	} else {
		desc.Digest, desc.Size = digest.FromBytes(data), int64(len(data))
	}
	if published(f) {
		_, m := s.destinationManifest(desc)
		desc.Annotations[annotationArtifact] = m.Digest.String()
	}
	if blob != nil {
		err = s.ensureBlobFrom(ctx, s.base, desc, blob.file)
	} else {
		err = s.ensureBlob(ctx, s.base, desc, data)
	}
	if err != nil {
		return builtLayer{}, fmt.Errorf("%s: %w", f, err)
	}
	s.keep(desc, files)
	return builtLayer{f: f, desc: desc}, nil
}

// stateManifest returns the manifest of next, the state that follows
// old: its layers in folder order (the empty descriptor when it has
// none), and annotations saying its generation, when and from what it
// was made, by whom (u's author, else the configured one), msg and the
// state it follows. An empty annotation is left out.
func (s *Store) stateManifest(old, next *state, msg statestore.Message, u statestore.Update) ocispec.Manifest {
	authors := s.cfg.Author
	if u.Author != nil {
		authors = fmt.Sprintf("%s <%s>", u.Author.Name, u.Author.Email)
	}
	m := ocispec.Manifest{
		Versioned:    specsVersioned,
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: StateArtifactType,
		Config:       ocispec.DescriptorEmptyJSON,
		Annotations: map[string]string{
			annotationGeneration:        strconv.Itoa(next.generation),
			ocispec.AnnotationCreated:   time.Now().UTC().Format(time.RFC3339),
			annotationSubject:           msg.Subject,
			annotationBody:              msg.Body,
			ocispec.AnnotationSource:    s.cfg.Source,
			ocispec.AnnotationAuthors:   authors,
			"dev.render.workload":       u.Workload,
			"dev.render.previous.state": old.desc.Digest.String(),
		},
	}
	if len(msg.Trailers) > 0 {
		t, _ := json.Marshal(msg.Trailers)
		m.Annotations[annotationTrailers] = string(t)
	}
	for k, v := range m.Annotations {
		if v == "" {
			delete(m.Annotations, k)
		}
	}
	for _, f := range slices.Sorted(maps.Keys(next.folders)) {
		m.Layers = append(m.Layers, next.folders[f])
	}
	if len(m.Layers) == 0 {
		m.Layers = []ocispec.Descriptor{ocispec.DescriptorEmptyJSON}
	}
	return m
}

// checkDestination refuses a folder whose artifact name the OCI spec forbids.
func (s *Store) checkDestination(f string) error {
	cfg := s.cfg
	cfg.Repository = s.DestinationRepository(f)
	if err := CheckConfig(cfg); err != nil {
		return fmt.Errorf("destination %s cannot be published as an artifact: %w", f, err)
	}
	return nil
}

// destinationManifest returns the manifest that publishes layer as a
// destination artifact, and its descriptor. It depends on the layer only.
func (s *Store) destinationManifest(layer ocispec.Descriptor) ([]byte, ocispec.Descriptor) {
	l := ocispec.Descriptor{MediaType: layer.MediaType, Digest: layer.Digest, Size: layer.Size}
	m := ocispec.Manifest{
		Versioned: specsVersioned,
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    fluxConfig,
		Layers:    []ocispec.Descriptor{l},
		Annotations: map[string]string{
			ocispec.AnnotationSource:   s.cfg.Source,
			ocispec.AnnotationRevision: layer.Digest.String(),
			// Fixed, so that the same files give the same digest.
			ocispec.AnnotationCreated: epoch.Format(time.RFC3339),
		},
	}
	data, err := json.Marshal(m)
	if err != nil {
		panic(err) // strings only: cannot fail
	}
	return data, ocispec.Descriptor{MediaType: m.MediaType, Digest: digest.FromBytes(data), Size: int64(len(data))}
}

var fluxConfigData = []byte("{}")

var fluxConfig = ocispec.Descriptor{
	MediaType: FluxConfigMediaType,
	Digest:    digest.FromBytes(fluxConfigData),
	Size:      int64(len(fluxConfigData)),
}

// emptyLayer is what an emptied destination is published with.
var emptyLayer = func() ocispec.Descriptor {
	data, err := pack(nil)
	if err != nil {
		panic(err)
	}
	return ocispec.Descriptor{MediaType: LayerMediaType, Digest: digest.FromBytes(data), Size: int64(len(data)), Data: data}
}()

// expected returns the manifest destination f should be tagged with in st.
func (s *Store) expected(st *state, f string) ([]byte, ocispec.Descriptor, ocispec.Descriptor) {
	layer, ok := st.folders[f]
	if !ok {
		layer = emptyLayer
	}
	data, desc := s.destinationManifest(layer)
	return data, desc, layer
}

// staleDestinations returns the folders among fs whose moving tag does not
// name the manifest st expects (one HEAD each).
func (s *Store) staleDestinations(ctx context.Context, st *state, fs []string) ([]string, error) {
	stale := make([]bool, len(fs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, f := range fs {
		g.Go(func() error {
			_, want, _ := s.expected(st, f)
			r := s.repo(s.DestinationRepository(f))
			var got ocispec.Descriptor
			err := s.retry(gctx, func() error {
				var err error
				got, err = r.Resolve(gctx, s.cfg.Tag)
				return err
			})
			if errors.Is(err, statestore.ErrNotFound) {
				stale[i] = true
				return nil
			}
			if err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			stale[i] = got.Digest != want.Digest
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var out []string
	for i, f := range fs {
		if stale[i] {
			out = append(out, f)
		}
	}
	return out, nil
}

// publish pushes the artifacts of folders fs as st has them, and moves
// their tags: the moving one and render-<generation>.
func (s *Store) publish(ctx context.Context, st *state, fs []string) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for _, f := range fs {
		g.Go(func() error {
			if err := s.checkDestination(f); err != nil {
				return err
			}
			r := s.repo(s.DestinationRepository(f))
			data, desc, layer := s.expected(st, f)
			var err error
			if layer.Data != nil {
				err = s.ensureBlob(gctx, r, layer, layer.Data)
			} else {
				err = s.mountBlob(gctx, r, layer)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			if err := s.ensureBlob(gctx, r, fluxConfig, fluxConfigData); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			for _, tag := range []string{s.cfg.Tag, fmt.Sprintf("render-%d", st.generation)} {
				err := s.retry(gctx, func() error { return r.PushReference(gctx, desc, bytes.NewReader(data), tag) })
				if err != nil {
					return fmt.Errorf("%s:%s: %w", s.DestinationRepository(f), tag, err)
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// layerBytes returns a state layer's packed bytes: packed again from the
// unpacked files when this process has them (pack is reproducible), pulled
// otherwise.
func (s *Store) layerBytes(ctx context.Context, desc ocispec.Descriptor) ([]byte, error) {
	s.mu.Lock()
	files, ok := s.layers[desc.Digest]
	s.mu.Unlock()
	if mem, small := files.(*memFiles); ok && small {
		if data, err := packFolder(desc.Annotations[ocispec.AnnotationTitle], mem.m); err == nil && digest.FromBytes(data) == desc.Digest {
			return data, nil
		}
	}
	return s.fetchBlob(ctx, desc)
}

// ensureBlob pushes a blob to r unless r has it.
func (s *Store) ensureBlob(ctx context.Context, r *remote.Repository, desc ocispec.Descriptor, data []byte) error {
	desc = ocispec.Descriptor{MediaType: desc.MediaType, Digest: desc.Digest, Size: desc.Size}
	return s.pushOnce(ctx, r, desc, func() error { return r.Blobs().Push(ctx, desc, bytes.NewReader(data)) })
}

// mountBlob makes r hold the state layer desc, which the base repository
// holds: mounted from there (one request, no upload; a drain that moves
// 1,000 workloads publishes 100 destinations), or, where the registry does
// not mount, uploaded as ensureBlob does.
func (s *Store) mountBlob(ctx context.Context, r *remote.Repository, desc ocispec.Descriptor) error {
	desc = ocispec.Descriptor{MediaType: desc.MediaType, Digest: desc.Digest, Size: desc.Size, Annotations: desc.Annotations}
	return s.pushOnce(ctx, r, desc, func() error {
		return r.Mount(ctx, desc, s.cfg.Repository, func() (io.ReadCloser, error) {
			data, err := s.layerBytes(ctx, desc)
			if err != nil {
				return nil, err
			}
			return io.NopCloser(bytes.NewReader(data)), nil
		})
	})
}

// ensureBlobFrom is ensureBlob for a blob waiting in file f.
func (s *Store) ensureBlobFrom(ctx context.Context, r *remote.Repository, desc ocispec.Descriptor, f *os.File) error {
	desc = ocispec.Descriptor{MediaType: desc.MediaType, Digest: desc.Digest, Size: desc.Size}
	return s.pushOnce(ctx, r, desc, func() error { return r.Blobs().Push(ctx, desc, io.NewSectionReader(f, 0, desc.Size)) })
}

// pushOnce makes r hold blob desc by push, unless this Store already
// made it hold it or r has it (asked first, retried as every request).
func (s *Store) pushOnce(ctx context.Context, r *remote.Repository, desc ocispec.Descriptor, push func() error) error {
	key := r.Reference.Repository + "@" + desc.Digest.String()
	s.mu.Lock()
	known := s.pushed[key]
	s.mu.Unlock()
	if known {
		return nil
	}
	err := s.retry(ctx, func() error {
		ok, err := r.Blobs().Exists(ctx, desc)
		if err != nil || ok {
			return err
		}
		return push()
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.pushed[key] = true
	s.mu.Unlock()
	return nil
}

// fetchBlob reads the blob desc names from the registry, verified against
// its digest and size, with the store's retries.
func (s *Store) fetchBlob(ctx context.Context, desc ocispec.Descriptor) ([]byte, error) {
	var data []byte
	err := s.retry(ctx, func() error {
		rc, err := s.base.Fetch(ctx, desc)
		if err != nil {
			return err
		}
		defer rc.Close()
		data, err = readVerified(rc, desc)
		return err
	})
	return data, err
}
