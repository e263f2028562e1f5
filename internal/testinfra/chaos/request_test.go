package chaos

import (
	"bufio"
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/render-dev/render/internal/testinfra/testenv"
)

// TestKilledRequest: a git writer that lost a race has published its
// update as a group-commit request and is killed while it waits; the
// workload is then rendered again, and lands; then another workload's
// render pushes. The killed writer's older update must not come back (it
// did: the other workload's push folded the dead writer's request over the
// newer render). Found by reading the group-commit protocol against the
// campaign's rule 1; the campaign's schedules reach it only rarely (a kill
// while waiting, then the same workload, then another one).
func TestKilledRequest(t *testing.T) {
	for _, kind := range []Kind{GitHTTP, GitSSH} {
		t.Run(string(kind), func(t *testing.T) {
			srv := sharedServer(t, kind)
			// The later render writes other files than the killed
			// writer read (its record differs from the one the killed
			// writer planned on), or the same files with other bytes
			// (only the files differ).
			t.Run("other files", func(t *testing.T) { killedRequest(t, srv, []string{"a"}) })
			t.Run("same files", func(t *testing.T) { killedRequest(t, srv, setupFiles) })
		})
	}
}

func killedRequest(t *testing.T, srv server, again []string) {
	sched := Schedule{Seed: 1, Workloads: []Workload{{Name: "w0", Setup: true}, {Name: "w1", Setup: true}}}
	w := &world{dir: t.TempDir(), bin: testenv.RenderBinary(t), sched: sched, store: srv.newStore(t)}
	if err := w.platform("platform", false); err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	var runs []*run
	render := func(r *run) {
		t.Helper()
		if err := w.exec(clock, r, "platform"); err != nil || r.code != 0 {
			t.Fatalf("%s: exit %d, %v\n%s%s", r.label, r.code, err, r.stdout, r.stderr)
		}
		runs = append(runs, r)
	}
	for i, wl := range sched.Workloads {
		render(&run{label: "setup " + wl.Name, key: "setup-" + wl.Name, kind: Configure, workload: i, files: setupFiles, pad: setupPad, deadline: time.Minute})
	}

	// The writer: stopped as it starts publishing, while another render
	// moves the branch, then let go: its push is refused and it publishes
	// its request.
	k := &run{label: "killed", key: "killed", kind: Configure, workload: 0, files: []string{"c"}, pad: 1, deadline: time.Minute}
	cmd, err := w.command(k, "platform")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Args = append(cmd.Args, "--log-level", "debug")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	k.start = time.Since(clock)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	publishing := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "phase=publishing") {
				cmd.Process.Signal(syscall.SIGSTOP)
				close(publishing)
				break
			}
		}
		for sc.Scan() {
		}
	}()
	select {
	case <-publishing:
	case <-time.After(time.Minute):
		t.Fatal("the writer did not reach publishing")
	}
	render(&run{label: "other", key: "other", kind: Configure, workload: 1, files: []string{"b"}, pad: 2, deadline: time.Minute})
	cmd.Process.Signal(syscall.SIGCONT)
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := w.store.read(context.Background(), dests)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Leftovers) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the writer published no request")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	k.end, k.code, k.outcome, k.signalled = time.Since(clock), -1, Unknown, "KILL"
	runs = append(runs, k)

	// The workload again, then another workload.
	render(&run{label: "again", key: "again", kind: Configure, workload: 0, files: again, pad: 3, deadline: time.Minute})
	render(&run{label: "last", key: "last", kind: Configure, workload: 1, files: []string{"c"}, pad: 4, deadline: time.Minute})
	st, err := w.store.read(context.Background(), dests)
	if err != nil {
		t.Fatal(err)
	}
	st.Read = time.Now()
	for _, v := range check(sched, runs, st) {
		t.Error(v)
	}
	if t.Failed() {
		for _, r := range runs {
			t.Logf("%s\n%s", r, r.stdout)
		}
	}
}
