package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/render-dev/render/internal/engine"
)

// signalRun is a one-shot command run through Main whose signals come from
// the test: hook is called as the command enters each phase, with the
// render's context (a first signal cancels it) and the signal channel.
type signalRun struct {
	code           int
	stdout, stderr string
	took           time.Duration
	phases         []string
}

func runWithSignals(t *testing.T, args []string, hook func(ctx context.Context, phase string, sigs chan<- os.Signal)) signalRun {
	t.Helper()
	sigs := make(chan os.Signal, 2)
	var out, errb bytes.Buffer
	var r signalRun
	io := IO{Out: &out, Err: &errb, Getenv: func(k string) string { return watchEnv[k] }, Signals: sigs,
		phaseHook: func(ctx context.Context, phase string) {
			r.phases = append(r.phases, phase)
			hook(ctx, phase, sigs)
		}}
	start := time.Now()
	r.code = Main(context.Background(), args, io)
	r.took = time.Since(start)
	r.stdout, r.stderr = out.String(), errb.String()
	return r
}

func (r signalRun) String() string {
	return fmt.Sprintf("exit %d after %v (phases %q)\n--- stdout:\n%s--- stderr:\n%s", r.code, r.took.Round(time.Millisecond), r.phases, r.stdout, r.stderr)
}

// signalAt returns a hook that sends sig as the command enters phase, and
// waits, bounded, until the command has taken it in (its context is done).
func signalAt(t *testing.T, phase string, sig os.Signal) func(context.Context, string, chan<- os.Signal) {
	return func(ctx context.Context, p string, sigs chan<- os.Signal) {
		if p != phase {
			return
		}
		sigs <- sig
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Errorf("the render's context was not cancelled within 10s of %v", sig)
		}
	}
}

// oneShot is a promise workflow with n files and a local store, as watchDirs
// lays it out; args run it once.
func oneShot(t *testing.T, n int) (watchDirs, string, []string) {
	t.Helper()
	repo := filepath.Join(t.TempDir(), "state.git")
	d := newWatchDirs(t, watchLocalStore(repo))
	for i := range n {
		watchWrite(t, filepath.Join(d.output, fmt.Sprintf("f%03d.yaml", i)), watchObj(fmt.Sprintf("v1-%03d", i)))
	}
	args := []string{"--platform", d.platform, "--output", d.output, "--metadata", d.metadata, "--input", d.input}
	return d, repo, args
}

func repoState(t *testing.T, repo string) watchRepoState {
	t.Helper()
	s, err := watchLocalRepo(repo)()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A first signal before publishing stops the render at once: exit 130 for
// SIGINT and 143 for SIGTERM, one line naming the phase, nothing written
// (no repository on a first render, the branch unmoved on a later one).
func TestSignalBeforePublishingWritesNothing(t *testing.T) {
	for _, c := range []struct {
		phase string
		sig   os.Signal
		code  int
	}{
		{engine.PhaseReading, syscall.SIGINT, 130},
		{engine.PhaseReading, syscall.SIGTERM, 143},
		{engine.PhasePlanning, syscall.SIGTERM, 143},
		{engine.PhasePlanning, syscall.SIGINT, 130},
	} {
		t.Run(fmt.Sprintf("%s %v", c.phase, c.sig), func(t *testing.T) {
			d, repo, args := oneShot(t, 20)
			for _, existing := range []bool{false, true} {
				var before watchRepoState
				if existing {
					if r := runWithSignals(t, args, func(context.Context, string, chan<- os.Signal) {}); r.code != 0 {
						t.Fatalf("first render: %s", r)
					}
					before = repoState(t, repo)
					watchWrite(t, filepath.Join(d.output, "new.yaml"), watchObj("new"))
				}
				r := runWithSignals(t, args, signalAt(t, c.phase, c.sig))
				want := fmt.Sprintf("render: %s: stopped while %s: nothing was written\n", signalName(c.sig), c.phase)
				if r.code != c.code || r.stderr != want {
					t.Fatalf("existing=%v: want exit %d and %q, got %s", existing, c.code, want, r)
				}
				if after := repoState(t, repo); after.head != before.head {
					t.Fatalf("existing=%v: the branch moved from %q to %q", existing, before.head, after.head)
				}
				if _, err := os.Stat(repo); !existing && !os.IsNotExist(err) {
					t.Fatalf("a stopped first render created the repository")
				}
			}
		})
	}
}

// A first signal while publishing lets the publish finish, and the last
// line says so; the exit code is the signal's.
func TestSignalWhilePublishingFinishes(t *testing.T) {
	_, repo, args := oneShot(t, 20)
	r := runWithSignals(t, args, signalAt(t, engine.PhasePublishing, syscall.SIGTERM))
	if r.code != 143 || !strings.Contains(r.stderr, "render: SIGTERM while publishing: the publish finished (GitStateStore/default: finished, wrote ") {
		t.Fatalf("want exit 143 and a line saying the publish finished, got %s", r)
	}
	if !strings.Contains(r.stderr, "signal while publishing: finishing the publish under way") {
		t.Errorf("no log line at the signal saying the publish goes on:\n%s", r.stderr)
	}
	st := repoState(t, repo)
	if st.commits != 1 || st.count(".yaml") != 22 { // 20 files and the two canaries
		t.Fatalf("the store holds %d commits and %d files, want 1 and 22: %v", st.commits, st.count(".yaml"), st.files)
	}
	if !strings.Contains(r.stderr, short(st.head)) {
		t.Errorf("the line does not name the commit %s:\n%s", short(st.head), r.stderr)
	}
}

// A second signal exits at once, whatever the render is doing.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	_, repo, args := oneShot(t, 5)
	release := make(chan struct{})
	defer close(release)
	r := runWithSignals(t, args, func(ctx context.Context, phase string, sigs chan<- os.Signal) {
		if phase != engine.PhasePlanning {
			return
		}
		signalAt(t, phase, syscall.SIGTERM)(ctx, phase, sigs)
		sigs <- syscall.SIGINT
		<-release // the render is stuck: only the second signal ends the wait
	})
	if r.code != 130 || !strings.Contains(r.stderr, "render: SIGINT again: exiting at once; nothing had been written\n") {
		t.Fatalf("want exit 130 and a line saying so, got %s", r)
	}
	if r.took > 5*time.Second {
		t.Errorf("the second signal took %v to end the render", r.took)
	}
	if _, err := os.Stat(repo); !os.IsNotExist(err) {
		t.Error("an abandoned first render created the repository")
	}
}

// Drain stops the same way.
func TestSignalStopsDrain(t *testing.T) {
	d, repo, args := oneShot(t, 3)
	if r := runWithSignals(t, args, func(context.Context, string, chan<- os.Signal) {}); r.code != 0 {
		t.Fatalf("render: %s", r)
	}
	before := repoState(t, repo)
	r := runWithSignals(t, []string{"drain", "dev-eu", "--platform", d.platform}, signalAt(t, engine.PhasePlanning, syscall.SIGTERM))
	if want := "render: SIGTERM: stopped while planning: nothing was written\n"; r.code != 143 || r.stderr != want {
		t.Fatalf("want exit 143 and %q, got %s", want, r)
	}
	if after := repoState(t, repo); after.head != before.head {
		t.Fatal("a stopped drain moved the branch")
	}
}

// A first signal does not wait for a read that ignores the context (a file
// or a connection that hangs): before publishing, the exit is prompt.
func TestFirstSignalDoesNotWaitForAStuckRead(t *testing.T) {
	_, repo, args := oneShot(t, 5)
	release := make(chan struct{})
	defer close(release)
	r := runWithSignals(t, args, func(ctx context.Context, phase string, sigs chan<- os.Signal) {
		if phase == engine.PhasePlanning {
			sigs <- syscall.SIGTERM
			<-release // stuck until the test ends
		}
	})
	if want := "render: SIGTERM: stopped while planning: nothing was written\n"; r.code != 143 || r.stderr != want {
		t.Fatalf("want exit 143 and %q, got %s", want, r)
	}
	if r.took > 5*time.Second {
		t.Errorf("the signal took %v to end a stuck render", r.took)
	}
	if _, err := os.Stat(repo); !os.IsNotExist(err) {
		t.Error("a stopped first render created the repository")
	}
}

// timeout(1) delivers its SIGTERM twice at once (to the command and to its
// process group): that is one signal, not a second one.
func TestSameSignalTwiceAtOnceIsOneSignal(t *testing.T) {
	_, _, args := oneShot(t, 5)
	r := runWithSignals(t, args, func(ctx context.Context, phase string, sigs chan<- os.Signal) {
		if phase == engine.PhasePlanning {
			sigs <- syscall.SIGTERM
			sigs <- syscall.SIGTERM
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
				t.Error("the render's context was not cancelled within 10s")
			}
		}
	})
	if want := "render: SIGTERM: stopped while planning: nothing was written\n"; r.code != 143 || r.stderr != want {
		t.Fatalf("want exit 143 and %q, got %s", want, r)
	}
}
