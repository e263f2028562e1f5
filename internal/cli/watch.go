package cli

// Watch mode (--watch) is render as a pipeline sidecar, or by hand while a
// pipeline is being written. It renders once at start, then again whenever
// the output, metadata, input, platform and secrets paths settle, except
// while the output folder is empty or missing. A render whose store failed
// is retried with backoff while the watch goes on; bad input is logged and
// waits for the next change; unscheduled groups are logged, and the next
// render (after, say, a new Destination) places them. The loop itself
// (debounce, one render at a time, backoff, signals) is watcher.Loop; this
// file gives it the engine, metrics, /healthz and the exit codes.
//
// Life cycle: the first SIGTERM or SIGINT (or the cancellation of ctx)
// stops watching. A render in progress finishes, then one last render of
// whatever is on disk runs, and it decides the exit code: 0 when it wrote
// or had nothing to do (unscheduled groups are logged, not an error here),
// 1 when a store failed or watching failed (the files, or serving
// --metrics-addr), 2 for bad input. A second signal exits at once
// with code 130, abandoning the render in progress; a git push or an S3
// upload in flight is either complete or absent, and the next render
// repairs the rest.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/render-dev/render/internal/engine"
	"github.com/render-dev/render/internal/metrics"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/watcher"
	"k8s.io/utils/clock"
)

// watchHooks are what tests replace: the signal source and the backoff.
type watchHooks struct {
	signals <-chan os.Signal
	// backoffMin is the first wait after a failed render; each further
	// failure doubles it, up to backoffMax.
	backoffMin, backoffMax time.Duration
	// clock times the backoff; nil is the real clock. (The watcher keeps
	// the real clock: renders follow real file changes.)
	clock clock.Clock
	// abandoned, if set, is given a channel closed once the render
	// abandoned after a second signal has returned, so tests can wait for
	// it to let go of their folders.
	abandoned func(<-chan struct{})
	// listen, when set, stands for net.Listen for --metrics-addr.
	listen func(network, addr string) (net.Listener, error)
}

// runWatch is watch mode. It handles SIGINT and SIGTERM itself; the
// cancellation of ctx counts as a first signal, which only asks for the
// last render. Renders run on a context that only a second signal cancels.
func runWatch(ctx context.Context, o *renderOptions, io IO, log *slog.Logger) error {
	sigs, release := io.notifySignals()
	defer release()
	return watch(ctx, o, io, log, watchHooks{signals: sigs, backoffMin: time.Second, backoffMax: 30 * time.Second})
}

// outcome is what one render returned.
type outcome struct {
	rep *engine.Report
	err error
}

// watch runs the watch loop (package watcher) with render's engine, its
// metrics and /healthz, and turns the last render into the exit code.
func watch(ctx context.Context, o *renderOptions, io IO, log *slog.Logger, h watchHooks) error {
	m := metrics.New()
	hs := &health{alive: true}
	// stopped gets why the metrics server stopped serving, if it does
	// before watch ends.
	var stopped chan error
	if o.MetricsAddr != "" {
		listen := h.listen
		if listen == nil {
			listen = net.Listen
		}
		ln, err := listen("tcp", o.MetricsAddr)
		if err != nil {
			return &ExitError{Code: ExitStoreFailed, Err: fmt.Errorf("--metrics-addr: %w", err)}
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", m.Handler())
		mux.Handle("/healthz", hs)
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		stopped = make(chan error, 1)
		go func() {
			err := srv.Serve(ln)
			if errors.Is(err, http.ErrServerClosed) {
				return // watch is over
			}
			// Serve only returns when the listener failed: /healthz is
			// gone, and a probe would take the sidecar for dead. Stop as
			// when watching files fails: a last render, then exit 1.
			log.Error("serving /metrics and /healthz stopped", "addr", o.MetricsAddr, "error", err.Error())
			stopped <- fmt.Errorf("--metrics-addr: serving /metrics and /healthz stopped: %w", err)
		}()
		defer srv.Close()
		log.Info("serving /metrics and /healthz", "addr", ln.Addr().String())
	}

	eng := engine.New(o.engineOptions(io, log))
	var res metrics.Result // the last render's
	loop := &watcher.Loop[outcome]{
		Watch: watcher.Options{Paths: watchPaths(o), QuietPeriod: o.QuietPeriod, MaxWait: o.MaxWait, Log: log},
		Render: func(ctx context.Context) outcome {
			rep, err := eng.Render(ctx)
			return outcome{rep, err}
		},
		Rendered: func(out outcome, _ bool) watcher.Next {
			res = m.Observe(out.rep, out.err)
			hs.record(res, renderError(out))
			logRender(log, out, res)
			switch res {
			case metrics.Failed:
				return watcher.Retry
			case metrics.BadInput, metrics.Refused:
				return watcher.WaitForChange
			}
			return watcher.Idle
		},
		// A sidecar starts before the workflow has written anything, and a
		// workflow may write its metadata first: rendering an empty output
		// would empty the workload's folders in the stores until the
		// workflow is done. So an empty output is only ever rendered by
		// the last render, which renders whatever is there.
		Ready: func(last bool) (bool, []any) {
			files := countFiles(o.Output)
			if files == 0 && !last {
				log.Info("the output folder is empty: waiting for files before rendering", "output", o.Output)
			}
			return files > 0, []any{"files", files}
		},
		Stopping:   func() { hs.setAlive(false) },
		Signals:    h.signals,
		Stop:       stopped,
		BackoffMin: h.backoffMin,
		BackoffMax: h.backoffMax,
		Clock:      h.clock,
		Log:        log,
		Abandoned:  h.abandoned,
	}
	last, err := loop.Run(ctx)
	var intr *watcher.InterruptedError
	var start *watcher.StartError
	switch {
	case errors.As(err, &intr):
		log.Error("second signal: exiting now, abandoning the render in progress", "signal", intr.Signal.String(), "exit_code", ExitInterrupted)
		return &ExitError{Code: ExitInterrupted, Err: err}
	case errors.As(err, &start):
		return &ExitError{Code: ExitStoreFailed, Err: start.Err}
	}
	eng.Close()
	return watchExit(last, res, err)
}

// watchPaths are the inputs a render reads: a file (a --platform file) is
// watched through its folder.
func watchPaths(o *renderOptions) []string {
	paths := []string{o.Output, o.Metadata, o.Input}
	paths = append(paths, o.Platform...)
	if o.SecretsDir != "" {
		paths = append(paths, o.SecretsDir)
	}
	return paths
}

// countFiles counts the regular files under dir, for progress logs.
func countFiles(dir string) int {
	n := 0
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return nil
	})
	return n
}

// renderError is a render's problem in one line, or nil.
func renderError(out outcome) error {
	if out.err != nil {
		return out.err
	}
	if out.rep == nil {
		return nil
	}
	var errs []error
	for _, f := range out.rep.Failed() {
		errs = append(errs, f.Err)
	}
	return errors.Join(errs...)
}

// logRender logs what one render did: groups, stores, and the outcome.
func logRender(log *slog.Logger, out outcome, res metrics.Result) {
	var ie *renderer.InputError
	switch {
	case errors.As(out.err, &ie):
		log.Error("bad input: nothing was written", "error", ie.Error())
		return
	case res == metrics.Refused:
		log.Error("refused by the mass-deletion breaker: nothing was written", "error", out.err.Error())
		return
	case out.err != nil:
		log.Error("render failed", "error", out.err.Error())
		return
	}
	rep := out.rep
	if rep.Plan != nil {
		for _, g := range rep.Groups() {
			if len(g.Misscheduled) > 0 {
				// Once per group and render, however many files it has.
				log.Warn("group misscheduled", "group", g.Directory, "destinations", strings.Join(g.Misscheduled, ","), "reason", renderer.MisscheduledLine(g))
			}
			if g.Unscheduled() {
				log.Warn("group unscheduled", "group", g.Directory, "reason", unscheduledLine(g))
				continue
			}
			log.Info("group placed", "group", g.Directory, "files", len(g.Files), "destinations", strings.Join(g.Destinations, ","))
		}
	}
	for _, s := range rep.Stores {
		r := s.Result
		switch {
		case s.Err != nil:
			log.Error("store failed", "store", s.Store.String(), "error", s.Err.Error(), "duration", dur(s.Duration))
		case r.Updated:
			log.Info("store written", "store", s.Store.String(), "revision", short(r.Revision),
				"added", len(r.Added), "changed", len(r.Changed), "deleted", len(r.Deleted), "duration", dur(s.Duration))
		default:
			log.Info("store up to date", "store", s.Store.String(), "duration", dur(s.Duration))
		}
		logPullRequest(log, s)
	}
	log.Info("render done", "result", string(res), "files", rep.Files, "duration", dur(rep.Duration))
}

// dur is a duration for logs: "15ms" in text and JSON alike.
func dur(d time.Duration) string { return d.Round(time.Millisecond).String() }

// watchExit is the exit code of watch mode, from its last render.
func watchExit(out outcome, res metrics.Result, watchErr error) error {
	switch res {
	case metrics.BadInput:
		return &ExitError{Code: ExitBadInput, Err: fmt.Errorf("last render: %v (nothing was written)", renderError(out))}
	case metrics.Failed:
		return &ExitError{Code: ExitStoreFailed, Err: fmt.Errorf("last render: %v", renderError(out))}
	case metrics.Refused:
		return &ExitError{Code: ExitMassDeletion, Err: fmt.Errorf("last render: %v", renderError(out))}
	}
	if watchErr != nil {
		return &ExitError{Code: ExitStoreFailed, Err: watchErr}
	}
	return nil
}

// health answers /healthz: 200 while the watch loop runs, 503 once it is
// stopping; the body names the last render's result and error.
type health struct {
	mu      sync.Mutex
	alive   bool
	renders int
	result  metrics.Result
	at      time.Time
	lastErr string
	errAt   time.Time
}

func (h *health) setAlive(v bool) {
	h.mu.Lock()
	h.alive = v
	h.mu.Unlock()
}

func (h *health) record(res metrics.Result, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.renders++
	h.result, h.at = res, time.Now()
	if err != nil {
		h.lastErr, h.errAt = err.Error(), h.at
	}
}

func (h *health) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if h.alive {
		w.WriteHeader(http.StatusOK)
		fmt.Fprintln(w, "ok: watching")
	} else {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "stopping: last render before exit")
	}
	if h.renders == 0 {
		fmt.Fprintln(w, "last render: none yet")
	} else {
		fmt.Fprintf(w, "last render: %s at %s (%d renders)\n", h.result, h.at.UTC().Format(time.RFC3339), h.renders)
	}
	if h.lastErr != "" {
		fmt.Fprintf(w, "last error: %s at %s\n", h.lastErr, h.errAt.UTC().Format(time.RFC3339))
	}
}
