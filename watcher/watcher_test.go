package watcher

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	clocktesting "k8s.io/utils/clock/testing"
)

// Tests that are about time run the loop on a fake clock and step it;
// they learn what the loop has seen from its probe instead of sleeping.
// Tests that are about which events fsnotify delivers run on the real
// clock with a short quiet period, and only ever wait for a batch they
// expect (with a generous timeout).

// probe records the loop's latest state for a test to wait on.
type probe struct {
	mu   sync.Mutex
	st   loopState
	seq  int           // how many states the loop has reported
	wake chan struct{} // closed at the next report
}

func newProbe() *probe { return &probe{wake: make(chan struct{})} }

func (p *probe) report(st loopState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.st, p.seq = st, p.seq+1
	close(p.wake)
	p.wake = make(chan struct{})
}

// await waits for a state, reported after report number after, for which
// ok holds. It returns the state, its number, and a channel closed at the
// loop's next report.
func (p *probe) await(t *testing.T, after int, what string, ok func(loopState) bool) (loopState, int, <-chan struct{}) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		p.mu.Lock()
		st, seq, wake := p.st, p.seq, p.wake
		p.mu.Unlock()
		if seq > after && ok(st) {
			return st, seq, wake
		}
		select {
		case <-wake:
		case <-timeout:
			t.Fatalf("the loop never got to %s; its last state: %+v", what, st)
		}
	}
}

// wait waits until the loop's state satisfies ok.
func (p *probe) wait(t *testing.T, what string, ok func(loopState) bool) loopState {
	t.Helper()
	st, _, _ := p.await(t, 0, what, ok)
	return st
}

// fake is a watcher on a fake clock, with a probe on its loop.
type fake struct {
	*probe
	w   *Watcher
	clk *clocktesting.FakeClock
	t0  time.Time // the clock's time at the start
	// received counts the batches the test has received: a state the loop
	// reported before it saw the last of them delivered is out of date.
	received int
}

func startFake(t *testing.T, opts Options) *fake {
	t.Helper()
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	f := &fake{probe: newProbe(), clk: clocktesting.NewFakeClock(t0), t0: t0}
	opts.Clock = f.clk
	w, err := newWatcher(t.Context(), opts, f.report)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	f.w = w
	return f
}

// current waits for a state, reported after every batch received so far
// was delivered, for which ok holds.
func (f *fake) current(t *testing.T, what string, ok func(loopState) bool) loopState {
	t.Helper()
	return f.wait(t, what, func(s loopState) bool { return s.delivered == f.received && ok(s) })
}

// pending waits until the loop has noted n paths.
func (f *fake) pending(t *testing.T, n int) loopState {
	t.Helper()
	return f.current(t, fmt.Sprintf("%d pending paths", n), func(s loopState) bool { return s.pending == n })
}

// receive receives the batch the loop has ready.
func (f *fake) receive(t *testing.T) Batch {
	t.Helper()
	b := next(t, f.w, 10*time.Second)
	f.received++
	return b
}

// fire steps the clock to each deadline the loop arms until a batch is
// ready, and receives it. An event still on its way from fsnotify may
// re-arm the timer, or put a ready batch back to waiting, at any moment;
// the loop reports its state after each, and fire follows.
func (f *fake) fire(t *testing.T) Batch {
	t.Helper()
	seen := 0
	for range 1000 {
		st, seq, changed := f.await(t, seen, "a ready batch or an armed timer", func(s loopState) bool {
			return s.delivered == f.received && (s.ready || s.armed)
		})
		seen = seq
		if !st.ready {
			f.clk.Step(max(0, st.deadline.Sub(f.clk.Now())))
			continue
		}
		select {
		case b, ok := <-f.w.Events():
			if !ok {
				t.Fatal("events closed")
			}
			f.received++
			return b
		case <-changed: // not delivered: the loop saw something first
		case <-time.After(10 * time.Second):
			t.Fatalf("a ready batch was neither delivered nor changed: %+v", st)
		}
	}
	t.Fatal("the loop kept re-arming its timer")
	return Batch{}
}

// settled asserts that, once the batches received are delivered, the loop
// has nothing pending and no timer set, on its own account and on the
// clock's: no further batch can come until something changes on disk.
func (f *fake) settled(t *testing.T) {
	t.Helper()
	st := f.current(t, "the batches delivered", func(loopState) bool { return true })
	if st.pending != 0 || st.ready || st.armed || f.clk.HasWaiters() {
		t.Fatalf("after %d batches: %+v, clock waiters %d; want nothing pending or armed", f.received, st, f.clk.Waiters())
	}
}

// touch makes an empty file: one Create event, so the loop's count of
// pending paths says when it has seen every file written so far.
func touch(t *testing.T, path string) {
	t.Helper()
	write(t, path, "")
}

func start(t *testing.T, opts Options) *Watcher {
	t.Helper()
	w, err := New(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// next waits for one batch.
func next(t *testing.T, w *Watcher, timeout time.Duration) Batch {
	t.Helper()
	select {
	case b, ok := <-w.Events():
		if !ok {
			t.Fatal("events closed")
		}
		return b
	case <-time.After(timeout):
		t.Fatalf("no batch within %v", timeout)
	}
	return Batch{}
}

// until collects batches until one holds want.
func until(t *testing.T, w *Watcher, want string, timeout time.Duration) []Batch {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var got []Batch
	for time.Now().Before(deadline) {
		select {
		case b := <-w.Events():
			got = append(got, b)
			if slices.Contains(b.Paths, want) {
				return got
			}
		case <-time.After(time.Until(deadline)):
		}
	}
	t.Fatalf("%s not reported within %v; batches: %v", want, timeout, got)
	return nil
}

func head(p []string) []string {
	if len(p) > 5 {
		return p[:5]
	}
	return p
}

func TestWatchDebounceMergesBurst(t *testing.T) {
	dir := t.TempDir()
	const quiet = 200 * time.Millisecond
	f := startFake(t, Options{Paths: []string{dir}, QuietPeriod: quiet, MaxWait: 10 * time.Second})
	// 300 files in six bursts, half a quiet period apart: 2.5 quiet
	// periods from the first write to the last, never quiet for one.
	for burst := range 6 {
		if burst > 0 {
			f.clk.Step(quiet / 2)
			if !f.clk.HasWaiters() {
				t.Fatalf("the quiet timer fired %v after the last event", quiet/2)
			}
		}
		for i := range 50 {
			touch(t, filepath.Join(dir, fmt.Sprintf("f%03d.yaml", 50*burst+i)))
		}
		st := f.pending(t, 50*(burst+1))
		// The quiet period counts from the latest event.
		if want := f.clk.Now().Add(quiet); !st.armed || !st.deadline.Equal(want) {
			t.Fatalf("after burst %d the timer is armed %v for %v, want %v", burst, st.armed, st.deadline, want)
		}
	}
	b := f.fire(t)
	if len(b.Paths) != 300 {
		t.Fatalf("batch has %d paths, want 300: %v", len(b.Paths), head(b.Paths))
	}
	last := f.t0.Add(5 * quiet / 2)
	if !b.First.Equal(f.t0) || !b.Last.Equal(last) || !f.clk.Now().Equal(last.Add(quiet)) {
		t.Fatalf("first %v, last %v, delivered at %v; want %v, %v, one quiet period later", b.First, b.Last, f.clk.Now(), f.t0, last)
	}
	f.settled(t)
}

func TestWatchNewSubfolderFilesAreSeen(t *testing.T) {
	dir := t.TempDir()
	w := start(t, Options{Paths: []string{dir}, QuietPeriod: 50 * time.Millisecond})
	// Like `mkdir -p a/b && touch a/b/c`: the file exists before any watch
	// on a/b can be in place.
	file := filepath.Join(dir, "a", "b", "c")
	write(t, file, "")
	until(t, w, file, 10*time.Second)

	// Later writes inside the new folder are watched too.
	later := filepath.Join(dir, "a", "b", "d.yaml")
	write(t, later, "y: 2\n")
	until(t, w, later, 10*time.Second)
}

func TestWatchMaxWaitDuringContinuousStream(t *testing.T) {
	dir := t.TempDir()
	const quiet, maxWait, every = 200 * time.Millisecond, 500 * time.Millisecond, 100 * time.Millisecond
	f := startFake(t, Options{Paths: []string{dir}, QuietPeriod: quiet, MaxWait: maxWait})
	// A writer that never pauses for a quiet period: one file each 100ms.
	for i := range 5 {
		touch(t, filepath.Join(dir, fmt.Sprintf("s%d", i)))
		st := f.pending(t, i+1)
		want := f.clk.Now().Add(min(quiet, f.t0.Add(maxWait).Sub(f.clk.Now())))
		if !st.armed || !st.deadline.Equal(want) || st.ready {
			t.Fatalf("after write %d: %+v, want the timer armed for %v", i, st, want)
		}
		f.clk.Step(every)
	}
	// The last step reached the max wait: the batch is ready, though the
	// writer was never quiet for a quiet period.
	f.current(t, "a ready batch", func(s loopState) bool { return s.ready })
	b := f.receive(t)
	if len(b.Paths) != 5 || !b.First.Equal(f.t0) || !b.Last.Equal(f.t0.Add(4*every)) {
		t.Fatalf("got %d paths, first %v, last %v; want 5, %v, %v", len(b.Paths), b.First, b.Last, f.t0, f.t0.Add(4*every))
	}
	if waited := f.clk.Since(b.First); waited != maxWait {
		t.Fatalf("delivered %v after the first event, want the max wait %v", waited, maxWait)
	}
	f.settled(t)
}

func TestWatchMissingRootAppearsLater(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "kratix", "output")
	w := start(t, Options{Paths: []string{root}, QuietPeriod: 50 * time.Millisecond, PollInterval: time.Hour})
	file := filepath.Join(root, "ns", "deploy.yaml")
	write(t, file, "kind: Deployment\n")
	until(t, w, file, 10*time.Second)

	// The root is watched recursively from now on.
	again := filepath.Join(root, "more.yaml")
	write(t, again, "a: b\n")
	until(t, w, again, 10*time.Second)

	// Removed and made again.
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	until(t, w, root, 10*time.Second)
	back := filepath.Join(root, "back.yaml")
	write(t, back, "a: b\n")
	until(t, w, back, 10*time.Second)
}

func TestWatchFileTarget(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "platform.yaml")
	write(t, file, "a: 1\n")
	f := startFake(t, Options{Paths: []string{file}, QuietPeriod: 50 * time.Millisecond})
	// The events of one folder come in order: once the loop has seen the
	// file's, it has seen (and, if right, ignored) unrelated.txt's.
	write(t, filepath.Join(dir, "unrelated.txt"), "x")
	write(t, file, "a: 2\n")
	f.pending(t, 1)
	b := f.fire(t)
	if !slices.Equal(b.Paths, []string{file}) {
		t.Fatalf("got %v, want only %s", b.Paths, file)
	}
	// Kubernetes swaps mounted files through a "..data" link.
	link := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if b := f.fire(t); !slices.Contains(b.Paths, link) {
		t.Fatalf("got %v, want %s", b.Paths, link)
	}
}

func TestWatchBatchWaitsWhileReceiverIsBusy(t *testing.T) {
	dir := t.TempDir()
	const quiet, maxWait = 50 * time.Millisecond, time.Second
	f := startFake(t, Options{Paths: []string{dir}, QuietPeriod: quiet, MaxWait: maxWait})
	touch(t, filepath.Join(dir, "a"))
	f.pending(t, 1)
	f.clk.Step(quiet)
	f.current(t, "a ready batch", func(s loopState) bool { return s.ready })
	// Nobody receives, well past the max wait: the batch waits, and no
	// timer is left to fire.
	f.clk.Step(2 * maxWait)
	if st := f.current(t, "a ready batch", func(s loopState) bool { return s.ready }); st.armed || f.clk.HasWaiters() {
		t.Fatalf("a timer is armed while the batch waits: %+v", st)
	}
	// A later event goes into the same batch, which goes back to waiting.
	// Its max wait still counts from its first event, which is long past:
	// the batch is due at once, without another quiet period.
	touch(t, filepath.Join(dir, "b"))
	st := f.pending(t, 2)
	if st.ready || !st.armed || st.deadline.After(f.clk.Now()) {
		t.Fatalf("after a later event: %+v at %v; want the batch waiting again and due now", st, f.clk.Now())
	}
	b := f.fire(t)
	if !slices.Equal(b.Paths, []string{filepath.Join(dir, "a"), filepath.Join(dir, "b")}) {
		t.Fatalf("got %v, want both a and b merged", b.Paths)
	}
	if !b.First.Equal(f.t0) || !b.Last.Equal(f.t0.Add(quiet+2*maxWait)) {
		t.Fatalf("first %v, last %v", b.First, b.Last)
	}
	f.settled(t)
}

func TestWatchPollFindsMissingPathOnTheClock(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "output")
	f := startFake(t, Options{Paths: []string{root}, QuietPeriod: 50 * time.Millisecond, PollInterval: time.Hour})
	f.wait(t, "polling for the missing root", func(s loopState) bool { return s.polling })
	// Watching the parent can fail (a watch limit, say); the poll is the
	// fallback. Drop that watch, so only the poll can see the root appear.
	if err := f.w.fsw.Remove(dir); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "deploy.yaml")
	touch(t, file)
	f.clk.Step(time.Hour)
	f.pending(t, 2)
	b := f.fire(t)
	if !slices.Equal(b.Paths, []string{root, file}) {
		t.Fatalf("got %v, want %s and %s", b.Paths, root, file)
	}
	if st := f.current(t, "the batch delivered", func(loopState) bool { return true }); st.polling {
		t.Fatal("still polling once every path exists")
	}
}

func TestWatchCloseEndsLoop(t *testing.T) {
	before := runtime.NumGoroutine()
	dir := t.TempDir()
	for i := range 3 {
		// The real clock: its timer and ticker end with the loop too.
		p := newProbe()
		w, err := newWatcher(context.Background(), Options{Paths: []string{dir, filepath.Join(dir, "missing")}, QuietPeriod: 10 * time.Millisecond, PollInterval: 10 * time.Millisecond}, p.report)
		if err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, fmt.Sprint(i)), "x")
		p.wait(t, "a ready batch", func(s loopState) bool { return s.ready }) // nobody receives
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-w.Done():
		default:
			t.Fatal("Close returned before the loop ended")
		}
		if _, ok := <-w.Events(); ok {
			t.Fatal("Events not closed after Close")
		}
		w.Close() // twice is fine
	}
	// Goroutines from fsnotify and the loop are gone.
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines after Close, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

func TestWatchStopsOnContextCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	w, err := New(ctx, Options{Paths: []string{t.TempDir()}, QuietPeriod: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-w.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("loop still running after cancel")
	}
	if w.Err() != nil {
		t.Fatalf("Err after cancel: %v", w.Err())
	}
	w.Close()
}

func TestWatchOverflowReportsEverything(t *testing.T) {
	dir := t.TempDir()
	w := start(t, Options{Paths: []string{dir}, QuietPeriod: 50 * time.Millisecond})
	w.fsw.Errors <- fsnotify.ErrEventOverflow // as the kernel's queue overflowing
	b := next(t, w, 10*time.Second)
	if !b.Overflow || !slices.Contains(b.Paths, dir) {
		t.Fatalf("got %+v, want an overflow batch naming %s", b, dir)
	}
	// Watching goes on.
	f := filepath.Join(dir, "after.yaml")
	write(t, f, "a")
	if b := until(t, w, f, 10*time.Second); b[len(b)-1].Overflow {
		t.Fatal("overflow flag kept after delivery")
	}
}
