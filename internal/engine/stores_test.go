package engine

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/internal/storekind"
	"github.com/render-dev/render/renderer"
)

// A store's snapshots log at debug level through the render's log, naming
// the store: a failed prefetch says which store fell back to single reads.
func TestStoreDebugLogNamesTheStore(t *testing.T) {
	var logs bytes.Buffer
	e := New(Options{Log: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	dir := t.TempDir()
	p := &inputs.Platform{Stores: inputs.StoreMap(
		&storekind.GitStateStore{Name: "default", File: "p.yaml", URL: "file://" + filepath.Join(dir, "state.git")},
	)}
	ref := renderer.StoreRef{Kind: "GitStateStore", Name: "default"}
	st, _, err := e.openStore(p, ref)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	snap, err := st.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	d := snap.Capabilities().Debug
	if d == nil {
		t.Fatalf("a git snapshot (%T) declares no Debug", snap)
	}
	d("prefetch failed: the lookups read one path at a time instead", "error", "server hung up")
	want := `"level":"DEBUG","msg":"prefetch failed: the lookups read one path at a time instead","store":"GitStateStore/default","error":"server hung up"`
	if !strings.Contains(logs.String(), want) {
		t.Errorf("log %q lacks %q", logs.String(), want)
	}
}
