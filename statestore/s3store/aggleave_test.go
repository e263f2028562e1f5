package s3store

import (
	"net/http"
	"sync"
	"testing"

	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore"
)

// holdDeletes holds a writer's first delete request (a DELETE, or a
// DeleteObjects POST) until released is closed, closing reached as it
// starts to hold it.
type holdDeletes struct {
	base     http.RoundTripper
	once     sync.Once
	reached  chan struct{}
	released chan struct{}
}

func (h *holdDeletes) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodDelete || (r.Method == http.MethodPost && r.URL.Query().Has("delete")) {
		hold := false
		h.once.Do(func() { hold = true })
		if hold {
			close(h.reached)
			select {
			case <-h.released:
			case <-r.Context().Done():
				return nil, r.Context().Err()
			}
		}
	}
	return h.base.RoundTrip(r)
}

// TestAggregateKeptWhenItsLastContributorLeavesAsAnotherArrives: workload
// b, the only contributor to dev/all.yaml, is removed; its removal plans
// the file empty, and its deletes are held while workload z contributes
// to the file (z uploads its part and rewrites the file, conditioned on
// the version it read). The removal then deletes its part and the file
// (S3 has no conditional DELETE), finds z's part in the file's folder,
// and plans again, which rebuilds the file from z's part: z's render
// landed, so the file must hold its contribution. This is the interleaving
// that matches what the simulated campaign's s3 seed 3010 reported once
// ("d4/aggregated.yaml does not hold exactly the documents of its parts
// (0 documents, 2 in parts)", after a removal of the file's contributor
// ran last); it passes on main as it stood (fcdfda6), and the seed has not
// failed again on replay (see docs/reliability.md), so it pins the
// guarantee rather than a fix.
func TestAggregateKeptWhenItsLastContributorLeavesAsAnotherArrives(t *testing.T) {
	m := testenv.MinIO(t)
	cfg := minioConfig(m, m.CreateBucket(t, "aggleave"))
	upd := func(name string) statestore.Update {
		return statestore.Update{
			Workload:     "w/" + name,
			Files:        map[string][]byte{"dev/" + name + "/f.yaml": []byte(name + "\n")},
			Aggregates:   []statestore.Aggregate{{Target: "dev/all.yaml", Contribution: []byte(name + "\n")}},
			Record:       &statestore.Record{},
			Destinations: []string{"dev"},
		}
	}
	// Another workload first, so that neither writer below creates the
	// store's index marker.
	applyOK(t, open(t, cfg), statestore.Update{Workload: "w/other", Files: map[string][]byte{"other/x.yaml": []byte("x\n")}, Record: &statestore.Record{}})
	applyOK(t, open(t, cfg), upd("b"))
	if got := contents(t, open(t, cfg))["dev/all.yaml"]; got != "b\n" {
		t.Fatalf("dev/all.yaml holds %q after b alone: nothing to test", got)
	}

	h := &holdDeletes{base: http.DefaultTransport, reached: make(chan struct{}), released: make(chan struct{})}
	bcfg := cfg
	bcfg.Transport = h
	done := make(chan error, 1)
	go func() {
		_, err := open(t, bcfg).Apply(testCtx(t), statestore.Update{Workload: "w/b", Destinations: []string{"dev"}})
		done <- err
	}()
	waitFor(t, h.reached, "the removal of b's first delete")
	applyOK(t, open(t, cfg), upd("z"))
	if got := contents(t, open(t, cfg))["dev/all.yaml"]; got != "b\n\n---\nz\n" {
		t.Fatalf("dev/all.yaml holds %q once z landed: nothing to test", got)
	}
	close(h.released)
	if err := waitFor(t, done, "the removal of b"); err != nil {
		t.Fatalf("the removal of b: %v", err)
	}

	got := contents(t, open(t, cfg))
	if got["dev/all.yaml"] != "z\n" {
		t.Errorf("dev/all.yaml holds %q, want z's contribution alone (z landed, b was removed); the store holds %v", got["dev/all.yaml"], keys(got))
	}
	if _, ok := got["dev/b/f.yaml"]; ok {
		t.Errorf("b's file is still there after its removal")
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
