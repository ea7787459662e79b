package gcrun

import (
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RunMetrics count and time a collector's runs:
// <prefix>_runs_total{trigger,result} and
// <prefix>_run_duration_seconds{trigger}; and
// <prefix>_consecutive_runs{result} says how many runs in a row, the last
// one included, ended with the last run's result, so that a collector whose
// runs keep failing can be told from one that failed once, whatever the
// time between its runs.
type RunMetrics struct {
	runs        *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	consecutive *prometheus.GaugeVec
	results     []string

	mu     sync.Mutex
	last   string // the last run's result, "" before the first
	streak int    // runs in a row that ended with last
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
		consecutive: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: prefix + "_consecutive_runs",
			Help: collector + " runs in a row, the last one included, that ended with this result, whatever their trigger: " +
				"the last run's result has the length of its streak, every other result 0 (" + strings.Join(results, ", ") + ").",
		}, []string{"result"}),
		results: results,
	}
	for _, r := range results {
		m.consecutive.WithLabelValues(r)
	}
	reg.MustRegister(m.runs, m.duration, m.consecutive)
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
	m.mu.Lock()
	defer m.mu.Unlock()
	if result != m.last {
		if m.last != "" {
			m.consecutive.WithLabelValues(m.last).Set(0)
		}
		m.last, m.streak = result, 0
	}
	m.streak++
	m.consecutive.WithLabelValues(result).Set(float64(m.streak))
}
