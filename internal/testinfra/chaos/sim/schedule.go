package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/render-dev/render/internal/testinfra/chaos"
)

// Writer is one render of a trial: a goroutine running render's engine.
type Writer struct {
	ID       int
	Kind     chaos.OpKind
	Workload int           // index into Schedule.Workloads; -1 for a drain
	At       time.Duration // its start, on the trial's clock
	// Files (a subset of a, b, c), each Pad bytes of payload, for
	// Configure.
	Files []string
	Pad   int
	// Repeat, when not -1, is the writer whose output this one writes
	// again byte for byte; -2 is the workload's setup render.
	Repeat int
	// Deadline is the writer's retry deadline (--retry-deadline).
	Deadline time.Duration
}

// Schedule is a trial, drawn from Seed: its workloads, writers and fault
// profile. The faults themselves are drawn per request as the trial runs
// (Profile.Draw), unless Pinned lists them (a shrunk schedule).
type Schedule struct {
	Seed  uint64
	Store chaos.Kind
	// Size is what the schedule was drawn within: a seed replays only
	// with the same.
	Size      Size
	Workloads []chaos.Workload
	Writers   []Writer
	Profile   Profile
	// Deaths maps a writer to the request at which it dies (drawn with
	// the schedule, so that every writer has its own).
	Deaths map[int]Fault
	// DeathAt is that request's number.
	DeathAt map[int]int
	// StopAt maps a writer to the request at which it is asked to stop.
	StopAt map[int]int
	// Restart, when set, restarts the server during the trial: down for
	// Down of virtual time from At. Such a trial runs alone on its server.
	Restart *Restart
	// Final says whether every workload gets a last render without faults
	// before the check.
	Final bool
	// Pinned, when not nil, are the only faults: by writer, then by
	// request number. A shrunk schedule pins what its run met.
	Pinned map[int]map[int]Fault
	// Foreign is what someone else left in the store before the writers
	// start.
	Foreign []Foreign
}

// Restart is a server restart during a trial.
type Restart struct {
	At, Down time.Duration
}

// Size bounds a campaign's trials.
type Size struct {
	// MaxWriters is the most writers a trial draws (at least 2).
	MaxWriters int
	// Foreign lets trials draw foreign state (see foreign.go).
	Foreign bool
}

// Generate draws the schedule of seed for store.
func Generate(seed uint64, store chaos.Kind, size Size) Schedule {
	r := rand.New(rand.NewPCG(seed, uint64(len(store))^0x73696d))
	s := Schedule{Seed: seed, Store: store, Size: size, Final: r.IntN(2) == 0, Profile: drawProfile(r),
		Deaths: map[int]Fault{}, DeathAt: map[int]int{}, StopAt: map[int]int{}}
	// Writers: mostly a few, sometimes many (a busy node's sidecars).
	var nw int
	switch x := r.IntN(100); {
	case x < 55:
		nw = 2 + r.IntN(6) // 2-7
	case x < 85:
		nw = 8 + r.IntN(17) // 8-24
	default:
		nw = 25 + r.IntN(40) // 25-64
	}
	nw = min(nw, max(size.MaxWriters, 2))
	// Workloads: enough that writers share some, few enough that most
	// workloads have several renders.
	nwl := min(3+r.IntN(3)+nw/8, 10)
	for i := range nwl {
		s.Workloads = append(s.Workloads, chaos.Workload{Name: fmt.Sprintf("w%d", i), Resource: r.IntN(5) >= 2, Setup: r.IntN(10) < 7})
	}
	s.Workloads[0].Resource, s.Workloads[0].Setup = true, true
	s.Workloads[1].Resource = false
	const window = 1500 // ms over which writers start
	drains := 0
	for i := range nw {
		w := Writer{ID: i, Workload: r.IntN(nwl), At: ms(r.IntN(window)), Deadline: 2 * time.Minute, Repeat: -1}
		switch x := r.IntN(100); {
		case x < 8 && drains < 2:
			w.Kind, w.Workload = chaos.Drain, -1
			drains++
		case x < 25:
			w.Kind = chaos.Delete
		default:
			w.Kind = chaos.Configure
		}
		// Two renders of one workload at about the same time.
		if i > 0 && w.Kind != chaos.Drain && r.IntN(3) == 0 {
			prev := s.Writers[r.IntN(i)]
			if prev.Kind != chaos.Drain {
				w.Workload = prev.Workload
				w.At = prev.At + ms(r.IntN(120))
			}
		}
		if w.Kind == chaos.Configure {
			for _, f := range []string{"a", "b", "c"} {
				if r.IntN(2) == 0 {
					w.Files = append(w.Files, f)
				}
			}
			if len(w.Files) == 0 {
				w.Files = []string{"a"}
			}
			w.Pad = []int{0, 300, 3000, 30000}[r.IntN(4)]
			if r.IntN(4) == 0 {
				var same []int
				if s.Workloads[w.Workload].Setup {
					same = append(same, -2)
				}
				for _, o := range s.Writers {
					if o.Workload == w.Workload && o.Kind == chaos.Configure {
						same = append(same, o.ID)
					}
				}
				if len(same) > 0 {
					w.Repeat = same[r.IntN(len(same))]
					if w.Repeat == -2 {
						w.Files, w.Pad = chaos.SetupFiles, chaos.SetupPad
					} else {
						w.Files, w.Pad = s.Writers[w.Repeat].Files, s.Writers[w.Repeat].Pad
					}
				}
			}
		}
		if r.IntN(100) < 15 {
			w.Deadline = ms(1000 + r.IntN(3000)) // may expire while faults last
		}
		if r.IntN(100) < 10 {
			s.DeathAt[i] = 1 + r.IntN(15)
			s.Deaths[i] = Fault{Kind: Death, After: r.IntN(2) == 0}
		}
		if r.IntN(100) < 8 {
			s.StopAt[i] = 1 + r.IntN(12)
		}
		s.Writers = append(s.Writers, w)
	}
	if r.IntN(100) < 3 {
		s.Restart = &Restart{At: ms(r.IntN(window)), Down: ms(100 + r.IntN(5000))}
	}
	if size.Foreign {
		s.Foreign = drawForeign(r, &s)
	}
	return s
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// Fault is the fault request n of writer w meets.
func (s *Schedule) Fault(w, n int) Fault {
	if s.Pinned != nil {
		return s.Pinned[w][n]
	}
	f := s.Profile.Draw(s.Seed, w, n)
	if at, ok := s.DeathAt[w]; ok && at == n {
		d := s.Deaths[w]
		d.Pause = f.Pause
		f = d
	}
	if at, ok := s.StopAt[w]; ok && at == n {
		f.Stop = true
	}
	return f
}

// Drains reports whether the trial has a drain.
func (s *Schedule) Drains() bool {
	return slices.ContainsFunc(s.Writers, func(w Writer) bool { return w.Kind == chaos.Drain })
}

// String prints the schedule in full, as a failing trial reports it.
func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, store %s, %d writers, final render: %t\n", s.Seed, s.Store, len(s.Writers), s.Final)
	if s.Pinned == nil {
		fmt.Fprintf(&b, "  faults: %.0f%% of requests (weights refuse %d, lost %d, cut %d, latency %d, stall %d), pauses before %.0f%%\n",
			s.Profile.Rate*100, s.Profile.Weights[0], s.Profile.Weights[1], s.Profile.Weights[2], s.Profile.Weights[3], s.Profile.Weights[4], s.Profile.PauseRate*100)
	}
	if s.Restart != nil {
		fmt.Fprintf(&b, "  server restart at %v, down for %v\n", s.Restart.At, s.Restart.Down)
	}
	for _, f := range s.Foreign {
		fmt.Fprintf(&b, "  foreign state placed before the writers: %s\n", f.String(s))
	}
	for _, w := range s.Workloads {
		kind := "promise"
		if w.Resource {
			kind = "resource"
		}
		fmt.Fprintf(&b, "  workload %s: %s, set up first: %t\n", w.Name, kind, w.Setup)
	}
	for _, w := range s.Writers {
		fmt.Fprintf(&b, "  writer %d at %v: %s", w.ID, w.At, w.Kind)
		if w.Workload >= 0 {
			fmt.Fprintf(&b, " %s", s.Workloads[w.Workload].Name)
		}
		if w.Kind == chaos.Configure {
			fmt.Fprintf(&b, " files %s pad %d", strings.Join(w.Files, ","), w.Pad)
		}
		switch w.Repeat {
		case -1:
		case -2:
			b.WriteString(" (the setup render's output again)")
		default:
			fmt.Fprintf(&b, " (writer %d's output again)", w.Repeat)
		}
		fmt.Fprintf(&b, ", retry deadline %v", w.Deadline)
		if s.Pinned == nil {
			if at, ok := s.DeathAt[w.ID]; ok {
				fmt.Fprintf(&b, ", %s at request %d", s.Deaths[w.ID], at)
			}
			if at, ok := s.StopAt[w.ID]; ok {
				fmt.Fprintf(&b, ", stop asked at request %d", at)
			}
		}
		b.WriteByte('\n')
		for _, n := range sortedKeys(s.Pinned[w.ID]) {
			fmt.Fprintf(&b, "    request %d: %s\n", n, s.Pinned[w.ID][n])
		}
	}
	return b.String()
}
