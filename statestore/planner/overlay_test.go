package planner

import (
	"testing"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
)

// declaringSnap is a memSnap that declares every capability, its answers
// about the store's bookkeeping made up: they are its files' alone.
type declaringSnap struct{ memSnap }

func (d declaringSnap) Capabilities() statestore.SnapshotCapabilities {
	return statestore.SnapshotCapabilities{
		Prefetch:   func(statestore.Hint) error { return nil },
		Debug:      func(string, ...any) {},
		TreeShaped: true,
		Indexed:    func() (bool, error) { return true, nil },
		SummaryLoad: func(dests []string) (map[string]map[string]int, []string, error) {
			return map[string]map[string]int{"d1": {"_": 7}}, nil, nil
		},
	}
}

// An overlay takes its base's hints, debug lines and shape, but not its
// answers about the store's bookkeeping: those are the base's files',
// and the overlay's operations may change them. Its callers look its own
// files up instead.
func TestOverlayCapabilities(t *testing.T) {
	ov := NewOverlay(declaringSnap{memSnap{}})
	c := ov.Capabilities()
	if c.Prefetch == nil || c.Debug == nil || !c.TreeShaped {
		t.Fatalf("the overlay does not declare its base's Prefetch, Debug and TreeShaped: %+v", c)
	}
	if c.Indexed != nil || c.SummaryLoad != nil {
		t.Fatalf("the overlay passes on its base's Indexed or SummaryLoad: %+v", c)
	}
	ov.Apply([]Op{{Path: bookkeeping.IndexMarker, Data: bookkeeping.IndexMarkerData()}})
	if indexed, err := bookkeeping.Indexed(ov); err != nil || !indexed {
		t.Fatalf("Indexed of an overlay that adds the marker: %v, %v", indexed, err)
	}
	if l, err := bookkeeping.ReadLoad(ov, []string{"d1"}, ""); err != nil || len(l.Total) > 0 {
		t.Fatalf("load of an overlay with no index entries: %v, %v", l.Total, err)
	}
}
