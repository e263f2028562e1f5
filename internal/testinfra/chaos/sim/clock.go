package sim

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/render-dev/render/statestore/wait"
)

// Clock is the virtual time of one trial: the wait.Clock every
// writer of the trial runs on (wait.WithClock), so every backoff,
// poll, lease and retry deadline of render's write path, and every context
// deadline a write sets (wait.WithTimeout), reads it.
//
// Time stands still while any live writer is busy: computing, or waiting
// for a server (a request in flight). It jumps to the next wake-up once
// every live writer waits on the clock (a goroutine of it in Sleep, none
// of its requests in flight) and nothing has happened for a short quiet
// window of real time. So a backoff of a minute costs no real time, a
// stalled request lasts exactly until its writer's deadline, and every
// writer of a trial sees one time (an OCI lease taken by one writer
// expires at the same moment for all of them). Network I/O and the
// servers' work take real time and no virtual time.
//
// A writer that dies (Kill) no longer holds the clock back; its sleeps
// fail at once, so it unwinds.
//
// A watchdog reports a trial whose clock could not move for a long real
// time although no writer was waiting on a server: something in render
// waits on what the clock cannot see (a lock, a channel, a real timer).
// It then moves the clock anyway, and the trial goes on.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	start  time.Time
	queue  waitQueue
	seq    uint64
	parts  []*Part
	events chan struct{}
	// last is the real time of the last event.
	last time.Time
	// quiet is the real time nothing must happen before the clock jumps;
	// woken how long it waits for a woken goroutine (Part.kicked).
	quiet, woken time.Duration
	// stuckAfter is how long the clock may stand still, with nothing
	// happening, before the watchdog reports it and moves it anyway.
	stuckAfter time.Duration
	onStuck    func(string)
	stop       chan struct{}
	stopped    chan struct{}
	// Jumps counts how often the clock moved; Forced how often the
	// watchdog moved it; Unseen how often it moved past a woken goroutine
	// not seen for its woken window.
	Jumps, Forced, Unseen int
	// Real is the real time the clock spent in each state: some request
	// in flight (Waiting), every live participant asleep on the clock
	// (Idle), or else some participant computing (Busy).
	Real       RealTimes
	state      int
	stateSince time.Time
}

// RealTimes splits a trial's real time by what its participants did.
type RealTimes struct{ Waiting, Idle, Busy time.Duration }

func (c *Clock) account() {
	now := time.Now()
	if !c.stateSince.IsZero() {
		d := now.Sub(c.stateSince)
		switch c.state {
		case 1:
			c.Real.Waiting += d
		case 2:
			c.Real.Idle += d
		default:
			c.Real.Busy += d
		}
	}
	c.stateSince = now
	idle, _ := c.idle()
	switch {
	case c.waiting():
		c.state = 1
	case idle:
		c.state = 2
	default:
		c.state = 0
	}
}

// Part is one participant whose work holds the clock back while it is
// busy: a writer, or the trial itself while it restarts a server.
type Part struct {
	Name string
	c    *Clock
	// sleeping counts its goroutines in Sleep; inflight its requests the
	// server has not answered yet.
	sleeping, inflight int
	// kicked is set when the clock woke one of its goroutines (at
	// kickedAt, real time), until it next does something the clock sees:
	// it is running. While others of its goroutines sleep, the clock
	// waits for it only for the clock's woken window: a woken goroutine
	// may end, or wait on one of its own that sleeps on the clock, and
	// then does nothing the clock sees.
	kicked   bool
	kickedAt time.Time
	done     bool
	dead     bool
}

// ErrDead is what a dead writer's requests and sleeps return: the process
// is gone.
var ErrDead = errors.New("sim: the writer is dead: this process sends nothing more")

type partKey struct{}

// NewClock starts a trial's clock at start (virtual). quiet is the real
// quiet window before a jump; woken how long the clock waits for a woken
// goroutine of a participant whose other goroutines sleep (Part.kicked);
// onStuck is told when the watchdog had to move the clock.
func NewClock(start time.Time, quiet, woken, stuckAfter time.Duration, onStuck func(string)) *Clock {
	c := &Clock{now: start, start: start, events: make(chan struct{}, 1), last: time.Now(), quiet: quiet, woken: woken,
		stuckAfter: stuckAfter, onStuck: onStuck, stop: make(chan struct{}), stopped: make(chan struct{})}
	go c.loop()
	return c
}

// Close stops the clock's loop.
func (c *Clock) Close() {
	close(c.stop)
	<-c.stopped
}

// Now is the virtual time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Elapsed is the virtual time since the clock started.
func (c *Clock) Elapsed() time.Duration { return c.Now().Sub(c.start) }

// Join registers a participant, busy from now on, and returns ctx with
// the clock and the participant in it.
func (c *Clock) Join(ctx context.Context, name string) (context.Context, *Part) {
	p := &Part{Name: name, c: c}
	c.mu.Lock()
	c.parts = append(c.parts, p)
	c.event()
	c.mu.Unlock()
	return context.WithValue(wait.WithClock(ctx, c), partKey{}, p), p
}

// PartOf is the participant ctx belongs to, or nil.
func PartOf(ctx context.Context) *Part {
	p, _ := ctx.Value(partKey{}).(*Part)
	return p
}

// Leave says p is done: it no longer holds the clock back.
func (p *Part) Leave() {
	p.c.mu.Lock()
	p.done = true
	p.c.event()
	p.c.mu.Unlock()
}

// Kill says p died: it no longer holds the clock back, and its sleeps
// fail at once.
func (p *Part) Kill() {
	p.c.mu.Lock()
	p.dead = true
	p.c.event()
	p.c.mu.Unlock()
}

// Dead reports whether p was killed.
func (p *Part) Dead() bool {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	return p.dead
}

// Begin says p is waiting for a server, until the returned function is
// called.
func (p *Part) Begin() func() {
	if p == nil {
		return func() {}
	}
	c := p.c
	c.mu.Lock()
	p.inflight++
	p.kicked = false
	c.event()
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			p.inflight--
			c.event()
			c.mu.Unlock()
		})
	}
}

// Busy marks p busy (computing, or doing work the clock cannot see, such
// as restarting a server) until the returned function is called.
func (p *Part) Busy() func() { return p.Begin() }

// alarm is a sleeper or a timer in the clock's queue.
type alarm struct {
	at    time.Time
	seq   uint64
	ch    chan struct{} // a sleeper's, closed when it wakes
	fire  func()        // a timer's
	who   *Part
	index int
	gone  bool
}

type waitQueue []*alarm

func (q waitQueue) Len() int { return len(q) }
func (q waitQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q waitQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i]; q[i].index = i; q[j].index = j }
func (q *waitQueue) Push(x any)   { w := x.(*alarm); w.index = len(*q); *q = append(*q, w) }
func (q *waitQueue) Pop() any {
	old := *q
	w := old[len(old)-1]
	*q = old[:len(old)-1]
	w.index = -1
	return w
}
func (c *Clock) push(w *alarm) { c.seq++; w.seq = c.seq; heap.Push(&c.queue, w) }
func (c *Clock) remove(w *alarm) {
	w.gone = true
	if w.index >= 0 {
		heap.Remove(&c.queue, w.index)
	}
}
func (c *Clock) event() { c.last = time.Now(); c.account(); c.poke() }
func (c *Clock) poke() {
	select {
	case c.events <- struct{}{}:
	default:
	}
}

// Sleep waits d of virtual time, or until ctx is done.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	p := PartOf(ctx)
	c.mu.Lock()
	if p != nil && p.dead {
		c.mu.Unlock()
		return ErrDead
	}
	if err := ctx.Err(); err != nil {
		c.mu.Unlock()
		return err
	}
	if d <= 0 {
		c.mu.Unlock()
		return nil
	}
	w := &alarm{at: c.now.Add(d), ch: make(chan struct{}), who: p}
	c.push(w)
	if p != nil {
		p.sleeping++
		p.kicked = false
	}
	c.event()
	c.mu.Unlock()
	select {
	case <-w.ch:
		if p != nil && p.Dead() {
			return ErrDead
		}
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		if !w.gone {
			c.remove(w)
			if p != nil {
				p.sleeping--
			}
		}
		c.event()
		c.mu.Unlock()
		return ctx.Err()
	}
}

// WithDeadline is context.WithDeadline on the virtual clock.
func (c *Clock) WithDeadline(parent context.Context, at time.Time) (context.Context, context.CancelFunc) {
	v := &vctx{parent: parent, at: at, done: make(chan struct{})}
	if d, ok := parent.Deadline(); ok && d.Before(at) {
		v.at = d
	}
	stop := context.AfterFunc(parent, func() { v.cancel(parent.Err()) })
	c.mu.Lock()
	if !at.After(c.now) {
		c.mu.Unlock()
		v.cancel(context.DeadlineExceeded)
		return v, func() { stop(); v.cancel(context.Canceled) }
	}
	w := &alarm{at: at, fire: func() { v.cancel(context.DeadlineExceeded) }}
	c.push(w)
	c.event()
	c.mu.Unlock()
	return v, func() {
		stop()
		c.mu.Lock()
		if !w.gone {
			c.remove(w)
		}
		c.mu.Unlock()
		v.cancel(context.Canceled)
	}
}

// vctx is a context that ends at a virtual deadline.
type vctx struct {
	parent context.Context
	at     time.Time
	done   chan struct{}
	mu     sync.Mutex
	err    error
}

func (v *vctx) Deadline() (time.Time, bool) { return v.at, true }
func (v *vctx) Done() <-chan struct{}       { return v.done }
func (v *vctx) Value(k any) any             { return v.parent.Value(k) }
func (v *vctx) Err() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.err
}

func (v *vctx) cancel(err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.err == nil && err != nil {
		v.err = err
		close(v.done)
	}
}

var _ wait.DeadlineClock = (*Clock)(nil)

// idle reports whether every live participant waits on the clock, and
// whether one of them counts as waiting only because its woken goroutine
// was not seen for the woken window.
func (c *Clock) idle() (idle, unseen bool) {
	for _, p := range c.parts {
		if p.done || p.dead {
			continue
		}
		if p.inflight > 0 || p.sleeping == 0 {
			return false, false
		}
		if p.kicked {
			if time.Since(p.kickedAt) < c.woken {
				return false, false
			}
			unseen = true
		}
	}
	return true, unseen
}

// recheck is when the loop looks again at a clock that could not move.
func (c *Clock) recheck() time.Duration {
	d := max(c.quiet, c.stuckAfter/10)
	for _, p := range c.parts {
		if !p.done && !p.dead && p.kicked {
			d = min(d, max(c.quiet, c.woken-time.Since(p.kickedAt)))
		}
	}
	return d
}

// waiting reports whether a live participant waits for a server.
func (c *Clock) waiting() bool {
	for _, p := range c.parts {
		if !p.done && !p.dead && p.inflight > 0 {
			return true
		}
	}
	return false
}

// advance moves the clock to the next wake-up and wakes what is due. It
// returns the timers to fire, which the caller fires without the lock.
func (c *Clock) advance() (fire []func(), moved bool) {
	if len(c.queue) == 0 {
		return nil, false
	}
	if next := c.queue[0].at; next.After(c.now) {
		c.now = next
	}
	for len(c.queue) > 0 && !c.queue[0].at.After(c.now) {
		w := heap.Pop(&c.queue).(*alarm)
		w.gone = true
		if w.fire != nil {
			fire = append(fire, w.fire)
			continue
		}
		if p := w.who; p != nil {
			p.sleeping--
			p.kicked, p.kickedAt = true, time.Now()
		}
		close(w.ch)
	}
	c.Jumps++
	c.event()
	return fire, true
}

func (c *Clock) loop() {
	defer close(c.stopped)
	t := time.NewTimer(c.quiet)
	stuckReported := false
	for {
		select {
		case <-c.stop:
			t.Stop()
			return
		case <-c.events:
			t.Reset(c.quiet)
			continue
		case <-t.C:
		}
		c.mu.Lock()
		idle, unseen := c.idle()
		quietFor := time.Since(c.last)
		stuck := ""
		if !idle && quietFor >= c.stuckAfter && len(c.queue) > 0 && !c.waiting() {
			// Nothing happened for long and some writer is neither
			// waiting on the clock nor on a server. (A request in
			// flight holds the clock however long the server takes:
			// on a busy machine a push can take longer than
			// stuckAfter, and moving the clock then fires the
			// deadlines of writers that are only waiting.)
			idle = true
			c.Forced++
			if !stuckReported && c.onStuck != nil {
				stuckReported = true
				stuck = fmt.Sprintf("the clock stood still for %v of real time at %v: %s", quietFor.Round(time.Second), c.now.Sub(c.start), c.describe())
			}
		}
		if stuck != "" {
			c.mu.Unlock()
			c.onStuck(stuck)
			c.mu.Lock()
		}
		if !idle {
			next := c.recheck()
			c.mu.Unlock()
			// Look again when something happens, when a woken
			// goroutine's window ends, or to watch for a clock that
			// cannot move.
			t.Reset(next)
			continue
		}
		if unseen {
			c.Unseen++
		}
		fire, moved := c.advance()
		c.mu.Unlock()
		for _, f := range fire {
			f()
		}
		if moved {
			t.Reset(c.quiet)
		} else {
			c.mu.Lock()
			next := c.recheck()
			c.mu.Unlock()
			t.Reset(next)
		}
	}
}

// describe says what each live participant is doing.
func (c *Clock) describe() string {
	var out []string
	for _, p := range c.parts {
		if p.done || p.dead {
			continue
		}
		switch {
		case p.inflight > 0:
			out = append(out, fmt.Sprintf("%s waits for %d requests", p.Name, p.inflight))
		case p.sleeping == 0:
			out = append(out, p.Name+" is busy (not waiting on the clock, no request in flight)")
		case p.kicked:
			out = append(out, fmt.Sprintf("%s was woken and not seen since (%d goroutines asleep)", p.Name, p.sleeping))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}
