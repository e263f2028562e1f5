package ocistore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/ocistore"
	"github.com/render-dev/render/statestore/wait"
)

// refusing answers 400 to the requests refuse picks, and passes the others
// to the registry.
type refusing struct {
	refuse func(*http.Request) bool
}

func (rt refusing) RoundTrip(req *http.Request) (*http.Response, error) {
	if rt.refuse(req) {
		return &http.Response{StatusCode: http.StatusBadRequest, Status: "400 Bad Request", Header: http.Header{},
			Body: io.NopCloser(strings.NewReader("{}")), Request: req}, nil
	}
	return http.DefaultTransport.RoundTrip(req)
}

func isTicketDelete(req *http.Request) bool {
	return req.Method == http.MethodDelete && strings.Contains(req.URL.Path, "/manifests/lock-t-")
}

// A lock that cannot be released is never dropped: after a write that
// landed it is logged (the next writer waits out its lease), and the
// error of a write that failed carries it too.
func TestLockReleaseFailureIsNotLost(t *testing.T) {
	r := testenv.Registry(t)
	ctx := context.Background()
	u := func(w, content string) statestore.Update {
		return statestore.Update{Workload: w, Destinations: []string{"d1"}, Files: map[string][]byte{"d1/" + w + ".yaml": []byte(content)},
			Record: &statestore.Record{Type: "promise", Promise: "p", Pipeline: w}}
	}

	cfg := config(r, repoName("release"))
	cfg.LockLease = 3 * time.Second
	var mu sync.Mutex
	var warned []string
	cfg.Warn = func(msg string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		warned = append(warned, fmt.Sprint(append([]any{msg}, args...)...))
	}
	cfg.Transport = refusing{isTicketDelete}
	res, err := open(t, cfg).Apply(ctx, u("a", "a\n"))
	if err != nil || !res.Updated {
		t.Fatalf("a write whose lock could not be released: %+v, %v; want it written", res, err)
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "the write landed, but the writers' lock could not be released") ||
		!strings.Contains(warned[0], "other writers wait until its lease ends at") || !strings.Contains(warned[0], "400 Bad Request") {
		t.Fatalf("warnings %q, want the lock that stays, and why", warned)
	}
	// The ticket is still there; the next writer waits out its lease.
	var tickets int
	for _, tag := range r.Tags(t, cfg.Registry+"/"+cfg.Repository) {
		if strings.HasPrefix(tag, "lock-t-") {
			tickets++
		}
	}
	if tickets != 1 {
		t.Errorf("lock tickets after the failed release: %d, want 1", tickets)
	}
	next := cfg
	next.Transport, next.Warn = nil, nil
	if _, err := open(t, next).Apply(ctx, u("b", "b\n")); err != nil {
		t.Fatalf("the next writer, once the lease ended: %v", err)
	}

	// A write that fails and cannot release its lock says both.
	failing := cfg
	failing.Transport = refusing{func(req *http.Request) bool {
		return isTicketDelete(req) || req.Method == http.MethodPut && strings.HasSuffix(req.URL.Path, "/manifests/"+ocistore.StateTag)
	}}
	_, err = open(t, failing).Apply(ctx, u("c", "c\n"))
	if err == nil || !strings.Contains(err.Error(), "PUT /v2/"+cfg.Repository+"/manifests/"+ocistore.StateTag) ||
		!strings.Contains(err.Error(), "release the writers' lock (lock-t-") {
		t.Fatalf("a failed write whose lock stays: %v, want both failures", err)
	}
}

// late delays the requests pick chooses by delay, and lets them reach the
// registry even when the client gave up on them meanwhile, as a request
// already on its way does.
type late struct {
	pick  func(*http.Request) bool
	delay time.Duration
	wg    sync.WaitGroup
}

func (rt *late) RoundTrip(req *http.Request) (*http.Response, error) {
	if !rt.pick(req) {
		return http.DefaultTransport.RoundTrip(req)
	}
	type answer struct {
		resp *http.Response
		err  error
	}
	ch := make(chan answer, 1)
	sent := req.Clone(context.WithoutCancel(req.Context()))
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		time.Sleep(rt.delay)
		resp, err := http.DefaultTransport.RoundTrip(sent)
		ch <- answer{resp, err}
	}()
	select {
	case a := <-ch:
		return a.resp, a.err
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
}

// A write cancelled while it tags its place in the writers' queue leaves
// no lock tag behind, even when the registry finishes that request after
// the cancellation: other writers do not wait out its lease.
func TestLockCancelledLeavesNoTag(t *testing.T) {
	r := testenv.Registry(t)
	cfg := config(r, repoName("cut"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rt := &late{delay: 300 * time.Millisecond, pick: func(req *http.Request) bool {
		if req.Method == http.MethodPut && strings.Contains(req.URL.Path, "/manifests/lock-c-") {
			cancel()
			return true
		}
		return false
	}}
	cfg.Transport = rt
	u := statestore.Update{Workload: "w/a", Destinations: []string{"d1"}, Files: map[string][]byte{"d1/a.yaml": []byte("a\n")},
		Record: &statestore.Record{Type: "promise", Promise: "p", Pipeline: "a"}}
	if _, err := open(t, cfg).Apply(ctx, u); !errors.Is(err, context.Canceled) {
		t.Fatalf("a write cancelled while it queued: %v, want context.Canceled", err)
	}
	rt.wg.Wait() // the late request has landed
	for _, tag := range r.Tags(t, cfg.Registry+"/"+cfg.Repository) {
		if strings.HasPrefix(tag, "lock-") {
			t.Errorf("lock tag %s stays after the write was cancelled", tag)
		}
	}
}

// A writer queued for the writers' lock behind two others, each holding
// it for most of its retry budget, gets it: the lock changing hands is
// progress (the registry is busy, not down), which moves its deadline on.
// Before, it gave up when its budget had passed, behind the second holder.
func TestLockChangingHandsIsProgress(t *testing.T) {
	r := testenv.Registry(t)
	cfg := config(r, repoName("hands"))
	tickets := func(n int) {
		t.Helper()
		for range 200 {
			c := 0
			for _, tag := range r.Tags(t, cfg.Registry+"/"+cfg.Repository) {
				if strings.HasPrefix(tag, "lock-t-") {
					c++
				}
			}
			if c >= n {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("fewer than %d lock tickets after 10s", n)
	}
	type held struct {
		release func(context.Context) error
		err     error
	}
	ctx := context.Background()
	releaseA, err := ocistore.AcquireLock(ctx, open(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	b := make(chan held, 1)
	go func() {
		rel, err := ocistore.AcquireLock(wait.WithRetryDeadline(ctx, time.Minute), open(t, cfg))
		b <- held{rel, err}
	}()
	tickets(2)
	c := make(chan held, 1)
	go func() {
		rel, err := ocistore.AcquireLock(wait.WithRetryDeadline(ctx, 3*time.Second), open(t, cfg))
		c <- held{rel, err}
	}()
	tickets(3)
	time.Sleep(2 * time.Second)
	if err := releaseA(ctx); err != nil {
		t.Fatal(err)
	}
	hb := <-b
	if hb.err != nil {
		t.Fatalf("the second writer: %v", hb.err)
	}
	time.Sleep(2 * time.Second)
	if err := hb.release(ctx); err != nil {
		t.Fatal(err)
	}
	hc := <-c
	if hc.err != nil {
		t.Fatalf("the third writer, whose 3s budget passed while the lock changed hands: %v", hc.err)
	}
	if err := hc.release(ctx); err != nil {
		t.Fatal(err)
	}
}
