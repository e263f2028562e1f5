package watcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"k8s.io/utils/clock"

	"github.com/render-dev/render/statestore/wait"
)

// Next is what a Loop does after a render that was not the last one,
// when no input changed while it ran.
type Next int

const (
	// Idle waits for the next change, saying nothing (the render did
	// what it had to).
	Idle Next = iota
	// WaitForChange waits for the next change, and logs that it does (a
	// render that a retry would not fix: bad input, a refusal).
	WaitForChange
	// Retry renders again after a backoff, changed or not (a store
	// failed). The backoff starts at BackoffMin and doubles with each
	// failure in a row, up to BackoffMax; any other answer resets it.
	Retry
)

// Loop is watch mode's control loop: it renders once at start, then
// again whenever the watched paths settle after a change, one render at a
// time (changes during a render make one more render once it ends), and
// retries a failed render with backoff while the watch goes on.
//
// Life cycle: the first signal on Signals, the cancellation of Run's
// context, an error on Stop, or the watcher failing, stops watching. A
// render in progress finishes, then one last render runs, and Run returns
// its result. A second signal cancels the render in progress and Run
// returns an *InterruptedError at once.
//
// R is what one render returns; the loop only passes it on.
type Loop[R any] struct {
	// Watch are the watcher's options: the paths, the quiet period, the
	// maximum wait. Its Log defaults to the loop's.
	Watch Options
	// Render runs one render. Its context is cancelled only by a second
	// signal: the first asks for one last render, which must not be cut
	// short.
	Render func(ctx context.Context) R
	// Rendered is told each render's result, the last one's too (last is
	// then true, and its answer is not used), and says what comes next.
	Rendered func(r R, last bool) Next
	// Ready, when set, is asked before each render; while it says false,
	// the loop waits for the next change (Ready logs its own reason). The
	// last render (last is true) runs whatever Ready says. args are added
	// to the "rendering" log line.
	Ready func(last bool) (ok bool, args []any)
	// Stopping, when set, is called once, when the loop stops watching.
	Stopping func()
	// Signals are SIGINT and SIGTERM (the first asks for a last render,
	// the second exits at once).
	Signals <-chan os.Signal
	// Stop stops the watch as a failure: an error received on it is logged
	// by its sender, and returned by Run after the last render (a server
	// beside the watch, say, that stopped serving).
	Stop <-chan error
	// BackoffMin and BackoffMax bound the wait before a render is retried.
	BackoffMin, BackoffMax time.Duration
	// Clock times the backoff; nil is the real clock. (The watcher keeps
	// Watch.Clock: renders follow real file changes.)
	Clock clock.Clock
	// Log gets the loop's lines; nil discards them.
	Log *slog.Logger
	// Abandoned, when set, is given a channel closed once the render a
	// second signal abandoned has returned (tests wait for it before they
	// remove the folders it reads).
	Abandoned func(<-chan struct{})
}

// InterruptedError is Run's answer to a second signal.
type InterruptedError struct{ Signal os.Signal }

func (e *InterruptedError) Error() string {
	return fmt.Sprintf("interrupted by a second signal (%v)", e.Signal)
}

// StartError is Run's answer when it could not start watching: no render
// ran.
type StartError struct{ Err error }

func (e *StartError) Error() string { return e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }

// Run watches and renders until the watch stops, and returns the last
// render's result with why watching stopped early, if it did: the
// watcher's failure or what came on Stop (nil after a signal or the
// cancellation of ctx). Its error is an *InterruptedError after a second
// signal, and a *StartError when no render ran.
func (l *Loop[R]) Run(ctx context.Context) (last R, err error) {
	log := l.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ck := l.Clock
	if ck == nil {
		ck = clock.RealClock{}
	}
	// The backoff's timer is ck's: the watch goes on meanwhile, and no
	// render's retry deadline bounds it.
	backoff := wait.Policy{First: min(l.BackoffMin, l.BackoffMax), Limit: l.BackoffMax}
	wopts := l.Watch
	if wopts.Log == nil {
		wopts.Log = log
	}
	// The watcher outlives ctx: its cancellation is a first signal.
	w, err := New(context.WithoutCancel(ctx), wopts)
	if err != nil {
		return last, &StartError{Err: err}
	}
	defer w.Close()
	log.Info("watching", "paths", wopts.Paths, "quiet_period", wopts.QuietPeriod.String(), "max_wait", wopts.MaxWait.String())

	// Renders survive the first signal (it asks for one more render) but
	// not the second.
	renderCtx, abort := context.WithCancel(context.WithoutCancel(ctx))
	defer abort()
	done := make(chan R, 1)

	var (
		rendering, stopping, final bool
		dirty                      bool // inputs changed since the running render began
		signals                    int
		failures                   int // failed renders in a row
		retry                      clock.Timer
		retryC                     <-chan time.Time
		watchErr                   error
	)
	events := w.Events()
	ctxDone := ctx.Done()
	stopC := l.Stop

	begin := func(reason string) {
		dirty = false
		var args []any
		if l.Ready != nil {
			ok, a := l.Ready(final)
			if !ok && !final {
				return
			}
			args = a
		}
		rendering = true
		log.Info("rendering", append(args, "reason", reason)...)
		go func() { done <- l.Render(renderCtx) }()
	}
	stopRetry := func() {
		if retry != nil {
			retry.Stop()
			retry, retryC = nil, nil
		}
	}
	stop := func(why string) {
		if stopping {
			return
		}
		stopping = true
		if l.Stopping != nil {
			l.Stopping()
		}
		events = nil
		stopRetry()
		log.Info("stopping: one last render, then exit", "because", why)
		if !rendering {
			final = true
			begin("last render before exit")
		}
	}

	begin("start")
	for {
		select {
		case b, ok := <-events:
			if !ok {
				watchErr = w.Err()
				if watchErr == nil {
					watchErr = errors.New("watching files stopped")
				}
				log.Error("watching files failed", "error", watchErr)
				stop("watching files failed")
				continue
			}
			dirty = true
			log.Debug("inputs changed", "paths", len(b.Paths), "first", b.Paths[0], "waited", b.Last.Sub(b.First).Round(time.Millisecond).String())
			if !rendering {
				stopRetry()
				begin("inputs changed")
			}

		case r := <-done:
			rendering = false
			next := l.Rendered(r, final)
			if final {
				return r, watchErr
			}
			if stopping {
				final = true
				begin("last render before exit")
				continue
			}
			if next == Retry {
				failures++
			} else {
				failures = 0
			}
			switch {
			case dirty:
				begin("inputs changed")
			case next == Retry:
				d := backoff.Delay(failures)
				log.Warn("render failed; retrying", "in", d.String())
				retry = ck.NewTimer(d)
				retryC = retry.C()
			case next == WaitForChange:
				log.Info("waiting for the next change")
			}

		case err := <-stopC:
			stopC = nil
			watchErr = err
			stop(err.Error())

		case <-retryC:
			retry, retryC = nil, nil
			begin("retry")

		case <-ctxDone:
			ctxDone = nil
			stop("context cancelled")

		case s := <-l.Signals:
			signals++
			if signals > 1 {
				abort()
				if l.Abandoned != nil {
					returned := make(chan struct{})
					go func(rendering bool) {
						if rendering {
							<-done
						}
						close(returned)
					}(rendering)
					l.Abandoned(returned)
				}
				return last, &InterruptedError{Signal: s}
			}
			stop("signal " + s.String())
		}
	}
}
