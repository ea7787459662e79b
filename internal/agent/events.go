package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"

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
)

// maxPodsNamed bounds how many pods an event names.
const maxPodsNamed = 5

// nodeEvents records Events on this agent's Node through client-go's
// broadcaster, whose correlator aggregates and rate-limits repeats. A nil
// *nodeEvents (node-only mode) records nothing.
type nodeEvents struct {
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	node        *corev1.ObjectReference
	logger      klog.Logger

	// disagreed says the last container GC plan's pod view disagreed with
	// the runtime; written by the container GC loop only.
	disagreed bool
}

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
	if e == nil || r.Err == nil || e.interrupted("Image GC", r.Err) {
		return
	}
	var fe *images.FreeDiskSpaceError
	switch {
	case errors.Is(r.Err, images.ErrInvalidDiskCapacity):
		e.recorder.Event(e.node, corev1.EventTypeWarning, EventInvalidDiskCapacity, r.Err.Error())
	case errors.As(r.Err, &fe):
		e.recorder.Event(e.node, corev1.EventTypeWarning, EventFreeDiskSpaceFailed, fe.Error())
	default:
		e.recorder.Event(e.node, corev1.EventTypeWarning, EventImageGCFailed, r.Err.Error())
	}
}

// containerGCReport turns a failed container GC run into ContainerGCFailed,
// and a pod view that starts disagreeing with the runtime (a wrong node
// name, most likely) into PodViewNotAuthoritative, once per episode. When
// no Node has nodegc's node name the manager's log line is all there is:
// an event would name a Node that does not exist.
func (e *nodeEvents) containerGCReport(r *containers.Report) {
	if e == nil {
		return
	}
	if r.Plan != nil {
		disagrees := r.Plan.PodsReason == containers.ViewDisagrees
		if disagrees && !e.disagreed {
			e.recorder.Event(e.node, corev1.EventTypeWarning, EventPodViewNotAuthoritative, podViewMessage(r.Plan))
		}
		e.disagreed = disagrees
	}
	if r.Err != nil && !e.interrupted("Container GC", r.Err) {
		e.recorder.Event(e.node, corev1.EventTypeWarning, EventContainerGCFailed, r.Err.Error())
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

func podViewMessage(p *containers.Plan) string {
	names := make([]string, 0, maxPodsNamed)
	for _, ref := range p.PodsMissing[:min(len(p.PodsMissing), maxPodsNamed)] {
		names = append(names, ref.String())
	}
	more := ""
	if n := len(p.PodsMissing) - len(names); n > 0 {
		more = fmt.Sprintf(" and %d more", n)
	}
	return fmt.Sprintf("The API server's pods of node %q lack %d pods the container runtime runs (%s%s): is %q the name the kubelet registered? "+
		"Until they agree, nodegc removes nothing because its pod is gone.",
		p.PodsNode, len(p.PodsMissing), strings.Join(names, ", "), more, p.PodsNode)
}
