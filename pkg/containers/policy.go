package containers

import (
	"time"

	"github.com/nodegc/nodegc/pkg/config"
)

// Reasons for removing something. They are metric label values.
const (
	// ReasonPodGone: the pod no longer exists (containers, sandboxes, log
	// directories).
	ReasonPodGone = "pod_gone"
	// ReasonPerContainerLimit: beyond maxPerPodContainer dead instances of
	// the same pod's container.
	ReasonPerContainerLimit = "per_container_limit"
	// ReasonNodeLimit: beyond maxContainers dead containers on the node.
	ReasonNodeLimit = "node_limit"
	// ReasonMaxAge: dead for longer than maxAge.
	ReasonMaxAge = "max_age"
	// ReasonSuperseded: an inactive sandbox of a live pod that is not the
	// pod's newest sandbox.
	ReasonSuperseded = "superseded"
	// ReasonDangling: a container log link whose target is gone.
	ReasonDangling = "dangling"
)

// Reasons for keeping something. They are metric label values.
const (
	KeepUnmanaged     = "unmanaged"      // no kubelet labels: never touched
	KeepRunning       = "running"        // a running container
	KeepMinAge        = "min_age"        // younger than minAge (or exit time unknown)
	KeepStarting      = "starting"       // created, never started, younger than max(minAge, StartGrace): may be starting
	KeepWithinLimit   = "within_limit"   // within the per-container and node limits
	KeepNewestDead    = "newest_dead"    // the newest dead instance of a live pod's container, which a limit or maxAge would remove
	KeepReady         = "ready"          // a ready sandbox
	KeepHasContainers = "has_containers" // a sandbox some remaining container belongs to
	KeepNewestSandbox = "newest"         // the newest sandbox of a live pod
	KeepPodLive       = "pod_live"       // the pod exists (or is newer than the view's last list)
	KeepPodRunning    = "pod_running"    // the pod has a ready sandbox or a running container: never gone
	KeepStaticPod     = "static_pod"     // a static pod: only its kubelet knows whether it still exists
	KeepPodsUnknown   = "pods_unknown"   // the pod view is not authoritative
	KeepPodActive     = "pod_active"     // log directory of a gone pod that still has containers or sandboxes
	KeepNotExited     = "not_exited"     // dangling log link of a container that has not exited
)

// StartGrace is how long an instance created but never started is not
// evictable, whatever minAge says (it is max(minAge, StartGrace)): the
// kubelet creates a container, then starts it, and the runtime lists it as
// created in between. An older one is a leftover (of a kubelet that crashed
// between the two calls, or of a start that failed) and is evictable.
const StartGrace = time.Minute

// Policy is a container GC policy, made of a validated configuration.
type Policy struct {
	minAge             time.Duration
	maxAge             time.Duration
	fromExit           bool
	maxPerPodContainer int // negative: no limit
	maxContainers      int // negative: no limit
}

// NewPolicy returns the policy cfg describes. cfg must be defaulted
// (config.SetDefaults) and valid (config.ValidateContainerGC, which
// NewManager and the agent's config.Validate run): NewPolicy checks and
// defaults nothing again.
func NewPolicy(cfg config.ContainerGCConfiguration) *Policy {
	return &Policy{
		minAge:             cfg.MinAge.Duration,
		maxAge:             cfg.MaxAge.Duration,
		fromExit:           cfg.MinAgeFrom == config.AgeFromExit,
		maxPerPodContainer: int(*cfg.MaxPerPodContainer),
		maxContainers:      int(*cfg.MaxContainers),
	}
}

// AgesFromExit says whether ages count from the containers' exit, which
// then must be read (Container.FinishedAt).
func (p *Policy) AgesFromExit() bool { return p.fromExit }

// PodRef names a pod on the node, from the kubelet's labels.
type PodRef struct {
	UID, Namespace, Name string
}

// String is namespace/name (UID).
func (r PodRef) String() string { return r.Namespace + "/" + r.Name + " (" + r.UID + ")" }

// ContainerDecision is what the plan does with one container, and why.
type ContainerDecision struct {
	Container Container
	// Reason is a Reason* constant for removals, a Keep* one otherwise.
	Reason string
	// StopFirst: the container's state is unknown, so it may still run; it
	// is stopped before it is removed, as the kubelet does.
	StopFirst bool
}

// SandboxDecision is what the plan does with one sandbox, and why. Removed
// sandboxes are always stopped first.
type SandboxDecision struct {
	Sandbox Sandbox
	Reason  string
}

// LogDirDecision is what the plan does with one pod log directory.
type LogDirDecision struct {
	Dir    PodLogDir
	Reason string
}

// LogLinkDecision is what the plan does with one dangling log link.
type LogLinkDecision struct {
	Link   LogLink
	Reason string
}

// Plan is the outcome of planning: what to remove and what to keep, and
// why. Plans are what `nodegc plan` and dry-run print. Removals are listed
// oldest first.
type Plan struct {
	Now time.Time
	// PodsAuthoritative and PodsReason describe the pod view the plan was
	// made with: without authority nothing is removed as ReasonPodGone.
	// PodsReason is a View* constant when PodsAuthoritative is false.
	PodsAuthoritative bool
	PodsReason        string
	// PodsNode is the node name of the pod view; empty in node-only mode.
	PodsNode string
	// PodsMissing lists, when PodsReason is ViewDisagrees, the pods the
	// runtime runs (a ready sandbox or a running container) that the view
	// lacks although its last complete list should have returned them:
	// evidence that the view is not this node's (a wrong node name). Sorted
	// by namespace, name and UID.
	PodsMissing []PodRef

	RemoveContainers, KeepContainers []ContainerDecision
	RemoveSandboxes, KeepSandboxes   []SandboxDecision
	RemoveLogDirs, KeepLogDirs       []LogDirDecision
	// RemoveLogLinks and KeepLogLinks list dangling links only.
	RemoveLogLinks, KeepLogLinks []LogLinkDecision
}

// Empty says the plan removes nothing.
func (p *Plan) Empty() bool {
	return len(p.RemoveContainers)+len(p.RemoveSandboxes)+len(p.RemoveLogDirs)+len(p.RemoveLogLinks) == 0
}
