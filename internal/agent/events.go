package agent

import (
	"errors"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/nodegc/nodegc/pkg/containers"
	"github.com/nodegc/nodegc/pkg/images"
)

// Event reasons on the Node, the kubelet's names.
const (
	EventFreeDiskSpaceFailed = "FreeDiskSpaceFailed"
	EventImageGCFailed       = "ImageGCFailed"
	EventInvalidDiskCapacity = "InvalidDiskCapacity"
	EventContainerGCFailed   = "ContainerGCFailed"
)

// nodeEvents records Events on this agent's Node through client-go's
// broadcaster, whose correlator aggregates and rate-limits repeats. A nil
// *nodeEvents (node-only mode) records nothing.
type nodeEvents struct {
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	node        *corev1.ObjectReference
}

func newNodeEvents(client kubernetes.Interface, nodeName string) *nodeEvents {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return &nodeEvents{
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
	if e == nil || r.Err == nil {
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

// containerGCReport turns a failed container GC run into ContainerGCFailed.
func (e *nodeEvents) containerGCReport(r *containers.Report) {
	if e == nil || r.Err == nil {
		return
	}
	e.recorder.Event(e.node, corev1.EventTypeWarning, EventContainerGCFailed, r.Err.Error())
}
