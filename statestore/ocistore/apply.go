package ocistore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/statestore"
)

var specsVersioned = specs.Versioned{SchemaVersion: 2}

// Apply plans u against the state and, when it changes anything, commits
// it under the writers' lock (see the package documentation).
func (s *Store) Apply(ctx context.Context, u statestore.Update) (statestore.Result, error) {
	return s.ApplyAll(ctx, []statestore.Update{u})
}

var _ statestore.BatchApplier = (*Store)(nil)

// ApplyAll writes several workloads' updates as one new state (one lock,
// one generation, each destination published once), each planned on top of
// the ones before it. The provenance is the first update's; DryRun is taken
// from the first update.
func (s *Store) ApplyAll(ctx context.Context, us []statestore.Update) (statestore.Result, error) {
	var res statestore.Result
	if len(us) == 0 {
		return res, nil
	}
	for _, u := range us {
		if err := checkUpdate(u); err != nil {
			return res, s.wrap("plan", err)
		}
	}
	ctx = statestore.EnsureRetryDeadline(ctx, s.cfg.RetryDeadline)
	res.Attempts = 1
	snap, err := s.snapshot(ctx)
	if err != nil {
		return res, s.wrap("read", err)
	}
	plan, err := planAll(snap, us)
	if err != nil {
		return res, s.wrap("plan", err)
	}
	res.Diff = plan.Diff
	res.Revision = snap.st.desc.Digest.String()
	if us[0].DryRun {
		res.Updated = plan.Changed()
		return res, nil
	}
	if !plan.Changed() {
		// Nothing to write, unless a writer died between its commit and
		// its destinations' tags: then the lock is needed to repair them.
		stale, err := s.staleDestinations(ctx, snap.st, s.foldersOf(snap.st, us))
		if err != nil {
			return res, s.wrap("read", err)
		}
		if len(stale) == 0 {
			return res, nil
		}
	}
	for {
		res.Attempts++
		out, err := s.locked(ctx, us)
		if errors.Is(err, errLeaseExpired) {
			continue // nothing was committed: plan again under a new lease
		}
		if err != nil {
			return res, err
		}
		out.Attempts = res.Attempts - 1
		return out, nil
	}
}

// planAll plans us in turn, each on top of the ones before it, and returns
// their operations and diffs in order as one plan.
func planAll(snap *snapshot, us []statestore.Update) (statestore.Plan, error) {
	if len(us) == 1 {
		return statestore.PlanUpdate(snap, us[0])
	}
	var all statestore.Plan
	ov := &overlay{base: snap, files: map[string][]byte{}, deleted: map[string]bool{}}
	for _, u := range us {
		plan, err := statestore.PlanUpdate(ov, u)
		if err != nil {
			return all, fmt.Errorf("%s: %w", u.Workload, err)
		}
		all.Ops = append(all.Ops, plan.Ops...)
		all.Diff.Added = append(all.Diff.Added, plan.Diff.Added...)
		all.Diff.Changed = append(all.Diff.Changed, plan.Diff.Changed...)
		all.Diff.Deleted = append(all.Diff.Deleted, plan.Diff.Deleted...)
		ov.apply(plan.Ops)
	}
	return all, nil
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

// locked reads, plans, commits and publishes us holding the lock.
// A lock that cannot be released is not lost: it is added to the error of
// a write that failed, and logged (Config.Warn) after one that landed.
func (s *Store) locked(ctx context.Context, us []statestore.Update) (res statestore.Result, err error) {
	l, err := s.acquire(ctx)
	if err != nil {
		return res, s.wrap("lock", err)
	}
	defer func() {
		rerr := l.release(ctx)
		switch {
		case rerr == nil:
		case err != nil:
			err = fmt.Errorf("%w; %w", err, rerr)
		default:
			s.warn("the write landed, but the writers' lock could not be released", "error", rerr.Error())
		}
	}()
	snap, err := s.snapshot(ctx)
	if err != nil {
		return res, s.wrap("read", err)
	}
	plan, err := planAll(snap, us)
	if err != nil {
		return res, s.wrap("plan", err)
	}
	res.Diff = plan.Diff
	res.Revision = snap.st.desc.Digest.String()
	st := snap.st
	var changed []string
	if plan.Changed() {
		if err := l.valid(); err != nil {
			return res, err
		}
		if st, changed, err = s.commit(ctx, snap, plan, batch(us)); err != nil {
			return res, s.wrap("commit", err)
		}
		res.Updated = true
		res.Revision = st.desc.Digest.String()
	}
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
		return res, s.wrap("read", err)
	}
	if err := s.publish(ctx, st, append(changed, stale...)); err != nil {
		return res, s.wrap("publish", err)
	}
	return res, nil
}

// commit writes plan's files into new layers and moves the state tag.
func (s *Store) commit(ctx context.Context, snap *snapshot, plan statestore.Plan, u statestore.Update) (*state, []string, error) {
	old := snap.st
	// The new files of every folder the plan touches.
	touched := map[string]map[string][]byte{}
	for _, op := range plan.Ops {
		f := old.folderFor(op.Path, u.Destinations)
		files, ok := touched[f]
		if !ok {
			cur, err := snap.files(f)
			if err != nil {
				return nil, nil, err
			}
			files = maps.Clone(cur)
			if files == nil {
				files = map[string][]byte{}
			}
			touched[f] = files
		}
		if op.Delete {
			delete(files, rel(f, op.Path))
		} else {
			files[rel(f, op.Path)] = op.Data
		}
	}
	for f := range touched {
		if published(f) {
			if err := s.checkDestination(f); err != nil {
				return nil, nil, err
			}
		}
	}
	next := &state{exists: true, generation: old.generation + 1, folders: maps.Clone(old.folders)}
	var changed []string
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	type built struct {
		f    string
		desc ocispec.Descriptor
		drop bool
	}
	results := make(chan built, len(touched))
	for f, files := range touched {
		changed = append(changed, f)
		g.Go(func() error {
			if len(files) == 0 {
				results <- built{f: f, drop: true}
				return nil
			}
			data, err := pack(files)
			if err != nil {
				return err
			}
			desc := ocispec.Descriptor{
				MediaType:   LayerMediaType,
				Digest:      digest.FromBytes(data),
				Size:        int64(len(data)),
				Annotations: map[string]string{ocispec.AnnotationTitle: f},
			}
			if published(f) {
				_, m := s.destinationManifest(desc)
				desc.Annotations[annotationArtifact] = m.Digest.String()
			}
			if err := s.ensureBlob(gctx, s.base, desc, data); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			s.keep(desc, files)
			results <- built{f: f, desc: desc}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, err
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

	msg, err := u.MessageFor(plan.Diff)
	if err != nil {
		return nil, nil, err
	}
	if err := s.ensureBlob(ctx, s.base, ocispec.DescriptorEmptyJSON, ocispec.DescriptorEmptyJSON.Data); err != nil {
		return nil, nil, err
	}
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
			content := layer.Data
			if content == nil {
				var err error
				if content, err = s.layerBytes(gctx, layer); err != nil {
					return fmt.Errorf("%s: %w", f, err)
				}
			}
			if err := s.ensureBlob(gctx, r, layer, content); err != nil {
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
	if ok {
		if data, err := pack(files); err == nil && digest.FromBytes(data) == desc.Digest {
			return data, nil
		}
	}
	return s.fetchBlob(ctx, desc)
}

// ensureBlob pushes a blob to r unless r has it.
func (s *Store) ensureBlob(ctx context.Context, r *remote.Repository, desc ocispec.Descriptor, data []byte) error {
	key := r.Reference.Repository + "@" + desc.Digest.String()
	s.mu.Lock()
	known := s.pushed[key]
	s.mu.Unlock()
	if known {
		return nil
	}
	desc = ocispec.Descriptor{MediaType: desc.MediaType, Digest: desc.Digest, Size: desc.Size}
	err := s.retry(ctx, func() error {
		ok, err := r.Blobs().Exists(ctx, desc)
		if err != nil || ok {
			return err
		}
		return r.Blobs().Push(ctx, desc, bytes.NewReader(data))
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.pushed[key] = true
	s.mu.Unlock()
	return nil
}

// checkUpdate refuses what this backend cannot store.
func checkUpdate(u statestore.Update) error {
	if u.Workload == "" {
		return errors.New("update names no workload")
	}
	for p := range u.Files {
		if err := layout.CheckStorePath(p); err != nil {
			return fmt.Errorf("path %q: %w", p, err)
		}
	}
	for p := range u.Shared {
		if err := layout.CheckStorePath(p); err != nil {
			return fmt.Errorf("path %q: %w", p, err)
		}
	}
	for _, d := range u.Destinations {
		d = strings.Trim(d, "/")
		if err := layout.ValidPath(d); err != nil {
			return fmt.Errorf("destination: %w", err)
		}
	}
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
