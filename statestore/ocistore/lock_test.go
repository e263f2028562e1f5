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

	"github.com/render-dev/render/internal/testenv"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/ocistore"
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

// cutShort passes every request to the registry, and fails those cut picks
// once the registry has handled them, as a render cancelled while the
// answer was on its way sees them.
type cutShort struct {
	cut func(*http.Request) bool
}

func (rt cutShort) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || !rt.cut(req) {
		return resp, err
	}
	resp.Body.Close()
	return nil, context.Canceled
}

// A write cut short while it tags its place in the writers' queue leaves
// no lock tag behind: other writers do not wait out its lease.
func TestLockCutShortLeavesNoTag(t *testing.T) {
	r := testenv.Registry(t)
	cfg := config(r, repoName("cut"))
	cfg.Transport = cutShort{func(req *http.Request) bool {
		return req.Method == http.MethodPut && strings.Contains(req.URL.Path, "/manifests/lock-c-")
	}}
	u := statestore.Update{Workload: "w/a", Destinations: []string{"d1"}, Files: map[string][]byte{"d1/a.yaml": []byte("a\n")},
		Record: &statestore.Record{Type: "promise", Promise: "p", Pipeline: "a"}}
	if _, err := open(t, cfg).Apply(context.Background(), u); !errors.Is(err, context.Canceled) {
		t.Fatalf("a write cut short while it queued: %v, want context.Canceled", err)
	}
	for _, tag := range r.Tags(t, cfg.Registry+"/"+cfg.Repository) {
		if strings.HasPrefix(tag, "lock-") {
			t.Errorf("lock tag %s stays after the write was cut short", tag)
		}
	}
}
