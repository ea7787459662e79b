package gcrun

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RunMetrics count and time a collector's runs:
// <prefix>_runs_total{trigger,result} and
// <prefix>_run_duration_seconds{trigger}.
type RunMetrics struct {
	runs     *prometheus.CounterVec
	duration *prometheus.HistogramVec
	results  []string
}

// NewRunMetrics creates the run metrics of collector (a display name such
// as "Image GC") and registers them into reg. span says what a run's
// duration covers ("from listing to the last removal"); triggers and
// results are every value of those labels, listed in the Help texts.
func NewRunMetrics(reg prometheus.Registerer, prefix, collector, span string, triggers, results []string) *RunMetrics {
	m := &RunMetrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "_runs_total",
			Help: collector + " runs, by trigger (" + strings.Join(triggers, ", ") + ") and result (" + strings.Join(results, ", ") + ").",
		}, []string{"trigger", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    prefix + "_run_duration_seconds",
			Help:    "Duration of " + strings.ToLower(collector[:1]) + collector[1:] + " runs, " + span + ", by trigger.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 10), // 10ms .. ~38s
		}, []string{"trigger"}),
		results: results,
	}
	reg.MustRegister(m.runs, m.duration)
	return m
}

// Init exports the series of triggers at 0 (every result of runs_total,
// and run_duration_seconds), so that the families exist and rates work
// before the first run: the triggers of the runs a collector starts itself.
func (m *RunMetrics) Init(triggers ...string) {
	for _, t := range triggers {
		m.duration.WithLabelValues(t)
		for _, r := range m.results {
			m.runs.WithLabelValues(t, r)
		}
	}
}

// Observe records one run.
func (m *RunMetrics) Observe(trigger, result string, d time.Duration) {
	m.runs.WithLabelValues(trigger, result).Inc()
	m.duration.WithLabelValues(trigger).Observe(d.Seconds())
}
