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
// stop a first Ctrl-C or SIGTERM asks for gives the render a stop channel
// with WithStop: once it is closed, a render that has not begun publishing
// returns a *StoppedError at the next check and writes nothing, and a
// render that is publishing finishes that publish (each store's write is
// all-or-nothing on its own terms) and sets Report.Stopped. Only the
// context's cancellation abandons a publish under way.

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

type stopKey struct{}

// WithStop returns ctx carrying stop: closing stop asks the render (or
// drain) running on ctx to stop before it publishes, and to finish a
// publish it has begun.
func WithStop(ctx context.Context, stop <-chan struct{}) context.Context {
	return context.WithValue(ctx, stopKey{}, stop)
}

// beforePublish returns the context of the work before publishing: ctx,
// cancelled too once the stop channel in ctx (if any) is closed.
func beforePublish(ctx context.Context) (context.Context, context.CancelFunc) {
	pctx, cancel := context.WithCancel(ctx)
	stop, _ := ctx.Value(stopKey{}).(<-chan struct{})
	if stop == nil {
		return pctx, cancel
	}
	go func() {
		select {
		case <-stop:
			cancel()
		case <-pctx.Done():
		}
	}()
	return pctx, cancel
}

// stopAsked reports whether ctx's stop channel is closed.
func stopAsked(ctx context.Context) bool {
	stop, _ := ctx.Value(stopKey{}).(<-chan struct{})
	if stop == nil {
		return false
	}
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// phaseTracker logs and announces a render's phases and turns an error
// caused by a stop into a *StoppedError naming the phase.
type phaseTracker struct {
	e     *Engine
	ctx   context.Context // the render's own context (a stop does not cancel it)
	pctx  context.Context // the context of the work before publishing
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
	case p.ctx.Err() != nil:
		return p.ctx.Err()
	case p.pctx.Err() != nil && stopAsked(p.ctx):
		return &StoppedError{Phase: p.phaseName()}
	}
	return err
}

func (p *phaseTracker) phaseName() string {
	if p.name == "" {
		return PhaseReading
	}
	return p.name
}
