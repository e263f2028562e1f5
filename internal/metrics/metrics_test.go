package metrics

import (
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/render-dev/render/internal/engine"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
)

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	return string(body)
}

func expect(t *testing.T, text string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(text, l+"\n") {
			t.Errorf("metrics lack %q", l)
		}
	}
}

func TestObserve(t *testing.T) {
	m := New()
	git := renderer.StoreRef{Kind: "GitStateStore", Name: "default"}
	bucket := renderer.StoreRef{Kind: "BucketStateStore", Name: "s3"}
	other := renderer.StoreRef{Kind: "GitStateStore", Name: "other"}
	rep := &engine.Report{
		Duration: 300 * time.Millisecond,
		Plan: &renderer.Plan{Groups: []renderer.Group{
			{Directory: ".", Destinations: []string{"dev"}},
			{Directory: "backup"}, // unscheduled
		}},
		Stores: []engine.StoreReport{
			{Store: git, Duration: 100 * time.Millisecond, Result: statestore.Result{Updated: true, Diff: statestore.Diff{Added: []string{"a", "b"}, Changed: []string{"c"}, Deleted: []string{"d"}}}},
			{Store: bucket, Uploads: true, Duration: 50 * time.Millisecond, Result: statestore.Result{Updated: true, Diff: statestore.Diff{Added: []string{"x"}}}},
			{Store: other, Duration: 10 * time.Millisecond},
		},
	}
	if got := m.Observe(rep, nil); got != Unscheduled {
		t.Fatalf("result %s, want unscheduled", got)
	}
	rep.Stores[2].Err = errors.New("boom")
	if got := m.Observe(rep, nil); got != Failed {
		t.Fatalf("result %s, want failed", got)
	}
	if got := m.Observe(nil, &renderer.InputError{File: "f", Msg: "bad"}); got != BadInput {
		t.Fatalf("result %s, want bad_input", got)
	}
	text := scrape(t, m)
	expect(t, text,
		`render_renders_total{result="unscheduled"} 1`,
		`render_renders_total{result="failed"} 1`,
		`render_renders_total{result="bad_input"} 1`,
		`render_renders_total{result="ok"} 0`,
		`render_store_writes_total{result="committed",store="GitStateStore/default"} 2`,
		`render_store_writes_total{result="uploaded",store="BucketStateStore/s3"} 2`,
		`render_store_writes_total{result="unchanged",store="GitStateStore/other"} 1`,
		`render_store_writes_total{result="failed",store="GitStateStore/other"} 1`,
		`render_files_written_total 8`,
		`render_render_duration_seconds_count 2`,
		`render_store_write_duration_seconds_count{store="GitStateStore/default"} 2`,
		`render_unscheduled_groups 1`,
	)
	if !strings.Contains(text, "render_last_success_timestamp_seconds 1.") {
		t.Errorf("last success timestamp not set:\n%s", text)
	}
	if !strings.Contains(text, "go_goroutines ") {
		t.Error("Go collector missing")
	}
}

func TestClassify(t *testing.T) {
	if got := Classify(&engine.Report{}, nil); got != OK {
		t.Fatalf("empty report: %s", got)
	}
	if got := Classify(nil, errors.New("x")); got != Failed {
		t.Fatalf("error: %s", got)
	}
}

// The misscheduled gauge counts, per destination, the groups the last
// render kept where they no longer match; a destination left with none
// goes back to zero (it is not reported at all).
func TestMisscheduledGauge(t *testing.T) {
	m := New()
	rep := &engine.Report{
		Plan: &renderer.Plan{Groups: []renderer.Group{
			{Directory: ".", Destinations: []string{"dev", "prod"}, Misscheduled: []string{"prod"}},
			{Directory: "db", Destinations: []string{"prod"}, Misscheduled: []string{"prod"}},
		}},
		Static: &renderer.Plan{Groups: []renderer.Group{{Directory: ".", Destinations: []string{"test"}, Misscheduled: []string{"test"}}}},
	}
	if got := m.Observe(rep, nil); got != Unscheduled {
		t.Fatalf("result %s: group db stays only where it no longer matches", got)
	}
	expect(t, scrape(t, m),
		`render_misscheduled_groups{destination="prod"} 2`,
		`render_misscheduled_groups{destination="test"} 1`,
		"render_unscheduled_groups 2")
	rep.Plan.Groups = rep.Plan.Groups[:1]
	rep.Static = nil
	m.Observe(rep, nil)
	text := scrape(t, m)
	expect(t, text, `render_misscheduled_groups{destination="prod"} 1`, "render_unscheduled_groups 0")
	if strings.Contains(text, `destination="test"`) {
		t.Errorf("test keeps nothing misscheduled any more, but is still reported:\n%s", text)
	}
}
