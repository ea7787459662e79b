package containers

import (
	"fmt"
	"time"
)

// Why a PodView cannot say that a pod is gone. They are log values and the
// value of PodView.Reason and Plan.PodsReason.
const (
	ViewNotSynced   = "not_synced"  // the informers have not listed pods and the Node yet
	ViewUnreachable = "unreachable" // the last list or watch of pods or of the Node failed
	ViewNodeOnly    = "node_only"   // no API access at all
	// ViewNodeNotFound: no Node object has the name the source watches pods
	// for. The name is not the one the node's kubelet registered (wrong
	// nodeName or host name), or the Node was deleted: the informer would
	// list no pod and every pod would look gone.
	ViewNodeNotFound = "node_not_found"
	// ViewNodeOtherBoot: the Node of that name reports another boot ID than
	// this machine's (PodSourceOptions.BootID). It is another machine's
	// Node (a wrong nodeName or host name that another node registered),
	// whose pods would make every pod here look gone; or this machine's
	// before its last reboot, until its kubelet reports again.
	ViewNodeOtherBoot = "node_other_boot"
	// ViewCacheBehind: the informer's cache has not caught up with the last
	// complete list yet (a relist just returned): it lacks pods the list
	// returned, whose images are not known. Set by PodImages only: View
	// counts those pods live from the list.
	ViewCacheBehind = "cache_behind"
	// ViewRuntimeUnchecked: the container GC has not checked the view
	// against the runtime yet (the agent's start, or a container GC built
	// again for another runtime). Set by PodImages only: the container
	// GC's plan makes the check itself (APIPodSource.ExpectRuntimeChecks).
	ViewRuntimeUnchecked = "runtime_unchecked"
	// ViewDisagrees: the view lacks pods the runtime runs although its last
	// complete list should have returned them (Plan.PodsMissing names them).
	// Set by Policy.Plan, not by a source.
	ViewDisagrees = "disagrees_with_runtime"
	// ViewRuntimeLacksPods: the runtime lists no sandbox and no container
	// of any of the view's pods that the kubelet reports running since
	// well before the runtime was listed (Plan.PodsNotInRuntime names
	// them). The runtime nodegc asks is not the kubelet's (a
	// containerRuntimeEndpoint that is another runtime's: a distro
	// containerd next to k3s's or RKE2's own, another install's), or the
	// view is another node's. Which pods exist, and whether a container
	// has exited, cannot be told from that runtime. Set by Policy.Plan,
	// not by a source.
	ViewRuntimeLacksPods = "runtime_lacks_view_pods"
	// ViewNodeOtherRuntime: the Node's kubelet reports another container
	// runtime (status.nodeInfo.containerRuntimeVersion: the name and
	// version its runtime answers to CRI Version) than the one nodegc
	// asks (Plan.NodeRuntime and Plan.Runtime say which). The runtime
	// nodegc asks is not the kubelet's, as for ViewRuntimeLacksPods, but
	// this tells it on an idle node too; or the runtime was upgraded in
	// place and the kubelet has not reported it yet (seconds). Set by
	// Policy.Plan, not by a source.
	ViewNodeOtherRuntime = "node_other_runtime"
	// ViewNodeLeaseStale: the plan would remove something because its pod
	// is gone, but the lease of the view's Node (kube-node-lease/<Node>)
	// is not fresh, or could not be read (Plan.PodsLease says which): no
	// kubelet is shown renewing it. The machine may run under another
	// node name now (renamed without a reboot: the old Node still exists,
	// reports this boot ID and may stay Ready, and its view lacks the new
	// name's pods), or the Node's kubelet is down: nothing goes as pod
	// gone until it renews the lease. Set by Policy.Plan, not by a source.
	ViewNodeLeaseStale = "node_lease_stale"
)

// RuntimeContradicts says whether reason, a plan's PodsReason, is one the
// runtime gave an authoritative view (ViewDisagrees, ViewRuntimeLacksPods,
// ViewNodeOtherRuntime): the view came from this machine's Node, and the
// runtime and the view disagree about this node (a wrong node name,
// another runtime than the kubelet's).
func RuntimeContradicts(reason string) bool {
	return reason == ViewDisagrees || NotTheKubeletsRuntime(reason)
}

// NotTheKubeletsRuntime says whether reason, a plan's PodsReason, says that
// the runtime nodegc asks is not the kubelet's (ViewRuntimeLacksPods,
// ViewNodeOtherRuntime): whether a container of the kubelet's has exited
// cannot be asked of it.
func NotTheKubeletsRuntime(reason string) bool {
	return reason == ViewRuntimeLacksPods || reason == ViewNodeOtherRuntime
}

// RunningPod is a pod the kubelet reports running, as the view keeps it.
type RunningPod struct {
	PodRef
	// Since is when its earliest running container started
	// (status.containerStatuses[].state.running.startedAt): its sandbox
	// existed then.
	Since time.Time
}

// PodView is a snapshot of which pods exist, as the policy sees them. It is
// plain data: a pod source takes it at the start of a run.
//
// A pod is gone when the view is authoritative, its UID is not live, and
// either the watch saw it deleted or everything the pod has on the node is
// older than the view's last complete list. The second condition covers pods
// deleted while nobody watched, without ever calling "gone" a pod created
// after the list that the cache has not caught up with yet (a lagging or
// silently stalled watch): the kubelet creates a pod's sandbox only after
// the Pod exists in the API, so a pod the list did not return whose content
// predates the list was deleted.
type PodView struct {
	// Node is the node name the view is for; empty in node-only mode.
	Node string
	// Authoritative says the view comes from synced informers whose last
	// list or watch requests succeeded, and that the Node of its name
	// exists. When false no pod is ever gone.
	Authoritative bool
	// Reason says why the view is not authoritative (View* constants).
	Reason string
	// Live holds the UIDs of the pods bound to this node and the static pod
	// UIDs that mirror pods name (kubernetes.io/config.mirror): those the
	// informer's cache holds, and those the last complete list returned
	// that the watch has not seen deleted since.
	Live map[string]bool
	// Deleted holds the UIDs of pods the watch saw deleted since ListedAt.
	Deleted map[string]bool
	// ListedAt is when the last complete list of pods began.
	ListedAt time.Time
	// Running holds the pods of the informer's cache that the kubelet
	// reports running (phase Running, not being deleted, a container
	// running), by the pod UID the runtime's sandboxes carry: a mirror
	// pod's is the static pod's. Policy.Plan checks that the runtime
	// has them (ViewRuntimeLacksPods).
	Running map[string]RunningPod
	// NodeRuntime is the container runtime the Node's kubelet reports
	// (status.nodeInfo.containerRuntimeVersion, "containerd://2.1.4"):
	// Policy.Plan checks that it is the one listed (ViewNodeOtherRuntime).
	// Empty: not reported.
	NodeRuntime string
	// NodeReady says the Node's Ready condition is True: its kubelet
	// reported it. A Node whose kubelet went away, as after the machine
	// took another node name, turns Unknown only after the node
	// lifecycle controller's grace period, and not at all while
	// kube-controller-manager is down: NodeLease tells that the kubelet
	// still runs.
	NodeReady bool
	// NodeLease reads the Node's lease (kube-node-lease/<Node>), which
	// its kubelet renews every 10s: Policy.Plan asks for it only when a
	// pod the view lists would vouch for the view (agree), as the Ready
	// condition outlives the kubelet, or when it would remove something
	// because its pod is gone; at most once per plan. Nil: no lease can
	// be read, no pod vouches, and nothing is gone.
	NodeLease func() NodeLease
	// CheckLease has Policy.Plan read the lease of an authoritative view
	// even when nothing would go as pod gone, and plan with the view not
	// authoritative (ViewNodeLeaseStale) if it is not fresh. The Manager
	// sets it at its first check of a view and after a plan found the
	// lease stale, until one finds it fresh, so that the image GC, which
	// goes by the plans' verdicts (PodSource.RuntimeChecked), trusts no
	// view whose kubelet is not known to renew it.
	CheckLease bool
}

// NodeOnlyView is the view of an agent without API access: every pod is
// assumed to exist.
func NodeOnlyView() PodView { return PodView{Reason: ViewNodeOnly} }

// Gone reports whether the pod uid no longer exists, given the creation time
// of the newest thing it has on the node (sandbox, container or log
// directory). A zero newest never makes a pod gone.
func (v PodView) Gone(uid string, newest time.Time) bool {
	switch {
	case !v.Authoritative || v.Live[uid]:
		return false
	case v.Deleted[uid]:
		return true
	default:
		return !newest.IsZero() && newest.Before(v.ListedAt)
	}
}

// leaseFresh reads the lease of the view's Node (NodeLease) and says
// whether it is fresh at now; when not, why not.
func (v PodView) leaseFresh(now time.Time) (bool, string) {
	if v.NodeLease == nil {
		return false, fmt.Sprintf("node lease of %s not read", v.Node)
	}
	return v.NodeLease().Fresh(v.Node, now)
}

// NodeLease is what a read of a Node's lease (namespace kube-node-lease,
// the Node's name; coordination.k8s.io/v1) found.
type NodeLease struct {
	// RenewTime is spec.renewTime, as the kubelet wrote it (on this
	// machine's clock, when the Node is this machine's); zero if the
	// lease was never renewed.
	RenewTime time.Time
	// Duration is spec.leaseDurationSeconds (DefaultNodeLeaseDuration if
	// unset).
	Duration time.Duration
	// ClockBack is how far this machine's wall clock was seen stepped
	// back (0 or less) while a renewal written before the step could
	// still look fresh: such a renewal is that much older than RenewTime
	// says. A step counts for the lease's duration and the step after it
	// was seen (APIPodSource.NodeLease).
	ClockBack time.Duration
	// ReadAt is when the read returned, on this machine's clock (zero:
	// unknown): a renewal the kubelet made during the read is no
	// further ahead of it than the tolerance.
	ReadAt time.Time
	// Err says why the lease could not be read (not found, forbidden: an
	// RBAC without get on leases, unreachable).
	Err error
}

// latest returns the later of a and b.
func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// DefaultNodeLeaseDuration is a node lease's duration when it sets none:
// the kubelet's default nodeLeaseDurationSeconds.
const DefaultNodeLeaseDuration = 40 * time.Second

// NodeLeaseAheadTolerance is how far after now a lease's renewTime may be
// and still count: the kubelet of this machine's Node dates it on the same
// clock, so a renewal further ahead was written before the clock stepped
// back (or on another machine's clock), and its age cannot be told.
const NodeLeaseAheadTolerance = 5 * time.Second

// Fresh says whether the lease shows its kubelet renewing it at now:
// read, renewed, no further ahead of now than NodeLeaseAheadTolerance, and
// not expired (RenewTime + Duration, moved back by ClockBack, after now).
// When not, why not, naming node.
func (l NodeLease) Fresh(node string, now time.Time) (bool, string) {
	switch {
	case l.Err != nil:
		return false, fmt.Sprintf("node lease of %s unreadable: %v", node, l.Err)
	case l.RenewTime.IsZero():
		return false, fmt.Sprintf("node lease of %s never renewed", node)
	case l.RenewTime.After(latest(now, l.ReadAt).Add(NodeLeaseAheadTolerance)):
		return false, fmt.Sprintf("node lease of %s renewed at %s, ahead of this clock (%s): stepped back?",
			node, l.RenewTime.UTC().Format(time.RFC3339), latest(now, l.ReadAt).UTC().Format(time.RFC3339))
	}
	d := l.Duration
	if d <= 0 {
		d = DefaultNodeLeaseDuration
	}
	if expiry := l.RenewTime.Add(d + min(l.ClockBack, 0)); !expiry.After(now) {
		return false, fmt.Sprintf("node lease of %s stale since %s (renewed %s, for %s)", node,
			expiry.UTC().Format(time.RFC3339), l.RenewTime.UTC().Format(time.RFC3339), d)
	}
	return true, ""
}
