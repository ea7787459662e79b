package containers

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodegc/nodegc/internal/gcrun"
	"github.com/nodegc/nodegc/internal/metricvec"
)

// Trigger values of a GC run (metric label).
const (
	TriggerPeriodic = "periodic" // every period
	TriggerManual   = "manual"   // asked for (tests, `nodegc plan`, future API)
)

// Result values of a GC run (metric label).
const (
	resultSuccess = "success"
	resultError   = "error" // listing failed, or some removals failed
	resultDryRun  = "dry_run"
)

// The values of each metric label, listed once: they make the Help texts
// and are exported at 0 from the start.
var (
	triggers               = []string{TriggerPeriodic, TriggerManual}
	results                = []string{resultSuccess, resultError, resultDryRun}
	containerRemoveReasons = []string{ReasonPodGone, ReasonPerContainerLimit, ReasonNodeLimit, ReasonMaxAge}
	sandboxRemoveReasons   = []string{ReasonPodGone, ReasonSuperseded}
	logDirRemoveReasons    = []string{ReasonPodGone}
	logLinkRemoveReasons   = []string{ReasonDangling}
	containerKeepReasons   = []string{KeepRunning, KeepMinAge, KeepStarting, KeepWithinLimit, KeepNewestDead, KeepUnmanaged, KeepIDFault, KeepLogsUnseen}
	operations             = []string{OpListRuntime, OpScanLogs, OpReadExitTime, OpReadVersion, OpReadBytes, OpContainerStatus, OpStopContainer, OpRemoveLogs,
		OpRemoveContainer, OpSandboxStatus, OpStopSandbox, OpRemoveSandbox, OpRemoveLogDir, OpRemoveLogLink, OpReclaim}
	// streakOperations: the operations whose failure leaves the run a
	// success, each with a streak of runs it failed in
	// (nodegc_container_gc_operation_failing_runs).
	streakOperations = []string{OpReadExitTime, OpReadVersion, OpReclaim}
	byteKinds        = []string{KindWritableLayer, KindContainerLogs, KindPodLogDirectory}
	filesystems      = []string{FSWritableLayers, FSPodLogs, FSWritableLayersAndPodLogs}
	listings         = []string{listingContainers, listingSandboxes}
	skipReasons      = []string{SkipStarted, SkipChanged, SkipPodFailed, SkipSandboxInUse, SkipGone, SkipPointsAgain, SkipLogsElsewhere}
)

// The listings an ID fault is counted for.
const (
	listingContainers = "containers"
	listingSandboxes  = "sandboxes"
)

// metrics of the container GC. Create once with newMetrics.
type metrics struct {
	containersRemoved *prometheus.CounterVec
	sandboxesRemoved  *prometheus.CounterVec
	logDirsRemoved    *prometheus.CounterVec
	logLinksRemoved   *prometheus.CounterVec
	// skipped counts the planned removals the check right before each
	// did not do (Outcome.Skipped), by why.
	skipped *prometheus.CounterVec
	runs    *gcrun.RunMetrics
	errors  *prometheus.CounterVec
	// failingRuns is, per streakOperations, the runs in a row that it
	// failed in (ops.end).
	failingRuns       *prometheus.GaugeVec
	containersKept    *prometheus.GaugeVec
	podsAuthoritative prometheus.Gauge
	// podViewNodeOnly is 1 for an agent without a pod source.
	podViewNodeOnly prometheus.Gauge
	// podLogsUnseen is 1 while the last snapshot found the pod logs
	// unseen (NodeState.PodLogsUnseen).
	podLogsUnseen prometheus.Gauge
	bytesFreed    *prometheus.CounterVec
	bytesMeasured *prometheus.CounterVec
	// idFaults counts the listings that gave containers
	// (Plan.ContainerIDFaults) or sandboxes (Plan.SandboxIDFaults) no ID
	// of their own.
	idFaults *prometheus.CounterVec
}

// newMetrics creates the container GC metrics and registers them into reg.
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		containersRemoved: metricvec.Counter("nodegc_container_gc_containers_removed_total",
			"Dead containers removed by the container GC,", "reason", containerRemoveReasons),
		sandboxesRemoved: metricvec.Counter("nodegc_container_gc_sandboxes_removed_total",
			"Pod sandboxes removed by the container GC,", "reason", sandboxRemoveReasons),
		logDirsRemoved: metricvec.Counter("nodegc_container_gc_log_directories_removed_total",
			"Pod log directories removed by the container GC,", "reason", logDirRemoveReasons),
		logLinksRemoved: metricvec.Counter("nodegc_container_gc_log_links_removed_total",
			"Dangling container log links removed by the container GC,", "reason", logLinkRemoveReasons),
		skipped: metricvec.Counter("nodegc_container_gc_removals_skipped_total",
			"Planned removals (of containers, sandboxes, pod log directories and log links) that the check right before each did not do, though nothing failed: the container started or changed state (started: also a dangling log link whose container has not exited), another removed it, a removal of its pod failed or a container of its sandbox stays, a link points at a log again, or a live pod's container logs outside the pod logs directory (logs_elsewhere: left to the kubelet's GC),",
			"why", skipReasons),
		runs: gcrun.NewRunMetrics(reg, "nodegc_container_gc", "Container GC", "from listing to the last removal", triggers, results),
		errors: metricvec.Counter("nodegc_container_gc_errors_total",
			"Failed container GC operations,", "operation", operations),
		failingRuns: metricvec.Gauge("nodegc_container_gc_operation_failing_runs",
			"Container GC runs in a row in which the operation failed, for the operations whose failure leaves the run a success: 0 after a run in which it was done and did not fail, unchanged by a run that did not do it (reclaim follows only a run that removed something, read_exit_time needs a dead container to date),",
			"operation", streakOperations),
		containersKept: metricvec.Gauge("nodegc_container_gc_containers_kept",
			"Containers the last container GC plan kept,", "reason", containerKeepReasons),
		podsAuthoritative: metricvec.SingleGauge("nodegc_container_gc_pod_view_authoritative",
			"1 when the last container GC run knew which pods exist (synced, reachable API, the Node of its name exists, the pods the runtime runs are listed, and, when something would go as its pod is gone, the Node's lease is fresh); 0 when every pod was assumed to exist, and while the Node's lease was last read stale or unreadable."),
		podViewNodeOnly: metricvec.SingleGauge("nodegc_container_gc_pod_view_node_only",
			"1 when the agent runs without API access (node-only): it knows no pod view, assumes every pod exists, and nodegc_container_gc_pod_view_authoritative is 0 for as long as it runs, by design; 0 when it has a pod view."),
		podLogsUnseen: metricvec.SingleGauge("nodegc_container_gc_pod_logs_unseen",
			"1 while the last container GC snapshot found that nodegc does not see a running container's log under the pod logs directory, that the runtime writes it outside that directory, or could not ask the runtime where it is: its view of that directory is not the kubelet's (a filesystem mounted there on the host after nodegc's container started: restart nodegc's pod; a kubelet podLogsDir other than containerGC.podLogsDirectory: set it), and no log link, pod log directory or log file is removed, nor a live pod's container that a limit or maxAge would remove; 0 otherwise."),
		bytesFreed: metricvec.Counter("nodegc_container_gc_bytes_freed_total",
			"Bytes freed by the container GC's removals that succeeded, as estimated when planning (writable layers: the runtime's snapshot usage, 0 where it is unknown; container logs: allocated blocks), pod log directories as they were right before their removal (allocated blocks),",
			"kind", byteKinds),
		bytesMeasured: metricvec.Counter("nodegc_container_gc_measured_bytes_freed_total",
			"Growth of a filesystem's available bytes from before a container GC run planned to after its removals settled, summed over runs that removed something (negative changes count as 0); it includes whatever else changed on that filesystem meanwhile,",
			"filesystem", filesystems),
		idFaults: metricvec.Counter("nodegc_container_gc_container_id_faults_total",
			"Listings of the runtime's containers or sandboxes, one of each per container GC plan, that gave some no ID of their own (none, or one another listed entry that differs has too): the runtime misbehaves; every such container or sandbox is kept (kept reason "+KeepIDFault+"), with its pod's log directory (and a container's sandbox), as removing it by ID could remove another; the first of each listing, and one a minute after, are logged with a few of them,",
			"listing", listings),
	}
	m.runs.Init(TriggerPeriodic) // the runs Run starts: exported before the first ends
	reg.MustRegister(m.containersRemoved, m.sandboxesRemoved, m.logDirsRemoved, m.logLinksRemoved, m.skipped,
		m.errors, m.failingRuns, m.containersKept, m.podsAuthoritative, m.podViewNodeOnly, m.podLogsUnseen, m.bytesFreed, m.bytesMeasured, m.idFaults)
	return m
}

// observePlan sets the kept gauge to the plan's count of each reason (0
// for a reason the plan has none of).
func (m *metrics) observePlan(p *Plan) {
	m.containersKept.Reset()
	for _, r := range containerKeepReasons {
		m.containersKept.WithLabelValues(r).Set(0)
	}
	for _, d := range p.KeepContainers {
		m.containersKept.WithLabelValues(d.Reason).Inc()
	}
	m.observeView(p.PodsAuthoritative)
}

// observeView sets whether the pod view is authoritative.
func (m *metrics) observeView(authoritative bool) {
	v := 0.0
	if authoritative {
		v = 1
	}
	m.podsAuthoritative.Set(v)
}

func (m *metrics) observeOutcome(o *Outcome) {
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
	for _, s := range o.Skipped {
		m.skipped.WithLabelValues(s.Why).Inc()
	}
	for kind, n := range o.Bytes().ByKind() {
		m.bytesFreed.WithLabelValues(kind).Add(float64(n))
	}
}

// observeFilesystems counts the measured growth of free space (none for a
// run that did not remove anything, or in dry-run: not measured).
func (m *metrics) observeFilesystems(fss []FilesystemChange) {
	for _, f := range fss {
		if f.Measured && f.MeasuredFreed > 0 {
			m.bytesMeasured.WithLabelValues(f.Filesystem).Add(float64(f.MeasuredFreed))
		}
	}
}

// ops records, within one run, which of streakOperations were done and
// which failed; end sets their streaks (metrics.failingRuns).
type ops struct {
	tried, failed map[string]bool
	streak        map[string]int
}

// begin forgets what an earlier run or plan did.
func (o *ops) begin() {
	o.tried, o.failed = map[string]bool{}, map[string]bool{}
	if o.streak == nil {
		o.streak = map[string]int{}
	}
}

// done records that op was done, and whether it failed.
func (o *ops) done(op string, failed bool) {
	if o.tried == nil {
		o.begin()
	}
	o.tried[op] = true
	o.failed[op] = o.failed[op] || failed
}

// end sets each operation's streak after a run: one more when it failed,
// 0 when it was done without failing, unchanged when it was not done.
func (o *ops) end(m *metrics) {
	for _, op := range streakOperations {
		switch {
		case o.failed[op]:
			o.streak[op]++
		case o.tried[op]:
			o.streak[op] = 0
		}
		m.failingRuns.WithLabelValues(op).Set(float64(o.streak[op]))
	}
}
