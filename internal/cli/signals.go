package cli

// One-shot commands (a render, a drain) and signals.
//
// The first SIGINT or SIGTERM asks the command to stop. One that has not
// begun publishing stops at once, writes nothing, says so in one line and
// exits 130 (SIGINT) or 143 (SIGTERM). One that is publishing finishes that
// publish — a git push moves the branch or leaves it, an S3 write ends
// with its record committed — and its last line says, per store, whether the
// publish finished or was abandoned; it exits 130 or 143 all the same. A
// second signal exits at once, abandoning the publish in progress.
//
// Watch mode handles signals its own way (see watch.go).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/render-dev/render/internal/engine"
)

// abandonGrace is how long a signal waits for the work it stops to return:
// a first one before publishing, a second one that abandons a publish (so
// that it lets go of what it holds, such as a branch lock file).
const abandonGrace = 250 * time.Millisecond

// sameSignal is how soon the same signal again counts as a copy of the
// first, not as a second signal.
const sameSignal = 100 * time.Millisecond

// cancelled stands for a signal when the caller cancelled the context.
type cancelled struct{}

func (cancelled) String() string { return "context cancelled" }
func (cancelled) Signal()        {}

// signalExit is the exit code after s.
func signalExit(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return ExitSIGINT
}

// signalName is s as people write it: SIGINT, SIGTERM.
func signalName(s os.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

// notifySignals returns the channel SIGINT and SIGTERM arrive on, and the
// function that stops listening.
func (io IO) notifySignals() (<-chan os.Signal, func()) {
	if io.Signals != nil {
		return io.Signals, func() {}
	}
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	return ch, func() { signal.Stop(ch) }
}

// phaseWatch remembers the phase a render is in (engine.Options.OnPhase).
type phaseWatch struct {
	v atomic.Value
	// hook, when set (tests, through IO.phaseHook), is called on entering
	// each phase with the render's context, which a first signal cancels.
	hook func(ctx context.Context, phase string)
	ctx  context.Context
}

func (p *phaseWatch) set(phase string) {
	p.v.Store(phase)
	if p.hook != nil {
		p.hook(p.ctx, phase)
	}
}

func (p *phaseWatch) get() string {
	s, _ := p.v.Load().(string)
	return s
}

// name is the phase for messages: before the first one, reading inputs.
func (p *phaseWatch) name() string {
	if s := p.get(); s != "" {
		return s
	}
	return engine.PhaseReading
}

// runInterruptible runs work under the signal rules above. It returns what
// work returned and the first signal, if one came before work returned. A
// second signal ends the wait at once: exit is then the error to return,
// and work is left to its cancelled context.
func runInterruptible[T any](ctx context.Context, io IO, log *slog.Logger, phase *phaseWatch, work func(context.Context) (T, error)) (res T, err error, first os.Signal, exit error) {
	sigs, release := io.notifySignals()
	defer release()
	hard, abort := context.WithCancel(context.WithoutCancel(ctx))
	defer abort()
	soft, stop := engine.WithStop(hard)
	defer stop()
	phase.hook, phase.ctx = io.phaseHook, soft
	type outcome struct {
		res T
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := work(soft)
		done <- outcome{r, err}
	}()
	ctxDone := ctx.Done()
	// second abandons the work: it cancels its context, gives it a moment
	// to let go of what it holds, and exits.
	second := func(s os.Signal) error {
		abort()
		select {
		case <-done:
		case <-time.After(abandonGrace):
		}
		what := "nothing had been written"
		if phase.get() == engine.PhasePublishing {
			what = "the publish in progress is abandoned: a push or upload in flight is complete or absent, and the next render repairs the rest"
		}
		return &ExitError{Code: signalExit(s), Err: fmt.Errorf("%s again: exiting at once; %s", signalName(s), what)}
	}
	var firstAt time.Time
	// again tells a deliberate second signal from a copy of the first:
	// timeout(1) sends its SIGTERM to the command and to its process group,
	// so the command gets it twice at once.
	again := func(s os.Signal) bool { return s != first || time.Since(firstAt) >= sameSignal }
	for {
		var s os.Signal
		select {
		case out := <-done:
			return out.res, out.err, first, nil
		case <-ctxDone:
			ctxDone = nil
			s = cancelled{}
		case s = <-sigs:
		}
		if first != nil {
			if !again(s) {
				continue
			}
			return res, nil, first, second(s)
		}
		first, firstAt = s, time.Now()
		stop()
		if phase.get() != engine.PhasePublishing {
			// The work stops at its next check of its context; a read that
			// does not look at it (a stuck file or connection) must not
			// hold the exit up. Nothing has been written, and nothing will
			// be: the work checks its context before it publishes.
			grace := time.NewTimer(abandonGrace)
		wait:
			for {
				select {
				case out := <-done:
					grace.Stop()
					return out.res, out.err, first, nil
				case s2 := <-sigs:
					if again(s2) {
						grace.Stop()
						return res, nil, first, second(s2)
					}
				case <-grace.C:
					break wait
				}
			}
		}
		if phase.get() != engine.PhasePublishing {
			return res, nil, first, stoppedExit(first, &engine.StoppedError{Phase: phase.name()})
		}
		log.Warn("signal while publishing: finishing the publish under way; a second signal abandons it", "signal", signalName(s))
	}
}

// stoppedExit is the exit error of a command a signal stopped before it
// wrote anything.
func stoppedExit(sig os.Signal, err error) error {
	var se *engine.StoppedError
	if errors.As(err, &se) {
		return &ExitError{Code: signalExit(sig), Err: fmt.Errorf("%s: %v", signalName(sig), se)}
	}
	return &ExitError{Code: signalExit(sig), Err: fmt.Errorf("%s: stopped: nothing was written", signalName(sig))}
}

// interruptedPublish turns the exit error of a command that finished
// normally into the one of a command a signal asked to stop while it was
// publishing (stopped): its code becomes the signal's, and one more line
// says, per store, whether the publish finished or was abandoned.
func interruptedPublish(sig os.Signal, stopped bool, stores []engine.StoreReport, dryRun bool, err error) error {
	if sig == nil || !stopped {
		return err
	}
	var parts []string
	for _, s := range stores {
		r := s.Result
		switch {
		case s.Err != nil:
			parts = append(parts, fmt.Sprintf("%s: abandoned (%v)", s.Store, s.Err))
		case dryRun:
			parts = append(parts, fmt.Sprintf("%s: dry run finished", s.Store))
		case r.Updated:
			parts = append(parts, fmt.Sprintf("%s: finished, wrote %s", s.Store, short(r.Revision)))
		default:
			parts = append(parts, fmt.Sprintf("%s: finished, nothing to write", s.Store))
		}
	}
	failed := 0
	for _, s := range stores {
		if s.Err != nil {
			failed++
		}
	}
	verdict := "the publish finished"
	switch {
	case failed == len(stores) && failed > 0:
		verdict = "the publish was abandoned"
	case failed > 0:
		verdict = "the publish finished in some stores and was abandoned in others"
	}
	line := fmt.Errorf("%s while publishing: %s (%s)", signalName(sig), verdict, strings.Join(parts, "; "))
	var ee *ExitError
	if errors.As(err, &ee) && ee.Err != nil {
		line = fmt.Errorf("%v\nrender: %v", ee.Err, line)
	}
	return &ExitError{Code: signalExit(sig), Err: line}
}
