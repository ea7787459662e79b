package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodegc/nodegc/internal/endpoint"
	"github.com/nodegc/nodegc/internal/metricvec"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/containers"
	"github.com/nodegc/nodegc/pkg/cri"
	"github.com/nodegc/nodegc/pkg/diskstats"
	"github.com/nodegc/nodegc/pkg/images"
)

// nodeGC runs the image and container GC of this node. It connects to the
// runtime with backoff: until the runtime answers, nothing is collected and
// /readyz says why.
type nodeGC struct {
	opts    Options
	rest    *rest.Config
	reg     prometheus.Registerer
	events  *nodeEvents
	status  *status
	metrics *cri.Metrics
	// standby is 1 while another agent holds the node lock (nodelock.go).
	standby prometheus.Gauge
	// Set by run: the connection to the runtime, the watchdog's view of
	// the image and container GC loops, and what the image GC remembers of
	// the pod view across the loops' rebuilds.
	link                       *runtimeLink
	imageWatch, containerWatch *loopWatch
	podsMemory                 *images.PodsMemory
	// containerTimeline is what the container GC learned of the clocks
	// and of the containers it saw, across its rebuilds.
	containerTimeline *containers.Timeline
	// agentRuns, set by plan: an agent runs node GC on the state directory
	// now (`nodegc plan` beside it).
	agentRuns bool
}

func newNodeGC(opts Options, rc *rest.Config, reg prometheus.Registerer, events *nodeEvents, st *status) (*nodeGC, error) {
	if errs := config.Validate(opts.Config); len(errs) > 0 {
		return nil, fmt.Errorf("invalid configuration: %w", errs.ToAggregate())
	}
	standby := metricvec.SingleGauge("nodegc_node_gc_standby",
		"1 while this agent's node GC waits for another nodegc on the node, which holds the state directory's lock, to stop; its node GC collects nothing meanwhile.")
	reg.MustRegister(standby)
	return &nodeGC{opts: opts, rest: rc, reg: reg, events: events, status: st, metrics: cri.NewMetrics(reg), standby: standby}, nil
}

func (n *nodeGC) run(ctx context.Context) {
	cfg := n.opts.Config
	// Before anything reads the state: an agent that waited reads what the
	// one before it wrote last.
	lock, ok := acquireNodeLock(ctx, cfg.StateDirectory, clock.RealClock{}, func(on bool) { n.standby.Set(metricvec.Bool(on)) })
	if !ok {
		return
	}
	defer lock.release()
	n.link = newRuntimeLink(klog.FromContext(ctx), cfg.ContainerRuntimeEndpoint, n.status.watchdog.clock)
	if cfg.ImageServiceEndpoint != cfg.ContainerRuntimeEndpoint {
		n.link.imageEndpoint = cfg.ImageServiceEndpoint
	}
	n.status.setRuntimeCheck(func(context.Context) error {
		return fmt.Errorf("container runtime not connected yet%s", n.link.explain())
	})
	c := n.connect(ctx)
	if c == nil {
		return
	}
	defer c.Close()
	n.status.setRuntimeCheck(func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, RuntimeCheckTimeout)
		defer cancel()
		if _, err := c.Version(ctx); err != nil {
			return fmt.Errorf("container runtime does not answer%s: %w", n.link.explain(), err)
		}
		// A separate image service (imageServiceEndpoint) may be gone
		// while the runtime answers: every image GC call fails then.
		return c.CheckImageService(ctx)
	})
	// Watched from here on: the setup for a runtime (collect) runs as an
	// iteration of both loops, so one that waits on runtime calls within
	// their deadlines is progress, and one stuck beyond them a wedge. The
	// image loop wakes every
	// diskCheckInterval (or period, if shorter), the container loop every
	// period.
	timeout := cfg.RuntimeRequestTimeout.Duration
	n.imageWatch = n.status.watchdog.add("image GC", min(cfg.ImageGC.DiskCheckInterval.Duration, cfg.ImageGC.Period.Duration), timeout)
	n.containerWatch = n.status.watchdog.add("container GC", cfg.ContainerGC.Period.Duration, timeout)

	// The pod informer lives as long as the node GC, and so does what the
	// image GC remembers of its last authoritative view: what the API says
	// of the node's pods does not change with the runtime.
	pods, podsErr := n.podSource(ctx)
	n.podsMemory = &images.PodsMemory{}
	// Nor do the wall clock's steps, and when the container GC first saw
	// a container created, or exited: the container IDs are the runtime's.
	n.containerTimeline = containers.NewTimeline()
	for n.collect(ctx, c, pods, podsErr) {
	}
}

// collect runs the image and container GC loops, built for the runtime that
// answers now, until ctx ends (false) or, after a loss of the connection,
// another runtime answers: another name or version (upgraded, downgraded
// or replaced in place). The loops are then stopped, their state saved,
// and collect returns true to have them built again for it: which runtime
// it is decides whether its event stream may be read, where its snapshots
// are, which sandbox image it names.
func (n *nodeGC) collect(ctx context.Context, c *cri.Client, pods *containers.APIPodSource, podsErr error) (again bool) {
	// The managers' metrics are unregistered with them, and registered
	// again by the next ones.
	reg := newScopedRegisterer(n.reg)
	defer reg.unregisterAll()
	// The managers' containerd clients close once their loops have stopped
	// (deferred before work.stop, so run after it): SIGTERM ends ctx at
	// once, while the loops end their iteration under a context of their
	// own (startAll).
	life, end := context.WithCancel(context.WithoutCancel(ctx))
	defer end()
	var (
		rt          runtimeProfile
		containerGC *containers.Manager
		imageGC     *images.Manager
	)
	// The setup's runtime calls each have a deadline, and may take it
	// (a runtime slow to give its status): an iteration of both loops.
	setupIteration(ctx, []*loopWatch{n.imageWatch, n.containerWatch}, func(ctx context.Context) {
		rt = n.readRuntimeProfile(ctx, c, false)
		rt.logUnread(klog.FromContext(ctx))
		// The container GC first: its pod informer also feeds the image
		// GC's scheduled rule.
		err := podsErr
		if err == nil {
			containerGC, err = n.containerManager(ctx, life, c, &rt, pods, reg)
		}
		if err != nil {
			klog.FromContext(ctx).Error(err, "Container GC cannot start; image GC goes on")
		}
		n.containerWatch.notStarted(err)
		imageGC, err = n.imageManager(ctx, life, c, &rt, false, pods, reg)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Image GC cannot start; container GC goes on")
		}
		n.imageWatch.notStarted(err)
	})
	var loops []runnable
	if imageGC != nil {
		loops = append(loops, runnable{name: "image-gc", run: watched(imageGC.Run, n.imageWatch)})
	}
	if containerGC != nil {
		loops = append(loops, runnable{name: "container-gc", run: watched(containerGC.Run, n.containerWatch)})
	}
	if ctx.Err() != nil {
		return false // stopped while building: start nothing
	}
	work := startAll(ctx, loops)
	defer work.stop(0)
	confirm := func(uint64) {}
	if imageGC != nil {
		confirm = imageGC.ConfirmProfile
	}
	return n.runtimeChanged(ctx, c, rt, confirm)
}

// runtimeChanged waits until ctx ends (false) or the runtime answers with
// another profile than was (true): at a return of the connection, another
// name or version, or a restart with another sandbox image or image
// filesystem in its config; and, while a fact of was could not be read, once
// it can (it is asked again every unreadRetry). Version is asked until it
// answers: a runtime may accept connections before it serves CRI. A
// profile read again that is unchanged is confirmed, with the generation
// of the connection it was read on: the image GC removes nothing after a
// loss of the connection until then (images.Options.ProfileGeneration).
func (n *nodeGC) runtimeChanged(ctx context.Context, c *cri.Client, was runtimeProfile, confirm func(generation uint64)) bool {
	return profileChanged(ctx, was, n.link.reconnected, unreadRetry,
		func(ctx context.Context) error { _, _, err := c.RefreshVersion(ctx); return err },
		func(ctx context.Context) runtimeProfile { return n.readRuntimeProfile(ctx, c, true) }, confirm)
}

// readRuntimeProfile reads the profile of the runtime c answers for. The
// profile the GCs are built for does not ask containerd's own API: they
// dial it themselves and note in the profile when it does not answer
// (apiUnread). One read again to tell whether anything changed (withAPI)
// asks it on the CRI endpoint's socket.
func (n *nodeGC) readRuntimeProfile(ctx context.Context, c *cri.Client, withAPI bool) runtimeProfile {
	cfg := n.opts.Config
	var socket string
	if withAPI {
		socket, _ = endpoint.SocketPath(cfg.ContainerRuntimeEndpoint)
	}
	return readRuntimeProfile(ctx, c, socket, cfg.RuntimeRequestTimeout.Duration)
}

// unreadRetry is how often a runtime's profile with facts it did not give
// is read again.
const unreadRetry = 30 * time.Second

// profileChanged is runtimeChanged on its parts: refresh asks the runtime
// for its Version, read for its profile, and confirm is told the
// generation of each profile read again that is unchanged.
func profileChanged(ctx context.Context, was runtimeProfile, reconnected <-chan struct{}, retryEvery time.Duration,
	refresh func(context.Context) error, read func(context.Context) runtimeProfile, confirm func(generation uint64)) bool {
	for {
		var retry <-chan time.Time
		if len(was.unread) > 0 {
			retry = time.After(retryEvery)
		}
		select {
		case <-ctx.Done():
			return false
		case <-retry:
		case <-reconnected:
			if !refreshUntilAnswered(ctx, refresh) {
				return false
			}
		}
		now := read(ctx)
		if ctx.Err() != nil {
			return false
		}
		changes := was.changes(now)
		if len(changes) == 0 {
			confirm(now.generation)
			continue
		}
		msg := "The container runtime's configuration changed while the connection was down; building the image and container GC again for it"
		switch {
		case was.name != now.name || was.version != now.version:
			msg = "Another container runtime answers since the connection returned; building the image and container GC again for it"
		case len(now.unread) < len(was.unread):
			msg = "The container runtime now gives what it did not when the image GC was built; building the image and container GC again with it"
		}
		klog.FromContext(ctx).Info(msg, "changes", changes)
		return true
	}
}

// refreshUntilAnswered asks refresh (the runtime's Version) until it
// answers (true) or ctx ends (false), every 5s at most: a runtime may accept
// connections before it serves CRI, and one that came back on the socket
// may serve none (the client is not connected meanwhile:
// nodegc_cri_connected 0). Its first failure is logged, with what to do
// about a socket that serves no CRI v1, and the answer after it; the
// retries between are not.
func refreshUntilAnswered(ctx context.Context, refresh func(context.Context) error) bool {
	logger := klog.FromContext(ctx)
	for failures, delay := 0, 100*time.Millisecond; ; failures, delay = failures+1, min(2*delay, 5*time.Second) {
		err := refresh(ctx)
		if err == nil {
			if failures > 0 {
				logger.Info("The container runtime answers CRI Version again; node GC goes on", "failures", failures)
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if failures == 0 {
			kv := []any{"err", err, "retryEvery", "5s at most"}
			if hint := dialHint(err); hint != "" {
				kv = append(kv, "hint", hint)
			}
			logger.Info("The connection to the container runtime returned, but the runtime does not answer CRI Version; "+
				"the image GC removes nothing until it does", kv...)
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(delay):
		}
	}
}

// watched runs a manager's Run as a runnable. Run returns only when its
// context ends; if it returns before, the loop is dead and /healthz says so.
func watched(run func(context.Context) error, w *loopWatch) func(context.Context) {
	return func(ctx context.Context) {
		if err := run(ctx); ctx.Err() == nil {
			w.stopped(err)
		}
	}
}

// connect dials the runtime until it answers or ctx ends.
func (n *nodeGC) connect(ctx context.Context) *cri.Client {
	cfg := n.opts.Config
	delay := time.Second
	for {
		c, err := cri.Dial(ctx, cri.Options{
			RuntimeEndpoint: cfg.ContainerRuntimeEndpoint, ImageEndpoint: cfg.ImageServiceEndpoint,
			Timeout: cfg.RuntimeRequestTimeout.Duration, Metrics: n.metrics, OnConnectionChange: n.link.changed,
		})
		if err == nil {
			n.link.dialed()
			v := c.RuntimeVersion()
			klog.FromContext(ctx).Info("Connected to the container runtime", "endpoint", cfg.ContainerRuntimeEndpoint,
				"runtime", v.GetRuntimeName(), "version", v.GetRuntimeVersion())
			return c
		}
		logger := klog.FromContext(ctx)
		if p := socketProblem(cfg.ContainerRuntimeEndpoint); p != "" {
			logger = logger.WithValues("socket", p)
		}
		if hint := dialHint(err); hint != "" {
			logger = logger.WithValues("hint", hint)
		}
		n.link.dialFailed(err, delay)
		logger.Error(err, "Cannot reach the container runtime; node GC does nothing until it answers", "retryIn", delay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Minute)
	}
}

// imageManager makes the image GC manager for the runtime rt describes;
// planOnly makes one for `nodegc plan`, which writes nothing. pods, the container GC's pod source (nil in
// node-only mode), gives the images of the pods that have not finished.
// Its calls end with ctx; its containerd client closes when life ends.
func (n *nodeGC) imageManager(ctx, life context.Context, c *cri.Client, rt *runtimeProfile, planOnly bool, pods *containers.APIPodSource, reg prometheus.Registerer) (*images.Manager, error) {
	cfg := n.opts.Config
	var layers *images.ContainerdLayers
	if rt.name == "containerd" {
		path, err := endpoint.SocketPath(cfg.ContainerRuntimeEndpoint)
		var l *images.ContainerdLayers
		if err == nil {
			l, err = images.NewContainerdLayers(ctx, path, rt.imageFs, cfg.RuntimeRequestTimeout.Duration)
		}
		if err != nil {
			// A cancelled context (shutdown, an interrupted plan) is no
			// complaint about containerd.
			if ctx.Err() == nil {
				klog.FromContext(ctx).Info("Cannot use containerd's own API; the image GC goes on without exact layer accounting (CRI sizes), image arrival times, the images of the pod sandboxes (the one remembered in the state file is kept) and disk checks after writes; asked again every 30s", "err", err)
			}
			rt.apiUnread(err)
		} else {
			layers = l
			context.AfterFunc(life, func() { l.Close() })
			if why := l.BlobsElsewhere(); why != "" {
				klog.FromContext(ctx).Info("Image layer accounting counts snapshots only", "reason", why)
			}
		}
	}
	var sandboxes []string
	if rt.sandboxImage != "" {
		sandboxes = append(sandboxes, rt.sandboxImage)
	}
	opts := images.Options{
		Config: cfg.ImageGC, StateDirectory: cfg.StateDirectory, NodeName: n.opts.NodeName, BootID: n.opts.BootID, Runtime: c, Disk: diskstats.NewReader(),
		Registerer: reg, SandboxImages: sandboxes, ProfileGeneration: rt.generation, OnRun: n.events.imageGCReport, PlanOnly: planOnly,
		WatchGoesOn: planOnly && n.agentRuns,
	}
	if rt.sandboxImageUnread() && !planOnly {
		// Without it, an image the runtime makes its pods' sandboxes
		// from is not protected; the profile is read again every
		// unreadRetry, and the GC built again once it is.
		opts.ProfileUnread = factSandboxImage
	}
	if n.imageWatch != nil {
		opts.Supervise = n.imageWatch.iteration
	}
	if layers != nil {
		opts.Layers, opts.Arrivals, opts.Sandboxes, opts.ContainerRecords, opts.Writes = layers, layers, layers, layers, layers
	}
	if pods != nil {
		opts.Pods, opts.PodsMemory = podImages{pods}, n.podsMemory
	} else {
		klog.FromContext(ctx).Info("No API access: image GC cannot know the images of pods about to run (keep reason scheduled is off)")
	}
	return images.NewManager(opts)
}

// podImages gives the image GC the images of the pods bound to this node
// that have not finished, from the container GC's pod source.
type podImages struct{ src *containers.APIPodSource }

func (p podImages) PodImages() images.PodImages {
	refs, view := p.src.PodImages()
	return images.PodImages{Authoritative: view.Authoritative, Reason: view.Reason, Refs: refs}
}

// podSource makes and starts the informer on the node's pods, which feeds
// the container GC's pod-gone rule and the image GC's scheduled rule, until
// ctx ends. nil without API access (node-only mode).
func (n *nodeGC) podSource(ctx context.Context) (*containers.APIPodSource, error) {
	if n.rest == nil {
		return nil, nil
	}
	client, err := kubernetes.NewForConfig(n.rest)
	if err != nil {
		return nil, err
	}
	pods, err := containers.NewAPIPodSource(client, containers.PodSourceOptions{NodeName: n.opts.NodeName, BootID: n.opts.BootID})
	if err != nil {
		return nil, err
	}
	go pods.Run(ctx)
	return pods, nil
}

// containerManager makes the container GC manager on the pods' view (nil:
// node-only), its metrics registered in reg, for the runtime rt describes
// (containerd's own API not answering is noted in it). Its calls end with
// ctx; its containerd client closes when life ends.
func (n *nodeGC) containerManager(ctx, life context.Context, c *cri.Client, rt *runtimeProfile, pods *containers.APIPodSource, reg prometheus.Registerer) (*containers.Manager, error) {
	opts := containers.Options{
		Config: n.opts.Config.ContainerGC, Runtime: c, Registerer: reg, OnRun: n.events.containerGCReport,
		Disk: diskstats.NewReader(),
		// The kubelet's deadline for a container's start, which
		// runtimeRequestTimeout mirrors: a created container is not a
		// leftover before it.
		RuntimeRequestTimeout: n.opts.Config.RuntimeRequestTimeout.Duration,
		Timeline:              n.containerTimeline,
	}
	if n.containerWatch != nil {
		opts.Supervise = n.containerWatch.iteration
	}
	// Writable layers' bytes come from containerd's snapshots, and
	// containerd is made to free the removed ones at once; other runtimes
	// have no source for them (counted 0, and said so).
	if name := c.RuntimeVersion().GetRuntimeName(); name != "containerd" {
		opts.NoWritableLayers = "runtime " + name
	} else if path, err := endpoint.SocketPath(n.opts.Config.ContainerRuntimeEndpoint); err != nil {
		opts.NoWritableLayers = "containerd's API unreachable: " + err.Error()
	} else if l, err := containers.NewContainerdWritableLayers(ctx, path, n.opts.Config.RuntimeRequestTimeout.Duration); err != nil {
		opts.NoWritableLayers = "containerd's API unreachable: " + err.Error()
		rt.apiUnread(err) // asked again, and the GC built again once it answers
	} else {
		opts.WritableLayers, opts.Reclaimer = l, l
		context.AfterFunc(life, func() { l.Close() })
	}
	if pods != nil {
		opts.Pods = pods
	}
	return containers.NewManager(opts)
}
