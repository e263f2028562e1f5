// Package watcher tells its user, once changes have settled, which paths
// changed under a set of folders and files. One goroutine runs an fsnotify
// loop that watches folders recursively (including folders created later),
// merges events per path, and waits for a quiet period, bounded by a
// maximum wait, before it delivers one Batch.
//
// A path that does not exist yet is watched from its nearest existing
// parent (and checked by a cheap poll as a fallback) until it appears; a
// workflow's output folder may be created after the watch starts.
//
// Every decision the loop makes in time (the quiet period, the maximum
// wait, the poll, a Batch's First and Last) reads Options.Clock, so a test
// can pass a fake clock and step it instead of sleeping.
//
// Loop is watch mode's control loop on top of a Watcher: a render at
// start and after each settled change, one at a time, retries with
// backoff, and a last render on the first signal. It knows nothing of what
// a render does: its user passes the render and is told each result.
package watcher

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/utils/clock"
)

// Options configure a Watcher.
type Options struct {
	// Paths to watch. A folder is watched with everything below it. A file
	// is watched through its folder, and only its own events are reported,
	// plus those of entries whose names start with ".." (the way Kubernetes
	// swaps a mounted ConfigMap or Secret). A path that does not exist yet
	// is watched from its nearest existing parent until it appears.
	Paths []string
	// QuietPeriod is how long no event must arrive before a batch is
	// delivered. Longer merges slower writers into one batch; shorter
	// reacts sooner but may split one burst of writes into several batches.
	QuietPeriod time.Duration
	// MaxWait bounds how long a batch waits for quiet, counted from its
	// first event, so a writer that never pauses still gets batches. It
	// defaults to 20 quiet periods and is never shorter than QuietPeriod.
	MaxWait time.Duration
	// PollInterval is how often paths that do not exist are looked for, in
	// case watching their parent is not possible (default 1s). Nothing is
	// polled while every path exists.
	PollInterval time.Duration
	// Log receives warnings (a watch that could not be added, an event
	// queue overflow) and debug lines; nil discards them.
	Log *slog.Logger
	// Clock is what the loop reads the time from and sets its timers
	// with: the quiet period, the maximum wait, the poll, and a Batch's
	// First and Last. Nil means the real clock; a test passes a fake one
	// (k8s.io/utils/clock/testing) and steps it instead of sleeping.
	Clock clock.WithTicker
}

// Batch is one notification: the paths that changed since the previous
// batch, merged and sorted.
type Batch struct {
	// Paths are absolute, cleaned and unique. A folder that appeared is
	// listed with every entry found inside it.
	Paths []string
	// First and Last are when the first and the last event of the batch
	// arrived.
	First, Last time.Time
	// Overflow is true when the kernel dropped events; Paths then holds the
	// watched paths themselves, and anything below them may have changed.
	Overflow bool
}

// Watcher watches paths and delivers Batches on Events until its context
// is cancelled or Close is called.
type Watcher struct {
	opts    Options
	fsw     *fsnotify.Watcher
	log     *slog.Logger
	clock   clock.WithTicker
	out     chan Batch
	cancel  context.CancelFunc
	done    chan struct{}
	targets []*target
	anchors map[string]bool // folders watched only to see a missing target appear

	// Pending batch, owned by the loop goroutine.
	pending  map[string]struct{}
	first    time.Time
	last     time.Time
	overflow bool
	// dirtyFlag is set by note and cleared by changed, so the loop re-arms
	// its timer once per step however many paths a step noted.
	dirtyFlag bool
	warned    map[string]bool
	// probe, when set (by tests), is told the loop's state each time the
	// loop waits for something to happen.
	probe func(loopState)

	errMu sync.Mutex
	err   error
}

// loopState is what the loop has seen and armed while it waits. Tests
// observe it to step a fake clock at the right moment and to know that
// nothing is pending, rather than sleeping.
type loopState struct {
	pending     int       // paths noted and not yet delivered
	first, last time.Time // of the pending paths
	armed       bool      // the quiet timer is set...
	deadline    time.Time // ...to fire at this time
	ready       bool      // a batch waits for a receiver
	polling     bool      // missing paths are polled for
	delivered   int       // batches delivered so far
}

// target is one watched path.
type target struct {
	path    string
	present bool
	dir     bool
}

// New starts watching. Every existing path is watched when New returns, so
// changes made afterwards are seen. The loop stops when ctx is cancelled
// or Close is called.
func New(ctx context.Context, opts Options) (*Watcher, error) {
	return newWatcher(ctx, opts, nil)
}

// newWatcher is New with a probe for tests.
func newWatcher(ctx context.Context, opts Options, probe func(loopState)) (*Watcher, error) {
	if opts.QuietPeriod <= 0 {
		return nil, errors.New("watcher: QuietPeriod must be positive")
	}
	if opts.MaxWait == 0 {
		opts.MaxWait = 20 * opts.QuietPeriod
	}
	opts.MaxWait = max(opts.MaxWait, opts.QuietPeriod)
	if opts.PollInterval <= 0 {
		opts.PollInterval = time.Second
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	if len(opts.Paths) == 0 {
		return nil, errors.New("watcher: no paths to watch")
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watcher: %w", err)
	}
	w := &Watcher{
		opts: opts, fsw: fsw, log: log, clock: clk, probe: probe,
		out:     make(chan Batch),
		done:    make(chan struct{}),
		anchors: map[string]bool{},
		pending: map[string]struct{}{},
		warned:  map[string]bool{},
	}
	seen := map[string]bool{}
	for _, p := range opts.Paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			fsw.Close()
			return nil, fmt.Errorf("watcher: %s: %w", p, err)
		}
		if !seen[abs] {
			seen[abs] = true
			w.targets = append(w.targets, &target{path: abs})
		}
	}
	// Watch what exists now, without reporting it.
	w.resolve(false)
	w.pending = map[string]struct{}{}
	ctx, w.cancel = context.WithCancel(ctx)
	go w.loop(ctx)
	return w, nil
}

// Events delivers one Batch each time changes settle. It is closed when
// the loop ends. While nobody receives, new events keep merging into the
// waiting batch.
func (w *Watcher) Events() <-chan Batch { return w.out }

// Done is closed when the loop has ended.
func (w *Watcher) Done() <-chan struct{} { return w.done }

// Err returns why the loop ended on its own (the event source failed), or
// nil after a cancellation or Close.
func (w *Watcher) Err() error {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	return w.err
}

// Close stops the loop and waits for it to end. It is safe to call more
// than once; events not yet delivered are dropped.
func (w *Watcher) Close() error {
	w.cancel()
	<-w.done
	return nil
}

func (w *Watcher) loop(ctx context.Context) {
	defer close(w.done)
	defer close(w.out)
	defer w.fsw.Close()

	timer := w.clock.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var timerC <-chan time.Time
	var timerAt time.Time
	var poll clock.Ticker
	var pollC <-chan time.Time
	defer func() {
		if poll != nil {
			poll.Stop()
		}
	}()

	var ready *Batch
	delivered := 0
	for {
		// Arm or disarm the timer and the poll after every change of state.
		if w.changed() {
			ready = nil
			if !timer.Stop() {
				// A timer that fired unseen must not count for this wait.
				// (Go's timers drop such a value on Reset; a fake clock's
				// keep it, and would block its next step on it.)
				select {
				case <-timer.C():
				default:
				}
			}
			now := w.clock.Now()
			wait := min(w.opts.QuietPeriod, w.first.Add(w.opts.MaxWait).Sub(now))
			timer.Reset(wait)
			timerC, timerAt = timer.C(), now.Add(wait)
		}
		switch {
		case w.missing() && poll == nil:
			poll = w.clock.NewTicker(w.opts.PollInterval)
			pollC = poll.C()
		case !w.missing() && poll != nil:
			poll.Stop()
			poll, pollC = nil, nil
		}
		var out chan<- Batch
		var batch Batch
		if ready != nil {
			out, batch = w.out, *ready
		}
		if w.probe != nil {
			w.probe(loopState{
				pending: len(w.pending), first: w.first, last: w.last,
				armed: timerC != nil, deadline: timerAt, ready: ready != nil,
				polling: poll != nil, delivered: delivered,
			})
		}

		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				w.setErr(errors.New("watcher: event source closed"))
				return
			}
			w.handle(ev)
		case err, ok := <-w.fsw.Errors:
			if !ok {
				w.setErr(errors.New("watcher: event source closed"))
				return
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				w.log.Warn("file events were lost (queue overflow); treating every watched path as changed")
				w.overflow = true
				for _, t := range w.targets {
					w.note(t.path)
					if t.present && t.dir {
						w.addTree(t.path, false)
					}
				}
				w.resolve(true)
				continue
			}
			w.log.Warn("watching files", "error", err)
		case <-timerC:
			timerC = nil
			if len(w.pending) > 0 {
				ready = w.take()
			}
		case <-pollC:
			w.resolve(true)
		case out <- batch:
			ready = nil
			delivered++
			clear(w.pending)
			w.overflow = false
			w.log.Debug("changes settled", "paths", len(batch.Paths), "waited", batch.Last.Sub(batch.First).Round(time.Millisecond))
		}
	}
}

func (w *Watcher) setErr(err error) {
	w.errMu.Lock()
	w.err = err
	w.errMu.Unlock()
}

// changed reports (once) whether paths were noted since the last call.
func (w *Watcher) changed() bool {
	d := w.dirtyFlag
	w.dirtyFlag = false
	return d
}

// take copies the pending paths into a Batch; they stay pending until it
// is delivered.
func (w *Watcher) take() *Batch {
	b := &Batch{First: w.first, Last: w.last, Overflow: w.overflow}
	b.Paths = make([]string, 0, len(w.pending))
	for p := range w.pending {
		b.Paths = append(b.Paths, p)
	}
	slices.Sort(b.Paths)
	return b
}

// note records a changed path. Paths stay pending until a batch is
// delivered; a batch that is ready but not yet received goes back to
// waiting for quiet (its MaxWait still counts from its first event).
func (w *Watcher) note(p string) {
	now := w.clock.Now()
	if len(w.pending) == 0 {
		w.first = now
	}
	w.last = now
	w.pending[p] = struct{}{}
	w.dirtyFlag = true
}

func (w *Watcher) missing() bool {
	for _, t := range w.targets {
		if !t.present {
			return true
		}
	}
	return false
}

// handle turns one fsnotify event into noted paths and new watches.
func (w *Watcher) handle(ev fsnotify.Event) {
	p := filepath.Clean(ev.Name)
	// Chmod alone is noise (and on Linux also accompanies a removal, which
	// comes with its own Remove event).
	if ev.Op == fsnotify.Chmod {
		return
	}
	reported := false
	needResolve := false
	for _, t := range w.targets {
		switch {
		case !t.present:
			if p == t.path || within(t.path, p) {
				needResolve = true
			}
		case t.dir:
			if p == t.path || within(p, t.path) {
				if p == t.path && ev.Has(fsnotify.Remove|fsnotify.Rename) {
					needResolve = true
				}
				reported = true
			}
		default:
			if filepath.Dir(p) == filepath.Dir(t.path) {
				base := filepath.Base(p)
				if p == t.path || strings.HasPrefix(base, "..") {
					reported = true
				}
				if p == t.path && ev.Has(fsnotify.Remove|fsnotify.Rename) {
					needResolve = true
				}
			}
		}
	}
	if reported {
		w.note(p)
		if ev.Has(fsnotify.Create) && w.inDirTarget(p) {
			if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
				w.addTree(p, true)
			}
		}
	}
	if needResolve {
		w.resolve(true)
	}
}

// inDirTarget reports whether p is below a present folder target.
func (w *Watcher) inDirTarget(p string) bool {
	for _, t := range w.targets {
		if t.present && t.dir && within(p, t.path) {
			return true
		}
	}
	return false
}

// resolve brings every target's watches up to date with what exists: a
// target that appeared is watched (and, when report is set, noted with
// everything in it), one that vanished is watched from its parent.
func (w *Watcher) resolve(report bool) {
	for _, t := range w.targets {
		for range 8 { // a path racing between absent and present settles quickly
			fi, err := os.Stat(t.path)
			exists := err == nil
			if exists {
				if t.present && t.dir == fi.IsDir() {
					break
				}
				t.present, t.dir = true, fi.IsDir()
				if report {
					w.note(t.path)
				}
				if t.dir {
					w.addTree(t.path, report)
				} else {
					w.add(filepath.Dir(t.path))
				}
				break
			}
			if t.present {
				t.present = false
				if report {
					w.note(t.path)
				}
			}
			// Watch the nearest existing parent, then look again: the
			// target may have appeared before that watch was in place.
			anchor := nearestExisting(t.path)
			if !w.anchors[anchor] && w.add(anchor) {
				w.anchors[anchor] = true
			}
			if _, err := os.Stat(t.path); err != nil {
				break
			}
		}
	}
	w.pruneAnchors()
}

// pruneAnchors drops parent watches no missing target needs any more,
// unless the folder is also watched for a present target.
func (w *Watcher) pruneAnchors() {
	for a := range w.anchors {
		needed := false
		for _, t := range w.targets {
			if !t.present && within(t.path, a) {
				needed = true
			}
			if t.present && t.dir && (a == t.path || within(a, t.path)) {
				needed = true
			}
			if t.present && !t.dir && a == filepath.Dir(t.path) {
				needed = true
			}
		}
		if !needed {
			_ = w.fsw.Remove(a)
			delete(w.anchors, a)
		}
	}
}

// addTree watches dir and every folder below it; with report, every entry
// found is noted (files created in a new folder before its watch existed
// would otherwise be missed).
func (w *Watcher) addTree(dir string, report bool) {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir {
				return err
			}
			return nil // vanished meanwhile: its removal has its own event
		}
		if d.IsDir() {
			// Watch first, then list: WalkDir reads the folder after this.
			if !w.add(p) {
				return fs.SkipDir
			}
		}
		if report && p != dir {
			w.note(p)
		}
		return nil
	})
}

// add watches one folder (not recursively); it logs a failure once.
func (w *Watcher) add(dir string) bool {
	err := w.fsw.Add(dir)
	if err == nil {
		return true
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if !w.warned[dir] {
		w.warned[dir] = true
		msg := "cannot watch folder; its changes will be missed"
		if errors.Is(err, syscall.ENOSPC) {
			msg += " (inotify watch limit reached: raise fs.inotify.max_user_watches)"
		}
		w.log.Warn(msg, "folder", dir, "error", err)
	}
	return false
}

// within reports whether p is strictly below dir.
func within(p, dir string) bool {
	if dir == string(filepath.Separator) {
		return p != dir && strings.HasPrefix(p, dir)
	}
	return strings.HasPrefix(p, dir+string(filepath.Separator))
}

// nearestExisting returns the closest existing folder at or above p.
func nearestExisting(p string) string {
	for {
		parent := filepath.Dir(p)
		if fi, err := os.Stat(parent); err == nil && fi.IsDir() {
			return parent
		}
		if parent == p {
			return p
		}
		p = parent
	}
}
