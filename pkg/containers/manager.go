package containers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodegc/nodegc/internal/clockstep"
	"github.com/nodegc/nodegc/internal/gcrun"
	"github.com/nodegc/nodegc/internal/metricvec"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/cri"
)

// RuntimeService is what the container GC needs of the runtime: a
// *cri.Client.
type RuntimeService interface {
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ListPodSandboxes(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	ContainerStatus(ctx context.Context, id string) (*runtimeapi.ContainerStatus, error)
	StopContainer(ctx context.Context, id string, gracePeriodSeconds int64) error
	RemoveContainer(ctx context.Context, id string) error
	PodSandboxStatus(ctx context.Context, id string) (*runtimeapi.PodSandboxStatus, error)
	StopPodSandbox(ctx context.Context, id string) error
	RemovePodSandbox(ctx context.Context, id string) error
	// ImageFsInfo says where writable layers are (Options.Disk).
	ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error)
	// Version asks the runtime its name and version, which the plan checks
	// against the runtime the Node reports. Asked at each listing, not
	// taken from the connection's start: cri-dockerd answers with
	// dockerd's version, which an upgrade of Docker Engine changes behind
	// a connection that stays up (and the kubelet, which asks at each node
	// status update, reports).
	Version(ctx context.Context) (*runtimeapi.VersionResponse, error)
}

var (
	_ RuntimeService = (*cri.Client)(nil)
	_ remover        = RuntimeService(nil) // what the executor needs is part of it
)

// PodSource tells which pods exist: an *APIPodSource.
type PodSource interface {
	// View returns the pod view at now.
	View(now time.Time) PodView
	// ExpectRuntimeChecks says the manager checks the views against the
	// runtime it lists, and reports each check with RuntimeChecked.
	ExpectRuntimeChecks()
	// RuntimeChecked reports what a plan found of an authoritative view
	// against the runtime: "" when they agree, else the plan's PodsReason
	// (RuntimeContradicts, or ViewNodeLeaseStale: the Node's lease was
	// stale, and stays so until a plan reads it fresh).
	RuntimeChecked(reason string)
	// NodeLease reads the lease of the view's Node, which its kubelet
	// renews; a plan asks for it only when something would go as its pod
	// is gone or a pod the view lists would vouch for the view
	// (PodView.NodeLease), at the manager's first check of a view, and
	// after a stale read until one is fresh.
	NodeLease(ctx context.Context) NodeLease
	// Retain forgets remembered deletions, recorded before since, of pods
	// that have nothing left on the node (onNode holds the UIDs that do).
	// The Manager calls it only with a snapshot of the node that read
	// everything telling which pods have anything there (the runtime's
	// containers and sandboxes, the pod log directories; not the log
	// links), which began at since (on the Manager's clock: the agent
	// gives the source and the Manager the real clock).
	Retain(onNode map[string]bool, since time.Time)
}

var _ PodSource = (*APIPodSource)(nil)

// ErrRunInProgress is returned by GarbageCollect and Plan while a run is
// going on.
var ErrRunInProgress = gcrun.ErrInProgress

// Options configure a Manager.
type Options struct {
	Config  config.ContainerGCConfiguration
	Runtime RuntimeService
	// RuntimeRequestTimeout is the kubelet's runtimeRequestTimeout (the
	// agent's runtimeRequestTimeout mirrors it): the deadline the kubelet
	// gives a container's start, which sets how long a container created
	// but never started is kept as starting (StartGrace). Zero (or less
	// than the kubelet's default) counts as the kubelet's default.
	RuntimeRequestTimeout time.Duration
	// Pods tells which pods exist (an *APIPodSource). Nil means node-only:
	// every pod is assumed to exist, so nothing is removed because its pod
	// is gone; count and age limits still apply.
	Pods  PodSource
	Clock clock.WithTicker
	// Registerer receives the container GC metrics; nil means none are
	// exported.
	Registerer prometheus.Registerer
	// OnRun, if set, receives the report of every run.
	OnRun func(*Report)
	// Supervise, if set, runs each iteration of Run's loop: it calls work
	// once, with ctx or a context derived from it, and returns when work
	// does. The agent's watchdog uses it to tell a wedged loop from a slow
	// one. Nil calls work directly.
	Supervise func(ctx context.Context, work func(context.Context))
	// WritableLayers, if set, reads the bytes of the writable layers of
	// the containers and sandboxes a plan removes (containerd:
	// *ContainerdWritableLayers). Nil: they count 0, and NoWritableLayers
	// says why, once in the log and in every plan.
	WritableLayers WritableLayerSource
	// NoWritableLayers says why WritableLayers is nil, e.g. "runtime
	// cri-o" or "containerd's API unreachable: ...".
	NoWritableLayers string
	// Reclaimer, if set, is asked after a run removed containers or
	// sandboxes to have the runtime free their writable layers at once
	// (containerd: *ContainerdWritableLayers). Nil: the runtime frees them
	// in its own time, and a run's measurement may miss them.
	Reclaimer Reclaimer
	// Disk, if set, measures the free space of the filesystems holding
	// writable layers and pod logs before planning and after a run that
	// removed something (Report.Filesystems). Nil: nothing is measured.
	Disk DiskReader
	// SettleTimeout bounds the wait for the runtime's asynchronous cleanup
	// before freed space is measured. Default 20s.
	SettleTimeout time.Duration
	// Timeline, if set, is what the manager learns of the clocks and of
	// the containers it sees (the steps of the wall clock; when it first
	// saw each container created, or exited without an exit time), handed
	// on to the managers built after it in this process (NewTimeline); the
	// first manager given it sets it up with its clock. Nil: the manager's
	// own, which dies with it.
	Timeline *Timeline
}

// Timeline is what a container GC manager learns of the clocks and of the
// containers it sees, kept for the next manager a process builds (the
// agent builds one again when the runtime comes back with another
// profile): without it, that manager would not know the steps of the wall
// clock found before, and would age containers by them, and it would see
// every created container created now, and keep it for the start grace
// again. Managers that share it must not run at once.
type Timeline struct{ tl timeline }

// NewTimeline returns an empty Timeline.
func NewTimeline() *Timeline { return &Timeline{} }

// Report describes one GC run: its trigger, start, duration and error
// (gcrun.Run), its plan and what applying it did.
type Report struct {
	gcrun.Run
	// Plan is nil when the runtime could not be listed.
	Plan    *Plan
	Outcome *Outcome
	// Freed is what the removals done free, as the plan counted them
	// (Outcome.Bytes; in dry-run, what they would free).
	Freed Bytes
	// Filesystems are the filesystems measured (Options.Disk): their free
	// space before planning, and after the removals settled when the run
	// removed something (not in dry-run).
	Filesystems []FilesystemChange
}

// Manager runs the container GC for one node, every period, never two runs
// at once.
type Manager struct {
	opts    Options
	policy  *Policy
	metrics *metrics
	clock   clock.WithTicker
	paths   logPaths
	// waitClock times waits for the real runtime (settling), which take
	// real time whatever clock decides ages.
	waitClock clock.Clock

	serial *gcrun.Serial // one run or plan at a time; guards lastView, checked and timeline
	// lastView is the pod view reason of the previous run, to log changes.
	lastView *string
	// ops: the operations of streakOperations the current run did, and
	// their streaks.
	ops ops
	// runningDeleted names the pods the previous plan found running here
	// although the authoritative view lacks them (Plan.PodsMissing), to
	// log changes.
	runningDeleted string
	// checked: a plan of this manager has checked an authoritative pod
	// view against the runtime (reported with Pods.RuntimeChecked).
	checked bool
	// leaseStale: the last plan that checked an authoritative view found
	// the Node's lease stale; the next reads it (PodView.CheckLease), as
	// the first does.
	leaseStale bool
	// awaitView: no plan has checked a view yet, and the last run read
	// one that was not authoritative: Run looks at the view every
	// viewPollInterval meanwhile, and runs as soon as it is (next).
	awaitView atomic.Bool
	timeline  *timeline
	// idFaultLogged is, per listing, when the last one that gave entries no ID
	// of their own was logged (one a minute at most).
	idFaultLogged map[string]time.Time
	// elsewhereLogged: links whose targets lie outside the pod logs
	// directory were logged (once).
	elsewhereLogged bool
	// elsewhereSkipped are the containers the last run skipped as
	// SkipLogsElsewhere (logsElsewhereSkipped).
	elsewhereSkipped map[string]bool
	// logsUnseen: the last snapshot found the pod logs unseen
	// (NodeState.PodLogsUnseen); logged when it changes.
	logsUnseen bool
}

// NewManager validates opts.Config (defaulted: config.SetDefaults) with
// config.ValidateContainerGC and returns a manager.
func NewManager(opts Options) (*Manager, error) {
	if errs := config.ValidateContainerGC(&opts.Config); len(errs) > 0 {
		return nil, fmt.Errorf("container GC: %w", errs.ToAggregate())
	}
	if opts.Runtime == nil {
		return nil, errors.New("container GC: Runtime is required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	reg := opts.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if p, ok := opts.Pods.(*APIPodSource); ok && p == nil {
		opts.Pods = nil // a nil *APIPodSource means node-only too
	}
	if opts.Pods == nil {
		klog.Background().Info("Container GC runs node-only: without API access no pod is ever considered gone; count and age limits still apply")
	}
	if opts.WritableLayers == nil {
		if opts.NoWritableLayers == "" {
			opts.NoWritableLayers = "no snapshot source"
		}
		klog.Background().Info("Container GC: writable-layer bytes unknown; removed containers' writable layers count 0 bytes", "reason", opts.NoWritableLayers)
	} else {
		opts.NoWritableLayers = ""
	}
	if opts.SettleTimeout <= 0 {
		opts.SettleTimeout = 20 * time.Second
	}
	if opts.Pods != nil {
		// Nothing fails from here on: the image GC waits for this
		// manager's first check.
		opts.Pods.ExpectRuntimeChecks()
	}
	m := &Manager{
		opts: opts, policy: NewPolicy(opts.Config, opts.RuntimeRequestTimeout), metrics: newMetrics(reg),
		clock: opts.Clock, waitClock: clock.RealClock{},
		serial: gcrun.NewSerial(opts.Clock),
		paths:  logPaths{PodLogs: opts.Config.PodLogsDirectory, ContainerLogs: opts.Config.ContainerLogsDirectory},
	}
	if opts.Pods == nil {
		m.metrics.podViewNodeOnly.Set(1)
	}
	if opts.Timeline == nil {
		opts.Timeline = NewTimeline()
	}
	m.timeline = &opts.Timeline.tl
	m.timeline.exits = m.policy.agesFromExit()
	if m.timeline.since != nil {
		return m, nil // set up by an earlier manager
	}
	// A fake clock's time is the only time: it is never stepped.
	if _, real := opts.Clock.(clock.RealClock); real {
		m.timeline.since = clockstep.Since(time.Now())
		m.timeline.follower.Monotonic = m.timeline.since
	} else {
		began := opts.Clock.Now()
		m.timeline.since = func() time.Duration { return opts.Clock.Since(began) }
	}
	return m, nil
}

// Run runs the container GC at once and then every period until ctx ends.
// With a pod source, until a plan has checked an authoritative view against
// the runtime, it also runs as soon as the view is authoritative (next):
// at the agent's start the first run comes before the informers have
// synced, and the image GC trusts the view only once a plan has checked it
// (APIPodSource.PodImages: ViewRuntimeUnchecked). It blocks.
func (m *Manager) Run(ctx context.Context) error {
	t := m.clock.NewTicker(m.opts.Config.Period.Duration)
	defer t.Stop()
	next := func(ctx context.Context) bool { return m.next(ctx, t.C()) }
	gcrun.Every(ctx, m.opts.Supervise, next, func(ctx context.Context) { m.collectAndLog(ctx, TriggerPeriodic) })
	return nil
}

// viewPollInterval is how often Run looks at the pod view while no plan
// has checked one (Manager.awaitView).
const viewPollInterval = time.Second

// next waits for Run's next run: the period's next tick, or, while no plan
// has checked a pod view and the last run's was not authoritative, the
// view turning authoritative (looked at every viewPollInterval: View reads
// the informers' caches, and returns at once while the view is not
// authoritative). A view that was authoritative at the last run does not
// bring the next one forward: a run that failed to list the runtime is
// tried again a period later, as without a pod source. It returns false
// once ctx ends.
func (m *Manager) next(ctx context.Context, tick <-chan time.Time) bool {
	var poll <-chan time.Time
	if m.awaitView.Load() {
		t := m.clock.NewTicker(viewPollInterval)
		defer t.Stop()
		poll = t.C()
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tick:
			return true
		case <-poll:
			if !m.awaitView.Load() {
				poll = nil // a plan (Plan) checked one meanwhile
			} else if m.opts.Pods.View(m.clock.Now()).Authoritative {
				return true
			}
		}
	}
}

func (m *Manager) collectAndLog(ctx context.Context, trigger string) {
	r, err := m.GarbageCollect(ctx, trigger)
	gcrun.LogEnd(ctx, "Container GC", trigger, err)
	if r != nil && r.Outcome != nil && !r.Plan.Empty() {
		o := r.Outcome
		kv := []any{"trigger", trigger, "dryRun", o.DryRun, "containers", len(o.Containers),
			"sandboxes", len(o.Sandboxes), "logDirectories", len(o.LogDirs), "logLinks", len(o.LogLinks),
			"skipped", len(o.Skipped), "duration", r.Duration,
			"estimatedFreedBytes", r.Freed.Total(), "writableLayerBytes", r.Freed.WritableLayer,
			"containerLogBytes", r.Freed.ContainerLogs, "podLogDirectoryBytes", r.Freed.PodLogDirectory}
		if why := r.Plan.WritableLayersUnknown; why != "" {
			kv = append(kv, "writableLayersUnknown", why)
		}
		if r.Plan.PodLogsUnseen {
			kv = append(kv, "podLogsUnseen", true)
		}
		if measured := measuredFreed(r.Filesystems); len(measured) > 0 {
			kv = append(kv, "measuredFreedBytes", measured)
		}
		klog.FromContext(ctx).Info("Container GC run done", kv...)
	}
}

// measuredFreed maps each filesystem measured after the run to the growth
// of its free space.
func measuredFreed(fss []FilesystemChange) map[string]int64 {
	out := map[string]int64{}
	for _, f := range fss {
		if f.Measured {
			out[f.Filesystem] = f.MeasuredFreed
		}
	}
	return out
}

// GarbageCollect runs the container GC once: list, plan, remove. It returns
// ErrRunInProgress if a run is going on. The error joins every failure; the
// report says what was done despite them.
func (m *Manager) GarbageCollect(ctx context.Context, trigger string) (*Report, error) {
	return gcrun.Collect(m.serial, trigger, func(r *Report) error { return m.collect(ctx, r) }, m.record, m.opts.OnRun)
}

func (m *Manager) collect(ctx context.Context, r *Report) error {
	m.ops.begin()
	defer m.ops.end(m.metrics)
	var fss []FilesystemChange
	if m.opts.Disk != nil {
		fss = m.filesystems(ctx)
	}
	plan, err := m.plan(ctx)
	if plan == nil {
		// Nothing is planned without the runtime's listing, but whether
		// the pod view is authoritative does not depend on it: a runtime
		// restart on a control-plane node takes its kube-apiserver down
		// too.
		// A view the last plan found at odds with the runtime (a wrong
		// node name, another runtime than the kubelet's) stays so until a
		// plan finds them agreeing.
		view := NodeOnlyView()
		if m.opts.Pods != nil {
			view = m.opts.Pods.View(m.clock.Now())
		}
		disagreed := m.lastView != nil && RuntimeContradicts(*m.lastView)
		m.metrics.observeView(view.Authoritative && !disagreed && !m.leaseStale)
		m.awaitView.Store(m.opts.Pods != nil && !m.checked && !view.Authoritative)
		return err
	}
	r.Plan = plan
	m.metrics.observePlan(plan)
	m.logViewChange(ctx, plan)
	m.logRunningDeleted(ctx, plan)
	out, execErr := execute(ctx, m.opts.Runtime, plan, m.paths, m.opts.Config.DryRun)
	r.Outcome, r.Freed = out, out.Bytes()
	m.logsElsewhereSkipped(ctx, out)
	if !out.DryRun && len(out.Containers)+len(out.Sandboxes) > 0 && m.opts.Reclaimer != nil {
		m.reclaim(ctx, out)
	}
	// Settling only serves the measurement: without a filesystem to
	// measure (no Options.Disk, or none could be read) there is no wait.
	if len(fss) > 0 && !out.DryRun && len(out.Containers)+len(out.Sandboxes)+len(out.LogDirs) > 0 {
		m.settle(ctx, fss)
	}
	r.Filesystems = fss
	return errors.Join(err, execErr)
}

// Plan lists the node and returns the plan for it as it is now. It removes
// nothing. A non-nil plan may come with an error: the log directories could
// not all be read, and the plan leaves them alone.
func (m *Manager) Plan(ctx context.Context) (*Plan, error) {
	var plan *Plan
	var err error
	if busy := m.serial.Exclusive(func() { plan, err = m.plan(ctx) }); busy != nil {
		return nil, busy
	}
	return plan, err
}

func (m *Manager) plan(ctx context.Context) (*Plan, error) {
	began := m.clock.Now()
	node, podsRead, err := m.snapshot(ctx)
	if node == nil {
		return nil, err
	}
	node.ListedAt = began
	now := m.clock.Now()
	m.timeline.follow(ctx, now)
	view := NodeOnlyView()
	if m.opts.Pods != nil {
		// After listing the node: a pod that has anything on the node
		// existed before this view was taken.
		view = m.opts.Pods.View(now)
		view.NodeLease = func() NodeLease { return m.opts.Pods.NodeLease(ctx) }
		// The first check reads the lease, even with nothing to remove as
		// pod_gone: otherwise the image GC would trust, from the start,
		// the view of a name the machine no longer runs under (renamed
		// without a reboot) until some plan had a pod_gone candidate.
		// After a plan that found it stale, the plans read it until one
		// finds it fresh (the cached read, or one GET every 10s at most),
		// and are not authoritative meanwhile: the gauge and the Warning
		// do not flap on plans with nothing to remove as pod_gone.
		view.CheckLease = view.Authoritative && (m.leaseStale || !m.checked)
		// Only a snapshot that read what podsOnNode reads says which pods
		// have nothing left on the node: one whose log directories could
		// not be read would forget the deletion of a pod that has only
		// its log directory. Links name no pod that has nothing else on
		// the node: a link scan that failed does not stop it.
		if podsRead {
			m.opts.Pods.Retain(podsOnNode(node), began)
		}
	}
	m.timeline.place(node, now)
	plan := m.policy.Plan(*node, view, now)
	if view.Authoritative {
		// The plan checked the view against the runtime: the image GC
		// goes by what it found (APIPodSource.RuntimeChecked).
		// A stale Node lease counts too: the view may be of the
		// machine's previous node name, whose pods' images are not the
		// ones about to run here.
		verdict := ""
		if RuntimeContradicts(plan.PodsReason) || plan.PodsReason == ViewNodeLeaseStale {
			verdict = plan.PodsReason
		}
		m.leaseStale = verdict == ViewNodeLeaseStale
		m.opts.Pods.RuntimeChecked(verdict)
		m.checked = true
	}
	m.awaitView.Store(m.opts.Pods != nil && !m.checked)
	plan.WritableLayersUnknown = m.opts.NoWritableLayers
	m.idFaults(ctx, plan, now)
	s := sizer{rt: m.opts.Runtime, layers: m.opts.WritableLayers, paths: m.paths}
	s.size(ctx, plan)
	if s.failed > 0 {
		m.metrics.errors.WithLabelValues(OpReadBytes).Add(float64(s.failed))
	}
	return plan, err
}

// snapshot lists what the policy looks at. Failing to list the runtime is
// fatal (no node); failing to read a log directory is not (nothing is
// planned there). podsRead says the runtime's listings and the pod log
// directories were read: everything that tells which pods have anything on
// the node (podsOnNode).
func (m *Manager) snapshot(ctx context.Context) (node *NodeState, podsRead bool, _ error) {
	cs, err := m.opts.Runtime.ListContainers(ctx, nil)
	if err != nil {
		m.metrics.errors.WithLabelValues(OpListRuntime).Inc()
		return nil, false, err
	}
	sbs, err := m.opts.Runtime.ListPodSandboxes(ctx, nil)
	if err != nil {
		m.metrics.errors.WithLabelValues(OpListRuntime).Inc()
		return nil, false, err
	}
	v, err := m.opts.Runtime.Version(ctx)
	m.ops.done(OpReadVersion, err != nil)
	if err != nil {
		// The plan does not check it against the Node's then.
		m.metrics.errors.WithLabelValues(OpReadVersion).Inc()
		klog.FromContext(ctx).V(2).Info("Cannot ask the runtime its version; this run does not check it against the Node's", "err", err)
	}
	node = &NodeState{Containers: make([]Container, 0, len(cs)), Sandboxes: make([]Sandbox, 0, len(sbs)),
		RuntimeName: v.GetRuntimeName(), RuntimeVersion: v.GetRuntimeVersion()}
	for _, s := range sbs {
		node.Sandboxes = append(node.Sandboxes, sandboxFromCRI(s))
	}
	for _, c := range cs {
		ct := containerFromCRI(c)
		if m.policy.agesFromExit() && ct.Managed && ct.State == StateExited {
			st, err := m.opts.Runtime.ContainerStatus(ctx, ct.ID)
			m.ops.done(OpReadExitTime, err != nil && !cri.IsNotFound(err))
			switch {
			case cri.IsNotFound(err):
				continue // removed meanwhile
			case err != nil:
				// FinishedAt stays zero: the timeline dates it by when
				// it was first seen exited (min_age until then).
				m.metrics.errors.WithLabelValues(OpReadExitTime).Inc()
				klog.FromContext(ctx).V(2).Info("Cannot read a container's exit time; its age counts from when it was first seen exited", "containerID", ct.ID, "err", err)
			default:
				ct.FinishedAt = unixNanos(st.GetFinishedAt())
			}
		}
		node.Containers = append(node.Containers, ct)
	}
	var errs []error
	if node.LogDirs, err = scanPodLogDirs(m.paths.PodLogs); err != nil {
		errs = append(errs, err)
	}
	podsRead = err == nil
	if m.paths.ContainerLogs != "" {
		if node.LogLinks, err = scanLogLinks(m.paths.ContainerLogs, m.paths.PodLogs); err != nil {
			errs = append(errs, err)
		}
		m.linksElsewhere(ctx, node.LogLinks)
	}
	if len(errs) > 0 {
		m.metrics.errors.WithLabelValues(OpScanLogs).Add(float64(len(errs)))
	}
	var why string
	node.PodLogsUnseen, why = podLogsUnseen(ctx, m.opts.Runtime, node.Containers, m.paths.PodLogs)
	m.logsUnseenChange(ctx, node.PodLogsUnseen, why)
	return node, podsRead, errors.Join(errs...)
}

// logsUnseenChange sets the gauge of whether the pod logs are unseen
// (NodeState.PodLogsUnseen), and logs when they become unseen, naming a
// running container's log that the runtime writes and nodegc does not see
// (or why it cannot tell), and when they are seen again: once per episode.
func (m *Manager) logsUnseenChange(ctx context.Context, unseen bool, why string) {
	m.metrics.podLogsUnseen.Set(metricvec.Bool(unseen))
	if unseen == m.logsUnseen {
		return
	}
	m.logsUnseen = unseen
	if unseen {
		klog.FromContext(ctx).Info("Warning: nodegc does not see a running container's log where the runtime writes it: "+
			"its view of the pod logs directory is not the kubelet's (a filesystem mounted there on the host after nodegc's container started, which its mount does not show: restart nodegc's pod; "+
			"or the runtime writes the logs outside it, in a kubelet podLogsDir that containerGC.podLogsDirectory does not name: the unseen log's path says which). "+
			"Until it sees them all, no container log link, pod log directory or log file is removed, nor a live pod's container that a limit or maxAge would remove (its logs would stay behind)",
			"podLogsDirectory", m.paths.PodLogs, "unseen", why)
		return
	}
	klog.FromContext(ctx).Info("Container GC sees the running containers' logs under the pod logs directory again: log links, pod log directories and containers are collected",
		"podLogsDirectory", m.paths.PodLogs)
}

// logsElsewhereSkipped logs, when a run skips a container the last did
// not as SkipLogsElsewhere, how many it skipped so: each run skips them
// again until the kubelet's GC removes them.
func (m *Manager) logsElsewhereSkipped(ctx context.Context, out *Outcome) {
	skipped, example, fresh := map[string]bool{}, "", false
	for _, s := range out.Skipped {
		if s.Why != SkipLogsElsewhere {
			continue
		}
		skipped[s.ID] = true
		if !m.elsewhereSkipped[s.ID] {
			fresh, example = true, s.ID
		}
	}
	m.elsewhereSkipped = skipped
	if fresh {
		klog.FromContext(ctx).Info("Warning: containers of live pods log outside the pod logs directory, where nodegc can remove no log file; it leaves them to the kubelet's GC: set containerGC.podLogsDirectory to the kubelet's podLogsDir (-v=2 names each log)",
			"containers", len(skipped), "example", example, "podLogsDirectory", m.paths.PodLogs)
	}
}

// linksElsewhere logs, once, that container log links point outside the
// pod logs directory: nodegc cannot tell whether they dangle, and leaves
// them (readLink).
func (m *Manager) linksElsewhere(ctx context.Context, links []LogLink) {
	if m.elsewhereLogged {
		return
	}
	n, example := 0, ""
	for _, l := range links {
		if l.Elsewhere {
			if n++; example == "" {
				example = l.Name
			}
		}
	}
	if n == 0 {
		return
	}
	m.elsewhereLogged = true
	klog.FromContext(ctx).Info("Warning: container log links point outside the pod logs directory; nodegc cannot tell whether they dangle and leaves them to the kubelet: set containerGC.podLogsDirectory to the kubelet's podLogsDir",
		"links", n, "example", example, "containerLogsDirectory", m.paths.ContainerLogs, "podLogsDirectory", m.paths.PodLogs)
}

// idFaultExamples is how many containers, or sandboxes, and IDs an ID
// fault's warning names at most.
const idFaultExamples = 10

// idFaults counts each listing, of containers and of sandboxes, that gave
// entries no ID of their own, and logs the first and one a minute after,
// naming a few: the plan keeps every such entry (KeepIDFault).
func (m *Manager) idFaults(ctx context.Context, plan *Plan, now time.Time) {
	if len(plan.ContainerIDFaults) > 0 && m.idFaultDue(listingContainers, now) {
		n, named := idFaulty(plan.KeepContainers, func(d ContainerDecision) (string, string) {
			c := &d.Container
			return d.Reason, fmt.Sprintf("%q (%s of pod %s/%s, attempt %d)", c.ID, c.Name, c.PodNamespace, c.PodName, c.Attempt)
		})
		klog.FromContext(ctx).Info("Warning: the runtime lists containers without an ID of their own (none, or one another listed container has); each is kept, with its sandbox and its pod's log directory, as removing it by ID could remove another",
			"count", n, "containers", named, "ids", firstOf(plan.ContainerIDFaults))
	}
	if len(plan.SandboxIDFaults) > 0 && m.idFaultDue(listingSandboxes, now) {
		n, named := idFaulty(plan.KeepSandboxes, func(d SandboxDecision) (string, string) {
			s := &d.Sandbox
			return d.Reason, fmt.Sprintf("%q (pod %s/%s, attempt %d)", s.ID, s.PodNamespace, s.PodName, s.Attempt)
		})
		klog.FromContext(ctx).Info("Warning: the runtime lists sandboxes without an ID of their own (none, or one another listed sandbox has); each is kept, with its pod's log directory, as removing it by ID could remove another",
			"count", n, "sandboxes", named, "ids", firstOf(plan.SandboxIDFaults))
	}
}

// idFaulty counts the decisions kept as KeepIDFault (reason says each
// one's reason and how to name it), and names the first idFaultExamples.
func idFaulty[D any](kept []D, reason func(D) (string, string)) (n int, named []string) {
	for _, d := range kept {
		if why, name := reason(d); why == KeepIDFault {
			if n++; len(named) < idFaultExamples {
				named = append(named, name)
			}
		}
	}
	return n, named
}

// idFaultDue counts a listing's ID fault and says whether to log it: the
// first, and one a minute after the last logged.
func (m *Manager) idFaultDue(listing string, now time.Time) bool {
	m.metrics.idFaults.WithLabelValues(listing).Inc()
	if last, ok := m.idFaultLogged[listing]; ok && now.Sub(last) < time.Minute {
		return false
	}
	if m.idFaultLogged == nil {
		m.idFaultLogged = map[string]time.Time{}
	}
	m.idFaultLogged[listing] = now
	return true
}

// firstOf returns the first idFaultExamples of ids.
func firstOf(ids []string) []string {
	return ids[:min(len(ids), idFaultExamples)]
}

func podsOnNode(node *NodeState) map[string]bool {
	uids := map[string]bool{}
	for _, c := range node.Containers {
		if c.Managed {
			uids[c.PodUID] = true
		}
	}
	for _, s := range node.Sandboxes {
		if s.Managed {
			uids[s.PodUID] = true
		}
	}
	for _, d := range node.LogDirs {
		uids[d.PodUID] = true
	}
	return uids
}

// logViewChange logs, once per change, whether the GC may act on "pod gone".
func (m *Manager) logViewChange(ctx context.Context, p *Plan) {
	reason := p.PodsReason
	if m.lastView != nil && *m.lastView == reason {
		return
	}
	first := m.lastView == nil
	m.lastView = &reason
	switch {
	case p.PodsAuthoritative && !first:
		klog.FromContext(ctx).Info("Container GC knows which pods exist again: containers, sandboxes and log directories of deleted pods are collected")
	case p.PodsAuthoritative:
	case reason == ViewNodeOnly:
		// Said once by NewManager.
	case reason == ViewNodeNotFound:
		klog.FromContext(ctx).Info("Container GC assumes every pod exists: no Node has this node's name; is it the name the kubelet registered?",
			"node", p.PodsNode)
	case reason == ViewNodeOtherBoot:
		klog.FromContext(ctx).Info("Container GC assumes every pod exists: the Node of this node's name reports another boot ID than this machine's; "+
			"it is another machine's Node (is this node's name the one its kubelet registered?), or the kubelet has not reported since this machine booted",
			"node", p.PodsNode)
	case reason == ViewDisagrees:
		kv := []any{"node", p.PodsNode, "missingPods", len(p.PodsMissing), "examples", examplePods(p.PodsMissing)}
		if p.PodsLease != "" {
			kv = append(kv, "nodeLease", p.PodsLease)
		}
		klog.FromContext(ctx).Info("Container GC assumes every pod exists: the API server does not list pods that run on this node; is this node's name the one the kubelet registered?",
			kv...)
	case reason == ViewNodeLeaseStale:
		klog.FromContext(ctx).Info("Container GC removes nothing because its pod is gone: the Node's lease is not renewed, or nodegc may not read it; "+
			"its kubelet is down, or runs under another node name now (is this node's name the one the kubelet registered?), "+
			"or nodegc's ServiceAccount lacks get on leases in kube-node-lease (nodeLease says which)",
			"node", p.PodsNode, "nodeLease", p.PodsLease)
	case reason == ViewRuntimeLacksPods:
		klog.FromContext(ctx).Info("Container GC assumes every pod exists, and keeps dangling log links: the container runtime lists none of the pods "+
			"the API server says run on this node; is containerRuntimeEndpoint the kubelet's runtime (k3s, RKE2: their own containerd's socket), "+
			"and this node's name the one the kubelet registered?",
			"node", p.PodsNode, "podsNotInRuntime", len(p.PodsNotInRuntime), "examples", examplePods(p.PodsNotInRuntime))
	case reason == ViewNodeOtherRuntime:
		klog.FromContext(ctx).Info("Container GC assumes every pod exists, and keeps dangling log links: the Node's kubelet reports another container "+
			"runtime than the one nodegc asks; is containerRuntimeEndpoint the kubelet's runtime (k3s, RKE2: their own containerd's socket)? "+
			"(A runtime upgraded in place is reported by the kubelet within seconds.)",
			"node", p.PodsNode, "nodeRuntime", p.NodeRuntime, "runtime", p.Runtime)
	default:
		klog.FromContext(ctx).Info("Container GC assumes every pod exists: nothing is removed because its pod is gone", "reason", reason)
	}
}

// logRunningDeleted logs, once per change, the pods that run here although
// an authoritative view lacks them: deleted from the API while they run
// (force-deleted), as a process the kubelet cannot stop may stay. They are
// kept; the log says why they stay.
func (m *Manager) logRunningDeleted(ctx context.Context, p *Plan) {
	var examples []string
	if p.PodsAuthoritative {
		examples = examplePods(p.PodsMissing)
	}
	names := strings.Join(examples, ",")
	if names == m.runningDeleted {
		return
	}
	m.runningDeleted = names
	if names != "" {
		klog.FromContext(ctx).Info("Pods run on this node that the API server no longer has (deleted while they run: force-deleted?); "+
			"the container GC keeps them as running pods until the kubelet has stopped them",
			"pods", len(p.PodsMissing), "examples", examples)
	}
}

// examplePods names the first few pods of refs.
func examplePods(refs []PodRef) []string {
	const few = 5
	out := make([]string, 0, min(len(refs), few))
	for _, r := range refs[:min(len(refs), few)] {
		out = append(out, r.String())
	}
	return out
}

func (m *Manager) record(r *Report) {
	result := resultSuccess
	switch {
	case r.Err != nil:
		result = resultError
	case m.opts.Config.DryRun:
		result = resultDryRun
	}
	m.metrics.runs.Observe(r.Trigger, result, r.Duration)
	if r.Outcome != nil {
		m.metrics.observeOutcome(r.Outcome)
	}
	m.metrics.observeFilesystems(r.Filesystems)
}
