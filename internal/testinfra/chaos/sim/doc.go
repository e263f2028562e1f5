// Package sim is render's fault campaign run in one process: the trials of
// internal/testinfra/chaos, with render's real engine and store code as goroutines
// instead of processes, every request meeting a fault drawn from the seed,
// and render's time on a clock the trial controls.
//
// A trial (Generate, runTrial) is drawn from a seed: 2-64 writers (most
// trials a few, some a busy node's worth), three to ten workloads so that
// writers share them, several renders of one workload at about the same
// time, outputs repeated byte for byte, deletes and drains of a cordoned
// destination; most workloads rendered once without faults first; with
// Size.Foreign, foreign state placed in the store before the writers start
// (foreign.go: a Kratix ledger naming another workload's files, a file
// where a folder goes, a forged group-commit request); and, as the seed
// says, a last render of every workload without faults. Each writer runs
// engine.New(...).Render or Drain, as render's command line does, and its
// outcome is read as the command line would exit.
//
// Every request of a writer goes through its Link (link.go; for git, the
// transports gitproto.go installs in go-git's protocol registry): request
// n of writer w meets the fault Profile.Draw(seed, w, n) draws, a pure
// function of the three, so a replay meets the same request with the same
// fault. The faults: the connection refused before the server saw the
// request, the answer lost after the server applied it, the answer cut
// after K bytes, latency, a stall until the writer's deadline (before or
// after the server applied the request), a pause of the writer before the
// request (starvation: 10 ms to 100 s, past an OCI lock's lease), a stop
// asked as SIGTERM asks, the writer's death at a drawn request (it sends
// nothing more: a crash, since render keeps no state of its own), and, in
// a few trials, a restart of the server (such a trial runs alone on a
// second server of the same kind, so that no other trial meets a restart
// its seed did not draw).
//
// The trial's Clock (clock.go) is the wait.Clock of every writer
// (wait.WithClock): backoffs, polls, leases, retry deadlines and the
// context deadlines a write sets. It stands still while any writer computes
// or waits on the server, and jumps to the next wake-up once every writer
// sleeps on it, so a minute of backoff costs no real time. A writer's
// goroutine the clock woke holds it until it is seen again (a request, a
// sleep), for at most Options.Woken while others of the writer's
// goroutines sleep: one that ended, or waits on a sibling asleep on the
// clock, is never seen again.
//
// The servers are real and kept running for a whole campaign, each trial in
// a store of its own: git's smart HTTP protocol served by real git
// (upload-pack and receive-pack --stateless-rpc, as git http-backend and
// Gitea run them; a ref advertisement or a fetch git already answered for
// the same refs and request is answered again from its earlier answer,
// githttp.go), the suite's SSH server in front of real git, MinIO and
// distribution's registry (internal/testinfra/testenv). The git repositories are
// set up as a server set up for cost would be (gitInit: a push's pack
// kept as sent, no fsync, no second look at the repository's own refs in
// a push's connectivity check), none of which a client can see. The final state is read
// straight from the server (go-git, minio-go, oras-go) and checked by
// internal/testinfra/chaos's checker, plus three rules only this campaign can check
// (landing.go): a writer that returned success is in the final state
// (chaos.Check), one that failed and knows its update did not land left
// nothing, and no writer returned more than Options.LandedBound of virtual
// time after its update landed, unless a fault met it since.
//
// A failing trial prints its seed, schedule, every faulted request and
// violation, and the command that replays it; with -seed the test replays
// it with the same draws and shrinks it (Campaign.Shrink: the faults it met
// pinned, then writers and faults dropped one at a time while it still
// fails). Seeds of defects found in other areas and not fixed yet are
// knownFailures: the short campaign leaves them out, -known runs them;
// seeds of defects since fixed are regressionSeeds, which the short
// campaign runs first.
//
// TestSimCampaign is the short campaign that `make test` runs: the four
// stores side by side, each running trials of seeds 1 to shortTrials (at
// most shortWriters writers), two at a time, starting none that would end
// past shortBudget by the mean trial's time so far. `make chaos` runs the
// long one (-seeds, -duration, -max-writers 64, -foreign) after
// internal/testinfra/chaos's process-level campaign, the stores side by side too.
// Each prints a table per store, with the real time of a trial's phases
// and what its writers did meanwhile (Trial.Phases, Trial.Real).
package sim
