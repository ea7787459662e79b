package ownergc

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// monitorState is where a monitor is on its way to a synced graph.
type monitorState uint8

const (
	stateSyncing monitorState = iota // initial list not yet in the graph
	stateSynced                      // initial list applied to the graph, list/watch working
	stateFailed                      // never synced: list/watch failing for longer than the grace period, or no sync within the sync timeout
	stateFailing                     // synced once, but its list/watch fails now: the graph may miss changes
)

// monitor lists and watches one resource, metadata only, and feeds what
// it sees to the graph builder (see feed).
type monitor struct {
	res    *resource
	cancel context.CancelFunc
	queue  *eventQueue

	// pushMu orders pushes against stop: no event of a stopped monitor
	// reaches the graph after its evResourceGone.
	pushMu  sync.Mutex
	stopped bool

	graphSynced atomic.Bool
	started     time.Time
	// beforeFeed and beforeList are the collector's test hooks
	// (testHooks).
	beforeFeed func(res *resource, obj *metav1.PartialObjectMetadata)
	beforeList func(res *resource)
	// clock times a resumed watch's catch-up (nil: the real clock);
	// catchUpWithin bounds it (0: catchUpWithin).
	clock         clock.Clock
	catchUpWithin time.Duration
	// reported is set once the monitor was logged as failed.
	reported atomic.Bool

	mu sync.Mutex // guards the failure fields
	// failing: the last list or watch failed and none succeeded since
	// (see recovered).
	failing bool
	// relisting: a relist began whose objects the graph has not applied
	// yet (it is in flight, which can last while kube-apiserver's watch
	// cache re-initializes, or its evRelisted is queued). The monitor
	// recovers when that event is applied, not when the list returns or
	// the watch after it opens: until then the graph may lack objects
	// created since the last watch event, and an owner's hold must not end
	// on it.
	relisting bool
	// relistingSince is when relisting last became set.
	relistingSince time.Time
	// errors counts the failures noted (noteError); okAt is its value at
	// the last list that returned or watch that opened. Applying a relist
	// ends a failure only if none came after (the watch opened after a
	// relist can be refused before the builder applies the relist).
	errors, okAt uint32
	// catchingUp: a watch resumed after a failure (see resume), and the
	// graph has not yet applied its events up to catchUp (which the feed
	// clears as it queues evCaughtUp); catchUpAt is errors then. A
	// failure or a relist since makes the mark void.
	catchingUp   bool
	catchUpAt    uint32
	failingSince time.Time
	lastLogged   time.Time

	// catchUp is the resource version a resumed watch must reach, 0 if
	// none is awaited (see resume).
	catchUp atomic.Uint64
}

func (m *monitor) push(ev event) {
	m.pushAll([]event{ev})
}

func (m *monitor) pushAll(evs []event) {
	m.pushMu.Lock()
	defer m.pushMu.Unlock()
	if !m.stopped && len(evs) > 0 {
		m.queue.pushAll(evs)
	}
}

func (m *monitor) markGraphSynced() {
	m.graphSynced.Store(true)
	m.recovered()
}

// recovered records that the graph follows the API server again: the
// first list or a relist is applied (evSynced, evRelisted), unless a list
// or watch failed since that list returned, or a watch that resumed after
// such a failure has not caught up.
func (m *monitor) recovered() {
	m.mu.Lock()
	if m.errors == m.okAt && !m.catchingUp {
		m.failing = false
	}
	m.relisting = false
	m.mu.Unlock()
}

// listing records that a list begins: after the first sync, a relist
// (relisting until the graph has applied it), which supersedes a resumed
// watch's catch-up.
func (m *monitor) listing() {
	if m.graphSynced.Load() {
		m.mu.Lock()
		m.setRelisting()
		m.catchingUp = false
		m.catchUp.Store(0)
		m.mu.Unlock()
	}
}

// listed records that a list returned. Before the first sync that ends a
// failure (the monitor stays syncing until evSynced is applied); a relist
// recovers the monitor only once evRelisted is applied (relisting).
func (m *monitor) listed() {
	m.mu.Lock()
	m.okAt = m.errors
	if m.graphSynced.Load() {
		m.setRelisting()
	} else {
		m.failing = false
	}
	m.mu.Unlock()
}

// setRelisting sets relisting, and when it began if it was not set. The
// caller holds m.mu.
func (m *monitor) setRelisting() {
	if !m.relisting {
		m.relisting, m.relistingSince = true, m.clk().Now()
	}
}

// clk is m's clock (the real clock without one).
func (m *monitor) clk() clock.Clock {
	if m.clock == nil {
		return clock.RealClock{}
	}
	return m.clock
}

// untrustedSince says whether the graph cannot trust the monitor now
// (syncing or failed before its first sync, failing, or relisting), and
// since when it has not without a break.
func (m *monitor) untrustedSince() (time.Time, bool) {
	if !m.graphSynced.Load() {
		return m.started, true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var since time.Time
	untrusted := false
	if m.failing {
		since, untrusted = m.failingSince, true
	}
	if m.relisting && (!untrusted || m.relistingSince.Before(since)) {
		since, untrusted = m.relistingSince, true
	}
	return since, untrusted
}

// relistPending reports whether a relist returned that the graph has not
// applied yet.
func (m *monitor) relistPending() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.relisting
}

// watching records that a watch opened, and reports whether it resumes
// after a failure of a synced monitor (see resume). That includes a watch
// refused after a relist returned and reopened before the graph applied
// it: what was created while it was refused comes behind the relist.
// Otherwise the graph follows the API server again, unless a relist is
// still to be applied (before the first sync, evSynced is what counts).
func (m *monitor) watching() (resumes bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	failedSince := m.errors != m.okAt
	m.okAt = m.errors
	switch {
	case m.failing && m.graphSynced.Load() && (!m.relisting || failedSince):
		// Catching up from now, not once resume has read the version
		// to reach: a relist applied meanwhile must not end the
		// failure.
		m.catchingUp, m.catchUpAt = true, m.errors
		m.catchUp.Store(0)
		return true
	case m.relisting:
	default:
		m.failing = false
	}
	return false
}

// state: synced once its initial list is in the graph, failing when its
// list/watch fails after that; before the first sync, failed when its
// list/watch has kept failing for grace, or when it has not synced within
// timeout (a list that hangs reports no error); syncing otherwise.
func (m *monitor) state(now time.Time, grace, timeout time.Duration) monitorState {
	synced := m.graphSynced.Load()
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case synced && m.failing:
		return stateFailing
	case synced:
		return stateSynced
	case (m.failing && now.Sub(m.failingSince) >= grace) || now.Sub(m.started) >= timeout:
		return stateFailed
	}
	return stateSyncing
}

// stop stops the reflector. With last (evResourceGone: the resource left
// discovery, the graph forgets what the monitor observed;
// evResourceUnmonitored: discovery lists it without list, watch or
// delete, the graph keeps it), that event of m's resource is the last of
// m's to reach the graph.
func (m *monitor) stop(last eventType, final bool) {
	m.cancel()
	m.pushMu.Lock()
	defer m.pushMu.Unlock()
	if final && !m.stopped {
		m.queue.push(event{typ: last, res: m.res})
	}
	m.stopped = true
}

// monitorSet is the set of running monitors. The discovery loop changes it;
// anything may read it; mu guards it whole.
//
// It holds at most one monitor per group and resource, whatever its
// version: the graph tells a monitor's objects by group and resource (see
// node.observedBy), so a monitor's relist or removal acts on every object
// of its resource that it delivered last. Two monitors of one resource at two versions would each
// act on the other's objects: a relist would delete from the graph an
// object created after its list that the other monitor delivered first
// (and its dependents would be collected although it exists), and the
// removal of one would turn every object of the resource virtual while the
// other still watches them (a foreground deletion would stop waiting for
// a blocking dependent that exists).
type monitorSet struct {
	r   *run
	ctx context.Context
	wg  sync.WaitGroup

	mu     sync.Mutex
	byGR   map[schema.GroupResource]*monitor
	closed bool
	// unmonitored are the resources whose monitors stopped while
	// discovery still listed them (see listed in sync), whose objects the
	// graph keeps (builder.resourceUnmonitored) until the resource is
	// monitored again or leaves discovery.
	unmonitored map[schema.GroupResource]*resource
}

func newMonitorSet(ctx context.Context, r *run) *monitorSet {
	return &monitorSet{r: r, ctx: ctx, byGR: map[schema.GroupResource]*monitor{}, unmonitored: map[schema.GroupResource]*resource{}}
}

// get returns the monitor of gr, nil if none.
func (ms *monitorSet) get(gr schema.GroupResource) *monitor {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return ms.byGR[gr]
}

// sync makes the monitors watch resources (one version of each group and
// resource): it starts monitors for new resources and stops those of
// resources that are gone, now picked at another version, or now of
// another kind or scope (see resource.sameAs), except where
// keep says that the monitor's version only failed discovery. A kept
// monitor stays in place of the version discovery picked meanwhile (the
// preferred version failed, another one did not): the monitor of the
// failed version still works, and none starts beside it.
//
// A resource that discovery still lists (listed: with get) but without
// list, watch or delete has its monitor stopped, and the graph keeps its
// objects (evResourceUnmonitored); they are forgotten (evResourceGone)
// once it is no longer listed, or is monitored at another version, kind
// or scope.
func (ms *monitorSet) sync(resources map[schema.GroupResource]*resource, keep func(schema.GroupVersionResource) bool,
	listed func(schema.GroupResource) bool) (added, removed int) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.closed {
		return 0, 0
	}
	if ms.unmonitored == nil {
		ms.unmonitored = map[schema.GroupResource]*resource{}
	}
	for gr, old := range ms.unmonitored {
		res, ok := resources[gr]
		switch {
		case ok && res.sameAs(old):
			// Monitored again: its first list tells what went meanwhile
			// (builder.resourceBack).
		case !ok && (keep(old.gvr) || listed(gr)):
			continue
		default:
			ms.r.events.push(event{typ: evResourceGone, res: old})
		}
		delete(ms.unmonitored, gr)
	}
	for gr, m := range ms.byGR {
		res, ok := resources[gr]
		if (ok && res.sameAs(m.res)) || keep(m.res.gvr) {
			continue
		}
		// Its events so far, then evResourceGone (or
		// evResourceUnmonitored), reach the graph before anything of a
		// monitor started below for another version.
		if !ok && listed(gr) {
			m.stop(evResourceUnmonitored, true)
			ms.unmonitored[gr] = m.res
		} else {
			m.stop(evResourceGone, true)
		}
		delete(ms.byGR, gr)
		removed++
	}
	for gr, res := range resources {
		if _, ok := ms.byGR[gr]; ok {
			continue
		}
		ms.byGR[gr] = ms.start(res)
		added++
	}
	return added, removed
}

// start starts a monitor of res.
func (ms *monitorSet) start(res *resource) *monitor {
	mctx, cancel := context.WithCancel(ms.ctx)
	m := &monitor{res: res, cancel: cancel, queue: ms.r.events, started: ms.r.c.clock.Now(), beforeFeed: ms.r.c.hooks.beforeFeed,
		beforeList: ms.r.c.hooks.beforeList, clock: ms.r.c.clock, catchUpWithin: ms.r.c.catchUpWithin}
	ctrl := cache.New(&cache.Config{
		Queue:             newFeed(m),
		ListerWatcher:     m.listWatch(ms.r.c.watches, func(ctx context.Context, err error) { ms.noteError(ctx, m, err) }),
		ObjectType:        &metav1.PartialObjectMetadata{},
		ObjectDescription: res.gvr.String(),
		Process:           func(any, bool) error { return nil }, // the feed queues nothing
		WatchErrorHandlerWithContext: func(ctx context.Context, _ *cache.Reflector, err error) {
			ms.noteError(ctx, m, err)
		},
	})
	ms.wg.Add(1)
	go func() {
		defer ms.wg.Done()
		ctrl.RunWithContext(mctx)
	}()
	return m
}

// listWatch is the list and watch of m's resource (as metadatainformer
// builds them), telling m when a list or a watch succeeds; the watch error
// handler tells the failures, but for those the reflector retries without
// telling it: a watch refused with 429 (a CRD's storage re-initializing,
// or throttling) or a refused connection (an API server down), which
// silent tells.
//
// Every list is a plain list, consistent and whole (see "# Synced" and
// "# Start-up" in doc.go): not one of any version (resourceVersion=0,
// which a watch cache that cannot initialize answers with an empty list),
// a relist not one from the watch cache at the last version seen (what
// ends a failure must hold every write before it), not in pages, and not
// a streaming list (a watch that sends the objects
// as initial events, client-go's default since 1.35), which costs
// kube-apiserver a deep copy of each object. The collector decodes the
// list as it arrives (readPartialList).
func (m *monitor) listWatch(client *metaClient, silent func(context.Context, error)) cache.ListerWatcher {
	gvr := m.res.gvr
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			m.listing()
			if m.beforeList != nil {
				m.beforeList(m.res)
			}
			// Consistent: not any version (the first list's "0"), nor
			// one not older than the last version seen (a relist's),
			// which the watch cache serves as far as it got, and that
			// may lag what was written before.
			opts.ResourceVersion, opts.ResourceVersionMatch = "", ""
			opts.Limit = 0 // whole, not in pages
			list, err := client.list(ctx, gvr, opts)
			if err != nil {
				return nil, err
			}
			m.listed()
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			retried := func(err error) error {
				if apierrors.IsTooManyRequests(err) || utilnet.IsConnectionRefused(err) {
					silent(ctx, err)
				}
				return err
			}
			w, err := client.watch(ctx, gvr, opts)
			if err != nil {
				return nil, retried(err)
			}
			if m.watching() {
				if err := m.resume(ctx, client); err != nil {
					w.Stop()
					return nil, retried(err)
				}
				w = m.expireUnlessCaughtUp(w)
			}
			// A watch that ends because its version is too old, or too
			// large (etcd restored without a revision bump), is followed
			// by a relist, after the reflector's backoff (up to half a
			// minute): relisting from the moment the watch says so, since
			// the graph misses what changed from then on. The reflector
			// tells no handler of it.
			return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
				if ev.Type == watch.Error {
					err := apierrors.FromObject(ev.Object)
					if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) ||
						apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
						m.listing()
					}
				}
				return ev, true
			}), nil
		},
	}
	return cache.ToListWatcherWithWatchListSemantics(lw, listThenWatch{})
}

// listThenWatch tells the reflector to list, then watch (see listWatch).
type listThenWatch struct{}

func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }

func (m *monitor) pushObject(typ eventType, obj any) {
	if o := slimMeta(obj); o != nil {
		if m.beforeFeed != nil {
			m.beforeFeed(m.res, o)
		}
		m.push(event{typ: typ, seq: fromWatch, obj: o, res: m.res})
		m.passed(o.ResourceVersion)
	}
}

// monitorErrorLogEvery spaces the error logs of a monitor that keeps
// failing.
const monitorErrorLogEvery = time.Minute

// noteError records a list or watch failure of a monitor: counted, logged
// at error level (the first of a run of failures, then once a minute), and
// the monitor is failing until a list or watch succeeds again. Before its
// first sync, once it lasts longer than the grace period the monitor counts
// as failed and stops holding back the collector; after it, the graph may
// miss changes of the resource, which holds back what needs every
// dependent (see holdFinalizer). A watch that simply ended (EOF, or a
// resourceVersion too old: the reflector relists) is no failure.
func (ms *monitorSet) noteError(ctx context.Context, m *monitor, err error) {
	if errors.Is(err, io.EOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		klog.FromContext(ctx).V(4).Info("Resource monitor watch ended", "resource", m.res.gvr.String(), "err", err)
		return
	}
	if ms.ctx.Err() != nil {
		return
	}
	ms.r.c.metrics.monitorErrors.WithLabelValues(m.res.gvr.Group, m.res.gvr.Resource).Inc()
	now := ms.r.c.clock.Now()
	m.mu.Lock()
	m.errors++
	m.catchingUp = false
	m.catchUp.Store(0)
	first := !m.failing
	if first {
		m.failing, m.failingSince = true, now
	}
	logNow := first || now.Sub(m.lastLogged) >= monitorErrorLogEvery
	if logNow {
		m.lastLogged = now
	}
	since := m.failingSince
	m.mu.Unlock()
	if !logNow {
		ms.r.logger.V(4).Info("Resource monitor still failing", "resource", m.res.gvr.String(), "err", err)
		return
	}
	msg := "Resource monitor cannot list or watch; other resources are collected meanwhile"
	if m.graphSynced.Load() {
		msg = "Resource monitor cannot list or watch; orphaning and foreground deletions that may involve it wait"
	}
	ms.r.logger.Error(err, msg, "resource", m.res.gvr.String(), "failingFor", now.Sub(since).Round(time.Second))
}

// unsynced names the monitored resources whose graph cannot be trusted now
// (syncing, failed or failing, or a relist not applied yet) and that could
// hold dependents of an owner
// in namespace ns: every resource for a cluster-scoped owner (ns ""), the
// namespaced ones otherwise (a cluster-scoped object cannot depend on a
// namespaced owner).
func (ms *monitorSet) unsyncedFor(now time.Time, ns string) []string {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	var out []string
	for gr, m := range ms.byGR {
		if ns != "" && !m.res.namespaced {
			continue
		}
		switch st := m.state(now, ms.r.c.failureGrace, ms.r.c.syncTimeout); {
		case st == stateFailing && m.catchingUpNow():
			out = append(out, gr.String()+" (catching up after a failure)")
		case st != stateSynced:
			out = append(out, gr.String()+" ("+monitorStates[st]+")")
		case m.relistPending():
			out = append(out, gr.String()+" (relisting)")
		}
	}
	slices.Sort(out)
	return out
}

// untrustedThrough reports whether a monitor of a resource that could hold
// dependents of an owner in namespace ns (as unsyncedFor) has not been
// trusted by the graph since t or before, without a break: an owner's hold
// that last held at t and then waited for something else goes on from
// where it was (holdSet.pause).
func (ms *monitorSet) untrustedThrough(ns string, t time.Time) bool {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	for _, m := range ms.byGR {
		if ns != "" && !m.res.namespaced {
			continue
		}
		if since, ok := m.untrustedSince(); ok && !since.After(t) {
			return true
		}
	}
	return false
}

// lags reports whether resource gr has a monitor that does not follow the
// API server now: synced, and its list or watch failed since (failing, or
// a resumed watch not caught up), or a relist is to be applied; or
// syncing (a monitor started again, as when its resource came back to
// discovery, has not applied its first list). An owner's absence is proof
// only while its resource's monitor does not lag (see judgeRef); a monitor
// that never synced and failed does not lag: it has nothing to catch up
// on.
func (ms *monitorSet) lags(gr schema.GroupResource, now time.Time) bool {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	m, ok := ms.byGR[gr]
	if !ok {
		return false
	}
	switch m.state(now, ms.r.c.failureGrace, ms.r.c.syncTimeout) {
	case stateFailing, stateSyncing:
		return true
	case stateSynced:
		return m.relistPending()
	}
	return false
}

// synced reports whether every monitor is synced or failed, and there is
// at least one.
func (ms *monitorSet) synced(now time.Time) bool {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.closed || len(ms.byGR) == 0 {
		return false
	}
	synced := true
	for _, m := range ms.byGR {
		switch m.state(now, ms.r.c.failureGrace, ms.r.c.syncTimeout) {
		case stateSyncing:
			synced = false
		case stateFailed:
			if !m.reported.Swap(true) {
				ms.r.logger.Info("Resource monitor has not synced; collecting without it", "resource", m.res.gvr.String(),
					"since", now.Sub(m.started).Round(time.Second))
			}
		}
	}
	return synced
}

// states counts the monitors by state.
func (ms *monitorSet) states(now time.Time) []int {
	counts := make([]int, len(monitorStates))
	ms.mu.Lock()
	defer ms.mu.Unlock()
	for _, m := range ms.byGR {
		counts[m.state(now, ms.r.c.failureGrace, ms.r.c.syncTimeout)]++
	}
	return counts
}

// unsynced names the monitors still syncing, for logs.
func (ms *monitorSet) unsynced(now time.Time) []string {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	var out []string
	for _, m := range ms.byGR {
		if m.state(now, ms.r.c.failureGrace, ms.r.c.syncTimeout) == stateSyncing {
			out = append(out, m.res.gvr.String())
		}
	}
	return out
}

func (ms *monitorSet) len() int {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return len(ms.byGR)
}

// stopAll stops every monitor and waits for their goroutines.
func (ms *monitorSet) stopAll() {
	ms.mu.Lock()
	ms.closed = true
	for _, m := range ms.byGR {
		m.stop(evResourceGone, false)
	}
	ms.mu.Unlock()
	ms.wg.Wait()
}

// slimObject drops what the collector never reads (managed fields, labels,
// annotations), which is most of an object's size, from an object on its
// way to the graph.
func slimObject(obj any) (any, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		m.ManagedFields = nil
		m.Annotations = nil
		m.Labels = nil
		m.GenerateName = ""
	}
	return obj, nil
}
