package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/render-dev/render/statestore/wait"
)

// Destinations of every trial: d1 and d2 nestedByMetadata, d3 with
// filepath mode none (every workload's files flat in one folder), d4
// aggregatedYAML (every workload's documents in one file, which each write
// rebuilds from the workloads' parts). d1 is the one a drain empties.
var (
	dests     = []string{"d1", "d2", "d3", "d4"}
	flatDests = map[string]bool{"d3": true, "d4": true}
	// aggDests are the aggregatedYAML destinations, and their file.
	aggDests = map[string]string{"d4": "aggregated.yaml"}
)

// drained is the destination drains cordon and empty.
const drained = "d1"

// Outcome is what a render's exit says about its update.
type Outcome int

// Outcomes.
const (
	// Landed: exit 0 (or a signal after which the publish finished): the
	// update is in the store unless a later render replaced it.
	Landed Outcome = iota
	// Nothing: the render said nothing was written.
	Nothing
	// Unknown: the render failed, was killed or abandoned its publish: its
	// update is in the store whole, or not at all.
	Unknown
)

func (o Outcome) String() string {
	return [...]string{"landed", "nothing written", "whole or nothing"}[o]
}

// run is one render process of a trial, as it went.
type run struct {
	label    string // "setup w0", "op 3", "final w1"
	key      string // the content key its files carry (data.op)
	kind     OpKind
	workload int // -1 for a drain
	files    []string
	pad      int
	deadline time.Duration
	at       time.Duration // when the trial meant to start it
	signal   *Signal
	stall    *Stall

	start, end time.Duration // since the trial's clock started (setup: negative)
	began      time.Time     // when it started, by the wall clock
	code       int
	signalled  string // the signal the trial sent, if it was sent
	stalled    bool   // the trial stopped it for a while (SIGSTOP, SIGCONT)
	hung       bool   // did not exit in time: killed by the trial
	stdout     string
	stderr     string
	outcome    Outcome
}

func (r *run) String() string {
	s := fmt.Sprintf("%s (%s", r.label, r.kind)
	if len(r.files) > 0 {
		s += " " + strings.Join(r.files, ",")
	}
	s += fmt.Sprintf(") ran %v..%v, exit %d", r.start.Round(time.Millisecond), r.end.Round(time.Millisecond), r.code)
	if r.signalled != "" {
		s += ", sent SIG" + r.signalled
	}
	if r.stalled {
		s += fmt.Sprintf(", stopped %v..%v", r.stall.After, r.stall.After+r.stall.For)
	}
	if r.hung {
		s += ", HUNG"
	}
	return s + ": " + r.outcome.String()
}

// Trial is one schedule run against one store, and what the checker found.
type Trial struct {
	Schedule   Schedule
	Runs       []*run
	Injected   map[string]int // faults injected, by kind (toxics, restart, KILL, TERM, deadline)
	Violations []string
	Took       time.Duration
}

// Failed reports whether the checker found a violation.
func (tr *Trial) Failed() bool { return len(tr.Violations) > 0 }

// Report is a failing trial's whole story: how to replay it, the schedule,
// what each render did and said, and every violation.
func (tr *Trial) Report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "replay: go test ./internal/testinfra/chaos -run 'TestCampaign/%s' -args -store %s -seed %d\n", tr.Schedule.Store, tr.Schedule.Store, tr.Schedule.Seed)
	b.WriteString(tr.Schedule.String())
	b.WriteString("runs:\n")
	for _, r := range tr.Runs {
		fmt.Fprintf(&b, "  %s\n", r)
		for _, l := range strings.Split(strings.TrimSpace(r.stdout+"\n"+r.stderr), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				fmt.Fprintf(&b, "      | %s\n", l)
			}
		}
	}
	b.WriteString("violations:\n")
	for _, v := range tr.Violations {
		fmt.Fprintf(&b, "  - %s\n", v)
	}
	return b.String()
}

// world is one trial's folder: its platforms and each render's inputs.
type world struct {
	dir   string
	bin   string
	sched Schedule
	store target
}

func (w *world) writeFile(rel, data string) error {
	p := filepath.Join(w.dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(data), 0o644)
}

// platform writes the platform folder name, with d1 cordoned or not.
func (w *world) platform(name string, cordon bool) error {
	return w.writeFile(name+"/platform.yaml", PlatformYAML(w.store.kind, w.store.docs, cordon))
}

// document is the file f of a workload as run key writes it.
func document(workload, f, key string, pad int) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s-%s\n  namespace: chaos\ndata:\n  op: %q\n  pad: %q\n",
		workload, f, key, strings.Repeat("x", pad))
}

// command prepares run r's process.
func (w *world) command(r *run, platform string) (*exec.Cmd, error) {
	slug := strings.ReplaceAll(r.label, " ", "-")
	plat := filepath.Join(w.dir, platform)
	args := []string{"--retry-deadline", r.deadline.String()}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KRATIX_") {
			env = append(env, kv)
		}
	}
	if r.kind == Drain {
		args = append([]string{"drain", drained, "--platform", plat, "--allow-mass-deletion"}, args...)
	} else {
		wl := w.sched.Workloads[r.workload]
		for _, d := range []string{"output", "metadata"} {
			if err := os.MkdirAll(filepath.Join(w.dir, slug, d), 0o755); err != nil {
				return nil, err
			}
		}
		for _, f := range r.files {
			if err := w.writeFile(slug+"/output/"+wl.Name+"-"+f+".yaml", document(wl.Name, f, r.key, r.pad)); err != nil {
				return nil, err
			}
		}
		pipeline := "configure"
		if r.kind == Delete {
			pipeline = "delete"
		}
		env = append(env, "KRATIX_WORKFLOW_ACTION="+string(r.kind), "KRATIX_PIPELINE_NAME="+pipeline)
		var object string
		if wl.Resource {
			env = append(env, "KRATIX_WORKFLOW_TYPE=resource", "KRATIX_PROMISE_NAME=db",
				"KRATIX_OBJECT_NAME="+wl.Name, "KRATIX_OBJECT_NAMESPACE=team")
			object = fmt.Sprintf("apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: %s\n  namespace: team\n", wl.Name)
		} else {
			env = append(env, "KRATIX_WORKFLOW_TYPE=promise", "KRATIX_PROMISE_NAME="+wl.Name)
			object = fmt.Sprintf("apiVersion: platform.kratix.io/v1alpha1\nkind: Promise\nmetadata:\n  name: %s\n", wl.Name)
		}
		if err := w.writeFile(slug+"/input/object.yaml", object); err != nil {
			return nil, err
		}
		args = append(args, "--platform", plat,
			"--output", filepath.Join(w.dir, slug, "output"),
			"--metadata", filepath.Join(w.dir, slug, "metadata"),
			"--input", filepath.Join(w.dir, slug, "input"))
	}
	cmd := exec.Command(w.bin, args...)
	cmd.Dir = w.dir
	cmd.Env = env
	return cmd, nil
}

// cleanDeadline is the retry deadline of the renders without faults (the
// setup, the final renders): three to five writers at once that must all
// land, on a machine that may be loaded (at a load average of 40, one push
// to Gitea took 10s, and a burst needs three rounds of pushes: the first,
// the requests of those who lost, the leader's).
const cleanDeadline = 90 * time.Second

// hangLimit is how long past the latest its retry deadline may be moved to
// (wait.Extended: progress of other writers moves it) a render may take
// before the trial calls it hung (a violation) and kills it.
const hangLimit = 90 * time.Second

// exec runs r to its end: started at clock+r.at, signalled as r.signal
// says, killed if it hangs.
func (w *world) exec(clock time.Time, r *run, platform string) error {
	cmd, err := w.command(r, platform)
	if err != nil {
		return err
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	time.Sleep(time.Until(clock.Add(r.at)))
	r.start, r.began = time.Since(clock), time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	var signalled sync.WaitGroup
	if s := r.signal; s != nil {
		signalled.Add(1)
		go func() {
			defer signalled.Done()
			select {
			case <-done:
			case <-time.After(s.After):
				sig := syscall.SIGKILL
				if s.Name == "TERM" {
					sig = syscall.SIGTERM
				}
				if cmd.Process.Signal(sig) == nil {
					r.signalled = s.Name
				}
			}
		}()
	}
	if st := r.stall; st != nil {
		signalled.Add(1)
		go func() {
			defer signalled.Done()
			select {
			case <-done:
				return
			case <-time.After(st.After):
			}
			if cmd.Process.Signal(syscall.SIGSTOP) != nil {
				return
			}
			r.stalled = true
			select {
			case <-done:
			case <-time.After(st.For):
			}
			_ = cmd.Process.Signal(syscall.SIGCONT)
		}()
	}
	hang := time.AfterFunc(wait.Extended(r.deadline)+hangLimit, func() {
		r.hung = true
		cmd.Process.Kill()
	})
	werr := cmd.Wait()
	hang.Stop()
	close(done)
	signalled.Wait()
	r.end = time.Since(clock)
	r.stdout, r.stderr = out.String(), errb.String()
	r.code = cmd.ProcessState.ExitCode()
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) {
		return werr
	}
	r.outcome = outcomeOf(r)
	return nil
}

// outcomeOf reads what a finished render says it did.
func outcomeOf(r *run) Outcome {
	said := r.stdout + r.stderr
	switch {
	case r.code == 0 || r.code == 3:
		return Landed
	case r.code == 143 && strings.Contains(said, "the publish finished (") && !strings.Contains(said, "abandoned"):
		return Landed
	case strings.Contains(said, "nothing was written") || strings.Contains(said, "nothing had been written"):
		return Nothing
	}
	return Unknown
}

// runTrial runs sched against srv and checks the result.
func runTrial(t testing.TB, srv server, bin string, sched Schedule) *Trial {
	t.Helper()
	began := time.Now()
	tr := &Trial{Schedule: sched, Injected: map[string]int{}}
	dir, err := os.MkdirTemp("", fmt.Sprintf("chaos-%s-%d-", sched.Store, sched.Seed))
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	w := &world{dir: dir, bin: bin, sched: sched, store: srv.newStore(t)}
	drain := false
	for _, op := range sched.Ops {
		drain = drain || op.Kind == Drain
	}
	if err := w.platform("platform", false); err != nil {
		t.Fatal(err)
	}
	if err := w.platform("platform-cordoned", true); err != nil {
		t.Fatal(err)
	}
	chaosPlatform := "platform"
	if drain {
		chaosPlatform = "platform-cordoned"
	}
	violate := func(format string, args ...any) {
		tr.Violations = append(tr.Violations, fmt.Sprintf(format, args...))
	}
	// runAll runs rs at once (each at its own r.at after the clock) and
	// waits for every one.
	runAll := func(clock time.Time, rs []*run, platform string) {
		var wg sync.WaitGroup
		for _, r := range rs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := w.exec(clock, r, platform); err != nil {
					violate("%s: could not run render: %v", r.label, err)
				}
			}()
		}
		wg.Wait()
		tr.Runs = append(tr.Runs, rs...)
	}

	// Setup, without faults.
	var setup []*run
	for i, wl := range sched.Workloads {
		if wl.Setup {
			setup = append(setup, &run{label: "setup " + wl.Name, key: fmt.Sprintf("%d/setup-%s", sched.Seed, wl.Name),
				kind: Configure, workload: i, files: setupFiles, pad: setupPad, deadline: cleanDeadline})
		}
	}
	setupClock := time.Now()
	runAll(setupClock, setup, "platform")
	for _, r := range setup {
		r.start, r.end = -2*time.Hour, -time.Hour // before every later run
		if r.outcome != Landed {
			violate("%s failed without faults: exit %d", r.label, r.code)
		}
	}

	// The faults and the renders.
	clock := time.Now()
	var ops []*run
	for _, op := range sched.Ops {
		r := &run{label: fmt.Sprintf("op %d", op.ID), key: fmt.Sprintf("%d/op-%d", sched.Seed, op.ID), kind: op.Kind,
			workload: op.Workload, files: op.Files, pad: op.Pad, deadline: op.Deadline, at: op.At, signal: op.Signal, stall: op.Stall}
		switch op.Repeat {
		case -1:
		case -2:
			r.key = fmt.Sprintf("%d/setup-%s", sched.Seed, sched.Workloads[op.Workload].Name)
		default:
			r.key = ops[op.Repeat].key
		}
		ops = append(ops, r)
	}
	var faults sync.WaitGroup
	var mu sync.Mutex
	// A schedule may draw two restarts whose windows overlap: the second
	// waits for the first to finish, then restarts the server again.
	// (Run at once, their stop and start of the one server raced: the
	// second start found the server still up and the first stop then
	// dropped its pid file, so every later restart of the campaign failed.)
	var restarting sync.Mutex
	count := func(kind string) { mu.Lock(); tr.Injected[kind]++; mu.Unlock() }
	p := srv.proxy()
	for _, f := range sched.Faults {
		faults.Add(1)
		go func() {
			defer faults.Done()
			time.Sleep(time.Until(clock.Add(f.At)))
			if f.Kind == Restart {
				count(string(Restart))
				restarting.Lock()
				err := srv.restart(f.For)
				restarting.Unlock()
				if err != nil {
					mu.Lock()
					violate("restart: %v", err)
					mu.Unlock()
				}
				return
			}
			name, err := p.Add(f.Toxic)
			if err != nil {
				mu.Lock()
				violate("fault %s: %v", f.Toxic, err)
				mu.Unlock()
				return
			}
			count(string(f.Kind))
			time.Sleep(f.For)
			p.Remove(name)
		}()
	}
	stopBusy := func() {}
	if sched.Busy {
		stopBusy = busyLoops(t)
		tr.Injected["busy"]++
	}
	runAll(clock, ops, chaosPlatform)
	stopBusy()
	faults.Wait()
	p.Clear()
	for _, r := range ops {
		if r.signalled != "" {
			tr.Injected["SIG"+r.signalled]++
		}
		if r.stalled {
			tr.Injected["SIGSTOP"]++
		}
		if r.deadline < 20*time.Second {
			tr.Injected["short deadline"]++
		}
		if r.hung {
			violate("%s did not exit within %v (its retry deadline %v, moved on by progress as far as it may be) and %v: killed", r.label, wait.Extended(r.deadline), r.deadline, hangLimit)
		}
		if r.signalled == "" && !r.hung && r.code != 0 && r.code != 1 && !(r.kind == Drain && r.code == 3) {
			violate("%s exited %d, which no fault explains", r.label, r.code)
		}
	}

	// The last clean render of every workload, as the seed says.
	if sched.Final {
		last := map[int]OpKind{}
		for _, op := range sched.Ops { // in start order
			if op.Kind != Drain {
				last[op.Workload] = op.Kind
			}
		}
		var final []*run
		for i, wl := range sched.Workloads {
			kind, ok := last[i]
			if !ok {
				if !wl.Setup {
					continue
				}
				kind = Configure
			}
			r := &run{label: "final " + wl.Name, key: fmt.Sprintf("%d/final-%s", sched.Seed, wl.Name), kind: kind, workload: i, deadline: cleanDeadline}
			if kind == Configure {
				r.files, r.pad = []string{"a", "c"}, 10
			}
			final = append(final, r)
		}
		runAll(clock, final, chaosPlatform)
		for _, r := range final {
			if r.outcome != Landed {
				violate("%s, without faults, exited %d: %s", r.label, r.code, lastLine(r.stderr))
			}
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := w.store.read(ctx, dests)
	if err == nil {
		st.Read = time.Now()
	}
	if err != nil {
		violate("reading the store: %v", err)
	} else {
		tr.Violations = append(tr.Violations, check(sched, tr.Runs, st)...)
	}
	sort.SliceStable(tr.Runs, func(i, j int) bool { return tr.Runs[i].start < tr.Runs[j].start })
	tr.Took = time.Since(began)
	return tr
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// busyLoops keeps every core busy (one busy-loop process per core) until
// the function it returns is called.
func busyLoops(t testing.TB) func() {
	t.Helper()
	var cmds []*exec.Cmd
	for range runtime.NumCPU() {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatalf("busy loop: %v", err)
		}
		cmds = append(cmds, cmd)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			for _, cmd := range cmds {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
