package ownergc

import (
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodegc/nodegc/internal/metricvec"
)

// Label values, each written once: the code that sets a label and the Help
// text that lists its values both use these.
const (
	lookupPresent      = "present"
	lookupAbsent       = "absent"
	lookupCachedAbsent = "cached_absent" // answered without a request
	// lookupCachedPresent: answered without a request by a verdict of a
	// GET of the owner that still holds (presentCache).
	lookupCachedPresent = "cached_present"
	lookupError         = "error"

	queueDelete       = "attempt_to_delete"
	queueOrphan       = "attempt_to_orphan"
	queueGraphChanges = "graph_changes"

	nodesObserved = "observed"
	nodesVirtual  = "virtual" // referenced, never observed
	nodesDeleted  = "deleted" // tombstones still referenced
)

var (
	lookupResults = []string{lookupPresent, lookupAbsent, lookupCachedAbsent, lookupCachedPresent, lookupError}
	workQueues    = []string{queueDelete, queueOrphan}
	allQueues     = append(slices.Clone(workQueues), queueGraphChanges)
	nodeStates    = []string{nodesObserved, nodesVirtual, nodesDeleted}
	// monitorStates is indexed by monitorState.
	monitorStates = []string{stateSyncing: "syncing", stateSynced: "synced", stateFailed: "failed", stateFailing: "failing"}
)

// metrics of the owner GC, registered once by New.
type metrics struct {
	actions         *prometheus.CounterVec
	dryRunActions   *prometheus.CounterVec
	actionErrors    *prometheus.CounterVec
	requests        *prometheus.CounterVec
	lookups         *prometheus.CounterVec
	monitorErrors   *prometheus.CounterVec
	discoveryErrors prometheus.Counter
	attemptDuration *prometheus.HistogramVec
	stuck           *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer, c *Collector) *metrics {
	m := &metrics{
		actions: metricvec.CounterOver("nodegc_owner_gc_actions_total",
			"Writes of the owner GC that succeeded, by action ("+writeActionList()+") and rule.", "action", "rule"),
		dryRunActions: metricvec.CounterOver("nodegc_owner_gc_dry_run_actions_total",
			"Actions the owner GC decided but did not write (dry-run), by action and rule; each object, action and rule counts once per run.", "action", "rule"),
		// At 0 for every action: increase() in NodegcOwnerGCActionErrors
		// does not count a series' first sample.
		actionErrors: metricvec.Counter("nodegc_owner_gc_action_errors_total",
			"Writes of the owner GC that failed for another reason than a changed or missing object,", "action", writeActionNames()),
		requests: metricvec.CounterOver("nodegc_owner_gc_api_requests_total",
			"API requests of the owner GC, by verb as the API server counts them (GET, LIST, WATCH, DELETE, PATCH, POST, ...; NONRESOURCE for discovery) and status class (2xx, 4xx, 5xx, error).", "verb", "code"),
		lookups: metricvec.Counter("nodegc_owner_gc_owner_lookups_total",
			"Verifications of owners the graph has not observed (cached_absent, cached_present: no request),", "result", lookupResults),
		monitorErrors: metricvec.CounterOver("nodegc_owner_gc_monitor_errors_total",
			"List or watch failures of resource monitors (a watch that simply ended is none), by API group and resource.", "group", "resource"),
		discoveryErrors: metricvec.Single("nodegc_owner_gc_discovery_errors_total",
			"API discovery rounds that failed in whole or in part."),
		attemptDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodegc_owner_gc_attempt_duration_seconds",
			Help:    metricvec.Help("Time to process one work item,", "queue", workQueues),
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10), // 0.5ms .. ~131s
		}, []string{"queue"}),
		stuck: metricvec.Gauge("nodegc_owner_gc_stuck_deletions",
			"Objects being deleted with foregroundDeletion or orphan that made no progress for longer than ownerGC.stuckDeletionThreshold,", "reason", stuckReasons),
	}
	reg.MustRegister(m.actions, m.dryRunActions, m.actionErrors, m.requests, m.lookups, m.monitorErrors,
		m.discoveryErrors, m.attemptDuration, m.stuck, &stateCollector{c: c})
	return m
}

// stateCollector exports the state of the current run when scraped.
type stateCollector struct{ c *Collector }

var (
	descGraphNodes = prometheus.NewDesc("nodegc_owner_gc_graph_nodes",
		metricvec.Help("Nodes of the dependency graph (virtual: referenced, never observed; deleted: tombstones still referenced),", "state", nodeStates), []string{"state"}, nil)
	descQueueDepth = prometheus.NewDesc("nodegc_owner_gc_queue_depth",
		metricvec.Help("Items waiting in the owner GC's queues,", "queue", allQueues), []string{"queue"}, nil)
	descMonitors = prometheus.NewDesc("nodegc_owner_gc_monitors",
		metricvec.Help("Resource monitors (failed: never synced, list/watch failing, not holding back collection; failing: synced, list/watch failing now or the graph not caught up since, holding back orphaning and foreground deletions),", "state", monitorStates), []string{"state"}, nil)
	descUnread = prometheus.NewDesc("nodegc_owner_gc_unread_group_versions",
		"API group versions that failed the last discovery round and that this process has never read (since the API server began to serve them): their resources are unknown and have no monitor, so they are in no state of nodegc_owner_gc_monitors, and orphan and foreground deletions wait for them up to ownerGC.unsyncedResourceHold.", nil, nil)
	descSynced = prometheus.NewDesc("nodegc_owner_gc_synced",
		"1 when the owner GC runs and every resource monitor has synced (its initial list is in the graph) or failed (nodegc_owner_gc_monitors{state=\"failed\"}: its resource may be missing from the graph).", nil, nil)
	descRunning = prometheus.NewDesc("nodegc_owner_gc_running",
		"1 while the owner GC runs (in the elected instance).", nil, nil)
	descUndecided = prometheus.NewDesc("nodegc_owner_gc_undecided_items",
		metricvec.Help("Objects with an owner reference the owner GC cannot classify now, neither deleted nor kept until it can (unknown-kind: the owner's kind is unknown to discovery; lookup-error: the owner's lookup fails),", "reason", undecidedReasons), []string{"reason"}, nil)
)

func (s *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descGraphNodes, descQueueDepth, descMonitors, descUnread, descSynced, descRunning, descUndecided} {
		ch <- d
	}
}

func (s *stateCollector) Collect(ch chan<- prometheus.Metric) {
	r := s.c.current.Load()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	var undecided map[string]int
	if r != nil {
		undecided = r.undecided.counts()
	}
	for _, reason := range undecidedReasons {
		gauge(descUndecided, float64(undecided[reason]), reason)
	}
	if r == nil {
		gauge(descRunning, 0)
		gauge(descSynced, 0)
		return
	}
	gauge(descRunning, 1)
	gauge(descSynced, metricvec.Bool(r.synced()))
	observed, virtual, deleted := r.graph.size()
	gauge(descGraphNodes, float64(observed), nodesObserved)
	gauge(descGraphNodes, float64(virtual), nodesVirtual)
	gauge(descGraphNodes, float64(deleted), nodesDeleted)
	gauge(descQueueDepth, float64(r.deletes.Len()), queueDelete)
	gauge(descQueueDepth, float64(r.orphans.Len()), queueOrphan)
	gauge(descQueueDepth, float64(r.events.len()), queueGraphChanges)
	states := r.monitors.states(s.c.clock.Now())
	for st, name := range monitorStates {
		gauge(descMonitors, float64(states[monitorState(st)]), name)
	}
	gauge(descUnread, float64(r.unread.Load()))
}

// setStuck sets the stuck deletions by reason; nil: none.
func (m *metrics) setStuck(counts map[string]int) {
	for _, r := range stuckReasons {
		m.stuck.WithLabelValues(r).Set(float64(counts[r]))
	}
}

// countRequests wraps the API client transport to count requests by verb.
func (m *metrics) countRequests(rt http.RoundTripper) http.RoundTripper {
	return &countingTransport{next: rt, requests: m.requests}
}

type countingTransport struct {
	next     http.RoundTripper
	requests *prometheus.CounterVec
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	code := "error"
	if err == nil {
		code = strconv.Itoa(resp.StatusCode/100) + "xx"
	}
	t.requests.WithLabelValues(requestVerb(req), code).Inc()
	return resp, err
}

// requestVerb names a request as kube-apiserver's apiserver_request_total
// does: LIST and WATCH for collection reads, DELETECOLLECTION, and the HTTP
// method otherwise. Requests outside /api and /apis resources (discovery,
// /version) are NONRESOURCE.
func requestVerb(req *http.Request) string {
	segs := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	var rest []string
	switch {
	case len(segs) >= 2 && segs[0] == "api":
		rest = segs[2:]
	case len(segs) >= 3 && segs[0] == "apis":
		rest = segs[3:]
	}
	if len(rest) == 0 {
		return "NONRESOURCE"
	}
	if rest[0] == "watch" {
		return "WATCH"
	}
	if rest[0] == "namespaces" && len(rest) >= 3 {
		rest = rest[2:]
	}
	collection := len(rest) == 1
	switch req.Method {
	case http.MethodGet:
		if w := req.URL.Query().Get("watch"); w == "true" || w == "1" {
			return "WATCH"
		}
		if collection {
			return "LIST"
		}
		return "GET"
	case http.MethodDelete:
		if collection {
			return "DELETECOLLECTION"
		}
		return "DELETE"
	default:
		return req.Method
	}
}

// writeActionNames names the write actions.
func writeActionNames() []string {
	names := make([]string, 0, numActions)
	for _, a := range writeActions() {
		names = append(names, a.String())
	}
	return names
}

// writeActionList names the write actions, comma-separated.
func writeActionList() string { return strings.Join(writeActionNames(), ", ") }
