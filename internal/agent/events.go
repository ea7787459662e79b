package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/nodegc/nodegc/pkg/containers"
	"github.com/nodegc/nodegc/pkg/cri"
	"github.com/nodegc/nodegc/pkg/images"
)

// Event reasons on the Node, the kubelet's names.
const (
	EventFreeDiskSpaceFailed = "FreeDiskSpaceFailed"
	EventImageGCFailed       = "ImageGCFailed"
	EventInvalidDiskCapacity = "InvalidDiskCapacity"
	EventContainerGCFailed   = "ContainerGCFailed"
	// EventPodViewNotAuthoritative: the API's pods of this node lack pods
	// the runtime runs (nodegc's).
	EventPodViewNotAuthoritative = "PodViewNotAuthoritative"
	// EventPodLogsUnseen: nodegc does not see a running container's log
	// under its pod logs directory (containers.Plan.PodLogsUnseen).
	EventPodLogsUnseen = "PodLogsUnseen"
)

// maxPodsNamed bounds how many pods an event names.
const maxPodsNamed = 5

// nodeEvents records Events on this agent's Node through client-go's
// broadcaster, whose correlator aggregates and rate-limits repeats. A nil
// *nodeEvents (node-only mode) records nothing.
//
// No Event is recorded on a Node the pod view found to be another
// machine's, or that does not exist (README, safety rule 3): this
// machine's failures are not that Node's. The runs' errors are logged
// anyway (gcrun); nodeEvents logs, once per episode, that they go onto no
// Node, and each one left out at V(2).
type nodeEvents struct {
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	node        *corev1.ObjectReference
	logger      klog.Logger

	// disagreed says the last container GC plan's pod view disagreed with
	// the runtime; written by the container GC loop only.
	disagreed bool
	// logsUnseenSince is when the plans began to find the pod logs
	// unseen, zero while they see them.
	logsUnseenSince time.Time
	// logsUnseen says the last container GC plan found the pod logs
	// unseen; written by the container GC loop only.
	logsUnseen bool
	// otherRuntimeSince is when the container GC plans began to find the
	// Node reporting another runtime than the one listed (the first such
	// plan's Now; zero while they do not); written by the container GC
	// loop only.
	otherRuntimeSince time.Time
	// leaseStaleSince is, likewise, when they began to find the Node's
	// lease stale (containers.ViewNodeLeaseStale); zero when the last did
	// not.
	leaseStaleSince time.Time

	// mu guards what the image and container GC loops, which report
	// concurrently, share.
	mu sync.Mutex
	// notOurs is what the last pod view that could tell said of the Node
	// of this node's name: containers.ViewNodeOtherBoot or
	// ViewNodeNotFound when it is not this machine's (no Event is
	// recorded), "" when it is or nothing said yet. A run without a plan
	// (the runtime could not be listed) or whose view could not tell (not
	// synced, unreachable) goes by it.
	notOurs string
	// viewAt is when the view notOurs comes from was taken (its plan's
	// Now): an older one, reported later (a long image GC run beside a
	// container GC run), says nothing new.
	viewAt time.Time
	// toldNotOurs says the episode of notOurs was logged at the default
	// verbosity.
	toldNotOurs bool
	// viewTold says some pod view could tell whose the Node is. Until
	// then (the agent's start: pods not listed yet, or the API server
	// unreachable) Events are held, the latest message of each reason in
	// held, in the order the reasons came: the first view that tells
	// records them, or logs them when the Node is not this machine's.
	viewTold bool
	held     []heldEvent
}

// heldEvent is an Event waiting for a view that tells whose the Node is.
type heldEvent struct{ reason, message string }

func newNodeEvents(logger klog.Logger, client kubernetes.Interface, nodeName string) *nodeEvents {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return &nodeEvents{
		logger:      logger,
		broadcaster: b,
		recorder:    b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "nodegc", Host: nodeName}),
		// As the kubelet does, the Node is referred to by name, with its
		// name as UID.
		node: &corev1.ObjectReference{Kind: "Node", Name: nodeName, UID: types.UID(nodeName)},
	}
}

func (e *nodeEvents) shutdown() {
	if e != nil {
		e.broadcaster.Shutdown()
	}
}

// imageGCReport turns a failed image GC run into the kubelet's events.
func (e *nodeEvents) imageGCReport(r *images.Report) {
	if e == nil {
		return
	}
	if r.Plan != nil {
		e.observeView(r.Plan.Now, r.Plan.PodsView == images.PodsAuthoritative, r.Plan.PodsView)
	}
	if r.Err == nil || e.interrupted("Image GC", r.Err) {
		return
	}
	var fe *images.FreeDiskSpaceError
	switch {
	case errors.Is(r.Err, images.ErrInvalidDiskCapacity):
		e.warn(EventInvalidDiskCapacity, r.Err.Error())
	case errors.As(r.Err, &fe):
		e.warn(EventFreeDiskSpaceFailed, fe.Error())
	default:
		e.warn(EventImageGCFailed, r.Err.Error())
	}
}

// containerGCReport turns a failed container GC run into ContainerGCFailed,
// a pod view that starts disagreeing with the runtime (a wrong node name,
// most likely), or a Node's lease its kubelet no longer renews while
// pods would go as gone, into PodViewNotAuthoritative, and pod logs that become
// unseen (a disk mounted on the pod logs directory after nodegc's container
// started) into PodLogsUnseen, each once per episode. When
// no Node has nodegc's node name, or it reports another boot ID, the
// manager's log line is all there is of the view: an event would name a
// Node that does not exist, or another machine's.
func (e *nodeEvents) containerGCReport(r *containers.Report) {
	if e == nil {
		return
	}
	if r.Plan != nil {
		e.observeView(r.Plan.Now, r.Plan.PodsAuthoritative, r.Plan.PodsReason)
		disagrees := containers.RuntimeContradicts(r.Plan.PodsReason)
		// A runtime upgraded in place is another than the one the
		// kubelet reports until it reports again (seconds), and a
		// restarted kubelet renews its Node's lease within seconds:
		// warned once the episode lasts.
		otherRuntimeLasts := lasted(&e.otherRuntimeSince, r.Plan, containers.ViewNodeOtherRuntime, otherRuntimeWarnAfter)
		leaseStaleLasts := lasted(&e.leaseStaleSince, r.Plan, containers.ViewNodeLeaseStale, leaseStaleWarnAfter)
		switch r.Plan.PodsReason {
		case containers.ViewNodeOtherRuntime:
			disagrees = otherRuntimeLasts
		case containers.ViewNodeLeaseStale:
			disagrees = leaseStaleLasts
		}
		if disagrees && !e.disagreed {
			e.warn(EventPodViewNotAuthoritative, podViewMessage(r.Plan))
		}
		e.disagreed = disagrees
		// An episode that ends at the next snapshot (a status read that
		// failed once, a log between two rotations) is no mount to fix:
		// warned once it lasts.
		switch {
		case !r.Plan.PodLogsUnseen:
			e.logsUnseenSince = time.Time{}
		case e.logsUnseenSince.IsZero():
			e.logsUnseenSince = r.Plan.Now
		}
		unseen := r.Plan.PodLogsUnseen && r.Plan.Now.Sub(e.logsUnseenSince) >= logsUnseenWarnAfter
		if unseen && !e.logsUnseen {
			e.warn(EventPodLogsUnseen, fmt.Sprintf("nodegc on node %q does not see a running container's log where the runtime writes it: "+
				"its view of its pod logs directory is not the kubelet's (a disk mounted on /var/log/pods after nodegc's container started, "+
				"or a kubelet podLogsDir other than nodegc's containerGC.podLogsDirectory? its log names the log). "+
				"Until it sees them, nodegc removes no container log link, pod log directory or log file, nor a live pod's container that a limit or maxAge would remove. "+
				"Restart nodegc's pod on this node, so that its mount sees the host's directory, or set containerGC.podLogsDirectory to the kubelet's podLogsDir.", e.node.Name))
		}
		e.logsUnseen = unseen
	}
	if r.Err != nil && !e.interrupted("Container GC", r.Err) {
		e.warn(EventContainerGCFailed, r.Err.Error())
	}
}

// observeView takes what a plan's pod view, taken at at, says of the Node
// of this node's name (see notOurs): authoritative, or disagreeing with
// the runtime (an authoritative view the runtime contradicts), it is this
// machine's; a view that could not tell, or older than the last that
// could, leaves what was known. at is the managers' clock's reading: its
// monotonic reading orders views across a step of the wall clock.
func (e *nodeEvents) observeView(at time.Time, authoritative bool, reason string) {
	switch {
	case reason == containers.ViewNodeOtherBoot || reason == containers.ViewNodeNotFound:
	case authoritative || containers.RuntimeContradicts(reason) || reason == containers.ViewNodeLeaseStale:
		// A stale lease is of a Node that reports this machine's boot:
		// its Warning says so, rather than wait for a view that agrees.
		reason = ""
	default:
		return
	}
	e.mu.Lock()
	if at.Before(e.viewAt) {
		e.mu.Unlock()
		return
	}
	e.viewAt = at
	if reason != e.notOurs {
		e.notOurs, e.toldNotOurs = reason, false
	}
	held := e.held
	e.viewTold, e.held = true, nil
	e.mu.Unlock()
	for _, h := range held {
		e.warn(h.reason, h.message)
	}
}

// warn records a Warning on the Node, unless the Node is not this
// machine's (notOurs): then it logs that the Node gets no Events, once per
// episode at the default verbosity, and what was left out at V(2). Before
// any view has told whose the Node is, the Warning is held (observeView).
func (e *nodeEvents) warn(reason, message string) {
	e.mu.Lock()
	if !e.viewTold {
		i := slices.IndexFunc(e.held, func(h heldEvent) bool { return h.reason == reason })
		if i < 0 {
			e.held = append(e.held, heldEvent{reason: reason})
			i = len(e.held) - 1
		}
		e.held[i].message = message
		e.mu.Unlock()
		e.logger.V(2).Info("Node Event held until a pod view tells whether the Node of this node's name is this machine's",
			"node", e.node.Name, "event", reason, "message", message)
		return
	}
	notOurs, told := e.notOurs, e.toldNotOurs
	e.toldNotOurs = notOurs != ""
	e.mu.Unlock()
	switch {
	case notOurs == "":
		e.recorder.Event(e.node, corev1.EventTypeWarning, reason, message)
	case !told:
		why := "no Node has this name"
		if notOurs == containers.ViewNodeOtherBoot {
			why = "the Node of this name reports another boot ID than this machine's: another machine's, or its kubelet has not reported since this machine booted"
		}
		e.logger.Info("No Node Events while the Node of this node's name is not this machine's ("+why+"): this machine's failures are in this log only; "+
			"is this node's name the one its kubelet registered?", "node", e.node.Name, "view", notOurs, "event", reason, "message", message)
	default:
		e.logger.V(2).Info("Node Event not recorded: the Node of this node's name is not this machine's", "node", e.node.Name, "view", notOurs,
			"event", reason, "message", message)
	}
}

// interrupted says, at V(2), that a run of collector failed because the
// agent is stopping, so that no Warning says "context canceled" on the Node
// at every rollout: the stop (SIGTERM) cancels the loops' context, and a
// run cut short ends with context.Canceled, or with the Canceled status of
// the runtime call it interrupted, which does not wrap it. Nothing else
// cancels a run, so this is no failure of the node's; whatever else failed
// in the run, the next agent's runs see again.
func (e *nodeEvents) interrupted(collector string, err error) bool {
	if !errors.Is(err, context.Canceled) && !cri.HasCode(err, codes.Canceled) {
		return false
	}
	e.logger.V(2).Info(collector+" run interrupted by the agent's stop: no Node event", "err", err)
	return true
}

// otherRuntimeWarnAfter is how long the container GC's plans must find the
// Node reporting another runtime than the one listed before
// PodViewNotAuthoritative says so: the kubelet reports a runtime upgraded
// in place at its next node status update (every 10s by default).
const otherRuntimeWarnAfter = 2 * time.Minute

// lasted follows an episode of plans whose pod view reason is reason,
// begun at *since (zero: none), and says whether it has lasted after.
func lasted(since *time.Time, p *containers.Plan, reason string, after time.Duration) bool {
	if p.PodsReason != reason {
		*since = time.Time{}
		return false
	}
	if since.IsZero() {
		*since = p.Now
	}
	return p.Now.Sub(*since) >= after
}

// leaseStaleWarnAfter is how long the container GC's plans must find the
// Node's lease stale, keeping what they would remove as pod_gone, before
// PodViewNotAuthoritative says so: a kubelet restarted renews the lease
// within seconds of its start.
const leaseStaleWarnAfter = 2 * time.Minute

// logsUnseenWarnAfter is how long the pod logs must stay unseen, from the
// first plan that found them so, before a PodLogsUnseen Warning: longer
// than the container GC's default period, so that an episode of one
// snapshot is not warned about.
const logsUnseenWarnAfter = 2 * time.Minute

func podViewMessage(p *containers.Plan) string {
	if p.PodsReason == containers.ViewNodeOtherRuntime {
		return fmt.Sprintf("The kubelet of node %q reports another container runtime (%s) than the one nodegc asks (%s): "+
			"is containerRuntimeEndpoint the kubelet's runtime (k3s, RKE2: their own containerd's socket; see the chart's presets)? "+
			"Until they agree, nodegc removes nothing because its pod is gone, nor any dangling log link.",
			p.PodsNode, p.NodeRuntime, p.Runtime)
	}
	if p.PodsReason == containers.ViewNodeLeaseStale {
		return fmt.Sprintf("The lease of node %q is not renewed, or nodegc may not read it (%s): its kubelet is down, or this machine's kubelet runs under another node name now "+
			"(is %q the name the kubelet registered?), or nodegc's ServiceAccount lacks get on leases in kube-node-lease (the Role nodegc-node-lease). "+
			"Until nodegc reads it renewed, it removes nothing because its pod is gone.",
			p.PodsNode, p.PodsLease, p.PodsNode)
	}
	if p.PodsReason == containers.ViewRuntimeLacksPods {
		return fmt.Sprintf("The container runtime nodegc asks lists none of the %d pods the API server says run on node %q (%s): "+
			"is containerRuntimeEndpoint the kubelet's runtime (k3s, RKE2: their own containerd's socket; see the chart's presets), "+
			"and %q the name the kubelet registered? Until they agree, nodegc removes nothing because its pod is gone, nor any dangling log link.",
			len(p.PodsNotInRuntime), p.PodsNode, namedPods(p.PodsNotInRuntime), p.PodsNode)
	}
	lease := ""
	if p.PodsLease != "" {
		lease = " Pods it lists run here, but do not show the view is this node's: " + p.PodsLease + "."
	}
	return fmt.Sprintf("The API server's pods of node %q lack %d pods the container runtime runs (%s): is %q the name the kubelet registered?%s "+
		"Until they agree, nodegc removes nothing because its pod is gone.",
		p.PodsNode, len(p.PodsMissing), namedPods(p.PodsMissing), p.PodsNode, lease)
}

// namedPods names the first maxPodsNamed pods of refs, and says how many
// more there are.
func namedPods(refs []containers.PodRef) string {
	names := make([]string, 0, maxPodsNamed)
	for _, ref := range refs[:min(len(refs), maxPodsNamed)] {
		names = append(names, ref.String())
	}
	more := ""
	if n := len(refs) - len(names); n > 0 {
		more = fmt.Sprintf(" and %d more", n)
	}
	return strings.Join(names, ", ") + more
}
