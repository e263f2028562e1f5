package engine

import (
	"context"
	"errors"
	"time"
)

// Stopping a render.
//
// A render goes through three phases: reading inputs, planning (which
// includes reading the stores' records) and publishing. Cancelling the
// render's context ends any phase at once. A caller that wants the gentler
// stop a first Ctrl-C or SIGTERM asks for makes the render's context with
// WithStop: calling its stop function cancels the context, and a render
// that has not begun publishing returns a *StoppedError at its next check,
// having written nothing; a render that is publishing finishes that
// publish (each store's write is all-or-nothing on its own terms) on the
// context WithStop was given, and sets Report.Stopped. Only cancelling that
// context abandons a publish under way.

// Phases of a render, as OnPhase and the debug log name them.
const (
	PhaseReading    = "reading inputs"
	PhasePlanning   = "planning"
	PhasePublishing = "publishing"
)

// ErrStopped is what a *StoppedError is: the render stopped, as asked,
// before it wrote anything.
var ErrStopped = errors.New("render stopped")

// StoppedError is returned by a render that stopped, as asked, before it
// began publishing. Nothing was written.
type StoppedError struct {
	// Phase is the phase the render was in.
	Phase string
}

func (e *StoppedError) Error() string { return "stopped while " + e.Phase + ": nothing was written" }

// Is makes errors.Is(err, ErrStopped) true.
func (e *StoppedError) Is(target error) bool { return target == ErrStopped }

type publishKey struct{}

// WithStop returns a context for a render (or a drain) and its stop
// function. Stop cancels the returned context: the render stops if it has
// not begun publishing. Its publish runs on ctx (with the returned
// context's values), which only ctx's own cancellation ends.
func WithStop(ctx context.Context) (context.Context, context.CancelFunc) {
	soft, stop := context.WithCancel(ctx)
	return context.WithValue(soft, publishKey{}, ctx), stop
}

// publishContext returns the context a publish runs on: for a context from
// WithStop, one that keeps ctx's values and ends only with the context
// WithStop was given; otherwise ctx itself.
func publishContext(ctx context.Context) (context.Context, context.CancelFunc) {
	hard, ok := ctx.Value(publishKey{}).(context.Context)
	if !ok {
		return ctx, func() {}
	}
	pub, cancel := context.WithCancel(context.WithoutCancel(ctx))
	unhook := context.AfterFunc(hard, cancel)
	return pub, func() { unhook(); cancel() }
}

// stopAsked reports whether ctx, from WithStop, was stopped while the
// context it was made from still runs.
func stopAsked(ctx context.Context) bool {
	hard, ok := ctx.Value(publishKey{}).(context.Context)
	return ok && ctx.Err() != nil && hard.Err() == nil
}

// phaseTracker logs and announces a render's phases and turns an error
// caused by a stop into a *StoppedError naming the phase.
type phaseTracker struct {
	e     *Engine
	ctx   context.Context // the render's context: a stop cancels it
	name  string
	began time.Time
}

// enter starts phase name, after checking that the render may go on.
func (p *phaseTracker) enter(name string) error {
	if err := p.check(nil); err != nil {
		return err
	}
	p.done()
	p.name, p.began = name, time.Now()
	p.e.log.Debug(name, "phase", name)
	if p.e.opts.OnPhase != nil {
		p.e.opts.OnPhase(name)
	}
	return nil
}

// done logs how long the current phase took.
func (p *phaseTracker) done() {
	if p.name != "" {
		p.e.log.Debug("phase done", "phase", p.name, "duration", time.Since(p.began).Round(time.Millisecond).String())
	}
}

// check returns err, or — when the render was stopped or cancelled, whatever
// err says — the reason it ended: a *StoppedError for a stop, the
// context's error for a cancellation.
func (p *phaseTracker) check(err error) error {
	switch {
	case stopAsked(p.ctx):
		return &StoppedError{Phase: p.phaseName()}
	case p.ctx.Err() != nil:
		return p.ctx.Err()
	}
	return err
}

func (p *phaseTracker) phaseName() string {
	if p.name == "" {
		return PhaseReading
	}
	return p.name
}
