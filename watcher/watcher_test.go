package watcher

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

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

// none asserts no batch arrives within d.
func none(t *testing.T, w *Watcher, d time.Duration) {
	t.Helper()
	select {
	case b := <-w.Events():
		t.Fatalf("unexpected batch of %d paths: %v", len(b.Paths), head(b.Paths))
	case <-time.After(d):
	}
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
	w := start(t, Options{Paths: []string{dir}, QuietPeriod: 200 * time.Millisecond, MaxWait: 10 * time.Second})
	for i := range 300 {
		write(t, filepath.Join(dir, fmt.Sprintf("f%03d.yaml", i)), "x: 1\n")
	}
	b := next(t, w, 5*time.Second)
	if len(b.Paths) != 300 {
		t.Fatalf("batch has %d paths, want 300: %v", len(b.Paths), head(b.Paths))
	}
	if b.First.IsZero() || b.Last.Before(b.First) {
		t.Fatalf("bad times: first %v last %v", b.First, b.Last)
	}
	none(t, w, 600*time.Millisecond)
}

func TestWatchNewSubfolderFilesAreSeen(t *testing.T) {
	dir := t.TempDir()
	w := start(t, Options{Paths: []string{dir}, QuietPeriod: 50 * time.Millisecond})
	// Like `mkdir -p a/b && touch a/b/c`: the file exists before any watch
	// on a/b can be in place.
	file := filepath.Join(dir, "a", "b", "c")
	write(t, file, "")
	until(t, w, file, 3*time.Second)

	// Later writes inside the new folder are watched too.
	later := filepath.Join(dir, "a", "b", "d.yaml")
	write(t, later, "y: 2\n")
	until(t, w, later, 3*time.Second)
}

func TestWatchMaxWaitDuringContinuousStream(t *testing.T) {
	dir := t.TempDir()
	w := start(t, Options{Paths: []string{dir}, QuietPeriod: 200 * time.Millisecond, MaxWait: 500 * time.Millisecond})
	stop := make(chan struct{})
	streamed := make(chan struct{})
	go func() {
		defer close(streamed)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("s%d", i%10)), []byte(fmt.Sprint(i)), 0o644)
		}
	}()
	t0 := time.Now()
	b := next(t, w, 3*time.Second)
	took := time.Since(t0)
	close(stop)
	<-streamed
	if took > 2*time.Second {
		t.Fatalf("first batch took %v during a continuous stream; max wait is 500ms", took)
	}
	if len(b.Paths) == 0 {
		t.Fatal("empty batch")
	}
	if d := b.Last.Sub(b.First); d > time.Second {
		t.Fatalf("batch spans %v, more than max wait allows", d)
	}
}

func TestWatchMissingRootAppearsLater(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "kratix", "output")
	w := start(t, Options{Paths: []string{root}, QuietPeriod: 50 * time.Millisecond, PollInterval: time.Hour})
	file := filepath.Join(root, "ns", "deploy.yaml")
	write(t, file, "kind: Deployment\n")
	until(t, w, file, 3*time.Second)

	// The root is watched recursively from now on.
	again := filepath.Join(root, "more.yaml")
	write(t, again, "a: b\n")
	until(t, w, again, 3*time.Second)

	// Removed and made again.
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	until(t, w, root, 3*time.Second)
	back := filepath.Join(root, "back.yaml")
	write(t, back, "a: b\n")
	until(t, w, back, 3*time.Second)
}

func TestWatchFileTarget(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "platform.yaml")
	write(t, file, "a: 1\n")
	w := start(t, Options{Paths: []string{file}, QuietPeriod: 50 * time.Millisecond})
	write(t, filepath.Join(dir, "unrelated.txt"), "x")
	none(t, w, 300*time.Millisecond)
	write(t, file, "a: 2\n")
	b := next(t, w, 3*time.Second)
	if !slices.Equal(b.Paths, []string{file}) {
		t.Fatalf("got %v, want only %s", b.Paths, file)
	}
	// Kubernetes swaps mounted files through a "..data" link.
	if err := os.Symlink(dir, filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	next(t, w, 3*time.Second)
}

func TestWatchBatchWaitsWhileReceiverIsBusy(t *testing.T) {
	dir := t.TempDir()
	w := start(t, Options{Paths: []string{dir}, QuietPeriod: 50 * time.Millisecond})
	write(t, filepath.Join(dir, "a"), "1")
	time.Sleep(300 * time.Millisecond) // the batch is ready; nobody receives
	write(t, filepath.Join(dir, "b"), "2")
	time.Sleep(300 * time.Millisecond)
	b := next(t, w, 3*time.Second)
	if len(b.Paths) != 2 {
		t.Fatalf("got %v, want both a and b merged", b.Paths)
	}
}

func TestWatchCloseEndsLoop(t *testing.T) {
	before := runtime.NumGoroutine()
	dir := t.TempDir()
	for i := range 3 {
		w, err := New(context.Background(), Options{Paths: []string{dir, filepath.Join(dir, "missing")}, QuietPeriod: 10 * time.Millisecond, PollInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, fmt.Sprint(i)), "x")
		time.Sleep(50 * time.Millisecond) // a batch is pending; nobody receives
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
	b := next(t, w, 3*time.Second)
	if !b.Overflow || !slices.Contains(b.Paths, dir) {
		t.Fatalf("got %+v, want an overflow batch naming %s", b, dir)
	}
	// Watching goes on.
	f := filepath.Join(dir, "after.yaml")
	write(t, f, "a")
	if b := until(t, w, f, 3*time.Second); b[len(b)-1].Overflow {
		t.Fatal("overflow flag kept after delivery")
	}
}
