package ocistore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
)

// snapshot is one state manifest's view of the store. Its layers are
// pulled when first looked at and kept by digest in the Store, so a layer
// that did not change is pulled once per process.
type snapshot struct {
	s   *Store
	ctx context.Context
	st  *state
}

var (
	_ statestore.Store    = (*Store)(nil)
	_ statestore.Snapshot = (*snapshot)(nil)
)

// snapshot reads the state manifest.
func (s *Store) snapshot(ctx context.Context) (*snapshot, error) {
	st, err := s.readState(ctx)
	if err != nil {
		return nil, err
	}
	return &snapshot{s: s, ctx: ctx, st: st}, nil
}

// viewOf is the state view shows, for a write running on ctx, without a
// request: view is a snapshot the caller read this Store through, or the
// View of an earlier write's Result (Update.View); nil when it is none or
// another store's.
func (s *Store) viewOf(ctx context.Context, view statestore.Snapshot) *snapshot {
	v, ok := view.(*snapshot)
	if !ok || v.s != s {
		return nil
	}
	return &snapshot{s: s, ctx: ctx, st: v.st}
}

// Revision is the digest of the state manifest the snapshot shows (empty
// for a store with none yet).
func (sn *snapshot) Revision() string { return sn.st.desc.Digest.String() }

// revision is a write's Revision: the digest its snapshot shows.
func revision(s statestore.Snapshot) string { return s.(*snapshot).Revision() }

// files returns folder f's files, relative to f (nil when f has no layer).
func (sn *snapshot) files(f string) (layerFiles, error) {
	desc, ok := sn.st.folders[f]
	if !ok {
		return nil, nil
	}
	return sn.s.layer(sn.ctx, desc)
}

// layer returns a state layer's files, pulling it from the base repository
// the first time: into memory, or, above spillAbove, into a temporary file
// as it is read (see layerFiles).
func (s *Store) layer(ctx context.Context, desc ocispec.Descriptor) (layerFiles, error) {
	s.mu.Lock()
	files, ok := s.layers[desc.Digest]
	s.mu.Unlock()
	if ok {
		return files, nil
	}
	var err error
	if desc.Size > spillAbove {
		files, err = s.fetchSpilled(ctx, desc)
	} else {
		var data []byte
		if data, err = s.fetchBlob(ctx, desc); err == nil {
			var m map[string][]byte
			if m, err = unpack(data); err == nil {
				files = newMemFiles(m)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("layer %s (%s): %w", desc.Annotations[ocispec.AnnotationTitle], desc.Digest, err)
	}
	s.keep(desc, files)
	return files, nil
}

// fetchSpilled reads the layer desc names from the registry into a
// temporary file, verified against its digest and size as it is read.
func (s *Store) fetchSpilled(ctx context.Context, desc ocispec.Descriptor) (layerFiles, error) {
	var out *spilledFiles
	err := s.retry(ctx, func() error {
		rc, err := s.base.Fetch(ctx, desc)
		if err != nil {
			return err
		}
		defer rc.Close()
		out, err = unspill(rc, desc)
		return err
	})
	return out, err
}

func (s *Store) keep(desc ocispec.Descriptor, files layerFiles) {
	s.mu.Lock()
	s.layers[desc.Digest] = files
	s.mu.Unlock()
}

// readVerified reads content and checks it against desc's size and digest.
func readVerified(r io.Reader, desc ocispec.Descriptor) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, desc.Size+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != desc.Size || desc.Digest.Algorithm().FromBytes(data) != desc.Digest {
		return nil, fmt.Errorf("content of %s does not match its digest", desc.Digest)
	}
	return data, nil
}

func decodeJSON(r io.Reader, desc ocispec.Descriptor, v any) error {
	data, err := readVerified(r, desc)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// Compare reports whether p exists and holds data.
func (sn *snapshot) Compare(p string, data []byte) (bool, bool, error) {
	b, err := sn.read(p)
	if err != nil || b == nil {
		return false, false, err
	}
	return true, bytes.Equal(b, data), nil
}

// ReadFile returns p's content.
func (sn *snapshot) ReadFile(p string) ([]byte, error) {
	b, err := sn.read(p)
	if err != nil {
		return nil, err
	}
	if b == nil {
		return nil, fmt.Errorf("%s: %w", p, statestore.ErrNotFound)
	}
	return b, nil
}

func (sn *snapshot) read(p string) ([]byte, error) {
	f, ok := sn.st.folderOf(p)
	if !ok {
		return nil, nil
	}
	files, err := sn.files(f)
	if err != nil || files == nil {
		return nil, err
	}
	b, ok, err := files.get(rel(f, p))
	if ok && b == nil {
		b = []byte{} // an empty file exists
	}
	return b, err
}

// List returns every file below dir, sorted. A folder's names are sorted
// once per layer (see names), and the files below dir found by a binary
// search: listing one destination's index entries in a .render layer of
// 100,000 workloads does not walk the layer.
func (sn *snapshot) List(dir string) ([]string, error) {
	dir = strings.Trim(dir, "/")
	var out []string
	for f := range sn.st.folders {
		if !overlaps(f, dir) {
			continue
		}
		names, err := sn.names(f)
		if err != nil {
			return nil, err
		}
		from, to := 0, len(names)
		if inner := rel(f, dir); dir != "" && !strings.HasPrefix(f+"/", dir+"/") {
			// dir is inside f: the names that start with inner/.
			from = sort.SearchStrings(names, inner+"/")
			to = sort.SearchStrings(names, inner+"0") // '0' follows '/'
		}
		for _, r := range names[from:to] {
			out = append(out, abs(f, r))
		}
	}
	sort.Strings(out)
	return out, nil
}

// names returns folder f's file names (relative to f), sorted.
func (sn *snapshot) names(f string) ([]string, error) {
	files, err := sn.files(f)
	if err != nil || files == nil {
		return nil, err
	}
	return files.names(), nil
}

// overlaps reports whether folder f may hold files below dir.
func overlaps(f, dir string) bool {
	switch {
	case dir == "":
		return true
	case f == rootFolder:
		return false // files at the top are below no folder
	case layout.IsMeta(dir) != (f == layout.MetaDir):
		return false
	}
	return f == dir || strings.HasPrefix(f, dir+"/") || strings.HasPrefix(dir, f+"/")
}

// Prefetch pulls, in parallel, the layers a series of lookups will read.
func (sn *snapshot) Prefetch(h statestore.Hint) error {
	need := map[string]bool{}
	for _, list := range [][]string{h.Paths, h.Reads, bookkeeping.LoadPaths(h.Load)} {
		for _, p := range list {
			if f, ok := sn.st.folderOf(p); ok {
				need[f] = true
			}
		}
	}
	for _, d := range h.Dirs {
		for f := range sn.st.folders {
			if overlaps(f, strings.Trim(d, "/")) {
				need[f] = true
			}
		}
	}
	g, ctx := errgroup.WithContext(sn.ctx)
	g.SetLimit(4)
	for f := range need {
		desc := sn.st.folders[f]
		g.Go(func() error {
			_, err := sn.s.layer(ctx, desc)
			return err
		})
	}
	return g.Wait()
}

// Capabilities declares what an OCI snapshot does beyond its lookups: it
// pulls a folder's layer when a lookup first needs it, and fetches ahead
// the layers a hint names (Prefetch); it logs through the store's
// Config.Debug. A layer is a folder that Flux unpacks onto a file
// system, where a path is a file or a folder (TreeShaped).
func (sn *snapshot) Capabilities() statestore.SnapshotCapabilities {
	return statestore.SnapshotCapabilities{Prefetch: sn.Prefetch, Debug: sn.Debug, TreeShaped: true}
}

// Debug logs through the store's Config.Debug, when it has one.
func (sn *snapshot) Debug(msg string, args ...any) {
	if sn.s.cfg.Debug != nil {
		sn.s.cfg.Debug(msg, args...)
	}
}
