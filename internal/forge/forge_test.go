package forge_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/render-dev/render/internal/forge"
	"github.com/render-dev/render/statestore/wait"
)

// fakeClock moves its time by what is slept on it, at once.
type fakeClock struct {
	now   time.Time
	slept []time.Duration
}

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.slept = append(c.slept, d)
	c.now = c.now.Add(d)
	return ctx.Err()
}

// newRepo is a Gitea whose pull-request endpoint answers 404 (a repository
// it still takes for empty) to the first notYet requests, then 201.
func newRepo(t *testing.T, notYet int32) *forge.Gitea {
	t.Helper()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/repos/o/r/pulls" {
			http.Error(w, "unexpected", http.StatusBadRequest)
			return
		}
		if calls.Add(1) <= notYet {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"message":"The target couldn't be found."}`))
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"number":7,"state":"open"}`))
	}))
	t.Cleanup(srv.Close)
	g, err := forge.NewGitea(forge.Config{APIURL: srv.URL, Owner: "o", Repo: "r"})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func sum(ds []time.Duration) (s time.Duration) {
	for _, d := range ds {
		s += d
	}
	return s
}

// Create's waits for a repository Gitea still takes for empty are on the
// render's clock (a test or a simulation that controls it waits no real
// time), back off from 200ms, and stop at 15s or at the render's retry
// deadline, whichever is sooner.
func TestCreateWaitsOnTheRendersClock(t *testing.T) {
	clk := &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	ctx := wait.WithClock(context.Background(), clk)

	pr, err := newRepo(t, 3).Create(wait.WithRetryDeadline(ctx, time.Hour), "main", "b", "t", "")
	if err != nil || pr.Number != 7 {
		t.Fatalf("Create = %+v, %v; want pull request 7", pr, err)
	}
	if want := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}; !slices.Equal(clk.slept, want) {
		t.Fatalf("waited %v on the render's clock, want %v", clk.slept, want)
	}

	clk.slept = nil
	_, err = newRepo(t, 1000).Create(wait.WithRetryDeadline(ctx, time.Hour), "main", "b", "t", "")
	var se *forge.StatusError
	if !errors.As(err, &se) || se.Code != http.StatusNotFound {
		t.Fatalf("a repository that stays empty: err = %v, want its 404", err)
	}
	if got := sum(clk.slept); got > 15*time.Second || got < 13*time.Second {
		t.Fatalf("waited %v in all (%v), want up to 15s", got, clk.slept)
	}

	clk.slept = nil
	if _, err = newRepo(t, 1000).Create(wait.WithRetryDeadline(ctx, time.Second), "main", "b", "t", ""); !errors.As(err, &se) {
		t.Fatalf("err = %v, want the 404", err)
	}
	if got := sum(clk.slept); got > time.Second {
		t.Fatalf("waited %v (%v) with a render's retry deadline of 1s", got, clk.slept)
	}
}
