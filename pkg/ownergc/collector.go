package ownergc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/nodegc/nodegc/internal/kubeconn"
	"github.com/nodegc/nodegc/pkg/config"
)

// UserAgent is the user agent of the collector's API clients, followed by
// "/" and Options.Identity when that is set.
const UserAgent = "nodegc-owner-gc"

// EventSource is the component name on the Events the collector records.
const EventSource = "nodegc-owner-gc"

// Options configures a Collector.
type Options struct {
	// Config is the owner GC section of the nodegc configuration, defaulted
	// (config.SetDefaults or config.Defaulted). New checks it with
	// config.ValidateOwnerGC, the agent's own rules.
	Config config.OwnerGCConfiguration
	// RESTConfig reaches the API server. It is copied; the collector sets
	// its own QPS, burst, user agent and request-counting transport.
	RESTConfig *rest.Config
	// Registerer receives the collector's metrics. Nil: not registered.
	Registerer prometheus.Registerer
	// EventRecorder records the collector's Events. Nil: each Run records
	// to the API server with its own broadcaster.
	EventRecorder record.EventRecorder
	// Clock drives discovery refreshes, retry delays and the failure grace
	// of monitors. Nil: the real clock.
	Clock clock.WithTicker
	// Identity names this instance (its leader election identity). The
	// collector's requests carry the user agent UserAgent/Identity, so that
	// the API server's audit log tells the instances apart. Empty:
	// UserAgent alone.
	Identity string
	// WriteWindow is asked immediately before every write request (POST,
	// PUT, PATCH, DELETE) of every client the collector builds (metadata,
	// discovery, Events): how long this instance may still write (the rest
	// of the lease fence's window). When it is under a second
	// (minWriteWindow) the request fails at once with ErrLeaseLost, without
	// being sent; otherwise the request is sent with a server-side timeout
	// (?timeout=) no longer than it, so that kube-apiserver gives the write
	// up if it has not run by
	// the time the window closes (see fence). It must be fast and safe for
	// concurrent use. Nil: every write may be sent, with no timeout of the
	// fence's.
	WriteWindow func() time.Duration
}

// Collector is the ownerReference garbage collector. Create it with New and
// call Run (in the elected instance). HasSynced and DebugHandler may be used
// from any goroutine at any time.
type Collector struct {
	enabled        bool
	dryRun         bool
	workers        int
	period         time.Duration
	requestTimeout time.Duration
	stallAfter     time.Duration // Stalled's bound: stallRequests request timeouts
	failureGrace   time.Duration // a monitor whose list/watch fails this long stops holding back the others
	syncTimeout    time.Duration // so does a monitor that has not synced this long after its start
	catchUpWithin  time.Duration // a resumed watch's catch-up bound (0: the default, catchUpWithin)
	unsyncedHold   time.Duration // ownerGC.unsyncedResourceHold
	stuckThreshold time.Duration // ownerGC.stuckDeletionThreshold (stuck.go); 0: off
	ignored        map[schema.GroupResource]struct{}
	qps            float32 // of each client; negative: no client-side rate limit
	burst          int

	// metadata and writes are the workers' clients (reads and writes of
	// single objects: writes deletes, metadata the rest); watches is the
	// monitors' (lists and watches), on a connection of its own. See
	// metaClient.
	metadata  metadata.Interface
	writes    *metaClient
	watches   *metaClient
	discovery discovery.DiscoveryInterfaceWithContext
	kube      kubernetes.Interface // for Events, nil when a recorder is given
	recorder  record.EventRecorder
	clock     clock.WithTicker
	metrics   *metrics

	running atomic.Bool
	current atomic.Pointer[run]
	// gvs is what discovery learnt in this process about the group
	// versions that may fail it (discovery.go), kept across Runs.
	gvs groupVersions
	// records are the recent decision records (record.go), kept across Runs.
	records recordStore

	// hooks are set by tests of this package only.
	hooks testHooks
}

// testHooks let in-package tests interpose between deciding and acting.
type testHooks struct {
	// beforeWrite runs before every write (not in dry-run).
	beforeWrite func(ctx context.Context, action string, id objectID)
	// onRecord sees every decision record.
	onRecord func(id objectID, rec decisionRecord, dryRun bool)
	// beforeFeed sees every object a monitor's watch delivers, before it
	// is queued for the graph, on the monitor's reflector goroutine.
	beforeFeed func(res *resource, obj *metav1.PartialObjectMetadata)
	// beforeList runs before every list of a monitor (the first and each
	// relist), on its reflector goroutine.
	beforeList func(res *resource)
}

// New returns a Collector, or the configuration's problems, each naming its
// field. It does no I/O.
func New(opts Options) (*Collector, error) {
	if opts.RESTConfig == nil {
		return nil, errors.New("ownergc: RESTConfig is required")
	}
	cfg := opts.Config
	if errs := config.ValidateOwnerGC(&cfg); len(errs) > 0 {
		return nil, fmt.Errorf("ownergc: %w", errs.ToAggregate())
	}
	c := &Collector{
		enabled:        *cfg.EnableGarbageCollector,
		dryRun:         cfg.DryRun,
		workers:        int(cfg.ConcurrentGCSyncs),
		period:         cfg.DiscoveryResyncPeriod.Duration,
		requestTimeout: 30 * time.Second,
		stallAfter:     stallRequests * 30 * time.Second,
		failureGrace:   10 * time.Second,
		syncTimeout:    time.Minute,
		unsyncedHold:   cfg.UnsyncedResourceHold.Duration,
		stuckThreshold: cfg.StuckDeletionThreshold.Duration,
		ignored:        map[schema.GroupResource]struct{}{},
		recorder:       opts.EventRecorder,
		clock:          opts.Clock,
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	for _, gr := range cfg.GCIgnoredResources {
		c.ignored[schema.GroupResource{Group: gr.Group, Resource: gr.Resource}] = struct{}{}
	}
	reg := opts.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	c.metrics = newMetrics(reg, c)

	c.qps, c.burst = cfg.KubeAPIQPS, int(cfg.KubeAPIBurst)
	clientConfig := func() *rest.Config {
		rc := rest.CopyConfig(opts.RESTConfig)
		// A negative QPS turns client-go's rate limiter off.
		rc.QPS, rc.Burst, rc.RateLimiter = c.qps, c.burst, nil
		rc.UserAgent = UserAgent
		if opts.Identity != "" {
			rc.UserAgent += "/" + opts.Identity
		}
		if opts.WriteWindow != nil {
			rc.Wrap(fence(opts.WriteWindow)) // inside the counting: a refused write counts as code "error"
		}
		rc.Wrap(c.metrics.countRequests)
		return rc
	}
	var err error
	if c.metadata, err = metadata.NewForConfig(clientConfig()); err != nil {
		return nil, fmt.Errorf("ownergc: metadata client: %w", err)
	}
	if c.writes, err = newMetaClient(clientConfig()); err != nil {
		return nil, fmt.Errorf("ownergc: metadata client: %w", err)
	}
	// The monitors' lists and watches get a connection of their own: on
	// one shared HTTP/2 connection, every object a cascade deletes comes
	// back as a watch event on the connection that carries the deletes
	// and delays their answers.
	wc := clientConfig()
	kubeconn.Own(wc)
	if c.watches, err = newMetaClient(wc); err != nil {
		return nil, fmt.Errorf("ownergc: metadata client: %w", err)
	}
	if c.discovery, err = discovery.NewDiscoveryClientForConfig(clientConfig()); err != nil {
		return nil, fmt.Errorf("ownergc: discovery client: %w", err)
	}
	if c.recorder == nil {
		if c.kube, err = kubernetes.NewForConfig(clientConfig()); err != nil {
			return nil, fmt.Errorf("ownergc: events client: %w", err)
		}
	}
	return c, nil
}

// Run collects garbage until ctx ends, then stops its workers and monitors
// and returns nil. It blocks meanwhile. Cancelling ctx stops every write at
// once: in-flight requests are cancelled and no new one starts. Run may be
// called again after it returned (each run starts from an empty graph), but
// not twice at the same time. With enableGarbageCollector=false it only
// waits for ctx.
func (c *Collector) Run(ctx context.Context) error {
	if !c.enabled {
		<-ctx.Done()
		return nil
	}
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("ownergc: Run is already running")
	}
	defer c.running.Store(false)
	r := newRun(ctx, c)
	c.current.Store(r)
	defer c.current.Store(nil)
	r.run(ctx)
	return nil
}

// HasSynced reports whether a Run is under way and its graph holds the
// initial state of every resource whose monitor did not fail: the readiness
// of the owner GC.
func (c *Collector) HasSynced() bool {
	r := c.current.Load()
	return r != nil && r.synced()
}

// Stalled returns why the running collector makes no progress while work
// waits, or nil (also when no Run is under way): its graph builder has
// taken no queued event, or every worker of a queue with ready items has
// made no progress (taken or finished an item, ended a request), for ten
// request timeouts (5 minutes). Requests end by their timeout, so only a
// fault of the process stalls it: the liveness of the owner GC.
func (c *Collector) Stalled() error {
	r := c.current.Load()
	if r == nil {
		return nil
	}
	return r.stalled(c.clock.Now())
}

// DebugHandler serves the dependency graph at DebugGraphPath.
func (c *Collector) DebugHandler() http.Handler {
	return &debugHandler{c: c}
}
