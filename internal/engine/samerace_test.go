package engine

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// TestSameResourceAtOnceAllLand: 16 renders of one resource at once into a
// local bare repository (issue 34), each with its own output (objects of
// its own names, as a pipeline that names what it makes after the run
// does), all reading the store before any of them writes (they wait for
// each other as they enter publishing, the first time). Each publish round
// lands one of them and leaves the others stale (the record they read no
// longer holds: other objects): a lost race, which each retries for as
// long as its retry deadline allows, so every render lands, and the store
// holds one of them whole. Before the fix, renders gave up after five
// stale rounds ("plan: stale update").
func TestSameResourceAtOnceAllLand(t *testing.T) {
	const n = 16
	dir := t.TempDir()
	repo := filepath.Join(dir, "state.git")
	platform := filepath.Join(dir, "platform.yaml")
	writeT(t, platform, fmt.Sprintf("apiVersion: platform.kratix.io/v1alpha1\nkind: GitStateStore\nmetadata:\n  name: default\nspec:\n  url: file://%s\n---\n", repo)+dests("d1", "d2"))
	var arrived sync.WaitGroup
	arrived.Add(n)
	reports := make([]*Report, n)
	logs := make([]*strings.Builder, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		in := filepath.Join(dir, fmt.Sprintf("r%02d", i))
		for _, f := range []string{"a", "b"} {
			writeT(t, filepath.Join(in, "output", f+".yaml"), fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: db-1-%s-%02d\n  namespace: team\ndata:\n  op: \"key-%02d\"\n", f, i, i))
		}
		writeT(t, filepath.Join(in, "input", "object.yaml"), "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: db-1\n  namespace: team\n")
		if err := os.MkdirAll(filepath.Join(in, "metadata"), 0o755); err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		var logb strings.Builder
		logs[i] = &logb
		e := New(Options{Log: slog.New(slog.NewTextHandler(&syncWriter{w: &logb}, &slog.HandlerOptions{Level: slog.LevelDebug})), OutputDir: filepath.Join(in, "output"), MetadataDir: filepath.Join(in, "metadata"), InputDir: filepath.Join(in, "input"),
			Platform: []string{platform}, Getenv: func(string) string { return "" },
			Identity: map[string]string{"workflow-type": "resource", "promise": "db", "pipeline": "configure"},
			OnPhase: func(p string) {
				if p == PhasePublishing {
					once.Do(func() { arrived.Done(); arrived.Wait() })
				}
			}})
		wg.Go(func() {
			defer e.Close()
			reports[i], errs[i] = e.Render(context.Background())
		})
	}
	wg.Wait()
	redos := 0
	for i := range n {
		redos += strings.Count(logs[i].String(), "reading the stores again")
	}
	t.Logf("stale redos in all: %d", redos)
	for i := range n {
		switch {
		case errs[i] != nil:
			t.Errorf("render r%02d: %v", i, errs[i])
		case len(reports[i].Failed()) > 0:
			t.Errorf("render r%02d: %v", i, reports[i].Failed()[0].Err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	// One of them, whole: both files in one destination, by one render.
	op := regexp.MustCompile(`op: "([^"]*)"`)
	keys := map[string]bool{}
	var found []string
	for name, s := range branchFiles(t, repo) {
		if strings.Contains(name, "/resources/team/db/db-1/") {
			found = append(found, name)
			if m := op.FindStringSubmatch(s); m != nil {
				keys[m[1]] = true
			}
		}
	}
	if len(found) != 2 || len(keys) != 1 {
		t.Fatalf("the resource's files on the branch: %v, written by %v; want a and b, by one render", found, keys)
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}
