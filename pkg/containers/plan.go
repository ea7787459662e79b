package containers

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/version"

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
	KeepIDFault       = "id_fault"       // listed without an ID of its own (none, or one another listed container has): cannot be removed by ID
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
	KeepPodsUnknown   = "pods_unknown"   // the pod view is not authoritative; for dangling log links, the runtime is not the kubelet's (NotTheKubeletsRuntime)
	KeepPodActive     = "pod_active"     // log directory of a gone pod that still has containers or sandboxes
	KeepNotExited     = "not_exited"     // dangling log link of a container that has not exited
	KeepLogsUnseen    = "logs_unseen"    // the pod logs as nodegc sees them are not the kubelet's (NodeState.PodLogsUnseen): links, log directories, and containers a limit or maxAge would remove, whose logs would stay behind
)

// StartMargin is how long, beyond the deadline the kubelet gives a
// container's start, an instance created but never started may still be
// starting (see StartGrace): the kubelet's work between CreateContainer and
// StartContainer, and the runtime's after the deadline, until it lists the
// container as running or exited.
const StartMargin = time.Minute

// StartGrace is how long an instance created but never started is not
// evictable, whatever minAge says (it is max(minAge, StartGrace)), given the
// kubelet's runtimeRequestTimeout: the kubelet creates a container, then
// starts it with that deadline, and the runtime lists it as created until
// the start is done, which on a node under I/O pressure may take that long.
// It is the timeout, counted as at least the kubelet's default
// (config.DefaultRuntimeRequestTimeout: the agent's own may be set lower
// than the kubelet's), plus StartMargin. An older one is a leftover (of a
// kubelet that crashed between the two calls, or of a start that failed)
// and is evictable. It saturates at the longest Duration (a timeout near
// it, plus the margin, would wrap to a negative grace: every created
// container evictable at once).
func StartGrace(runtimeRequestTimeout time.Duration) time.Duration {
	t := max(runtimeRequestTimeout, config.DefaultRuntimeRequestTimeout)
	if t > math.MaxInt64-StartMargin {
		return math.MaxInt64
	}
	return t + StartMargin
}

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
	// WritableLayerBytes and LogBytes are what removing the container
	// frees: its writable layer, and its log file with its rotated
	// siblings. Counted for removals only, by the Manager right after
	// planning (Policy.Plan leaves them 0).
	WritableLayerBytes, LogBytes uint64
}

// SandboxDecision is what the plan does with one sandbox, and why. Removed
// sandboxes are always stopped first.
type SandboxDecision struct {
	Sandbox Sandbox
	Reason  string
	// WritableLayerBytes is what removing the sandbox frees of its own
	// writable layer (its pause container's), counted as for containers.
	WritableLayerBytes uint64
}

// LogDirDecision is what the plan does with one pod log directory.
type LogDirDecision struct {
	Dir    PodLogDir
	Reason string
	// Bytes is what removing the directory frees beyond the log files
	// counted with the plan's container removals; counted as for
	// containers. In an Outcome: what it held right before its removal,
	// those of a planned container another removed meanwhile included.
	Bytes uint64
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
	// PodsMissing lists the pods the runtime runs (a ready sandbox or a
	// running container) that the view lacks although its last complete
	// list should have returned them. When PodsReason is ViewDisagrees,
	// evidence that the view is not this node's (a wrong node name); in an
	// authoritative view, of which a pod runs here, pods deleted from the
	// API while they run (force-deleted), kept as running. Sorted by
	// namespace, name and UID.
	PodsMissing []PodRef
	// PodsLease says, when PodsReason is ViewDisagrees although a pod the
	// view lists, reported running by the kubelet of its Ready Node, runs
	// here, why that pod could not vouch for the view, and when it is
	// ViewNodeLeaseStale, why nothing goes as pod gone: the Node's lease
	// is not fresh (its kubelet is gone, or down: the Ready condition
	// outlives it) or could not be read (PodView.NodeLease).
	PodsLease string
	// PodsNotInRuntime lists, when PodsReason is ViewRuntimeLacksPods,
	// the view's pods that the kubelet reports running since well before
	// the runtime was listed (RunningMargin), of none of which the
	// runtime lists a sandbox or a container: evidence that the runtime
	// is not the kubelet's. Sorted like PodsMissing.
	PodsNotInRuntime []PodRef
	// NodeRuntime and Runtime say, when PodsReason is
	// ViewNodeOtherRuntime, the container runtime the Node's kubelet
	// reports and the one listed, in the kubelet's form
	// ("containerd://2.1.4").
	NodeRuntime, Runtime string

	RemoveContainers, KeepContainers []ContainerDecision
	RemoveSandboxes, KeepSandboxes   []SandboxDecision
	RemoveLogDirs, KeepLogDirs       []LogDirDecision
	// RemoveLogLinks and KeepLogLinks list dangling links only.
	RemoveLogLinks, KeepLogLinks []LogLinkDecision

	// ContainerIDFaults are the IDs the runtime's listing gave no
	// container of its own: "" for containers listed without one, and
	// each ID listed for two containers that differ (the runtime
	// misbehaves; an entry listed twice alike is one container). Every
	// container listed under one is kept (KeepIDFault): removing it by ID
	// could remove another. Sorted.
	ContainerIDFaults []string
	// SandboxIDFaults are, likewise, the IDs the sandbox listing gave no
	// sandbox of its own; every sandbox listed under one is kept
	// (KeepIDFault). Sorted.
	SandboxIDFaults []string

	// WritableLayersUnknown, when not empty, says why writable layers
	// count 0 bytes (e.g. "runtime cri-o": no snapshot source for it).
	WritableLayersUnknown string

	// PodLogsUnseen says the plan was made with NodeState.PodLogsUnseen:
	// it removes no log link and no pod log directory, and keeps the
	// containers a limit or maxAge would remove (KeepLogsUnseen).
	PodLogsUnseen bool
}

// Empty says the plan removes nothing.
func (p *Plan) Empty() bool {
	return len(p.RemoveContainers)+len(p.RemoveSandboxes)+len(p.RemoveLogDirs)+len(p.RemoveLogLinks) == 0
}

// unit is what the kubelet evicts by: the dead instances of one container
// of one pod.
type unit struct {
	podUID, name string
}

// planner holds one planning pass. It is not shared.
type planner struct {
	p    *Policy
	pods PodView
	now  time.Time
	plan *Plan

	static   map[string]bool      // pod UIDs of static pods
	newest   map[string]time.Time // pod UID -> newest creation on the node
	oldest   map[string]time.Time // pod UID -> oldest creation of its sandboxes and containers
	running  map[string]bool      // pod UIDs with a ready sandbox or a running container
	refs     map[string]PodRef    // pod UID -> its namespace and name, from the labels
	removed  map[string]bool      // container IDs the plan removes
	kept     map[string]bool      // container IDs the plan keeps
	idFaults map[string]bool      // IDs the listing gave no container of its own (Plan.ContainerIDFaults)
	podStays map[string]bool      // pod UIDs that keep a container or sandbox

	newestDead map[unit]*newest    // the instances of each unit that are never removed while its pod lives
	protected  map[*Container]bool // newest dead instances kept although a limit or maxAge would remove them
}

// Plan decides, for the node as given and the pods the view says exist, at
// time now, what to remove and what to keep. It is a pure function: it reads
// no clock and does no I/O.
//
// The pod view must agree with the runtime: a pod with a ready sandbox or a
// running container is never gone, and if the view lacks such a pod (not
// static, not seen deleted) whose oldest sandbox or container predates the
// view's last complete list, the view is not this node's and the plan
// treats it as not authoritative (PodsReason ViewDisagrees, PodsMissing).
// The other way round, if the view has pods the kubelet reports running
// since well before the runtime was listed and the runtime lists a sandbox
// or container of none of them, the runtime is not the kubelet's (PodsReason
// ViewRuntimeLacksPods, PodsNotInRuntime): nothing goes as pod gone, and
// no dangling log link goes either (whether its container has exited
// cannot be told). Before both, the runtime listed must be the one the
// view's Node reports its kubelet runs (ViewNodeOtherRuntime, with the
// effects of ViewRuntimeLacksPods; sameRuntime).
//
// Containers, with kubelet's rules: evictable are managed containers that
// are not running, at least minAge old, and, if created but never started,
// at least StartGrace old (the kubelet may have their start in flight); the
// evictable containers of a gone pod are all removed; the others are
// grouped by (pod UID, container name) and each group keeps its
// maxPerPodContainer newest (by creation); dead containers older than
// maxAge are removed; when more than maxContainers remain, each group is cut
// to max(1, maxContainers/groups), then the oldest on the node go until
// maxContainers remain. Whatever the limits and maxAge, the newest
// dead instance of each group of a live pod stays (the newest that ran, or
// if none ran, the newest created), and counts as one of the group's kept.
//
// Sandboxes: one is active while ready or while a container that stays
// belongs to it. A gone pod loses every inactive sandbox; a live pod keeps
// its newest sandbox and loses its other inactive ones.
//
// Log directories of gone pods are removed once the plan leaves nothing of
// the pod on the node; dangling log links are removed unless their
// container exists and has not exited.
//
// When the pod logs as nodegc sees them are not the kubelet's
// (node.PodLogsUnseen), no log link and no pod log directory is removed,
// and the containers a limit or maxAge would remove are kept
// (KeepLogsUnseen): their logs would stay behind. Those of gone pods
// still go: the kubelet removes a deleted pod's log directory.
//
// Nothing goes as pod gone either unless the lease of the view's Node is
// fresh (PodView.NodeLease, NodeLease.Fresh): only a plan that would
// remove something so reads it (or one asked to, PodView.CheckLease), and
// when it is not fresh the node is planned again with the view not
// authoritative (ViewNodeLeaseStale; Plan.PodsLease says why). A view of the machine's previous node name
// (renamed without a reboot: that Node exists, reports this boot ID, and
// none of its pods runs here any more) agrees with the runtime, and lacks
// the pods of the new name; no kubelet renews that Node's lease. A kubelet
// that is down leaves its lease stale too, and nothing goes as pod gone
// until it renews it. The lease is read at most once per plan.
func (p *Policy) Plan(node NodeState, pods PodView, now time.Time) *Plan {
	pods.NodeLease = readOnce(pods.NodeLease)
	plan := p.plan(node, pods, now)
	if !plan.PodsAuthoritative || !(pods.CheckLease || plan.removesGonePods()) {
		return plan
	}
	if fresh, why := pods.leaseFresh(now); !fresh {
		pods.Authoritative, pods.Reason = false, ViewNodeLeaseStale
		plan = p.plan(node, pods, now)
		plan.PodsLease = why
	}
	return plan
}

// removesGonePods says whether the plan removes anything because its pod
// is gone (ReasonPodGone).
func (p *Plan) removesGonePods() bool {
	gone := func(reason string) bool { return reason == ReasonPodGone }
	return slices.ContainsFunc(p.RemoveContainers, func(d ContainerDecision) bool { return gone(d.Reason) }) ||
		slices.ContainsFunc(p.RemoveSandboxes, func(d SandboxDecision) bool { return gone(d.Reason) }) ||
		slices.ContainsFunc(p.RemoveLogDirs, func(d LogDirDecision) bool { return gone(d.Reason) })
}

// readOnce returns read, called at most once: a plan reads the Node's
// lease at most once, whoever asks (vouched, Plan). nil stays nil.
func readOnce(read func() NodeLease) func() NodeLease {
	if read == nil {
		return nil
	}
	var got *NodeLease
	return func() NodeLease {
		if got == nil {
			l := read()
			got = &l
		}
		return *got
	}
}

func (p *Policy) plan(node NodeState, pods PodView, now time.Time) *Plan {
	pl := &planner{
		p: p, pods: pods, now: now,
		plan: &Plan{Now: now, PodsAuthoritative: pods.Authoritative, PodsReason: pods.Reason, PodsNode: pods.Node,
			PodLogsUnseen: node.PodLogsUnseen},
		static:     map[string]bool{},
		newest:     map[string]time.Time{},
		oldest:     map[string]time.Time{},
		running:    map[string]bool{},
		refs:       map[string]PodRef{},
		removed:    map[string]bool{},
		kept:       map[string]bool{},
		idFaults:   map[string]bool{},
		podStays:   map[string]bool{},
		newestDead: map[unit]*newest{},
		protected:  map[*Container]bool{},
	}
	node.Containers = pl.distinctIDs(node.Containers)
	pl.index(node)
	pl.sameRuntime(node.RuntimeName, node.RuntimeVersion)
	pl.agree()
	pl.runtimeHasViewPods(node.ListedAt)
	pl.containers(node.Containers)
	pl.sandboxes(node.Sandboxes, node.Containers)
	pl.logDirs(node.LogDirs)
	pl.logLinks(node.LogLinks, node.Containers)
	pl.sort()
	return pl.plan
}

// distinctIDs folds the entries of all that are the same container listed
// again alike (same ID, same fields) into one, and records in idFaults,
// and the plan, every ID the listing gives no container of its own: the
// empty ID, and one listed for two containers that differ. The runtime
// misbehaves then (containerd lists each container once, from a map by
// ID), but the plan removes by ID: of two containers under one, the one
// the runtime resolves may be the one the plan keeps (the newest dead
// instance), so every container under such an ID stays, and with it its
// sandbox and its pod's log directory.
func (pl *planner) distinctIDs(all []Container) []Container {
	out, faults := distinctByID(all, func(c Container) string { return c.ID }, sameContainer)
	if len(faults) > 0 {
		pl.idFaults = faults
		pl.plan.ContainerIDFaults = slices.Sorted(maps.Keys(faults))
	}
	return out
}

// distinctByID folds the entries of all that are one thing listed again
// alike (same) into one, and returns the IDs (id) the listing gives
// nothing of its own: the empty ID, and one listed for two things that
// differ (nil if none).
func distinctByID[T any](all []T, id func(T) string, same func(a, b T) bool) (out []T, faults map[string]bool) {
	byID := make(map[string][]T, len(all))
	out = make([]T, 0, len(all))
	for _, x := range all {
		key := id(x)
		listed := byID[key]
		if slices.ContainsFunc(listed, func(o T) bool { return same(o, x) }) {
			continue // the same thing again
		}
		if key == "" || len(listed) > 0 {
			if faults == nil {
				faults = map[string]bool{}
			}
			faults[key] = true
		}
		byID[key] = append(listed, x)
		out = append(out, x)
	}
	return out, faults
}

// sameContainer says whether a and b say the same of one container: an
// entry listed twice.
func sameContainer(a, b Container) bool {
	times := func(c *Container) [3]time.Time { return [3]time.Time{c.CreatedAt, c.FinishedAt, c.SeenCreatedSince} }
	ta, tb := times(&a), times(&b)
	for i := range ta {
		if !ta[i].Equal(tb[i]) {
			return false
		}
	}
	a.CreatedAt, a.FinishedAt, a.SeenCreatedSince = time.Time{}, time.Time{}, time.Time{}
	b.CreatedAt, b.FinishedAt, b.SeenCreatedSince = time.Time{}, time.Time{}, time.Time{}
	return a == b
}

// index records, per pod, whether it is static, whether it runs, its name,
// and its newest and oldest creation times.
func (pl *planner) index(node NodeState) {
	seen := func(uid, ns, name string, t time.Time) {
		if t.After(pl.newest[uid]) {
			pl.newest[uid] = t
		}
		if o, ok := pl.oldest[uid]; !t.IsZero() && (!ok || t.Before(o)) {
			pl.oldest[uid] = t
		}
		if _, ok := pl.refs[uid]; !ok {
			pl.refs[uid] = PodRef{UID: uid, Namespace: ns, Name: name}
		}
	}
	for _, s := range node.Sandboxes {
		if !s.Managed {
			continue
		}
		seen(s.PodUID, s.PodNamespace, s.PodName, s.CreatedAt)
		if s.Source != "" && s.Source != SourceAPI {
			pl.static[s.PodUID] = true
		}
		if s.Ready {
			pl.running[s.PodUID] = true
		}
	}
	for _, c := range node.Containers {
		if !c.Managed {
			continue
		}
		seen(c.PodUID, c.PodNamespace, c.PodName, c.CreatedAt)
		if c.State == StateRunning {
			pl.running[c.PodUID] = true
		}
	}
	for _, d := range node.LogDirs {
		if d.ModTime.After(pl.newest[d.PodUID]) {
			pl.newest[d.PodUID] = d.ModTime
		}
	}
}

// sameRuntime checks that the runtime listed, which answered name and
// version to CRI Version, is the one the kubelet of an authoritative view's
// Node reports (PodView.NodeRuntime): the kubelet asks its runtime the same
// and reports "name://version", the version as it reads it (kubeletVersion).
// If it is another, the runtime nodegc asks is not the kubelet's (a
// containerRuntimeEndpoint that names another runtime answering CRI), or it
// was upgraded in place and the kubelet has not reported since: the plan
// treats the view as not authoritative (ViewNodeOtherRuntime), and keeps
// every dangling log link. Unlike runtimeHasViewPods, this needs no running
// pod. The two are compared as the kubelet would write them, so that a
// distro containerd is not taken for k3s's of the same numbers
// ("1.6.20~ds1" reads 1.6.20, k3s's "v1.6.20-k3s1" 1.6.20-k3s1). A side
// that does not say (nothing reported, a kubelet that could not ask its
// runtime: "Unknown", a runtime that gave no Version) is not checked.
func (pl *planner) sameRuntime(name, version string) {
	reported := pl.pods.NodeRuntime
	if !pl.pods.Authoritative || reported == "" || name == "" {
		return
	}
	if _, v, ok := strings.Cut(reported, "://"); !ok || v == "Unknown" {
		return
	}
	ours := name + "://" + kubeletVersion(version)
	if ours == reported {
		return
	}
	pl.pods.Authoritative, pl.pods.Reason = false, ViewNodeOtherRuntime
	pl.plan.PodsAuthoritative, pl.plan.PodsReason = false, ViewNodeOtherRuntime
	pl.plan.NodeRuntime, pl.plan.Runtime = reported, ours
}

// kubeletVersion writes a runtime's version as the kubelet reports it:
// read as a semantic version if it can be, else as a generic one (only
// its numbers: "1.6.20~ds1" is 1.6.20); as given if neither (the kubelet
// then reports "Unknown").
func kubeletVersion(v string) string {
	if sv, err := version.ParseSemantic(v); err == nil {
		return sv.String()
	}
	if gv, err := version.ParseGeneric(v); err == nil {
		return gv.String()
	}
	return v
}

// agree checks an authoritative view against the runtime: a pod that runs
// here, is not static, and was neither listed nor seen deleted although
// something of it predates the view's last complete list, should have been
// in that list. The kubelet runs only pods bound to its node, which exist in
// the API before anything of theirs is created on the node; a pod deleted
// while it runs stays in the API until the kubelet has stopped it, unless it
// was force-deleted. So such a pod means the view is not this node's (a
// wrong node name: another node's pods, or none), and the plan treats it as
// not authoritative, unless the view's Node is Ready, its lease fresh, and
// a pod the view lists, that the kubelet reports running (PodView.Running:
// not being deleted), runs here too (not static; vouched): the kubelet
// runs only pods bound to its Node, so the view is then this node's, and
// the pods it lacks were deleted from the API while they run
// (force-deleted; a process the kubelet cannot stop, hung on a lost NFS
// server, runs on for hours). They are named (Plan.PodsMissing), and kept
// as running pods (gone). A pod the view lists that runs here is not
// enough alone: the machine may have run under the view's node name
// before (renamed), and a pod of that name hung here, Terminating in the
// API, would vouch for the old Node's view, whose kubelet is gone (not
// Ready, its lease stale). Any creation time dates the pod, so the oldest
// is used: a pod whose container just restarted is not taken for a new
// one.
func (pl *planner) agree() {
	v := pl.pods
	if !v.Authoritative {
		return
	}
	var missing []PodRef
	for uid := range pl.running {
		if pl.static[uid] || v.Live[uid] || v.Deleted[uid] {
			continue
		}
		if since, ok := pl.oldest[uid]; !ok || !since.Before(v.ListedAt) {
			continue // created after the list: the cache may lag
		}
		missing = append(missing, pl.refs[uid])
	}
	if len(missing) == 0 {
		return
	}
	sortRefs(missing)
	pl.plan.PodsMissing = missing
	if pl.vouched() {
		return // the view is this node's
	}
	pl.pods.Authoritative, pl.pods.Reason = false, ViewDisagrees
	pl.plan.PodsAuthoritative, pl.plan.PodsReason, pl.plan.PodsMissing = false, ViewDisagrees, missing
}

// vouched says whether a pod the view lists, that the kubelet of its Ready
// Node reports running, runs here (not static), while that kubelet renews
// the Node's lease (NodeLease.Fresh): the view is then this node's. The
// Ready condition is not enough: the node lifecycle controller turns it
// Unknown only after its grace period (40s) without the kubelet, and
// never while kube-controller-manager is down; within that time a pod of
// the machine's previous node name, not yet Terminating, would vouch for
// that Node's view. The lease is read only here, once such a pod is
// found, and at most once; when it lets no pod vouch, Plan.PodsLease
// says why.
func (pl *planner) vouched() bool {
	v := pl.pods
	if !v.NodeReady {
		return false
	}
	for uid := range pl.running {
		if _, reported := v.Running[uid]; !reported || pl.static[uid] || staticPodUID(uid) {
			continue
		}
		fresh, why := v.leaseFresh(pl.now)
		pl.plan.PodsLease = why
		return fresh
	}
	return false
}

// RunningMargin is how long before the runtime was listed a pod must have
// been running, as the kubelet reports it, to count in the check that the
// runtime has the view's running pods (ViewRuntimeLacksPods): its sandbox,
// made before its containers started, was then in the runtime, which
// lists sandboxes in any state until they are removed. The margin is that
// of the view's list date (a minute): the kubelet dates container starts
// by the runtime's answers, on this machine's clock, which a step may
// have moved since.
const RunningMargin = time.Minute

// runtimeHasViewPods checks an authoritative view the other way round from
// agree: the pods the kubelet reports running since well before the runtime
// was listed (listedAt, less RunningMargin; the plan's time if zero) must
// have a sandbox, or a container, in the runtime. If the view has such pods
// and the runtime lists none of them, the runtime is not the kubelet's (or
// the view is not this node's): the plan treats the view as not
// authoritative. One such pod the runtime lists is enough: a view lags
// behind the kubelet, and may still show running a pod whose sandbox was
// just removed.
func (pl *planner) runtimeHasViewPods(listedAt time.Time) {
	v := pl.pods
	if !v.Authoritative || len(v.Running) == 0 {
		return
	}
	if listedAt.IsZero() || listedAt.After(pl.now) {
		listedAt = pl.now
	}
	before := listedAt.Add(-RunningMargin)
	var lacking []PodRef
	for uid, r := range v.Running {
		if r.Since.IsZero() || !r.Since.Before(before) || v.Deleted[uid] {
			continue
		}
		if _, listed := pl.refs[uid]; listed {
			return
		}
		ref := r.PodRef
		ref.UID = uid
		lacking = append(lacking, ref)
	}
	if len(lacking) == 0 {
		return
	}
	sortRefs(lacking)
	pl.pods.Authoritative, pl.pods.Reason = false, ViewRuntimeLacksPods
	pl.plan.PodsAuthoritative, pl.plan.PodsReason, pl.plan.PodsNotInRuntime = false, ViewRuntimeLacksPods, lacking
}

func sortRefs(refs []PodRef) {
	slices.SortFunc(refs, func(a, b PodRef) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name), strings.Compare(a.UID, b.UID))
	})
}

// gone says whether the pod uid no longer exists; when it does not, why it
// is kept (a Keep* reason).
func (pl *planner) gone(uid string) (bool, string) {
	switch {
	case !pl.pods.Authoritative:
		return false, KeepPodsUnknown
	case pl.static[uid] || staticPodUID(uid):
		return false, KeepStaticPod
	case pl.running[uid]:
		return false, KeepPodRunning
	case pl.pods.Gone(uid, pl.newest[uid]):
		return true, ""
	default:
		return false, KeepPodLive
	}
}

// age is how old a dead container is, from its creation or its exit. The
// second result is false when the exit time is needed but unknown.
func (pl *planner) age(c *Container) (time.Duration, bool) {
	if pl.p.fromExit && c.State == StateExited {
		if c.FinishedAt.IsZero() {
			return 0, false
		}
		return pl.now.Sub(c.FinishedAt), true
	}
	return pl.now.Sub(c.CreatedAt), true
}

// newestFirst orders containers by creation, newest first, as the kubelet
// does; attempt and ID break ties so that plans are deterministic.
func newestFirst(a, b *Container) int {
	return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(b.Attempt, a.Attempt), strings.Compare(a.ID, b.ID))
}

// newest is the newest dead instance of a pod's container, by creation
// time (deadFirst) and by attempt (deadAttemptFirst): the two differ only
// when the wall clock stepped between their creations (the plan's times
// are moved for a step it saw, and one moved and the other not may swap
// their order; a step back swaps the runtime's own times), and then both
// stay. The kubelet's restart count only grows for a container of a pod,
// so the attempt orders the instances whatever the clock did; the time
// still decides when the attempts cannot (a runtime wiped, a kubelet that
// lost its log directory).
type newest struct{ byTime, byAttempt *Container }

// see takes c, a dead instance of the unit, into account.
func (n *newest) see(c *Container) {
	if n.byTime == nil || deadFirst(c, n.byTime) < 0 {
		n.byTime = c
	}
	if n.byAttempt == nil || deadAttemptFirst(c, n.byAttempt) < 0 {
		n.byAttempt = c
	}
}

// is says whether c is the newest dead instance by either order.
func (n *newest) is(c *Container) bool {
	return n != nil && (c == n.byTime || c == n.byAttempt)
}

// deadAttemptFirst orders as deadFirst does, by attempt before creation
// time.
func deadAttemptFirst(a, b *Container) int {
	return cmp.Or(cmp.Compare(ran(a), ran(b)), cmp.Compare(b.Attempt, a.Attempt), newestFirst(a, b))
}

// ran is 0 for a container that ran (exited, or unknown), 1 for one never
// started.
func ran(c *Container) int {
	if c.State == StateCreated {
		return 1
	}
	return 0
}

// deadFirst orders the instances of a pod's container for maxAge: those
// that ran and stopped (exited, or unknown) before those never started, then
// newest first. The first is the "previous" instance that `kubectl logs
// --previous` and restart counts read.
func deadFirst(a, b *Container) int {
	return cmp.Or(cmp.Compare(ran(a), ran(b)), newestFirst(a, b))
}

func (pl *planner) keepContainer(c *Container, reason string) {
	pl.plan.KeepContainers = append(pl.plan.KeepContainers, ContainerDecision{Container: *c, Reason: reason})
	pl.kept[c.ID] = true
	if c.Managed {
		pl.podStays[c.PodUID] = true
	}
}

func (pl *planner) removeContainer(c *Container, reason string) {
	if pl.plan.PodLogsUnseen && reason != ReasonPodGone {
		// Its log files, which nodegc cannot see, would stay until its
		// pod is deleted: the kubelet no longer knows the container. A
		// gone pod's go with its log directory, which the kubelet
		// removes.
		pl.keepContainer(c, KeepLogsUnseen)
		return
	}
	pl.removed[c.ID] = true
	pl.plan.RemoveContainers = append(pl.plan.RemoveContainers,
		ContainerDecision{Container: *c, Reason: reason, StopFirst: c.State == StateUnknown})
}

// containerPass is one rule of the container GC, as kuberuntime's
// evictContainers applies them one step after the other. The first pass
// (evictable) sorts the node's containers into units of evictable ones,
// newest first, and keeps the others; every later pass removes containers
// of units (removeContainer) and takes them out, or keeps them for good
// and takes them out too. What is left in units after the last pass is
// kept within the limits.
type containerPass func(pl *planner, all []Container, units map[unit][]*Container)

// containerPasses are the container rules in the order they apply: a new
// rule is a new pass (with its Reason* or Keep* constant, and that value in
// the label lists of metrics.go).
var containerPasses = []struct {
	name string
	run  containerPass
}{
	{"evictable", (*planner).evictable},                   // kubelet: getEvictableContainers (minAge); running, starting, unmanaged stay
	{"pod gone", (*planner).podGone},                      // kubelet: the evictable containers of deleted pods
	{"per-container limit", (*planner).perContainerLimit}, // kubelet: enforceMaxContainersPerEvictUnit(maxPerPodContainer)
	{"max age", (*planner).maxAge},                        // nodegc: dead for longer than maxAge
	{"node limit", (*planner).nodeLimit},                  // kubelet: maxContainers, a fair share per unit, then the oldest
}

func (pl *planner) containers(all []Container) {
	units := map[unit][]*Container{}
	for _, pass := range containerPasses {
		pass.run(pl, all, units)
	}
	for _, cs := range units {
		for _, c := range cs {
			pl.keepWithinLimit(c)
		}
	}
	pl.neverKeptAndRemoved()
}

// neverKeptAndRemoved makes sure no ID is both kept and removed: a removal
// by an ID the plan also keeps could remove the container it keeps. Every
// removal of such an ID becomes a keep (KeepIDFault). distinctIDs leaves
// no ID to two containers, so this only guards against a rule's mistake.
func (pl *planner) neverKeptAndRemoved() {
	var removals []ContainerDecision
	for _, d := range pl.plan.RemoveContainers {
		if pl.kept[d.Container.ID] {
			delete(pl.removed, d.Container.ID)
			pl.keepContainer(&d.Container, KeepIDFault)
			continue
		}
		removals = append(removals, d)
	}
	pl.plan.RemoveContainers = removals
}

// evictable keeps what is not evictable (unmanaged, running, starting,
// younger than minAge) and puts the rest in units, newest first. It finds
// the newest dead instance of every unit, evictable or not.
func (pl *planner) evictable(all []Container, units map[unit][]*Container) {
	for i := range all {
		c := &all[i]
		switch {
		case pl.idFaults[c.ID]:
			pl.keepContainer(c, KeepIDFault)
			continue
		case !c.Managed:
			pl.keepContainer(c, KeepUnmanaged)
			continue
		case c.State == StateRunning:
			pl.keepContainer(c, KeepRunning)
			continue
		}
		key := unit{c.PodUID, c.Name}
		if pl.newestDead[key] == nil {
			pl.newestDead[key] = &newest{}
		}
		pl.newestDead[key].see(c)
		if grace := max(pl.p.minAge, pl.p.startGrace); c.State == StateCreated &&
			(pl.now.Sub(c.CreatedAt) < grace || !c.SeenCreatedSince.IsZero() && pl.now.Sub(c.SeenCreatedSince) < grace) {
			pl.keepContainer(c, KeepStarting)
			continue
		}
		if age, known := pl.age(c); !known || age < pl.p.minAge {
			pl.keepContainer(c, KeepMinAge)
			continue
		}
		units[key] = append(units[key], c)
	}
	for _, cs := range units {
		slices.SortFunc(cs, newestFirst)
	}
}

// podGone removes every evictable container of a gone pod.
func (pl *planner) podGone(_ []Container, units map[unit][]*Container) {
	for key, cs := range units {
		if gone, _ := pl.gone(key.podUID); gone {
			for _, c := range cs {
				pl.removeContainer(c, ReasonPodGone)
			}
			delete(units, key)
		}
	}
}

// perContainerLimit cuts every unit to maxPerPodContainer.
func (pl *planner) perContainerLimit(_ []Container, units map[unit][]*Container) {
	if pl.p.maxPerPodContainer >= 0 {
		pl.capUnits(units, pl.p.maxPerPodContainer, ReasonPerContainerLimit)
	}
}

// maxAge removes the containers dead for longer than maxAge, except the
// newest dead instance of each unit.
func (pl *planner) maxAge(_ []Container, units map[unit][]*Container) {
	if pl.p.maxAge <= 0 {
		return
	}
	for key, cs := range units {
		kept := cs[:0]
		for _, c := range cs {
			if age, _ := pl.age(c); age > pl.p.maxAge {
				if !pl.newestDead[key].is(c) {
					pl.removeContainer(c, ReasonMaxAge)
					continue
				}
				pl.protected[c] = true
			}
			kept = append(kept, c)
		}
		units[key] = kept
	}
}

// nodeLimit brings the node down to maxContainers: the kubelet's fairness
// rule first, an equal share per unit, at least one; then the oldest across
// the node, except the newest dead instance of each unit.
func (pl *planner) nodeLimit(_ []Container, units map[unit][]*Container) {
	limit := pl.p.maxContainers
	if limit < 0 || countUnits(units) <= limit {
		return
	}
	pl.capUnits(units, max(1, limit/len(units)), ReasonNodeLimit)
	if n := countUnits(units); n <= limit {
		return
	}
	var flat []*Container
	for key, cs := range units {
		flat = append(flat, cs...)
		delete(units, key)
	}
	slices.SortFunc(flat, newestFirst)
	for i, c := range flat {
		switch {
		case i < limit:
			pl.keepWithinLimit(c)
		case pl.newestDead[unit{c.PodUID, c.Name}].is(c):
			// Safety over the count: the newest dead container of a
			// live pod's container stays, even above maxContainers.
			pl.keepContainer(c, KeepNewestDead)
		default:
			pl.removeContainer(c, ReasonNodeLimit)
		}
	}
}

// keepWithinLimit keeps a container no rule removes: within the limits, or
// the newest dead instance a limit or maxAge would have removed.
func (pl *planner) keepWithinLimit(c *Container) {
	if pl.protected[c] {
		pl.keepContainer(c, KeepNewestDead)
		return
	}
	pl.keepContainer(c, KeepWithinLimit)
}

// capUnits keeps n (at least 1) containers of every unit (sorted newest
// first) and removes the rest for reason. The kubelet keeps the n newest;
// so does capUnits, unless the unit's newest dead instance is not among
// them (newer instances were created but never started): then it keeps
// that one and the n-1 newest. The newest dead instance by attempt, where
// a step of the clock made it another than by time, stays too, above n.
// Emptied units stay in the map: the kubelet counts them when it shares
// the node limit.
func (pl *planner) capUnits(units map[unit][]*Container, n int, reason string) {
	for key, cs := range units {
		if len(cs) <= n {
			continue
		}
		nd := pl.newestDead[key]
		kept := cs[:n:n]
		if p := nd.byTime; slices.Index(cs, p) >= n {
			pl.protected[p] = true
			kept = append(slices.Clone(cs[:n-1]), p) // cs[:n-1] are newer than p: still newest first
		}
		if a := nd.byAttempt; a != nd.byTime && slices.Contains(cs, a) && !slices.Contains(kept, a) {
			pl.protected[a] = true
			kept = append(slices.Clone(kept), a)
			slices.SortFunc(kept, newestFirst)
		}
		for _, c := range cs {
			if !slices.Contains(kept, c) {
				pl.removeContainer(c, reason)
			}
		}
		units[key] = kept
	}
}

func countUnits(units map[unit][]*Container) int {
	n := 0
	for _, cs := range units {
		n += len(cs)
	}
	return n
}

func (pl *planner) sandboxes(all []Sandbox, containers []Container) {
	referenced := map[string]bool{}
	for _, c := range containers {
		if !pl.removed[c.ID] {
			referenced[c.SandboxID] = true
		}
	}
	all, faults := distinctSandboxIDs(all)
	if len(faults) > 0 {
		pl.plan.SandboxIDFaults = slices.Sorted(maps.Keys(faults))
	}
	byPod := map[string][]*Sandbox{}
	for i := range all {
		s := &all[i]
		switch {
		case faults[s.ID]:
			pl.plan.KeepSandboxes = append(pl.plan.KeepSandboxes, SandboxDecision{Sandbox: *s, Reason: KeepIDFault})
			if s.Managed {
				pl.podStays[s.PodUID] = true
			}
			continue
		case !s.Managed:
			pl.plan.KeepSandboxes = append(pl.plan.KeepSandboxes, SandboxDecision{Sandbox: *s, Reason: KeepUnmanaged})
			continue
		}
		byPod[s.PodUID] = append(byPod[s.PodUID], s)
	}
	for uid, sbs := range byPod {
		slices.SortFunc(sbs, func(a, b *Sandbox) int {
			return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(b.Attempt, a.Attempt), strings.Compare(a.ID, b.ID))
		})
		gone, _ := pl.gone(uid)
		// The newest by creation time, as the kubelet orders them, and by
		// attempt: a step of the wall clock back between two creations
		// dates the latest sandbox earlier (as newest.byAttempt, for
		// containers).
		latest := slices.MaxFunc(sbs, func(a, b *Sandbox) int {
			return cmp.Or(cmp.Compare(a.Attempt, b.Attempt), a.CreatedAt.Compare(b.CreatedAt), strings.Compare(b.ID, a.ID))
		})
		for i, s := range sbs {
			d := SandboxDecision{Sandbox: *s}
			switch {
			case s.Ready:
				d.Reason = KeepReady
			case referenced[s.ID]:
				d.Reason = KeepHasContainers
			case gone:
				d.Reason = ReasonPodGone
			case i == 0 || s == latest:
				d.Reason = KeepNewestSandbox
			default:
				d.Reason = ReasonSuperseded
			}
			if d.Reason == ReasonPodGone || d.Reason == ReasonSuperseded {
				pl.plan.RemoveSandboxes = append(pl.plan.RemoveSandboxes, d)
				continue
			}
			pl.plan.KeepSandboxes = append(pl.plan.KeepSandboxes, d)
			pl.podStays[uid] = true
		}
	}
}

// distinctSandboxIDs folds the entries of all that are one sandbox listed
// again alike into one, and returns the IDs the listing gives no sandbox of
// its own (the empty ID, one listed for two sandboxes that differ): as for
// containers (distinctIDs), every sandbox under such an ID is kept, for
// the runtime stops and removes by ID.
func distinctSandboxIDs(all []Sandbox) ([]Sandbox, map[string]bool) {
	return distinctByID(all, func(s Sandbox) string { return s.ID }, func(a, b Sandbox) bool {
		same := a.CreatedAt.Equal(b.CreatedAt)
		a.CreatedAt = b.CreatedAt
		return same && a == b
	})
}

func (pl *planner) logDirs(dirs []PodLogDir) {
	for _, d := range dirs {
		gone, why := pl.gone(d.PodUID)
		switch {
		case pl.plan.PodLogsUnseen:
			pl.plan.KeepLogDirs = append(pl.plan.KeepLogDirs, LogDirDecision{Dir: d, Reason: KeepLogsUnseen})
		case !gone:
			pl.plan.KeepLogDirs = append(pl.plan.KeepLogDirs, LogDirDecision{Dir: d, Reason: why})
		case pl.podStays[d.PodUID]:
			pl.plan.KeepLogDirs = append(pl.plan.KeepLogDirs, LogDirDecision{Dir: d, Reason: KeepPodActive})
		default:
			pl.plan.RemoveLogDirs = append(pl.plan.RemoveLogDirs, LogDirDecision{Dir: d, Reason: ReasonPodGone})
		}
	}
}

func (pl *planner) logLinks(links []LogLink, containers []Container) {
	for _, l := range links {
		if !l.Dangling {
			continue
		}
		if pl.plan.PodLogsUnseen {
			// Whether its target exists cannot be told.
			pl.plan.KeepLogLinks = append(pl.plan.KeepLogLinks, LogLinkDecision{Link: l, Reason: KeepLogsUnseen})
			continue
		}
		if NotTheKubeletsRuntime(pl.plan.PodsReason) {
			// Whether its container has exited cannot be told: the
			// runtime listed is not the kubelet's.
			pl.plan.KeepLogLinks = append(pl.plan.KeepLogLinks, LogLinkDecision{Link: l, Reason: KeepPodsUnknown})
			continue
		}
		// A link is dangling for a moment while the kubelet rotates a
		// running container's log: only links of exited (or unknown to the
		// runtime) containers go, as in the kubelet.
		if linkOfLiveContainer(l.ContainerID, containers) || logOfLiveContainer(l.Target, containers) {
			pl.plan.KeepLogLinks = append(pl.plan.KeepLogLinks, LogLinkDecision{Link: l, Reason: KeepNotExited})
			continue
		}
		pl.plan.RemoveLogLinks = append(pl.plan.RemoveLogLinks, LogLinkDecision{Link: l, Reason: ReasonDangling})
	}
}

// minLinkIDPrefix is the shortest container ID prefix in a link's name that
// names a container: the kubelet takes anything shorter for no container
// (kuberuntime's getContainerIDFromLegacyLogSymlink).
const minLinkIDPrefix = 6

// linkOfLiveContainer reports whether a link whose name ends in id names a
// container that has not exited. The kubelet cuts link names to 255 bytes:
// with a long pod name, namespace and container name only a prefix of the
// ID is left, which the kubelet's status lookup resolves (containerd takes
// ID prefixes). So a prefix of at least minLinkIDPrefix characters matches
// every container whose ID it begins, and the link stays if any of them
// has not exited.
func linkOfLiveContainer(id string, containers []Container) bool {
	if len(id) < minLinkIDPrefix {
		return false
	}
	for _, c := range containers {
		if strings.HasPrefix(c.ID, id) && c.State != StateExited {
			return true
		}
	}
	return false
}

// logOfLiveContainer reports whether t is the log of a container that has
// not exited: a link whose name the kubelet's cut left no ID (long pod,
// namespace and container names) names no container, but its target says
// whose log it is.
func logOfLiveContainer(t *LogTarget, containers []Container) bool {
	if t == nil {
		return false
	}
	for _, c := range containers {
		if c.Managed && c.PodUID == t.PodUID && c.Name == t.Container && c.Attempt == t.Attempt && c.State != StateExited {
			return true
		}
	}
	return false
}

// sort orders removals oldest first and everything else by pod, so that
// plans are deterministic and an interrupted run removed the oldest.
func (pl *planner) sort() {
	byAge := func(a, b ContainerDecision) int {
		return cmp.Or(a.Container.CreatedAt.Compare(b.Container.CreatedAt), strings.Compare(a.Container.ID, b.Container.ID))
	}
	byPod := func(a, b ContainerDecision) int {
		x, y := &a.Container, &b.Container
		return cmp.Or(strings.Compare(x.PodNamespace, y.PodNamespace), strings.Compare(x.PodName, y.PodName),
			strings.Compare(x.PodUID, y.PodUID), strings.Compare(x.Name, y.Name), byAge(a, b))
	}
	sandboxes := func(a, b SandboxDecision) int {
		x, y := &a.Sandbox, &b.Sandbox
		return cmp.Or(strings.Compare(x.PodNamespace, y.PodNamespace), strings.Compare(x.PodName, y.PodName),
			strings.Compare(x.PodUID, y.PodUID), x.CreatedAt.Compare(y.CreatedAt), strings.Compare(x.ID, y.ID))
	}
	dirs := func(a, b LogDirDecision) int { return strings.Compare(a.Dir.Name, b.Dir.Name) }
	links := func(a, b LogLinkDecision) int { return strings.Compare(a.Link.Name, b.Link.Name) }
	slices.SortFunc(pl.plan.RemoveContainers, byAge)
	slices.SortFunc(pl.plan.KeepContainers, byPod)
	slices.SortFunc(pl.plan.RemoveSandboxes, sandboxes)
	slices.SortFunc(pl.plan.KeepSandboxes, sandboxes)
	slices.SortFunc(pl.plan.RemoveLogDirs, dirs)
	slices.SortFunc(pl.plan.KeepLogDirs, dirs)
	slices.SortFunc(pl.plan.RemoveLogLinks, links)
	slices.SortFunc(pl.plan.KeepLogLinks, links)
}
