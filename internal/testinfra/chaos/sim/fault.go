package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// FaultKind is what happens to one request of one writer.
type FaultKind string

// The faults a request can meet.
const (
	None FaultKind = ""
	// Refuse: the connection is reset before the server saw the request.
	Refuse FaultKind = "refuse"
	// Lost: the server saw the request and answered; the connection is
	// reset before the writer read the answer.
	Lost FaultKind = "lost"
	// Cut: the answer is cut after Bytes bytes.
	Cut FaultKind = "cut"
	// Latency: the request waits For before it is sent.
	Latency FaultKind = "latency"
	// Stall: the server never answers, until the writer's retry deadline
	// (or its request's own deadline) passes; with After, the server saw
	// and applied the request first.
	Stall FaultKind = "stall"
	// Death: the writer dies at this request (before it is sent, or with
	// After once the server saw it): it sends nothing more.
	Death FaultKind = "death"
)

// Fault is one request's fate.
type Fault struct {
	Kind  FaultKind
	Bytes int64         // Cut
	For   time.Duration // Latency
	After bool          // Stall, Death
	// Pause, when set, pauses the writer for that long before it sends
	// the request (starvation: a process not scheduled), whatever Kind.
	Pause time.Duration
	// Stop asks the writer to stop as it sends the request, as SIGTERM
	// does: a render that has not begun publishing ends with nothing
	// written, one that has finishes its publish.
	Stop bool
}

// Zero reports whether f does nothing.
func (f Fault) Zero() bool { return f.Kind == None && f.Pause == 0 && !f.Stop }

func (f Fault) String() string {
	var s string
	switch f.Kind {
	case None:
	case Cut:
		s = fmt.Sprintf("cut after %d bytes", f.Bytes)
	case Latency:
		s = fmt.Sprintf("latency %v", f.For)
	case Stall, Death:
		s = string(f.Kind)
		if f.After {
			s += " after the server saw it"
		} else {
			s += " before the server saw it"
		}
	default:
		s = string(f.Kind)
	}
	if f.Pause > 0 {
		if s != "" {
			s = ", " + s
		}
		s = fmt.Sprintf("pause %v", f.Pause) + s
	}
	if f.Stop {
		if s != "" {
			s = ", " + s
		}
		s = "stop asked" + s
	}
	return s
}

// Profile is how often a trial's requests meet faults, drawn from its
// seed: each request of each writer draws its own fault from it (Draw), so
// the same seed meets the same request with the same fault.
type Profile struct {
	// Rate is the chance that a request meets a fault, PauseRate that the
	// writer is paused before it.
	Rate, PauseRate float64
	// Weights of the fault kinds (Refuse, Lost, Cut, Latency, Stall).
	Weights [5]int
}

var profileKinds = [5]FaultKind{Refuse, Lost, Cut, Latency, Stall}

// drawProfile draws a trial's fault profile.
func drawProfile(r *rand.Rand) Profile {
	p := Profile{Rate: []float64{0, 0.02, 0.05, 0.1, 0.2, 0.3}[r.IntN(6)]}
	if r.IntN(3) == 0 {
		p.PauseRate = []float64{0.02, 0.05, 0.15}[r.IntN(3)]
	}
	for i := range p.Weights {
		p.Weights[i] = r.IntN(4) // some kinds absent from some trials
	}
	if p.Weights == [5]int{} {
		p.Weights[r.IntN(5)] = 1
	}
	return p
}

// Draw is the fault of request n (from 1) of writer w in the trial of
// seed: a pure function of the three.
func (p Profile) Draw(seed uint64, w, n int) Fault {
	r := rand.New(rand.NewPCG(seed^0x5eed_f4417, uint64(w)<<32|uint64(n)))
	var f Fault
	if r.Float64() < p.PauseRate {
		// Log-uniform from 10 ms to about 100 s: past a lock's lease.
		f.Pause = time.Duration(float64(10*time.Millisecond) * math.Exp2(r.Float64()*13.3))
	}
	if r.Float64() >= p.Rate {
		return f
	}
	total := 0
	for _, w := range p.Weights {
		total += w
	}
	x := r.IntN(total)
	for i, w := range p.Weights {
		if x < w {
			f.Kind = profileKinds[i]
			break
		}
		x -= w
	}
	switch f.Kind {
	case Cut:
		k := int64(1) << r.IntN(16)
		f.Bytes = k + r.Int64N(k)
	case Latency:
		f.For = time.Duration(float64(time.Millisecond) * math.Exp2(r.Float64()*12)) // 1 ms to 4 s
	case Stall:
		f.After = r.IntN(2) == 0
	}
	return f
}
