package ownergc

import (
	"context"
	"errors"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// maxRetryDelay caps the per-item backoff of both work queues.
const maxRetryDelay = 5 * time.Minute

// maxUnmonitoredPoll caps the interval between reads of an object kept
// unmonitored that is being deleted and waited on (processUnmonitored):
// two GETs per read, so 10,000 such objects cost about 33 a second at
// most, and the collector learns they went within 10 minutes.
const maxUnmonitoredPoll = 10 * time.Minute

// idleUnmonitoredPoll is the interval between reads of an object kept
// unmonitored that is being deleted and not waited on (someone else's
// finalizer, nothing of the collector's): 10,000 such objects cost about
// 5.5 GETs a second, and a foregroundDeletion or orphan finalizer that a
// later DELETE adds to it is seen within the hour.
const idleUnmonitoredPoll = time.Hour

// retryQPS and retryBurst bound the retries of each work queue together
// (a token bucket beside the per-item backoff, the larger delay wins), as
// kube-controller-manager's DefaultTypedControllerRateLimiter does: a
// great many items that cannot be decided (owner lookups that fail) or
// written (a webhook denying every delete) are retried at this rate at
// most, not each at its own, and leave the client's budget (kubeAPIQPS)
// to the rest. Only retries go through it (AddRateLimited): an item that
// events, a wake or a discovery round queue is added at once.
const (
	retryQPS   = 10
	retryBurst = 100
)

// graphBatch is the most events applied under one write lock.
const graphBatch = 256

// run is the state of one Run: a fresh graph, queues and monitors.
type run struct {
	c      *Collector
	logger klog.Logger
	// started is when the Run began (on the collector's clock): this
	// instance has led since then.
	started time.Time

	graph   *graph
	events  *eventQueue
	builder *builder
	deletes workqueue.TypedRateLimitingInterface[types.UID]
	orphans workqueue.TypedRateLimitingInterface[types.UID]
	// recheck paces the re-verification of owners found by a lookup but
	// not (yet) observed whose verdict is not kept (deleting in the
	// foreground); present ones are the owners' own (presentCache).
	recheck workqueue.TypedRateLimiter[types.UID]
	// polls paces the reads of objects kept unmonitored that are being
	// deleted and waited on (processUnmonitored): from a second, doubling
	// to maxUnmonitoredPoll.
	polls workqueue.TypedRateLimiter[types.UID]

	monitors   *monitorSet
	snapshot   atomic.Pointer[discoverySnapshot]
	discovered atomic.Bool
	// roundsStarted counts discovery rounds begun; roundDone is the number
	// of the last one that completed, roundFailed of the last one that
	// failed whole (no group read); undiscovered names the group versions
	// the last round could not read that hold finalizers (those that served
	// a monitored resource at their last read in this process, or were
	// never read: groupVersions.learn), unread how many of those were
	// never read: they have no monitor. kick asks for a round now.
	roundsStarted, roundDone atomic.Uint64
	roundFailed              atomic.Uint64
	undiscovered             atomic.Pointer[[]string]
	unread                   atomic.Int64
	kick                     chan struct{}
	holds                    holdSet

	recorder  record.EventRecorder
	absent    *absentCache
	present   presentCache
	flights   flights
	lag       lagWaits // dependents waiting for their owner's watch (ownerWatchBehind)
	parked    parkedSet
	undecided undecidedSet

	// active counts work items being processed, applying whether the
	// builder is applying a batch (for tests waiting for quiet).
	active   atomic.Int32
	applying atomic.Bool
	// deletePool and orphanPool follow each queue's workers (Stalled),
	// once working says they started.
	deletePool, orphanPool pool
	working                atomic.Bool

	// reported holds the Warnings about owner references already reported
	// in this run (reportKey).
	reported sync.Map
	// recorded holds the dry-run decisions already logged in this run.
	recorded sync.Map
	// fenceRefusing: the lease fence refused a write, and none was sent
	// since (the refusal is logged once).
	fenceRefusing atomic.Bool
}

func newRun(ctx context.Context, c *Collector) *run {
	r := &run{
		c:      c,
		logger: klog.FromContext(ctx).WithName("ownergc"),
		graph:  newGraph(),
		events: newEventQueue(),
		absent: newAbsentCache(absentCacheSize),
		kick:   make(chan struct{}, 1),
	}
	r.recheck = workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](time.Second, maxRetryDelay)
	r.polls = workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](time.Second, maxUnmonitoredPoll)
	r.deletes = newQueue(c, queueDelete)
	r.orphans = newQueue(c, queueOrphan)
	r.deletePool = pool{name: queueDelete, queue: r.deletes, workers: int32(c.workers)}
	r.orphanPool = pool{name: queueOrphan, queue: r.orphans, workers: int32(c.workers)}
	r.builder = &builder{g: r.graph, logger: r.logger, enqueueDelete: r.deletes.Add, enqueueOrphan: r.orphans.Add, initial: true,
		lostFor: c.unsyncedHold, endHold: r.holds.drop}
	if c.clock != nil {
		r.builder.now = c.clock.Now
		r.events.now = c.clock.Now
		r.started = c.clock.Now()
		r.deletePool.base, r.orphanPool.base = r.started, r.started
	}
	r.monitors = newMonitorSet(ctx, r)
	return r
}

func newQueue(c *Collector, name string) workqueue.TypedRateLimitingInterface[types.UID] {
	limiter := workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](5*time.Millisecond, maxRetryDelay),
		&workqueue.TypedBucketRateLimiter[types.UID]{Limiter: rate.NewLimiter(retryQPS, retryBurst)},
	)
	return workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[types.UID]{
		Name: name, Clock: c.clock, MetricsProvider: noQueueMetrics{},
	})
}

// run blocks until ctx ends; see Collector.Run.
func (r *run) run(ctx context.Context) {
	logger := r.logger
	logger.Info("Starting owner garbage collector", "workers", r.c.workers, "dryRun", r.c.dryRun,
		"discoveryResyncPeriod", r.c.period, "kubeAPIQPS", r.c.qps, "kubeAPIBurst", r.c.burst)
	defer logger.Info("Stopped owner garbage collector")

	if r.recorder = r.c.recorder; r.recorder == nil {
		b := record.NewBroadcaster(record.WithContext(ctx))
		b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: r.c.kube.CoreV1().Events("")})
		defer b.Shutdown()
		r.recorder = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: EventSource})
	}

	var graphWG, loops sync.WaitGroup
	graphWG.Go(r.processGraphChanges)
	loops.Go(func() { r.discoveryLoop(ctx) })
	if r.waitForSync(ctx) {
		logger.Info("All resource monitors synced; collecting garbage", "monitors", r.monitors.len())
		r.events.push(event{typ: evRunSynced})
		// The initial lists were the run's largest allocation and are
		// garbage now that the graph holds what it needs of them. Give
		// their memory back to the system at once: the runtime would
		// otherwise keep it until its periodic collection (two minutes)
		// and return it slowly after that.
		loops.Go(debug.FreeOSMemory)
		now := r.c.clock.Now()
		r.deletePool.mark(now)
		r.orphanPool.mark(now)
		r.working.Store(true)
		for range r.c.workers {
			loops.Go(func() { r.deleteWorker(ctx) })
			loops.Go(func() { r.orphanWorker(ctx) })
		}
		loops.Go(func() { r.watchStuck(ctx) })
	}
	<-ctx.Done()

	// Stop: the graph builder drops the events not applied yet (the graph
	// goes with the run) and exits, no new work, in-flight requests end
	// with ctx, monitors stop.
	r.events.close()
	r.deletes.ShutDown()
	r.orphans.ShutDown()
	loops.Wait()
	r.monitors.stopAll()
	graphWG.Wait()
}

// processGraphChanges is the graph builder's goroutine: the only writer of
// the graph.
func (r *run) processGraphChanges() {
	var buf []event
	for {
		batch, ok := r.events.pop(buf[:0], graphBatch)
		if !ok {
			return
		}
		r.applying.Store(true)
		r.graph.mu.Lock()
		for i := range batch {
			r.builder.apply(&batch[i])
		}
		r.graph.mu.Unlock()
		r.applying.Store(false)
		clear(batch)
		buf = batch
	}
}

// synced: discovery ran and every monitor's initial list is in the graph
// (or the monitor failed).
func (r *run) synced() bool {
	return r.discovered.Load() && r.monitors.synced(r.c.clock.Now())
}

// waitForSync waits until synced or ctx ends.
func (r *run) waitForSync(ctx context.Context) bool {
	t := r.c.clock.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	begin := r.c.clock.Now()
	lastLog := begin
	for !r.synced() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C():
		}
		if now := r.c.clock.Now(); now.Sub(lastLog) >= 10*time.Second {
			lastLog = now
			r.logger.Info("Waiting for resource monitors to sync", "waited", now.Sub(begin).Round(time.Second),
				"unsynced", r.monitors.unsynced(now))
		}
	}
	return true
}

// barrier returns once the builder applied every event pushed before; an
// error once the run stops (the events not applied were dropped) or ctx
// ends.
func (r *run) barrier(ctx context.Context) error {
	done := make(chan struct{})
	r.events.push(event{typ: evBarrier, done: done})
	select {
	case <-done:
		if r.events.isClosed() {
			return errors.New("the run stopped")
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// idle reports whether nothing is queued or being processed.
func (r *run) idle() bool {
	return r.events.len() == 0 && !r.applying.Load() && r.deletes.Len() == 0 && r.orphans.Len() == 0 &&
		r.active.Load() == 0
}

// parkedSet holds items waiting for a discovery refresh (an owner kind
// unknown to discovery).
type parkedSet struct {
	mu   sync.Mutex
	uids map[types.UID]struct{}
}

func (p *parkedSet) add(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.uids == nil {
		p.uids = map[types.UID]struct{}{}
	}
	p.uids[uid] = struct{}{}
}

func (p *parkedSet) take() map[types.UID]struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	uids := p.uids
	p.uids = nil
	return uids
}

// unpark requeues the parked items after a discovery refresh.
func (r *run) unpark() {
	for uid := range r.parked.take() {
		r.deletes.Add(uid)
	}
}

// noQueueMetrics keeps the queues off client-go's global metrics provider;
// the collector exports queue depths itself.
type noQueueMetrics struct{}

func (noQueueMetrics) NewDepthMetric(string) workqueue.GaugeMetric       { return noMetric{} }
func (noQueueMetrics) NewAddsMetric(string) workqueue.CounterMetric      { return noMetric{} }
func (noQueueMetrics) NewLatencyMetric(string) workqueue.HistogramMetric { return noMetric{} }
func (noQueueMetrics) NewWorkDurationMetric(string) workqueue.HistogramMetric {
	return noMetric{}
}
func (noQueueMetrics) NewUnfinishedWorkSecondsMetric(string) workqueue.SettableGaugeMetric {
	return noMetric{}
}
func (noQueueMetrics) NewLongestRunningProcessorSecondsMetric(string) workqueue.SettableGaugeMetric {
	return noMetric{}
}
func (noQueueMetrics) NewRetriesMetric(string) workqueue.CounterMetric { return noMetric{} }

type noMetric struct{}

func (noMetric) Inc()            {}
func (noMetric) Dec()            {}
func (noMetric) Set(float64)     {}
func (noMetric) Observe(float64) {}
