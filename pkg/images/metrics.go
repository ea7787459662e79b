package images

import (
	"errors"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodegc/nodegc/internal/gcrun"
	"github.com/nodegc/nodegc/internal/metricvec"
	"github.com/nodegc/nodegc/pkg/config"
)

// Trigger values of a GC run (metric label).
const (
	TriggerThreshold = "threshold" // the fast disk check saw usage at or above the high threshold, or over the low one since it did
	TriggerProjected = "projected" // the fill rate would take the disk to the kubelet's eviction threshold within fillRateHorizon
	TriggerPeriodic  = "periodic"  // the periodic sweep
	TriggerManual    = "manual"    // asked for (tests, future API)
)

// Result values of a GC run (metric label).
const (
	resultSuccess    = "success"
	resultNotEnough  = "not_enough" // FreeDiskSpaceFailed
	resultError      = "error"
	resultDryRun     = "dry_run"
	resultNoCapacity = "invalid_capacity"
)

// The values of each metric label, listed once: they make the Help texts
// and the series exported at 0 from the start (so every family is exported,
// and rates work, before the first run).
var (
	triggers = []string{TriggerThreshold, TriggerProjected, TriggerPeriodic, TriggerManual}
	// loopTriggers are the triggers of the runs Run starts; their series
	// start at 0.
	loopTriggers  = []string{TriggerThreshold, TriggerProjected, TriggerPeriodic}
	results       = []string{resultSuccess, resultNotEnough, resultError, resultDryRun, resultNoCapacity}
	removeReasons = planRemoveReasons()
	keepReasons   = planKeepReasons()
	usageSources  = []string{usageFromEvents, usageFromPolling}
	checkCauses   = []string{checkAtInterval, checkAfterWrite}
	saveResults   = []string{resultSuccess, resultError}
	phases        = []string{phaseFirstRemoval, phaseBelowLow}
	thresholds    = []string{thresholdHigh, thresholdLow, thresholdEviction}
	heldReasons   = []string{heldReconnected, heldProfileUnread}
	apiReads      = []string{readArrivals, readHeld}
	faultSources  = []string{faultInListing, faultInEvent}
	// checkKeepReasons are the reasons the check before a removal keeps
	// an image for (Manager.checkBeforeRemoval).
	checkKeepReasons = []string{KeepInUse, KeepPinned, KeepSandbox, KeepScheduled, KeepExcluded, KeepNewestTags, KeepMinAge, KeepUnreadable}
	checkFailures    = []string{checkFailedHeld, checkFailedError}
)

// Outcomes of the check right before a removal (metric label outcome),
// and why one could not be made (label reason of outcome failed).
const (
	checkPassed      = "passed" // the removal goes on
	checkKept        = "kept"   // the image stays, for a reason (label reason)
	checkWasGone     = "gone"   // another removed the image since the plan
	checkFailed      = "failed" // the check could not be made: the run stops
	checkFailedHeld  = "held"   // removals are held (ErrRemovalsHeld)
	checkFailedError = "error"  // the runtime, containerd or the pod view could not be asked
)

// Reads of containerd's own API that a plan goes on without (metric
// label).
const (
	readArrivals = "arrivals" // when images arrived (ContainerdLayers.Arrivals)
	readHeld     = "held"     // what else holds image storage (ContainerdLayers.Held)
)

// Reasons the image GC holds its removals (metric label; see
// Manager.removalsHeld).
const (
	heldReconnected   = "runtime_reconnected" // the connection was lost since the runtime's config was read
	heldProfileUnread = "profile_unread"      // the runtime's sandbox image could not be read
)

// Causes of a reading of the image filesystem (metric label).
const (
	checkAtInterval = "interval" // every diskCheckInterval
	checkAfterWrite = "write"    // the runtime wrote to its storage (Options.Writes)
)

// Thresholds the image filesystem's usage is compared with (metric label).
const (
	thresholdHigh     = "high"     // imageGC.highThresholdPercent: a GC starts
	thresholdLow      = "low"      // imageGC.lowThresholdPercent: the GC frees down to it
	thresholdEviction = "eviction" // the usage at which the kubelet's evictionHard or evictionSoft (imagefs/nodefs.available) is met
)

// Phases of the reaction to a crossing of the high threshold (metric
// label).
const (
	phaseFirstRemoval = "first_removal"
	phaseBelowLow     = "below_low"
)

// reactionBuckets are the reaction histogram's buckets, in seconds: a
// second's resolution where the guarantee lives, minutes for a GC that
// could not keep up.
var reactionBuckets = []float64{0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 300, 600}

// metrics of the image GC. Create once with newMetrics.
type metrics struct {
	removed         *prometheus.CounterVec
	runs            *gcrun.RunMetrics
	bytesTargeted   prometheus.Counter
	bytesEstimated  prometheus.Counter
	bytesMeasured   prometheus.Counter
	skipped         *prometheus.GaugeVec
	exactAccounting prometheus.Gauge
	usagePercent    prometheus.Gauge
	capacity        prometheus.Gauge
	available       prometheus.Gauge
	usageSource     *prometheus.GaugeVec
	stateSaves      *prometheus.CounterVec
	stateDiscarded  *prometheus.CounterVec
	reaction        *prometheus.HistogramVec
	thresholds      *prometheus.GaugeVec
	diskChecks      *prometheus.CounterVec
	diskCheckErrors prometheus.Counter
	clockSteps      prometheus.Counter
	writesFollowed  prometheus.Gauge
	removalsHeld    *prometheus.GaugeVec
	// diskUnresponsive is 1 while space removals are held because they
	// free nothing on the image filesystem as nodegc reads it.
	diskUnresponsive prometheus.Gauge
	// containerdReadErrors counts the failed reads of containerd's own
	// API that a plan goes on without.
	containerdReadErrors *prometheus.CounterVec
	checkOutcomes        *prometheus.CounterVec
	// evictionAvailable has no labels: a vector so that the series can be
	// removed where no eviction threshold applies.
	evictionAvailable *prometheus.GaugeVec
	// containerIDFaults counts the listings and events that gave
	// containers no ID of their own.
	containerIDFaults *prometheus.CounterVec
}

// newMetrics creates the image GC metrics and registers them into reg.
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		removed: metricvec.Counter("nodegc_image_gc_images_removed_total",
			"Images removed by the image GC (age: unused longer than maximumGCAge; space: disk above the high threshold), with the meaning of kubelet_image_garbage_collected_total,",
			"reason", removeReasons),
		runs: gcrun.NewRunMetrics(reg, "nodegc_image_gc", "Image GC", "from listing to the measurement of freed space", triggers, results),
		bytesTargeted: metricvec.Single("nodegc_image_gc_bytes_targeted_total",
			"Bytes the image GC's runs planned to free for space: what the high threshold asked (down to the low threshold), with what the fill-rate projection adds (trigger projected), less what the same run's age removals free; summed over runs, dry runs left out (as from nodegc_image_gc_bytes_estimated_freed_total)."),
		bytesEstimated: metricvec.Single("nodegc_image_gc_bytes_estimated_freed_total",
			"Bytes the image GC estimated it freed (exact layer accounting on containerd, CRI sizes otherwise), summed over runs."),
		bytesMeasured: metricvec.Single("nodegc_image_gc_bytes_measured_freed_total",
			"Growth of the image filesystem's available bytes from before a run's removals to after they settled, summed over runs (negative changes count as 0); includes whatever else changed there meanwhile, the container GC's removals among them, so it is not to be added to nodegc_container_gc_measured_bytes_freed_total."),
		// Not at 0 from the start: the gauge holds the last plan's counts.
		skipped: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodegc_image_gc_images_skipped",
			Help: metricvec.Help("Images the last image GC plan kept,", "reason", keepReasons),
		}, []string{"reason"}),
		exactAccounting: metricvec.SingleGauge("nodegc_image_gc_exact_accounting",
			"1 when the last image GC run's plan counted each image's layers through containerd (shared layers once, storage held elsewhere left out, content blobs only where the content store is on the image filesystem), 0 when it used CRI image sizes (no containerd API, or a layer could not be read: the first such plan logs why)."),
		usagePercent: metricvec.SingleGauge("nodegc_image_fs_usage_percent",
			"Usage of the image filesystem in percent, as the image GC computes it (100 - available*100/capacity, the available part rounded down: a whole percent, rounded up)."),
		capacity:  metricvec.SingleGauge("nodegc_image_fs_capacity_bytes", "Capacity of the image filesystem."),
		available: metricvec.SingleGauge("nodegc_image_fs_available_bytes", "Available bytes of the image filesystem."),
		// Set once the usage watcher knows whether the stream is open.
		usageSource: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodegc_image_usage_source",
			Help: metricvec.Help("1 for how image last-used times are kept up to date now (the CRI container event stream, or polling ListContainers),", "source", usageSources),
		}, []string{"source"}),
		reaction: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "nodegc_image_gc_reaction_seconds",
			Help: metricvec.Help("Time from a reading that saw the image filesystem at or above the high threshold to the image GC's first removal (first_removal) and to a reading under the low threshold (below_low), once per crossing,",
				"phase", phases),
			Buckets: reactionBuckets,
		}, []string{"phase"}),
		// high and low set from the configuration; eviction on every disk
		// reading (a threshold in bytes is a percentage of the capacity),
		// absent while neither evictionHard nor evictionSoft sets one.
		thresholds: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodegc_image_gc_threshold_percent",
			Help: metricvec.Help("Image filesystem usage in percent at which the image GC starts (high), down to which it frees (low), and at which the kubelet's eviction threshold is met (eviction: the stricter of evictionHard and evictionSoft on imagefs.available and nodefs.available, where a soft one evicts after its grace period; exact, so the rounded-up usage reaches it up to 1% of the capacity before the kubelet evicts: nodegc_image_fs_eviction_available_bytes gives it in bytes), to compare with nodegc_image_fs_usage_percent,",
				"threshold", thresholds),
		}, []string{"threshold"}),
		evictionAvailable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodegc_image_fs_eviction_available_bytes",
			Help: "Available bytes of the image filesystem under which the kubelet's eviction threshold (the stricter of evictionHard and evictionSoft on imagefs.available and nodefs.available; a percentage taken of the current capacity) is met: the kubelet evicts pods while nodegc_image_fs_available_bytes is below it (after the grace period, for a soft threshold), the comparison it makes itself. Absent without such a threshold.",
		}, nil),
		diskChecks: metricvec.Counter("nodegc_image_gc_disk_checks_total",
			"Readings of the image filesystem's usage that may start a run (trigger threshold or projected), every diskCheckInterval (interval) or right after the runtime wrote to its storage (write: a pull's blob or layer, an image record; at most one per 100ms),",
			"cause", checkCauses),
		diskCheckErrors: metricvec.Single("nodegc_image_gc_disk_check_errors_total",
			"Readings of the image filesystem that failed (statfs of its mountpoint, or the runtime's ImageFsInfo): while they fail no threshold or projected run starts, and the nodegc_image_fs_* gauges keep the last reading; the first failure of a streak, one a minute after it, and the recovery are logged."),
		clockSteps: metricvec.Single("nodegc_image_gc_clock_steps_total",
			"Steps of the wall clock (its time moved more than 2s from the monotonic clock's between two readings, or from the time since boot between the state file's write and a start on the same boot) applied to the image usage records, so that images keep their ages."),
		writesFollowed: metricvec.SingleGauge("nodegc_image_gc_runtime_writes_followed",
			"1 while the image GC follows the runtime's writes to its storage (containerd's event stream), each of which has the disk read at once; 0 while only diskCheckInterval does (another runtime, no containerd API, or the stream is being reopened)."),
		removalsHeld: metricvec.Gauge("nodegc_image_gc_removals_held",
			"1 while the image GC removes no image because what it was built for may not hold: the connection to the runtime was lost since the runtime's config was read (runtime_reconnected; set by a run's check, cleared once the agent read it again, or rebuilt the GC for a changed one), or the runtime's sandbox image could not be read (profile_unread; until the agent reads it: every 30s),",
			"reason", heldReasons),
		diskUnresponsive: metricvec.SingleGauge("nodegc_image_gc_disk_unresponsive",
			"1 while the image GC removes no image for space because its space removals (two or more in a row), estimated to free at least 1% of the image filesystem's capacity together, each showed less than a tenth of its own estimate freed on it as nodegc reads it (exact accounting only, never CRI sizes; a statfs right before and after each): nodegc's view of the filesystem is likely not the runtime's (a filesystem mounted at or under its mountpoint on the host after nodegc's container started; restart nodegc's pod); no threshold or projected run starts, and periodic runs make their age removals only. 0 once a reading of it grew by 1% of its capacity since, or the GC is built again."),
		containerdReadErrors: metricvec.Counter("nodegc_image_gc_containerd_read_errors_total",
			"Reads of containerd's own API that failed and that a plan, or the check before a removal, went on without: when images arrived (arrivals; the minimum age of every image then counts from the start of nodegc's current watch at the earliest, and the check keeps the plan's dating), what else holds image storage (held; the estimates then count it as freed); the first failure of a streak, one a minute after, and the recovery are logged,",
			"read", apiReads),
		checkOutcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodegc_image_gc_check_outcomes_total",
			Help: "Outcomes of the image GC's check right before each removal (dry runs too): " + checkPassed + " (the removal goes on), " +
				checkKept + " (a container, a sandbox or a pod bound since the plan uses the image, a name it gained since protects it, it was pulled again since, or containerd can no longer read what it holds; by reason: " +
				strings.Join(checkKeepReasons, ", ") + "), " + checkWasGone + " (another removed it since the plan), " + checkFailed +
				" (the check could not be made and the run stopped; by reason: " + checkFailedHeld + ", removals held, see nodegc_image_gc_removals_held; " +
				checkFailedError + ", the runtime, containerd's API or the pod view could not be asked).",
		}, []string{"outcome", "reason"}),
		containerIDFaults: metricvec.Counter("nodegc_image_gc_container_id_faults_total",
			"Container listings (listing) and container events (event) of the runtime that gave containers no ID of their own (none, or one another container of the same listing or event has too): the runtime misbehaves; each such container keeps its image all the same, and where the runtime gives container statuses, the image GC removes nothing while it knows one (which images it mounts cannot be read); the first, and one a minute after, are logged,",
			"source", faultSources),
		stateSaves: metricvec.Counter("nodegc_image_state_saves_total",
			"Writes of the image usage records (first-detected and last-used times) to the state directory, within seconds of a change (a last-used time that moved less than a minute waits for the next),",
			"result", saveResults),
		stateDiscarded: metricvec.Counter("nodegc_image_state_discarded_total",
			"Image usage records (first-detected and last-used times) discarded at the image GC's start, the state file set aside as images.json.corrupt-<time> or .othernode-<time> (unusable: unreadable, not JSON, or of another version; other_node: written for another node, a disk cloned from a template node or a node renamed): those times start over, so the minimum age keeps every image for that long, and maximumGCAge counts from then,",
			"reason", discardedReasons),
	}
	m.runs.Init(loopTriggers...)
	reg.MustRegister(m.removed, m.bytesTargeted, m.bytesEstimated, m.bytesMeasured,
		m.skipped, m.exactAccounting, m.usagePercent, m.capacity, m.available, m.usageSource, m.stateSaves, m.stateDiscarded, m.reaction, m.thresholds, m.evictionAvailable,
		m.diskChecks, m.diskCheckErrors, m.clockSteps, m.writesFollowed, m.removalsHeld, m.diskUnresponsive, m.containerdReadErrors, m.checkOutcomes, m.containerIDFaults)
	m.checkOutcomes.WithLabelValues(checkPassed, "")
	m.checkOutcomes.WithLabelValues(checkWasGone, "")
	for _, r := range checkKeepReasons {
		m.checkOutcomes.WithLabelValues(checkKept, r)
	}
	for _, r := range checkFailures {
		m.checkOutcomes.WithLabelValues(checkFailed, r)
	}
	for _, p := range phases {
		m.reaction.WithLabelValues(p)
	}
	return m
}

// observeCheck counts an outcome of the check before a removal (keep and
// err as the removalCheck returned them).
func (m *metrics) observeCheck(keep string, err error) {
	switch {
	case errors.Is(err, ErrRemovalsHeld):
		m.checkOutcomes.WithLabelValues(checkFailed, checkFailedHeld).Inc()
	case err != nil:
		m.checkOutcomes.WithLabelValues(checkFailed, checkFailedError).Inc()
	case keep == checkGone:
		m.checkOutcomes.WithLabelValues(checkWasGone, "").Inc()
	case keep != "":
		m.checkOutcomes.WithLabelValues(checkKept, keep).Inc()
	default:
		m.checkOutcomes.WithLabelValues(checkPassed, "").Inc()
	}
}

func (m *metrics) observeDisk(d DiskStats) {
	m.capacity.Set(float64(d.Capacity))
	m.available.Set(float64(d.Available))
	m.usagePercent.Set(float64(d.UsagePercent()))
}

// observePlan records a run's plan; a dry run's target is not counted.
func (m *metrics) observePlan(p *Plan, dryRun bool) {
	m.skipped.Reset()
	for _, d := range p.Keep {
		m.skipped.WithLabelValues(d.Reason).Inc()
	}
	m.skipped.WithLabelValues(KeepNotNeeded).Add(float64(len(p.Spare)))
	if !dryRun {
		m.bytesTargeted.Add(float64(p.BytesToFree))
	}
	m.exactAccounting.Set(metricvec.Bool(p.ExactAccounting))
}

// setThresholds exports the high and low thresholds of the configuration.
func (m *metrics) setThresholds(high, low int) {
	m.thresholds.WithLabelValues(thresholdHigh).Set(float64(high))
	m.thresholds.WithLabelValues(thresholdLow).Set(float64(low))
}

// observeEviction exports the kubelet's eviction threshold on a filesystem
// of that capacity, th: the available bytes under which it is met (evictAt),
// and the usage in percent at which it is; the series are removed when
// there is none (no evictionHard nor evictionSoft on the image
// filesystem, or no capacity).
func (m *metrics) observeEviction(capacity, evictAt uint64, th config.EvictionThreshold, ok bool) {
	if !ok || capacity == 0 {
		m.thresholds.DeleteLabelValues(thresholdEviction)
		m.evictionAvailable.DeleteLabelValues()
		return
	}
	m.thresholds.WithLabelValues(thresholdEviction).Set(evictionUsagePercent(capacity, evictAt, th))
	m.evictionAvailable.WithLabelValues().Set(float64(evictAt))
}

func (m *metrics) setUsageSource(source string) {
	for _, s := range usageSources {
		v := 0.0
		if s == source {
			v = 1
		}
		m.usageSource.WithLabelValues(s).Set(v)
	}
}

func (m *metrics) observeSave(err error) {
	if err != nil {
		m.stateSaves.WithLabelValues(resultError).Inc()
		return
	}
	m.stateSaves.WithLabelValues(resultSuccess).Inc()
}
