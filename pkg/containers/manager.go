package containers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodegc/nodegc/internal/gcrun"
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
	StopPodSandbox(ctx context.Context, id string) error
	RemovePodSandbox(ctx context.Context, id string) error
}

var (
	_ RuntimeService = (*cri.Client)(nil)
	_ remover        = RuntimeService(nil) // what the executor needs is part of it
)

// PodSource tells which pods exist: an *APIPodSource.
type PodSource interface {
	// View returns the pod view at now.
	View(now time.Time) PodView
	// Retain forgets remembered deletions of pods that have nothing left on
	// the node (onNode holds the UIDs that do).
	Retain(onNode map[string]bool)
}

var _ PodSource = (*APIPodSource)(nil)

// ErrRunInProgress is returned by GarbageCollect and Plan while a run is
// going on.
var ErrRunInProgress = gcrun.ErrInProgress

// Options configure a Manager.
type Options struct {
	Config  config.ContainerGCConfiguration
	Runtime RuntimeService
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
}

// Report describes one GC run: its trigger, start, duration and error
// (gcrun.Run), its plan and what applying it did.
type Report struct {
	gcrun.Run
	// Plan is nil when the runtime could not be listed.
	Plan    *Plan
	Outcome *Outcome
}

// Manager runs the container GC for one node, every period, never two runs
// at once.
type Manager struct {
	opts    Options
	policy  *Policy
	metrics *metrics
	clock   clock.WithTicker
	paths   logPaths

	serial *gcrun.Serial // one run or plan at a time; guards lastView
	// lastView is the pod view reason of the previous run, to log changes.
	lastView *string
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
	return &Manager{
		opts: opts, policy: NewPolicy(opts.Config), metrics: newMetrics(reg), clock: opts.Clock, serial: gcrun.NewSerial(opts.Clock),
		paths: logPaths{PodLogs: opts.Config.PodLogsDirectory, ContainerLogs: opts.Config.ContainerLogsDirectory},
	}, nil
}

// Run runs the container GC at once and then every period until ctx ends.
// It blocks.
func (m *Manager) Run(ctx context.Context) error {
	t := m.clock.NewTicker(m.opts.Config.Period.Duration)
	defer t.Stop()
	gcrun.Every(ctx, m.opts.Supervise, t.C(), func(ctx context.Context) { m.collectAndLog(ctx, TriggerPeriodic) })
	return nil
}

func (m *Manager) collectAndLog(ctx context.Context, trigger string) {
	r, err := m.GarbageCollect(ctx, trigger)
	gcrun.LogEnd(ctx, "Container GC", trigger, err)
	if r != nil && r.Outcome != nil && !r.Plan.Empty() {
		o := r.Outcome
		klog.FromContext(ctx).Info("Container GC run done", "trigger", trigger, "dryRun", o.DryRun, "containers", len(o.Containers),
			"sandboxes", len(o.Sandboxes), "logDirectories", len(o.LogDirs), "logLinks", len(o.LogLinks),
			"skipped", len(o.Skipped), "duration", r.Duration)
	}
}

// GarbageCollect runs the container GC once: list, plan, remove. It returns
// ErrRunInProgress if a run is going on. The error joins every failure; the
// report says what was done despite them.
func (m *Manager) GarbageCollect(ctx context.Context, trigger string) (*Report, error) {
	return gcrun.Collect(m.serial, trigger, func(r *Report) error { return m.collect(ctx, r) }, m.record, m.opts.OnRun)
}

func (m *Manager) collect(ctx context.Context, r *Report) error {
	plan, err := m.plan(ctx)
	if plan == nil {
		return err
	}
	r.Plan = plan
	m.metrics.observePlan(plan)
	m.logViewChange(ctx, plan)
	out, execErr := execute(ctx, m.opts.Runtime, plan, m.paths, m.opts.Config.DryRun)
	r.Outcome = out
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
	node, err := m.snapshot(ctx)
	if err != nil && node == nil {
		return nil, err
	}
	now := m.clock.Now()
	view := NodeOnlyView()
	if m.opts.Pods != nil {
		// After listing the node: a pod that has anything on the node
		// existed before this view was taken.
		view = m.opts.Pods.View(now)
		m.opts.Pods.Retain(podsOnNode(node))
	}
	return m.policy.Plan(*node, view, now), err
}

// snapshot lists what the policy looks at. Failing to list the runtime is
// fatal; failing to read a log directory is not (nothing is planned there).
func (m *Manager) snapshot(ctx context.Context) (*NodeState, error) {
	cs, err := m.opts.Runtime.ListContainers(ctx, nil)
	if err != nil {
		m.metrics.errors.WithLabelValues(OpListRuntime).Inc()
		return nil, err
	}
	sbs, err := m.opts.Runtime.ListPodSandboxes(ctx, nil)
	if err != nil {
		m.metrics.errors.WithLabelValues(OpListRuntime).Inc()
		return nil, err
	}
	node := &NodeState{Containers: make([]Container, 0, len(cs)), Sandboxes: make([]Sandbox, 0, len(sbs))}
	for _, s := range sbs {
		node.Sandboxes = append(node.Sandboxes, sandboxFromCRI(s))
	}
	for _, c := range cs {
		ct := containerFromCRI(c)
		if m.policy.agesFromExit() && ct.Managed && ct.State == StateExited {
			st, err := m.opts.Runtime.ContainerStatus(ctx, ct.ID)
			switch {
			case cri.IsNotFound(err):
				continue // removed meanwhile
			case err != nil:
				// FinishedAt stays zero: the policy keeps it (min_age).
				m.metrics.errors.WithLabelValues(OpReadExitTime).Inc()
				klog.FromContext(ctx).V(2).Info("Cannot read a container's exit time; keeping it this run", "containerID", ct.ID, "err", err)
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
	if m.paths.ContainerLogs != "" {
		if node.LogLinks, err = scanLogLinks(m.paths.ContainerLogs); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		m.metrics.errors.WithLabelValues(OpScanLogs).Add(float64(len(errs)))
	}
	return node, errors.Join(errs...)
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
	case reason == ViewDisagrees:
		klog.FromContext(ctx).Info("Container GC assumes every pod exists: the API server does not list pods that run on this node; is this node's name the one the kubelet registered?",
			"node", p.PodsNode, "missingPods", len(p.PodsMissing), "examples", examplePods(p.PodsMissing))
	default:
		klog.FromContext(ctx).Info("Container GC assumes every pod exists: nothing is removed because its pod is gone", "reason", reason)
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
}
