package ocistore

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/render-dev/render/internal/layout"
)

// epoch is every entry's modification time: a layer depends on its files
// only, so that the same files always give the same digest.
var epoch = time.Unix(0, 0).UTC()

// maxLayer bounds what one layer may expand to, against a corrupted or
// hostile artifact.
const maxLayer = 1 << 30

// pack writes files (paths relative to the layer's folder) as a
// reproducible tar+gzip: entries sorted, folders before their files, fixed
// times, modes and owners, no user or group names, and a gzip header with
// no name and no time, compressed as well as gzip can (what Flux pulls).
func pack(files map[string][]byte) ([]byte, error) { return packLevel(files, gzip.BestCompression) }

// packFolder packs folder f's files as pack does, at the level of its
// kind of folder: a destination's (what Flux pulls) at gzip's default
// level, which for YAML is within a few percent of the best and several
// times faster (a drain of 1,000 workloads out of 100,000 repacks 100
// destinations); render's own folder, which only render reads and which
// holds every workload's record, claims and index entries (100,000
// workloads: 300,000 files), at gzip's fastest. The level is part of what
// makes a layer's digest: each folder always uses the same one, and a
// layer an older render packed at another level stays as it is until its
// files change.
func packFolder(f string, files map[string][]byte) ([]byte, error) {
	return packLevel(files, folderLevel(f))
}

// folderLevel is the gzip level of folder f's layer (see packFolder).
func folderLevel(f string) int {
	if f == layout.MetaDir {
		return gzip.BestSpeed
	}
	return gzip.DefaultCompression
}

func packLevel(files map[string][]byte, level int) ([]byte, error) {
	var buf bytes.Buffer
	if err := packTo(&buf, newMemFiles(files), level); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// unpack reads a layer written by pack (or by any tool that writes plain
// files and folders) into a map of paths relative to the layer's folder.
// Anything but regular files and folders, and any path that is not clean
// and relative, is refused.
func unpack(data []byte) (map[string][]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("layer is not gzip: %w", err)
	}
	tr := tar.NewReader(zr)
	out := map[string][]byte{}
	var total int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("layer: %w", err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		switch h.Typeflag {
		case tar.TypeDir:
			continue
		case tar.TypeReg:
		default:
			return nil, fmt.Errorf("layer: %s is not a regular file", h.Name)
		}
		if name == "" || path.Clean(name) != name || path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return nil, fmt.Errorf("layer: entry name %q is not a clean relative path", h.Name)
		}
		total += h.Size
		if total > maxLayer {
			return nil, fmt.Errorf("layer expands to more than %d bytes", maxLayer)
		}
		// Exactly the entry's size (io.ReadAll's first 512 bytes for each
		// of 100,000 small files were 50 MB of a drain's memory).
		b := make([]byte, h.Size)
		if _, err := io.ReadFull(tr, b); err != nil {
			return nil, fmt.Errorf("layer: %s: %w", name, err)
		}
		out[name] = b
	}
	return out, nil
}
