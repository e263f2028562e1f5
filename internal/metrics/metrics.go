// Package metrics defines render's Prometheus metrics, on a registry of
// their own, and records what a render did (an *engine.Report) into them.
// Watch mode serves them on /metrics; a one-shot render does not need them.
package metrics

import (
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/render-dev/render/internal/engine"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore/bookkeeping"
)

// Result is how a render ended, as the render_renders_total label says it.
type Result string

// Render results.
const (
	// OK: every store was written or already up to date.
	OK Result = "ok"
	// Failed: at least one store failed (or the render could not run).
	Failed Result = "failed"
	// BadInput: the inputs are invalid; nothing was written.
	BadInput Result = "bad_input"
	// Unscheduled: stores were written but some group matched no destination.
	Unscheduled Result = "unscheduled"
	// Refused: the mass-deletion breaker refused the write; nothing was written.
	Refused Result = "refused"
)

// Store write results, as the render_store_writes_total label says them.
const (
	StoreCommitted = "committed" // a git store got a commit
	StoreUploaded  = "uploaded"  // a bucket got new or deleted objects
	StoreUnchanged = "unchanged" // the store already held the update
	StoreFailed    = "failed"
)

// Classify says how a render ended, from what engine.Render returned.
func Classify(rep *engine.Report, err error) Result {
	var ie *renderer.InputError
	switch {
	case errors.As(err, &ie):
		return BadInput
	case errors.As(err, new(*bookkeeping.MassDeletionError)):
		return Refused
	case err != nil || rep == nil:
		return Failed
	case len(rep.BadInput()) > 0:
		return BadInput
	case len(rep.Failed()) > 0:
		return Failed
	case len(rep.Unscheduled()) > 0:
		return Unscheduled
	}
	return OK
}

// Metrics are render's metrics on their own registry.
type Metrics struct {
	reg            *prometheus.Registry
	renders        *prometheus.CounterVec
	storeWrites    *prometheus.CounterVec
	filesWritten   prometheus.Counter
	renderDuration prometheus.Histogram
	storeDuration  *prometheus.HistogramVec
	unscheduled    prometheus.Gauge
	misscheduled   *prometheus.GaugeVec
	lastSuccess    prometheus.Gauge
}

// New makes the metrics and registers them, with the Go and process
// collectors, on a new registry.
func New() *Metrics {
	// Renders take from milliseconds (a local repository, nothing changed)
	// to minutes (a store retried up to its deadline).
	buckets := []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		renders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "render_renders_total",
			Help: "Renders by result: ok, failed (a store failed), bad_input (nothing written), unscheduled (written, but a group matched no destination).",
		}, []string{"result"}),
		storeWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "render_store_writes_total",
			Help: "Writes per state store by result: committed (git), uploaded (S3), unchanged or failed.",
		}, []string{"store", "result"}),
		filesWritten: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "render_files_written_total",
			Help: "Files added or changed in state stores (deletions not counted).",
		}),
		renderDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "render_render_duration_seconds",
			Help:    "How long a whole render took, from reading the inputs to the last store write.",
			Buckets: buckets,
		}),
		storeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "render_store_write_duration_seconds",
			Help:    "How long one state store's write took.",
			Buckets: buckets,
		}, []string{"store"}),
		unscheduled: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "render_unscheduled_groups",
			Help: "Workload groups the last completed render could not place on any destination.",
		}),
		misscheduled: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "render_misscheduled_groups",
			Help: "Workload groups the last completed render kept on a destination that no longer matches them (misscheduled), per destination; `render prune-misscheduled` removes them.",
		}, []string{"destination"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "render_last_success_timestamp_seconds",
			Help: "Unix time of the last render whose stores were all written (0: none yet).",
		}),
	}
	m.reg.MustRegister(m.renders, m.storeWrites, m.filesWritten, m.renderDuration, m.storeDuration,
		m.unscheduled, m.misscheduled, m.lastSuccess,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	for _, r := range []Result{OK, Failed, BadInput, Unscheduled} {
		m.renders.WithLabelValues(string(r))
	}
	return m
}

// Registry is the registry the metrics are on.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Observe records one render, given what engine.Render returned, and
// returns how it ended. A bad-input render counts only as a render: it
// wrote nothing and leaves the other metrics as they were.
func (m *Metrics) Observe(rep *engine.Report, err error) Result {
	res := Classify(rep, err)
	m.renders.WithLabelValues(string(res)).Inc()
	if rep == nil {
		return res
	}
	m.renderDuration.Observe(rep.Duration.Seconds())
	for _, s := range rep.Stores {
		store := s.Store.String()
		result := StoreUnchanged
		switch {
		case s.Err != nil:
			result = StoreFailed
		case s.Result.Updated && s.Uploads:
			result = StoreUploaded
		case s.Result.Updated:
			result = StoreCommitted
		}
		m.storeWrites.WithLabelValues(store, result).Inc()
		m.storeDuration.WithLabelValues(store).Observe(s.Duration.Seconds())
		if s.Err == nil && s.Result.Updated && !rep.DryRun {
			m.filesWritten.Add(float64(len(s.Result.Added) + len(s.Result.Changed)))
		}
	}
	if rep.Plan != nil {
		m.unscheduled.Set(float64(len(rep.Unscheduled())))
		// The gauge says what the last render kept: destinations it no
		// longer keeps anything misscheduled on go back to zero.
		m.misscheduled.Reset()
		for d, n := range rep.Misscheduled() {
			m.misscheduled.WithLabelValues(d).Set(float64(n))
		}
	}
	if res == OK || res == Unscheduled {
		m.lastSuccess.Set(float64(time.Now().UnixNano()) / 1e9)
	}
	return res
}
