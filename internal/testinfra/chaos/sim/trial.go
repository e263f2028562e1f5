package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/render-dev/render/internal/engine"
	"github.com/render-dev/render/internal/testinfra/chaos"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore/bookkeeping"
)

// Options tune how trials run (not what they do: that is the schedule's).
type Options struct {
	// Quiet is the real time nothing must happen before the clock jumps.
	Quiet time.Duration
	// Woken is how long the clock waits for a writer's goroutine it woke
	// to be seen again (a request, a sleep) while others of the writer's
	// goroutines sleep: one that ended, or waits for one of its own that
	// sleeps, is never seen again.
	Woken time.Duration
	// StuckAfter is how long the clock may stand still before the
	// watchdog reports it and moves it.
	StuckAfter time.Duration
	// LandedBound is the most virtual time a writer may take to return
	// after its update landed, when no fault met it meanwhile.
	LandedBound time.Duration
}

// DefaultOptions are the campaign's.
var DefaultOptions = Options{Quiet: time.Millisecond, Woken: time.Second, StuckAfter: 20 * time.Second, LandedBound: 5 * time.Second}

// writerRun is one render of a trial, as it went.
type writerRun struct {
	chaos.Render
	writer int // the schedule's writer, -1 for setup and final renders
	link   *Link
	dead   bool
	err    string // what render said went wrong
	log    string // its log
	// landed is when its update landed (virtual, since the trial's
	// start), when the trial could tell.
	landed    time.Duration
	hasLanded bool
	deadline  time.Duration // its retry deadline
	// sure is set for a render that failed, and knows its update did not
	// land (see run): the checker holds it to leaving nothing.
	sure bool
}

// Trial is one schedule run against one store, and what the checker found.
type Trial struct {
	Schedule   Schedule
	Runs       []*writerRun
	Injected   map[string]int // faults by kind
	Violations []string
	Notes      []string
	// Took is the real time the trial took; Virtual its clock's.
	Took, Virtual time.Duration
	// Jumps counts the clock's moves; Unseen those past a woken
	// goroutine not seen again (Options.Woken), Forced those the
	// watchdog made.
	Jumps, Unseen, Forced int
	// Requests counts the requests the trial's renders sent.
	Requests int
	// Met lists every fault that met a request, by writer and request:
	// what a shrunk replay pins.
	Met map[int]map[int]Fault
	// State is the final state the checker read.
	State *chaos.State
	// Phases is the real time each phase of the trial took, in order;
	// Real the clock's real time by what the writers did.
	Phases []Phase
	Real   RealTimes
}

// Phase is one phase of a trial and the real time it took.
type Phase struct {
	Name string
	Took time.Duration
}

// phase ends the current phase (named name) and starts the next.
func (tr *Trial) phase(name string, since *time.Time) {
	now := time.Now()
	tr.Phases = append(tr.Phases, Phase{name, now.Sub(*since)})
	*since = now
}

// PhaseString is the phases as one line.
func (tr *Trial) PhaseString() string {
	var parts []string
	for _, p := range tr.Phases {
		parts = append(parts, fmt.Sprintf("%s %v", p.Name, p.Took.Round(time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}

// Failed reports whether the checker found a violation.
func (tr *Trial) Failed() bool { return len(tr.Violations) > 0 }

// Report is a failing trial's whole story: how to replay it, the schedule,
// what each writer did and said, and every violation.
func (tr *Trial) Report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "replay and shrink: scripts/testservers.sh with go test ./internal/testinfra/chaos/sim -run 'TestSimCampaign/%s' -v -args -store %s -seed %d -max-writers %d -foreign=%t\n",
		tr.Schedule.Store, tr.Schedule.Store, tr.Schedule.Seed, tr.Schedule.Size.MaxWriters, tr.Schedule.Size.Foreign)
	b.WriteString(tr.Schedule.String())
	b.WriteString("runs:\n")
	for _, r := range tr.Runs {
		fmt.Fprintf(&b, "  %s\n", r)
		if r.link != nil {
			for _, q := range r.link.Requests() {
				if !q.Fault.Zero() || q.Err != "" {
					fmt.Fprintf(&b, "      request %d at %v: %s: %s", q.N, q.At.Round(time.Millisecond), q.What, q.Fault)
					if q.Err != "" {
						fmt.Fprintf(&b, " -> %s", q.Err)
					}
					b.WriteByte('\n')
				}
			}
		}
		for _, l := range strings.Split(strings.TrimSpace(r.err+"\n"+r.log), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				fmt.Fprintf(&b, "      | %s\n", l)
			}
		}
	}
	for _, n := range tr.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	b.WriteString("violations:\n")
	for _, v := range tr.Violations {
		fmt.Fprintf(&b, "  - %s\n", v)
	}
	return b.String()
}

func (r *writerRun) String() string {
	s := fmt.Sprintf("%s (%s", r.Label, r.Kind)
	if len(r.Files) > 0 {
		s += " " + strings.Join(r.Files, ",")
	}
	s += fmt.Sprintf(") ran %v..%v, exit %d", r.Start.Round(time.Millisecond), r.End.Round(time.Millisecond), r.Code)
	if r.dead {
		s += ", DIED"
	}
	if r.sure {
		s += ", failed with no answer lost"
	}
	if r.hasLanded {
		s += fmt.Sprintf(", landed at %v", r.landed.Round(time.Millisecond))
	}
	return s + ": " + r.Outcome.String()
}

// world is one trial's folder, clock and store.
type world struct {
	dir   string
	sched Schedule
	st    *store
	clock *Clock
	opts  Options
	base  time.Time // the start of the faults' phase, on the clock
	mu    sync.Mutex
	notes []string
}

func (w *world) note(s string) {
	w.mu.Lock()
	w.notes = append(w.notes, s)
	w.mu.Unlock()
}

func (w *world) writeFile(rel, data string) error {
	p := filepath.Join(w.dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(data), 0o644)
}

// inputs writes run r's workflow folders and returns its engine options.
func (w *world) inputs(r *writerRun, platform string) (engine.Options, error) {
	slug := strings.ReplaceAll(r.Label, " ", "-")
	opts := engine.Options{Platform: []string{filepath.Join(w.dir, platform)}, RetryDeadline: r.deadline, Version: "sim"}
	env := map[string]string{}
	opts.Getenv = func(k string) string { return env[k] }
	if r.Kind == chaos.Drain {
		opts.AllowMassDeletion = true
		return opts, nil
	}
	wl := w.sched.Workloads[r.Workload]
	for _, d := range []string{"output", "metadata"} {
		if err := os.MkdirAll(filepath.Join(w.dir, slug, d), 0o755); err != nil {
			return opts, err
		}
	}
	for _, f := range r.Files {
		if err := w.writeFile(slug+"/output/"+wl.Name+"-"+f+".yaml", chaos.Document(wl.Name, f, r.Key, r.Pad)); err != nil {
			return opts, err
		}
	}
	pipeline := "configure"
	if r.Kind == chaos.Delete {
		pipeline = "delete"
	}
	env["KRATIX_WORKFLOW_ACTION"], env["KRATIX_PIPELINE_NAME"] = string(r.Kind), pipeline
	var object string
	if wl.Resource {
		env["KRATIX_WORKFLOW_TYPE"], env["KRATIX_PROMISE_NAME"] = "resource", "db"
		env["KRATIX_OBJECT_NAME"], env["KRATIX_OBJECT_NAMESPACE"] = wl.Name, "team"
		object = fmt.Sprintf("apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: %s\n  namespace: team\n", wl.Name)
	} else {
		env["KRATIX_WORKFLOW_TYPE"], env["KRATIX_PROMISE_NAME"] = "promise", wl.Name
		object = fmt.Sprintf("apiVersion: platform.kratix.io/v1alpha1\nkind: Promise\nmetadata:\n  name: %s\n", wl.Name)
	}
	if err := w.writeFile(slug+"/input/object.yaml", object); err != nil {
		return opts, err
	}
	opts.OutputDir = filepath.Join(w.dir, slug, "output")
	opts.MetadataDir = filepath.Join(w.dir, slug, "metadata")
	opts.InputDir = filepath.Join(w.dir, slug, "input")
	return opts, nil
}

// run runs r to its end: started at r.Start on the clock (after the
// phase's base), every request through its Link.
func (w *world) run(ctx context.Context, r *writerRun, platform string, faults func(n int) Fault) {
	opts, err := w.inputs(r, platform)
	if err != nil {
		r.err = "could not prepare render: " + err.Error()
		r.Outcome, r.Code = chaos.Unknown, -1
		return
	}
	ctx, part := w.clock.Join(ctx, r.Label)
	defer part.Leave()
	ctx, die := context.WithCancel(ctx)
	defer die()
	l := &Link{ID: r.writer, clock: w.clock, part: part, faults: faults, die: die, base: w.base, tr: newTransport()}
	defer l.close()
	r.link = l
	ctx = withLink(ctx, l)
	ctx, l.stop = engine.WithStop(ctx)
	var logb bytes.Buffer
	var logMu sync.Mutex
	opts.Log = slog.New(slog.NewTextHandler(lockedWriter{&logb, &logMu}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts.Transport = l
	if err := w.clock.Sleep(ctx, r.Start); err != nil {
		r.err = "could not wait for its start: " + err.Error()
		r.Outcome, r.Code = chaos.Unknown, -1
		return
	}
	r.Start = w.clock.Now().Sub(w.base)
	r.Began = w.clock.Now()
	eng := engine.New(opts)
	var code int
	var msg string
	if r.Kind == chaos.Drain {
		rep, err := eng.Drain(ctx, chaos.Drained)
		code, msg, r.Wrote = drainOutcome(rep, err)
	} else {
		rep, err := eng.Render(ctx)
		code, msg, r.Wrote = renderOutcome(rep, err)
	}
	eng.Close()
	r.End = w.clock.Now().Sub(w.base)
	r.Code, r.err = code, msg
	logMu.Lock()
	r.log = logb.String()
	logMu.Unlock()
	r.dead = l.Dead()
	switch {
	case r.dead:
		r.Outcome = chaos.Unknown
	case code == 0 || code == 3:
		r.Outcome = chaos.Landed
	case strings.Contains(msg, "nothing was written"):
		r.Outcome = chaos.Nothing
	case !slices.ContainsFunc(l.Requests(), func(q *Request) bool { return mayHaveLanded(w.sched.Store, q) }):
		// It failed, and it knows its update did not land: none of its
		// commits succeeded, and none went unanswered. It must have left
		// nothing.
		r.Outcome, r.sure = chaos.Nothing, true
	default:
		r.Outcome = chaos.Unknown
	}
}

type lockedWriter struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// renderOutcome is the exit code and message render's command line gives
// a render's report and error (internal/cli's finish and report), and
// whether it said it wrote.
func renderOutcome(rep *engine.Report, err error) (int, string, bool) {
	if err != nil {
		return errOutcome(err)
	}
	code, msg, wrote, done := storesOutcome(rep.Stores, rep.MassDeletion)
	switch {
	case done && code == 1 && len(rep.BadInput()) > 0:
		return 2, msg, wrote
	case done:
		return code, msg, wrote
	case rep.Plan != nil && len(rep.Unscheduled()) > 0:
		return 3, "unscheduled", wrote
	}
	return 0, "", wrote
}

// drainOutcome is renderOutcome for a drain (internal/cli's runDrain).
func drainOutcome(rep *engine.DrainReport, err error) (int, string, bool) {
	if err != nil {
		return errOutcome(err)
	}
	code, msg, wrote, done := storesOutcome(rep.Stores, rep.MassDeletion)
	if done {
		return code, msg, wrote
	}
	for _, s := range rep.Stuck {
		if s.Blocked {
			return 3, "blocked", wrote
		}
	}
	return 0, "", wrote
}

// errOutcome is the exit code and message of a render or drain that
// returned err, having written nothing.
func errOutcome(err error) (int, string, bool) {
	var ie *renderer.InputError
	var md *bookkeeping.MassDeletionError
	switch {
	case errors.As(err, &ie):
		return 2, fmt.Sprintf("%v (nothing was written)", ie), false
	case errors.As(err, &md):
		return 4, md.Error(), false
	case errors.Is(err, engine.ErrStopped), errors.Is(err, context.Canceled):
		// internal/cli: a render stopped by a signal before it published.
		return 143, "stopped: nothing was written", false
	}
	return 1, err.Error(), false
}

// storesOutcome reads the stores' reports of a render or drain: whether
// one wrote, and, when the outcome is decided by them (done), the exit
// code and message: 1 when a store failed, 4 when the mass-deletion
// breaker refused.
func storesOutcome(stores []engine.StoreReport, md *bookkeeping.MassDeletionError) (code int, msg string, wrote, done bool) {
	var failed []string
	for _, s := range stores {
		if s.Err != nil {
			failed = append(failed, s.Err.Error())
		} else if s.Result.Updated {
			wrote = true
		}
	}
	switch {
	case len(failed) > 0:
		return 1, strings.Join(failed, "\n"), wrote, true
	case md != nil && md.Refused():
		return 4, md.Error(), wrote, true
	}
	return 0, "", wrote, false
}

// noFaults is the fault plan of clean renders.
func noFaults(int) Fault { return Fault{} }

// runTrial runs sched against srv and checks the result.
func runTrial(t testing.TB, srv server, sched Schedule, opts Options) *Trial {
	began := time.Now()
	tr := &Trial{Schedule: sched, Injected: map[string]int{}, Met: map[int]map[int]Fault{}}
	violate := func(format string, args ...any) { tr.Violations = append(tr.Violations, fmt.Sprintf(format, args...)) }
	dir, err := os.MkdirTemp("", fmt.Sprintf("sim-%s-%d-", sched.Store, sched.Seed))
	if err != nil {
		violate("trial folder: %v", err)
		return tr
	}
	defer os.RemoveAll(dir)
	st, err := srv.newStore(fmt.Sprintf("t%d-%s", sched.Seed, filepath.Base(dir)[len(fmt.Sprintf("sim-%s-%d-", sched.Store, sched.Seed)):]))
	if err != nil {
		violate("new store: %v", err)
		return tr
	}
	defer st.cleanup()
	mark := began
	tr.phase("store", &mark)
	w := &world{dir: dir, sched: sched, st: st, opts: opts}
	w.clock = NewClock(time.Now(), opts.Quiet, opts.Woken, opts.StuckAfter, func(s string) { w.note(s) })
	defer w.clock.Close()
	// A trial that ends early (a store it could not set up) keeps its
	// notes too: they say why.
	defer func() {
		w.mu.Lock()
		tr.Notes = w.notes
		w.mu.Unlock()
	}()
	w.base = w.clock.Now()
	for _, p := range []struct {
		name   string
		cordon bool
	}{{"platform", false}, {"platform-cordoned", true}} {
		if err := w.writeFile(p.name+"/platform.yaml", chaos.PlatformYAML(st.kind, st.docs, p.cordon)); err != nil {
			violate("platform: %v", err)
			return tr
		}
	}
	chaosPlatform := "platform"
	if sched.Drains() {
		chaosPlatform = "platform-cordoned"
	}
	ctx := context.Background()
	runAll := func(rs []*writerRun, platform string, faults func(r *writerRun) func(int) Fault) {
		var wg sync.WaitGroup
		for _, r := range rs {
			wg.Go(func() { w.run(ctx, r, platform, faults(r)) })
		}
		wg.Wait()
		tr.Runs = append(tr.Runs, rs...)
	}
	clean := func(*writerRun) func(int) Fault { return noFaults }

	// Setup, without faults.
	var setup []*writerRun
	for i, wl := range sched.Workloads {
		if wl.Setup {
			setup = append(setup, newRun("setup "+wl.Name, fmt.Sprintf("%d/setup-%s", sched.Seed, wl.Name), chaos.Configure, i, chaos.SetupFiles, chaos.SetupPad, time.Minute))
		}
	}
	runAll(setup, "platform", clean)
	tr.phase("setup", &mark)
	for _, r := range setup {
		r.Start, r.End = -2*time.Hour, -time.Hour // before every later run
		if r.Outcome != chaos.Landed {
			violate("%s failed without faults: exit %d: %s", r.Label, r.Code, r.err)
		}
	}

	// Foreign state, as someone else would leave it.
	var foreign []placed
	for _, f := range sched.Foreign {
		p := foreignFiles(sched, f)
		if st.place == nil {
			continue
		}
		if err := st.place(ctx, sched, f, p); err != nil {
			violate("placing foreign state (%s): %v", f.Kind, err)
			return tr
		}
		tr.Injected["foreign"]++
		foreign = append(foreign, p)
	}
	tr.phase("foreign", &mark)
	blocked := func(workload int) bool {
		return slices.ContainsFunc(foreign, func(p placed) bool { return p.blocks == workload })
	}

	// The writers, each request meeting its fault.
	w.base = w.clock.Now()
	var ws []*writerRun
	byID := map[int]*writerRun{}
	for _, wr := range sched.Writers {
		r := newRun(fmt.Sprintf("writer %d", wr.ID), fmt.Sprintf("%d/writer-%d", sched.Seed, wr.ID), wr.Kind, wr.Workload, wr.Files, wr.Pad, wr.Deadline)
		r.writer, r.Start = wr.ID, wr.At
		switch wr.Repeat {
		case -1:
		case -2:
			r.Key = fmt.Sprintf("%d/setup-%s", sched.Seed, sched.Workloads[wr.Workload].Name)
		default:
			if o, ok := byID[wr.Repeat]; ok {
				r.Key = o.Key
			}
		}
		ws = append(ws, r)
		byID[wr.ID] = r
	}
	var restarted sync.WaitGroup
	if rs := sched.Restart; rs != nil {
		restarted.Go(func() {
			ctx, part := w.clock.Join(ctx, "server restart")
			defer part.Leave()
			if err := w.clock.Sleep(ctx, rs.At); err != nil {
				return
			}
			tr.Injected["restart"]++
			if err := srv.restart(func() { w.clock.Sleep(ctx, rs.Down) }); err != nil {
				violate("restart: %v", err)
			}
		})
	}
	runAll(ws, chaosPlatform, func(r *writerRun) func(int) Fault {
		return func(n int) Fault { return sched.Fault(r.writer, n) }
	})
	restarted.Wait()
	tr.phase("writers", &mark)

	// The last clean render of every workload, as the seed says.
	if sched.Final {
		last := map[int]chaos.OpKind{}
		for _, wr := range sched.Writers {
			if wr.Kind != chaos.Drain {
				last[wr.Workload] = wr.Kind
			}
		}
		var final []*writerRun
		for i, wl := range sched.Workloads {
			kind, ok := last[i]
			if !ok {
				if !wl.Setup {
					continue
				}
				kind = chaos.Configure
			}
			r := newRun("final "+wl.Name, fmt.Sprintf("%d/final-%s", sched.Seed, wl.Name), kind, i, nil, 0, 10*time.Minute)
			if kind == chaos.Configure {
				r.Files, r.Pad = []string{"a", "c"}, 10
			}
			r.Start = w.clock.Now().Sub(w.base)
			final = append(final, r)
		}
		runAll(final, chaosPlatform, clean)
		for _, r := range final {
			if r.Outcome != chaos.Landed && !blocked(r.Workload) {
				violate("%s, without faults, exited %d: %s", r.Label, r.Code, lastLine(r.err))
			}
		}
	}

	for _, r := range tr.Runs {
		if r.link == nil {
			continue
		}
		tr.Requests += len(r.link.Requests())
		if r.writer < 0 {
			continue // setup and final renders meet no faults
		}
		for _, q := range r.link.Requests() {
			if q.Fault.Zero() {
				continue
			}
			if tr.Met[r.writer] == nil {
				tr.Met[r.writer] = map[int]Fault{}
			}
			tr.Met[r.writer][q.N] = q.Fault
			if q.Fault.Kind != None {
				tr.Injected[string(q.Fault.Kind)]++
			}
			if q.Fault.Pause > 0 {
				tr.Injected["pause"]++
			}
			if q.Fault.Stop {
				tr.Injected["stop"]++
			}
		}
		if r.deadline < 2*time.Minute {
			tr.Injected["short deadline"]++
		}
	}

	if sched.Final {
		tr.phase("final", &mark)
	}
	landings(sched.Store, tr.Runs)
	tr.Violations = append(tr.Violations, slowReturns(tr.Runs, opts.LandedBound)...)
	rctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	state, err := st.read(rctx)
	if err != nil {
		violate("reading the store: %v", err)
	} else {
		state.Read = w.clock.Now()
		tr.State = state
		for _, p := range foreign {
			tr.Violations = append(tr.Violations, foreignChecks(sched, p, tr.Runs, state)...)
		}
		var renders []chaos.Render
		for _, r := range tr.Runs {
			renders = append(renders, r.Render)
		}
		tr.Violations = append(tr.Violations, chaos.Check(sched.Workloads, renders, state)...)
	}
	tr.phase("check", &mark)
	sort.SliceStable(tr.Runs, func(i, j int) bool { return tr.Runs[i].Start < tr.Runs[j].Start })
	w.clock.mu.Lock()
	tr.Jumps, tr.Unseen, tr.Forced = w.clock.Jumps, w.clock.Unseen, w.clock.Forced
	w.clock.account()
	tr.Real = w.clock.Real
	w.clock.mu.Unlock()
	tr.Virtual = w.clock.Elapsed()
	tr.Took = time.Since(began)
	return tr
}

// newRun is a run before it ran.
func newRun(label, key string, kind chaos.OpKind, workload int, files []string, pad int, deadline time.Duration) *writerRun {
	return &writerRun{writer: -1, deadline: deadline, Render: chaos.Render{Label: label, Key: key, Kind: kind, Workload: workload, Files: files, Pad: pad}}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
