package planner

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/statestore"
)

// Overlay is a Snapshot with planned operations on top of another, so that
// a batch's later updates are planned seeing the earlier ones' files. It
// never writes to the store underneath.
type Overlay struct {
	base    statestore.Snapshot
	files   map[string][]byte
	deleted map[string]bool
}

// NewOverlay returns an overlay of base with nothing on top yet.
func NewOverlay(base statestore.Snapshot) *Overlay {
	return &Overlay{base: base, files: map[string][]byte{}, deleted: map[string]bool{}}
}

// Apply lays ops on top, in order.
func (o *Overlay) Apply(ops []Op) {
	for _, op := range ops {
		if op.Delete {
			delete(o.files, op.Path)
			o.deleted[op.Path] = true
		} else {
			o.files[op.Path] = op.Data
			delete(o.deleted, op.Path)
		}
	}
}

// Compare reports whether p exists and holds data.
func (o *Overlay) Compare(p string, data []byte) (bool, bool, error) {
	if o.deleted[p] {
		return false, false, nil
	}
	if b, ok := o.files[p]; ok {
		return true, bytes.Equal(b, data), nil
	}
	return o.base.Compare(p, data)
}

// ReadFile returns p's content.
func (o *Overlay) ReadFile(p string) ([]byte, error) {
	if o.deleted[p] {
		return nil, fmt.Errorf("%s: %w", p, statestore.ErrNotFound)
	}
	if b, ok := o.files[p]; ok {
		return b, nil
	}
	return o.base.ReadFile(p)
}

// List returns every file below dir, sorted.
func (o *Overlay) List(dir string) ([]string, error) {
	dir = strings.Trim(dir, "/")
	paths, err := o.base.List(dir)
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for _, p := range paths {
		if !o.deleted[p] {
			set[p] = true
		}
	}
	for p := range o.files {
		if dir == "" || strings.HasPrefix(p, dir+"/") {
			set[p] = true
		}
	}
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	slices.Sort(out)
	return out, nil
}

// Capabilities are the snapshot's underneath (hints and debug lines go
// to it, and its paths form a tree if its base's do), except the answers
// it gives about the store's bookkeeping (Indexed, SummaryLoad): those
// are the base's files', not the overlay's, whose operations may add or
// remove the marker or index entries. The overlay leaves them out, and
// its callers look its files up the generic way.
func (o *Overlay) Capabilities() statestore.SnapshotCapabilities {
	c := o.base.Capabilities()
	c.Indexed, c.SummaryLoad = nil, nil
	return c
}

// ValidateUpdate checks what every backend needs of an update before
// planning it: a workload key, and paths a store can hold for its files,
// shared files and aggregated files (layout.CheckStorePath) and its
// destinations. PlanUpdate refuses the rest (render's own folder).
func ValidateUpdate(u statestore.Update) error {
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
	for _, a := range u.Aggregates {
		if err := layout.CheckStorePath(a.Target); err != nil {
			return fmt.Errorf("path %q: %w", a.Target, err)
		}
	}
	for _, d := range u.Destinations {
		if d = strings.Trim(d, "/"); d == "" {
			continue
		}
		if err := layout.ValidPath(d); err != nil {
			return fmt.Errorf("destination: %w", err)
		}
	}
	return nil
}
