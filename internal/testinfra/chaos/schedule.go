package chaos

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Kind names a store the campaign runs against.
type Kind string

// The stores, each a real server behind a Proxy.
const (
	GitHTTP Kind = "git-http" // Gitea, git's smart HTTP protocol
	GitSSH  Kind = "git-ssh"  // git over SSH (testenv.SSHGit: sshd-like, real git on the server)
	S3      Kind = "s3"       // MinIO
	OCI     Kind = "oci"      // distribution's registry
)

// Kinds are every store, in the order campaigns run them.
var Kinds = []Kind{GitHTTP, GitSSH, S3, OCI}

// Workload is one workflow of a trial: a promise (written to every
// destination) or a resource request (written to one).
type Workload struct {
	Name     string // w0, w1, ...: the promise's name, or the resource's
	Resource bool
	// Setup says the workload is rendered once, without faults, before the
	// faults begin; otherwise its first render is one of the trial's.
	Setup bool
}

// OpKind is what an Op runs.
type OpKind string

// The operations of a trial.
const (
	Configure OpKind = "configure" // render --action configure
	Delete    OpKind = "delete"    // render --action delete
	Drain     OpKind = "drain"     // render drain d1 (cordoned)
)

// Op is one render process of a trial.
type Op struct {
	ID       int
	Kind     OpKind
	Workload int           // index into Schedule.Workloads; -1 for a drain
	At       time.Duration // start, after the faults' clock starts
	// Files are the output's files (a subset of a, b, c), each Pad bytes
	// of payload, for Configure.
	Files []string
	Pad   int
	// Repeat, when not -1, is the op whose output this one writes again,
	// byte for byte (a pipeline run again with the same result); -2 is the
	// workload's setup render.
	Repeat int
	// Deadline is --retry-deadline.
	Deadline time.Duration
	// Signal, when set, is sent Signal.After the process started.
	Signal *Signal
	// Stall, when set, pauses the process (SIGSTOP) Stall.After it
	// started and resumes it (SIGCONT) Stall.For later: a render the
	// scheduler does not run for seconds, as on a busy node.
	Stall *Stall
}

// Stall is a starvation fault on one render: stopped After its start,
// resumed For later.
type Stall struct {
	After, For time.Duration
}

// Signal is a signal a trial sends to one of its renders.
type Signal struct {
	Name  string // KILL or TERM
	After time.Duration
}

// FaultKind is the kind of a fault: a toxic on the proxy, or a restart of
// the server behind it.
type FaultKind string

// Restart stops the server and starts it again; other kinds are toxics.
const Restart FaultKind = "restart"

// Fault is one fault of a trial, active from At for For.
type Fault struct {
	At, For time.Duration
	Kind    FaultKind // a toxic's type, or Restart
	Toxic   Toxic     // when Kind is not Restart
}

// Schedule is a trial: everything it does is drawn from Seed, so a seed
// replays the same schedule (the servers' and processes' timing aside).
type Schedule struct {
	Seed      uint64
	Store     Kind
	Workloads []Workload
	Ops       []Op
	Faults    []Fault
	// Final says whether every workload gets a last render without faults
	// before the check.
	Final bool
	// Busy says a busy loop runs on every core while the trial's renders
	// run (not during the setup or the final renders): every render is
	// starved of CPU, and there are more processes than cores.
	Busy bool
}

// Generate draws the schedule of seed for store.
func Generate(seed uint64, store Kind) Schedule {
	r := rand.New(rand.NewPCG(seed, uint64(len(store))^0x636861_6f73))
	s := Schedule{Seed: seed, Store: store, Final: r.IntN(2) == 0}
	nw := 3 + r.IntN(3)
	for i := range nw {
		w := Workload{Name: fmt.Sprintf("w%d", i), Resource: r.IntN(5) >= 2, Setup: r.IntN(10) < 7}
		s.Workloads = append(s.Workloads, w)
	}
	// At least one of each kind, and a resource placed before a drain.
	s.Workloads[0].Resource, s.Workloads[0].Setup = true, true
	s.Workloads[1].Resource = false
	const window = 1500 // ms over which renders start and faults begin
	nops := 3 + r.IntN(5)
	drained := false
	for i := range nops {
		op := Op{ID: i, Workload: r.IntN(nw), At: ms(r.IntN(window)), Deadline: 20 * time.Second, Repeat: -1}
		switch x := r.IntN(100); {
		case x < 12 && !drained:
			op.Kind, op.Workload, drained = Drain, -1, true
		case x < 27:
			op.Kind = Delete
		default:
			op.Kind = Configure
		}
		// Two renders of one workload at about the same time.
		if i > 0 && op.Kind != Drain && r.IntN(3) == 0 {
			prev := s.Ops[r.IntN(i)]
			if prev.Kind != Drain {
				op.Workload = prev.Workload
				op.At = prev.At + ms(r.IntN(120))
			}
		}
		if op.Kind == Configure {
			for _, f := range []string{"a", "b", "c"} {
				if r.IntN(2) == 0 {
					op.Files = append(op.Files, f)
				}
			}
			if len(op.Files) == 0 {
				op.Files = []string{"a"}
			}
			op.Pad = []int{0, 300, 3000, 30000}[r.IntN(4)]
			// The same output as an earlier render of the workload.
			if r.IntN(4) == 0 {
				var same []int
				if s.Workloads[op.Workload].Setup {
					same = append(same, -2)
				}
				for _, o := range s.Ops {
					if o.Workload == op.Workload && o.Kind == Configure {
						same = append(same, o.ID)
					}
				}
				if len(same) > 0 {
					op.Repeat = same[r.IntN(len(same))]
					switch op.Repeat {
					case -2:
						op.Files, op.Pad = setupFiles, setupPad
					default:
						op.Files, op.Pad = s.Ops[op.Repeat].Files, s.Ops[op.Repeat].Pad
					}
				}
			}
		}
		if r.IntN(100) < 15 {
			op.Deadline = ms(1000 + r.IntN(3000)) // expires while faults last
		}
		switch x := r.IntN(100); {
		case x < 12:
			op.Signal = &Signal{Name: "KILL", After: ms(20 + r.IntN(700))}
		case x < 20:
			op.Signal = &Signal{Name: "TERM", After: ms(20 + r.IntN(700))}
		}
		s.Ops = append(s.Ops, op)
	}
	nf := 1 + r.IntN(4)
	for range nf {
		f := Fault{At: ms(r.IntN(window)), For: ms(100 + r.IntN(2000))}
		stream := []string{"upstream", "downstream"}[r.IntN(2)]
		switch x := r.IntN(100); {
		case x < 20:
			f.Kind, f.Toxic = "reset_peer", Toxic{Type: "reset_peer", Stream: stream, Attributes: map[string]int64{"timeout": int64(r.IntN(300))}}
		case x < 50:
			// Cut every connection after K bytes, K log-uniform in [1, 2^17).
			k := int64(1) << r.IntN(17)
			k += r.Int64N(k)
			f.Kind, f.Toxic = "limit_data", Toxic{Type: "limit_data", Stream: stream, Attributes: map[string]int64{"bytes": k}}
		case x < 65:
			f.Kind, f.Toxic = "latency", Toxic{Type: "latency", Stream: stream, Attributes: map[string]int64{"latency": int64(50 + r.IntN(500)), "jitter": int64(r.IntN(100))}}
		case x < 78:
			f.Kind, f.Toxic = "bandwidth", Toxic{Type: "bandwidth", Stream: stream, Attributes: map[string]int64{"rate": int64(5 + r.IntN(100))}}
		case x < 90:
			// 0 never answers nor closes until the fault ends.
			f.Kind, f.Toxic = "timeout", Toxic{Type: "timeout", Stream: stream, Attributes: map[string]int64{"timeout": int64([]int{0, 200, 1000}[r.IntN(3)])}}
		default:
			f.Kind, f.For = Restart, ms(300+r.IntN(2500))
		}
		s.Faults = append(s.Faults, f)
	}
	// Starvation (issue 34), drawn from a stream of its own, so that every
	// seed keeps the renders and faults it had before starvation was
	// added: a busy loop per core in half the trials, and about one
	// render in four paused for up to four seconds.
	st := rand.New(rand.NewPCG(seed, uint64(len(store))^0x7374_6172_7665))
	s.Busy = st.IntN(2) == 0
	for i := range s.Ops {
		if st.IntN(100) < 25 {
			s.Ops[i].Stall = &Stall{After: ms(st.IntN(1500)), For: ms(200 + st.IntN(3800))}
		}
	}
	return s
}

// What a workload's setup render writes.
var setupFiles, setupPad = []string{"a", "b"}, 100

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// String prints the schedule in full, as a failing trial reports it.
func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, store %s, final render: %t, busy loop on every core: %t\n", s.Seed, s.Store, s.Final, s.Busy)
	for _, w := range s.Workloads {
		kind := "promise"
		if w.Resource {
			kind = "resource"
		}
		fmt.Fprintf(&b, "  workload %s: %s, set up before the faults: %t\n", w.Name, kind, w.Setup)
	}
	for _, op := range s.Ops {
		fmt.Fprintf(&b, "  op %d at %v: %s", op.ID, op.At, op.Kind)
		if op.Workload >= 0 {
			fmt.Fprintf(&b, " %s", s.Workloads[op.Workload].Name)
		}
		if op.Kind == Configure {
			fmt.Fprintf(&b, " files %s pad %d", strings.Join(op.Files, ","), op.Pad)
		}
		switch op.Repeat {
		case -1:
		case -2:
			b.WriteString(" (the setup render's output again)")
		default:
			fmt.Fprintf(&b, " (op %d's output again)", op.Repeat)
		}
		fmt.Fprintf(&b, " --retry-deadline %v", op.Deadline)
		if op.Signal != nil {
			fmt.Fprintf(&b, ", SIG%s after %v", op.Signal.Name, op.Signal.After)
		}
		if op.Stall != nil {
			fmt.Fprintf(&b, ", stopped after %v for %v", op.Stall.After, op.Stall.For)
		}
		b.WriteByte('\n')
	}
	for _, f := range s.Faults {
		if f.Kind == Restart {
			fmt.Fprintf(&b, "  fault at %v for %v: server restart\n", f.At, f.For)
		} else {
			fmt.Fprintf(&b, "  fault at %v for %v: %s\n", f.At, f.For, f.Toxic)
		}
	}
	return b.String()
}
