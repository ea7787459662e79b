package containers

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Trigger values of a GC run (metric label).
const (
	TriggerPeriodic = "periodic" // every period
	TriggerManual   = "manual"   // asked for (tests, `nodegc plan`, future API)
)

// Result values of a GC run (metric label).
const (
	ResultSuccess = "success"
	ResultError   = "error" // listing failed, or some removals failed
	ResultDryRun  = "dry_run"
)

// Metrics of the container GC. Create once with NewMetrics.
type Metrics struct {
	containersRemoved *prometheus.CounterVec
	sandboxesRemoved  *prometheus.CounterVec
	logDirsRemoved    *prometheus.CounterVec
	logLinksRemoved   *prometheus.CounterVec
	runs              *prometheus.CounterVec
	duration          *prometheus.HistogramVec
	errors            *prometheus.CounterVec
	containersKept    *prometheus.GaugeVec
	podsAuthoritative prometheus.Gauge
}

// NewMetrics creates the container GC metrics and registers them into reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		containersRemoved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodegc_container_gc_containers_removed_total",
			Help: "Dead containers removed by the container GC, by reason (pod_gone, per_container_limit, node_limit, max_age).",
		}, []string{"reason"}),
		sandboxesRemoved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodegc_container_gc_sandboxes_removed_total",
			Help: "Pod sandboxes removed by the container GC, by reason (pod_gone, superseded).",
		}, []string{"reason"}),
		logDirsRemoved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodegc_container_gc_log_directories_removed_total",
			Help: "Pod log directories removed by the container GC, by reason (pod_gone).",
		}, []string{"reason"}),
		logLinksRemoved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodegc_container_gc_log_links_removed_total",
			Help: "Dangling container log links removed by the container GC, by reason (dangling).",
		}, []string{"reason"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodegc_container_gc_runs_total",
			Help: "Container GC runs, by trigger (periodic, manual) and result (success, error, dry_run).",
		}, []string{"trigger", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodegc_container_gc_run_duration_seconds",
			Help:    "Duration of container GC runs, from listing to the last removal, by trigger.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 10), // 10ms .. ~38s
		}, []string{"trigger"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodegc_container_gc_errors_total",
			Help: "Failed container GC operations, by operation (list_runtime, scan_logs, read_exit_time, container_status, stop_container, remove_container_logs, remove_container, stop_sandbox, remove_sandbox, remove_log_dir, remove_log_link).",
		}, []string{"operation"}),
		containersKept: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodegc_container_gc_containers_kept",
			Help: "Containers the last container GC plan kept, by reason (running, min_age, starting, within_limit, newest_dead, unmanaged).",
		}, []string{"reason"}),
		podsAuthoritative: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodegc_container_gc_pod_view_authoritative",
			Help: "1 when the last container GC run knew which pods exist (synced, reachable API, the Node of its name exists, and the pods the runtime runs are listed); 0 when every pod was assumed to exist.",
		}),
	}
	reg.MustRegister(m.containersRemoved, m.sandboxesRemoved, m.logDirsRemoved, m.logLinksRemoved,
		m.runs, m.duration, m.errors, m.containersKept, m.podsAuthoritative)
	for _, r := range []string{ReasonPodGone, ReasonPerContainerLimit, ReasonNodeLimit, ReasonMaxAge} {
		m.containersRemoved.WithLabelValues(r)
	}
	for _, r := range []string{ReasonPodGone, ReasonSuperseded} {
		m.sandboxesRemoved.WithLabelValues(r)
	}
	m.logDirsRemoved.WithLabelValues(ReasonPodGone)
	m.logLinksRemoved.WithLabelValues(ReasonDangling)
	return m
}

func (m *Metrics) observePlan(p *Plan) {
	m.containersKept.Reset()
	for _, d := range p.KeepContainers {
		m.containersKept.WithLabelValues(d.Reason).Inc()
	}
	v := 0.0
	if p.PodsAuthoritative {
		v = 1
	}
	m.podsAuthoritative.Set(v)
}

func (m *Metrics) observeOutcome(o *Outcome) {
	for op, n := range o.Failures {
		m.errors.WithLabelValues(op).Add(float64(n))
	}
	if o.DryRun {
		return
	}
	for _, d := range o.Containers {
		m.containersRemoved.WithLabelValues(d.Reason).Inc()
	}
	for _, d := range o.Sandboxes {
		m.sandboxesRemoved.WithLabelValues(d.Reason).Inc()
	}
	for _, d := range o.LogDirs {
		m.logDirsRemoved.WithLabelValues(d.Reason).Inc()
	}
	for _, d := range o.LogLinks {
		m.logLinksRemoved.WithLabelValues(d.Reason).Inc()
	}
}
