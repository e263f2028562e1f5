package sim

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/render-dev/render/statestore/wait"
)

// TestDrawReplays: a request's fault is a function of the seed, the
// writer and the request's number alone.
func TestDrawReplays(t *testing.T) {
	p := Profile{Rate: 0.3, PauseRate: 0.1, Weights: [5]int{1, 1, 1, 1, 1}}
	kinds := map[FaultKind]int{}
	for w := range 8 {
		for n := 1; n <= 200; n++ {
			a, b := p.Draw(42, w, n), p.Draw(42, w, n)
			if a != b {
				t.Fatalf("writer %d request %d drew %v, then %v", w, n, a, b)
			}
			kinds[a.Kind]++
		}
	}
	for _, k := range profileKinds {
		if kinds[k] == 0 {
			t.Errorf("no %s in 1,600 draws at 30%%", k)
		}
	}
	if n := kinds[None]; n < 1000 || n > 1250 {
		t.Errorf("%d of 1,600 requests met no fault at a 30%% rate", n)
	}
	if p.Draw(42, 1, 1) == p.Draw(43, 1, 1) && p.Draw(42, 1, 2) == p.Draw(43, 1, 2) && p.Draw(42, 1, 3) == p.Draw(43, 1, 3) {
		t.Error("two seeds drew the same faults")
	}
}

// linkTo is a writer's Link to srv whose request n meets faults[n].
func linkTo(t *testing.T, faults map[int]Fault) (*Link, context.Context, *Clock) {
	t.Helper()
	c := testClock(t, nil)
	ctx, part := c.Join(context.Background(), "w")
	t.Cleanup(part.Leave)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	l := &Link{clock: c, part: part, faults: func(n int) Fault { return faults[n] }, die: cancel, base: c.Now(), tr: newTransport()}
	return l, wait.WithRetryDeadline(withLink(ctx, l), time.Minute), c
}

func get(ctx context.Context, l *Link, url string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("body"))
	resp, err := l.RoundTrip(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestLinkFaults: each fault does to a request what it says, as the
// server and the writer see it.
func TestLinkFaults(t *testing.T) {
	var seen atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		io.WriteString(w, strings.Repeat("x", 1000))
	}))
	defer srv.Close()
	l, ctx, c := linkTo(t, map[int]Fault{
		1: {Kind: Refuse},
		2: {Kind: Lost},
		3: {Kind: Cut, Bytes: 10},
		4: {Kind: Latency, For: time.Hour},
		5: {Kind: Stall},
		6: {Kind: Death, After: true},
	})
	_, err := get(ctx, l, srv.URL)
	if !errors.Is(err, errRefused) || seen.Load() != 0 {
		t.Fatalf("refuse: %v, server saw %d", err, seen.Load())
	}
	_, err = get(ctx, l, srv.URL)
	if !errors.Is(err, errReset) || seen.Load() != 1 {
		t.Fatalf("lost: %v, server saw %d", err, seen.Load())
	}
	body, err := get(ctx, l, srv.URL)
	if !errors.Is(err, errReset) || len(body) != 10 {
		t.Fatalf("cut after 10 bytes: %d bytes, %v", len(body), err)
	}
	if body, err = get(ctx, l, srv.URL); err != nil || len(body) != 1000 || c.Now().Sub(t0) != time.Hour {
		t.Fatalf("latency: %d bytes, %v, clock at %v", len(body), err, c.Now().Sub(t0))
	}
	at, _ := wait.RetryDeadline(ctx)
	if _, err = get(ctx, l, srv.URL); !errors.Is(err, errTimeout) || c.Now().Before(at) || seen.Load() != 3 {
		t.Fatalf("stall: %v at %v (deadline %v), server saw %d", err, c.Now().Sub(t0), at.Sub(t0), seen.Load())
	}
	if _, err = get(ctx, l, srv.URL); !errors.Is(err, ErrDead) || seen.Load() != 4 {
		t.Fatalf("death after the server saw it: %v, server saw %d", err, seen.Load())
	}
	if _, err = get(ctx, l, srv.URL); !errors.Is(err, ErrDead) || seen.Load() != 4 || ctx.Err() == nil {
		t.Fatalf("after death: %v, server saw %d, context %v", err, seen.Load(), ctx.Err())
	}
	log := l.Requests()
	if len(log) != 6 || log[0].Sent || !log[1].Sent || log[1].Delivered || log[4].Sent || !log[1].Unknown() || log[0].Unknown() {
		t.Fatalf("request log: %+v", log)
	}
}
