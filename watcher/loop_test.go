package watcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"log/slog"

	clocktesting "k8s.io/utils/clock/testing"
)

// The loop's tests drive it with a render the test answers: each render
// is a call the test receives, and returns what the test says. Results
// are named r1, r2, ...; "fail" asks for a retry, "bad" for a wait.

// call is one render the loop started.
type call struct {
	ctx    context.Context
	answer chan string
}

// seen is one result the loop was told of.
type seen struct {
	r    string
	last bool
}

// lines is a log the test can search, safe for the loop to write.
type lines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type loopRun struct {
	dir      string
	calls    chan call
	rendered chan seen
	sigs     chan os.Signal
	stop     chan error
	clk      *clocktesting.FakeClock
	logs     *lines
	cancel   context.CancelFunc
	result   chan loopResult
	// abandoned is what Loop.Abandoned was given.
	abandoned chan (<-chan struct{})
	stopping  chan struct{}
}

type loopResult struct {
	last string
	err  error
}

// startLoop runs a Loop on a temporary folder; ready, when set, is its
// Ready.
func startLoop(t *testing.T, ready func(dir string, last bool) bool) *loopRun {
	t.Helper()
	r := &loopRun{
		dir:       t.TempDir(),
		calls:     make(chan call),
		rendered:  make(chan seen, 100),
		sigs:      make(chan os.Signal, 2),
		stop:      make(chan error, 1),
		clk:       clocktesting.NewFakeClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)),
		logs:      &lines{},
		result:    make(chan loopResult, 1),
		abandoned: make(chan (<-chan struct{}), 1),
		stopping:  make(chan struct{}),
	}
	l := &Loop[string]{
		Watch: Options{Paths: []string{r.dir}, QuietPeriod: 50 * time.Millisecond},
		Render: func(ctx context.Context) string {
			c := call{ctx: ctx, answer: make(chan string)}
			r.calls <- c
			select {
			case a := <-c.answer:
				return a
			case <-ctx.Done():
				return "aborted"
			}
		},
		Rendered: func(res string, last bool) Next {
			r.rendered <- seen{res, last}
			switch res {
			case "fail":
				return Retry
			case "bad":
				return WaitForChange
			}
			return Idle
		},
		Stopping:   func() { close(r.stopping) },
		Signals:    r.sigs,
		Stop:       r.stop,
		BackoffMin: time.Second,
		BackoffMax: 4 * time.Second,
		Clock:      r.clk,
		Log:        slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Abandoned:  func(c <-chan struct{}) { r.abandoned <- c },
	}
	if ready != nil {
		l.Ready = func(last bool) (bool, []any) { return ready(r.dir, last), nil }
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		last, err := l.Run(ctx)
		r.result <- loopResult{last, err}
	}()
	t.Cleanup(func() {
		cancel()
		// Answer whatever render is still asked for, until Run returns.
		for {
			select {
			case c := <-r.calls:
				close(c.answer)
			case <-r.result:
				return
			case <-time.After(20 * time.Second):
				t.Error("the loop did not end after its context was cancelled")
				return
			}
		}
	})
	return r
}

// render waits for the loop to start a render.
func (r *loopRun) render(t *testing.T) call {
	t.Helper()
	select {
	case c := <-r.calls:
		return c
	case <-time.After(10 * time.Second):
		t.Fatalf("no render started; logs:\n%s", r.logs)
	}
	return call{}
}

// answer ends render c with res, and waits until the loop was told.
func (r *loopRun) answer(t *testing.T, c call, res string) {
	t.Helper()
	c.answer <- res
	select {
	case s := <-r.rendered:
		if s.r != res {
			t.Fatalf("the loop was told %q, want %q", s.r, res)
		}
		if s.last {
			t.Fatalf("the render answered %q was taken as the last one", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the loop was not told of %q", res)
	}
}

// last ends render c, which must be the last, with res; Run must return it.
func (r *loopRun) last(t *testing.T, c call, res string) loopResult {
	t.Helper()
	c.answer <- res
	select {
	case s := <-r.rendered:
		if s.r != res || !s.last {
			t.Fatalf("the loop was told %+v, want %q as the last render", s, res)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the loop was not told of %q", res)
	}
	return r.end(t)
}

// end waits for Run to return.
func (r *loopRun) end(t *testing.T) loopResult {
	t.Helper()
	select {
	case res := <-r.result:
		r.result <- res // for the cleanup
		return res
	case <-time.After(10 * time.Second):
		t.Fatalf("Run did not return; logs:\n%s", r.logs)
	}
	return loopResult{}
}

// put writes the file name into the watched folder in one event (a file
// written elsewhere, renamed in), so it makes exactly one batch.
func (r *loopRun) put(t *testing.T, name string) {
	t.Helper()
	tmp := filepath.Join(t.TempDir(), name)
	write(t, tmp, name)
	if err := os.Rename(tmp, filepath.Join(r.dir, name)); err != nil {
		t.Fatal(err)
	}
}

// waitLog waits for a log line holding s, n times in all.
func (r *loopRun) waitLog(t *testing.T, s string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(r.logs.String(), s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%q not logged %d times; logs:\n%s", s, n, r.logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitTimer waits until the backoff's timer is set.
func (r *loopRun) waitTimer(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !r.clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatalf("no retry was set; logs:\n%s", r.logs)
		}
		time.Sleep(time.Millisecond)
	}
}

// A render at start, one per settled change, and one last render on the
// first signal, whose result Run returns.
func TestLoopRendersOnChangesAndLastOnSignal(t *testing.T) {
	r := startLoop(t, nil)
	r.answer(t, r.render(t), "r1")
	r.put(t, "a.yaml")
	r.answer(t, r.render(t), "r2")
	r.sigs <- syscall.SIGTERM
	if res := r.last(t, r.render(t), "r3"); res.last != "r3" || res.err != nil {
		t.Fatalf("Run = %+v, want r3 and no error", res)
	}
	select {
	case <-r.stopping:
	default:
		t.Error("Stopping was not called")
	}
}

// Changes while a render runs make one more render once it ends, however
// many there were, not one each.
func TestLoopChangesDuringRenderMakeOneMore(t *testing.T) {
	r := startLoop(t, nil)
	c := r.render(t)
	for i := range 3 {
		r.put(t, fmt.Sprintf("f%d.yaml", i))
		r.waitLog(t, "inputs changed", i+1) // one batch each: the loop saw them all
	}
	r.answer(t, c, "r1")
	r.answer(t, r.render(t), "r2")
	// Nothing changed since r2 began: the next render is the last one (an
	// extra render would be told r3 as not the last).
	r.sigs <- syscall.SIGTERM
	r.last(t, r.render(t), "r3")
	if n := strings.Count(r.logs.String(), "reason=\"inputs changed\""); n != 1 {
		t.Fatalf("%d renders for the changes, want 1; logs:\n%s", n, r.logs)
	}
}

// A failed render is retried after a backoff that doubles up to its
// maximum, with no change needed; any other result ends the retries, and
// a render a retry would not fix waits for a change.
func TestLoopRetriesWithBackoff(t *testing.T) {
	r := startLoop(t, nil)
	c := r.render(t)
	for _, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		r.answer(t, c, "fail")
		r.waitTimer(t)
		r.clk.Step(wait - time.Nanosecond)
		if !r.clk.HasWaiters() {
			t.Fatalf("retried before %v", wait)
		}
		r.clk.Step(time.Nanosecond)
		c = r.render(t)
	}
	r.answer(t, c, "r1")
	if r.clk.HasWaiters() {
		t.Fatal("a retry is set after a render that did not fail")
	}
	// The backoff starts over after a success.
	r.put(t, "a.yaml")
	r.answer(t, r.render(t), "fail")
	r.waitTimer(t)
	r.clk.Step(time.Second)
	r.answer(t, r.render(t), "bad")
	r.waitLog(t, "waiting for the next change", 1)
	if r.clk.HasWaiters() {
		t.Fatal("a render that a retry would not fix is retried")
	}
	r.put(t, "a.yaml")
	r.answer(t, r.render(t), "r2")
}

// A change during the backoff renders at once, and cancels the retry.
func TestLoopChangeCutsTheBackoffShort(t *testing.T) {
	r := startLoop(t, nil)
	r.answer(t, r.render(t), "fail")
	r.waitTimer(t)
	r.put(t, "a.yaml")
	c := r.render(t)
	if r.clk.HasWaiters() {
		t.Fatal("the retry is still set once a change started a render")
	}
	r.answer(t, c, "r1")
}

// A second signal cancels the render in progress and ends Run at once;
// the abandoned render is waited for through Abandoned.
func TestLoopSecondSignalAbandonsTheRender(t *testing.T) {
	r := startLoop(t, nil)
	c := r.render(t)
	r.sigs <- syscall.SIGTERM
	r.sigs <- syscall.SIGINT
	res := r.end(t)
	var ie *InterruptedError
	if !errors.As(res.err, &ie) || ie.Signal != syscall.SIGINT {
		t.Fatalf("Run = %+v, want an InterruptedError naming SIGINT", res)
	}
	select {
	case <-c.ctx.Done():
	default:
		t.Fatal("the abandoned render's context is not cancelled")
	}
	select {
	case returned := <-r.abandoned:
		select {
		case <-returned:
		case <-time.After(10 * time.Second):
			t.Fatal("the abandoned render's channel was not closed once it returned")
		}
	default:
		t.Fatal("Abandoned was not called")
	}
}

// Cancelling Run's context is a first signal: one last render.
func TestLoopContextCancelIsGraceful(t *testing.T) {
	r := startLoop(t, nil)
	r.answer(t, r.render(t), "r1")
	r.cancel()
	c := r.render(t)
	if c.ctx.Err() != nil {
		t.Fatal("the last render's context is cancelled with Run's")
	}
	if res := r.last(t, c, "r2"); res.err != nil {
		t.Fatalf("Run = %+v, want no error", res)
	}
}

// An error on Stop ends the watch as a failure: a last render, and Run
// returns the error with its result.
func TestLoopStopEndsWithLastRender(t *testing.T) {
	r := startLoop(t, nil)
	r.answer(t, r.render(t), "r1")
	boom := errors.New("the server beside the watch stopped")
	r.stop <- boom
	if res := r.last(t, r.render(t), "r2"); res.last != "r2" || !errors.Is(res.err, boom) {
		t.Fatalf("Run = %+v, want r2 and the error", res)
	}
}

// Ready holds renders back until a change makes it say yes; the last
// render runs whatever it says.
func TestLoopReadyHoldsRendersButNotTheLast(t *testing.T) {
	asked := make(chan bool, 10)
	r := startLoop(t, func(dir string, last bool) bool {
		asked <- last
		_, err := os.Stat(filepath.Join(dir, "ready"))
		return err == nil
	})
	if last := <-asked; last {
		t.Fatal("the first render is asked about as the last")
	}
	r.put(t, "not-yet")
	if last := <-asked; last {
		t.Fatal("a change is asked about as the last render")
	}
	r.put(t, "ready")
	r.answer(t, r.render(t), "r1")
	if err := os.Remove(filepath.Join(r.dir, "ready")); err != nil {
		t.Fatal(err)
	}
	r.waitLog(t, "inputs changed", 3)
	r.sigs <- syscall.SIGTERM
	r.last(t, r.render(t), "r2")
	if n := strings.Count(r.logs.String(), "msg=rendering"); n != 2 {
		t.Fatalf("%d renders started, want 2 (the ready one and the last); logs:\n%s", n, r.logs)
	}
}

// Run cannot start without a quiet period: no render, a StartError.
func TestLoopStartError(t *testing.T) {
	l := &Loop[string]{
		Watch:  Options{Paths: []string{t.TempDir()}},
		Render: func(context.Context) string { t.Error("rendered"); return "" },
	}
	_, err := l.Run(t.Context())
	var se *StartError
	if !errors.As(err, &se) {
		t.Fatalf("Run = %v, want a StartError", err)
	}
}
