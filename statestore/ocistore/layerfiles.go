package ocistore

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// layerFiles is one state layer's files, by name relative to its folder.
// Small layers are held in memory (memFiles). A large one (render's own
// folder in a store of 100,000 workloads: 300,000 files, 160 MB) is
// spilled: its contents wait in a temporary file, and only an index of
// names is in memory (spilledFiles); a commit that changes it lays its
// changes over it (overlayFiles) and packs the new layer straight into
// another temporary file, which is pushed from there. So a render's or a
// drain's memory follows what it reads and changes, not the store.
type layerFiles interface {
	// get returns a file's content (ok false: no such file).
	get(name string) (data []byte, ok bool, err error)
	// names returns every name, sorted (the caller must not change it).
	names() []string
}

// spillAbove is the packed size above which a layer read from the
// registry is spilled (a variable for the tests, which spill every layer).
var spillAbove int64 = 4 << 20

// memFiles is a layer held in memory.
type memFiles struct {
	m      map[string][]byte
	once   sync.Once
	sorted []string
}

func newMemFiles(m map[string][]byte) *memFiles { return &memFiles{m: m} }

func (f *memFiles) get(name string) ([]byte, bool, error) {
	b, ok := f.m[name]
	return b, ok, nil
}

func (f *memFiles) names() []string {
	f.once.Do(func() {
		f.sorted = make([]string, 0, len(f.m))
		for n := range f.m {
			f.sorted = append(f.sorted, n)
		}
		slices.Sort(f.sorted)
	})
	return f.sorted
}

// extent is where a spilled file's content is in its temporary file.
type extent struct {
	off int64
	n   int64
}

// spilledFiles is a layer whose contents are in a temporary file (already
// removed from its folder: it goes away with the process). Its index is
// the names, sorted, and each one's extent at the same position: a map
// beside the sorted names took 17 MB more for render's folder in a store
// of 100,000 workloads (300,000 files), and a lookup is a binary search.
type spilledFiles struct {
	file   *os.File
	sorted []string
	at     []extent
}

func (f *spilledFiles) get(name string) ([]byte, bool, error) {
	i, ok := slices.BinarySearch(f.sorted, name)
	if !ok {
		return nil, false, nil
	}
	e := f.at[i]
	b := make([]byte, e.n)
	if _, err := f.file.ReadAt(b, e.off); err != nil {
		return nil, false, fmt.Errorf("read %s from the layer's spill file: %w", name, err)
	}
	return b, true, nil
}

func (f *spilledFiles) names() []string { return f.sorted }

// overlayFiles is a layer made of another with some files set and some
// deleted: a commit's new version of a spilled layer.
type overlayFiles struct {
	base   layerFiles
	set    map[string][]byte
	del    map[string]bool
	sorted []string
}

func newOverlayFiles(base layerFiles, set map[string][]byte, del map[string]bool) *overlayFiles {
	o := &overlayFiles{base: base, set: set, del: del}
	var added []string
	for n := range set {
		added = append(added, n)
	}
	slices.Sort(added)
	var old []string
	if base != nil {
		old = base.names()
	}
	o.sorted = make([]string, 0, len(old)+len(added))
	i, j := 0, 0
	for i < len(old) || j < len(added) {
		var n string
		switch {
		case j == len(added) || i < len(old) && old[i] < added[j]:
			n, i = old[i], i+1
		case i == len(old) || added[j] < old[i]:
			n, j = added[j], j+1
		default: // in both
			n, i, j = old[i], i+1, j+1
		}
		if _, isSet := set[n]; isSet || !del[n] {
			o.sorted = append(o.sorted, n)
		}
	}
	return o
}

func (o *overlayFiles) get(name string) ([]byte, bool, error) {
	if b, ok := o.set[name]; ok {
		return b, true, nil
	}
	if o.del[name] || o.base == nil {
		return nil, false, nil
	}
	return o.base.get(name)
}

func (o *overlayFiles) names() []string { return o.sorted }

// packTo writes fs as pack does (a reproducible tar+gzip at level) to w.
func packTo(w io.Writer, fs layerFiles, level int) error {
	zw, err := gzip.NewWriterLevel(w, level)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	header := func(name string, typ byte, mode int64, size int64) *tar.Header {
		return &tar.Header{
			Typeflag: typ, Name: name, Mode: mode, Size: size,
			ModTime: epoch, Format: tar.FormatPAX,
		}
	}
	dirs := map[string]bool{}
	for _, p := range fs.names() {
		data, ok, err := fs.get(p)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		// The folders above p, each once, before it.
		parts := strings.Split(p, "/")
		for i := 1; i < len(parts); i++ {
			d := strings.Join(parts[:i], "/")
			if !dirs[d] {
				dirs[d] = true
				if err := tw.WriteHeader(header(d+"/", tar.TypeDir, 0o755, 0)); err != nil {
					return err
				}
			}
		}
		if err := tw.WriteHeader(header(p, tar.TypeReg, 0o644, int64(len(data)))); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// spillBlob is a packed layer waiting in a temporary file, with its
// digest and size.
type spillBlob struct {
	file *os.File
	desc ocispec.Descriptor
}

// packSpilled packs fs at level into a temporary file.
func packSpilled(fs layerFiles, level int) (*spillBlob, error) {
	f, err := tempFile()
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	if err := packTo(cw, fs, level); err != nil {
		f.Close()
		return nil, err
	}
	return &spillBlob{file: f, desc: ocispec.Descriptor{
		MediaType: LayerMediaType, Size: cw.n,
		Digest: digest.NewDigestFromEncoded(digest.SHA256, hex.EncodeToString(h.Sum(nil))),
	}}, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// tempFile is a new temporary file, already removed from its folder: it
// is gone once closed, or when the process ends, however it ends.
func tempFile() (*os.File, error) {
	f, err := os.CreateTemp("", "render-oci-layer-")
	if err != nil {
		return nil, err
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// unspill reads a packed layer from r (desc's blob, verified against its
// digest and size as it is read) into a spilledFiles, with the checks of
// unpack.
func unspill(r io.Reader, desc ocispec.Descriptor) (*spilledFiles, error) {
	f, err := tempFile()
	if err != nil {
		return nil, err
	}
	out := &spilledFiles{file: f}
	type entry struct {
		name string
		at   extent
	}
	var entries []entry
	fail := func(err error) (*spilledFiles, error) {
		f.Close()
		return nil, err
	}
	var h hash.Hash = desc.Digest.Algorithm().Hash()
	vr := &countReader{r: io.TeeReader(io.LimitReader(r, desc.Size+1), h)}
	zr, err := gzip.NewReader(vr)
	if err != nil {
		return fail(fmt.Errorf("layer is not gzip: %w", err))
	}
	tr := tar.NewReader(zr)
	bw := bufio.NewWriterSize(f, 1<<20)
	var buf []byte
	var off int64
	for {
		hd, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fail(fmt.Errorf("layer: %w", err))
		}
		name := strings.TrimPrefix(hd.Name, "./")
		switch hd.Typeflag {
		case tar.TypeDir:
			continue
		case tar.TypeReg:
		default:
			return fail(fmt.Errorf("layer: %s is not a regular file", hd.Name))
		}
		if name == "" || path.Clean(name) != name || path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fail(fmt.Errorf("layer: entry name %q is not a clean relative path", hd.Name))
		}
		if off+hd.Size > maxLayer {
			return fail(fmt.Errorf("layer expands to more than %d bytes", maxLayer))
		}
		// One buffer for every entry: 300,000 copies of 32 KiB each
		// (io.Copy's) were nine tenths of a big drain's allocations.
		buf = slices.Grow(buf[:0], int(hd.Size))[:hd.Size]
		if _, err := io.ReadFull(tr, buf); err != nil {
			return fail(fmt.Errorf("layer: %s: %w", name, err))
		}
		if _, err := bw.Write(buf); err != nil {
			return fail(err)
		}
		entries = append(entries, entry{name, extent{off: off, n: hd.Size}})
		off += hd.Size
	}
	if err := bw.Flush(); err != nil {
		return fail(err)
	}
	// The rest of the blob (gzip's trailer), so that all of it is hashed.
	if _, err := io.Copy(io.Discard, zr); err != nil {
		return fail(fmt.Errorf("layer: %w", err))
	}
	if _, err := io.Copy(io.Discard, vr); err != nil {
		return fail(err)
	}
	if vr.n != desc.Size || digest.NewDigest(desc.Digest.Algorithm(), h) != desc.Digest {
		return fail(fmt.Errorf("content of %s does not match its digest", desc.Digest))
	}
	// Sorted by name, the entries of one name in the layer's order: the
	// last of them is the file (as a tar is read).
	slices.SortStableFunc(entries, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	out.sorted = make([]string, 0, len(entries))
	out.at = make([]extent, 0, len(entries))
	for i, e := range entries {
		if i+1 < len(entries) && entries[i+1].name == e.name {
			continue
		}
		out.sorted = append(out.sorted, e.name)
		out.at = append(out.at, e.at)
	}
	return out, nil
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
