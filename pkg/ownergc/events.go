package ownergc

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// resource is one monitored API resource (its preferred version).
type resource struct {
	gvr        schema.GroupVersionResource
	gvk        schema.GroupVersionKind
	apiVersion string
	namespaced bool
}

func newResource(gvr schema.GroupVersionResource, kind string, namespaced bool) *resource {
	gvk := gvr.GroupVersion().WithKind(kind)
	return &resource{gvr: gvr, gvk: gvk, apiVersion: gvk.GroupVersion().String(), namespaced: namespaced}
}

type eventType uint8

const (
	// evUpsert: a monitor observed an object (add or update).
	evUpsert eventType = iota
	// evDelete: a monitor observed an object's deletion.
	evDelete
	// evOwnerAbsent: a worker's live lookup found no object with the UID
	// at the given coordinates.
	evOwnerAbsent
	// evResourceGone: a resource left discovery and its monitor stopped.
	evResourceGone
	// evSynced: every object of a monitor's initial list was delivered
	// before this event.
	evSynced
	// evBarrier: closes done once every earlier event is applied.
	evBarrier
	// evRelisted: a monitor listed its resource again; uids are the
	// objects of the list (whose upserts came before). Observed objects
	// of the resource not among them were deleted.
	evRelisted
)

// ownerKey names a live lookup: the owner's UID at the coordinates a
// reference states, with the namespace resolved ("" if cluster-scoped).
type ownerKey struct {
	uid       types.UID
	group     string
	kind      string
	name      string
	namespace string
}

// event is one change for the graph builder.
type event struct {
	typ   eventType
	obj   *metav1.PartialObjectMetadata // evUpsert, evDelete
	res   *resource                     // evUpsert, evDelete, evResourceGone, evRelisted
	uids  map[types.UID]struct{}        // evRelisted
	mon   *monitor                      // evSynced
	owner ownerKey                      // evOwnerAbsent
	done  chan struct{}                 // evBarrier
}

// eventQueue is the unbounded FIFO between the monitors (and workers) and
// the graph builder. push never blocks, so reflectors never stall.
type eventQueue struct {
	mu     sync.Mutex
	items  []event
	wake   chan struct{}
	closed bool
}

func newEventQueue() *eventQueue {
	return &eventQueue{wake: make(chan struct{}, 1)}
}

func (q *eventQueue) push(ev event) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.items = append(q.items, ev)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// pop moves up to max events into buf and returns it; it blocks until there
// is at least one, and returns ok=false once the queue is closed and empty.
func (q *eventQueue) pop(buf []event, max int) (_ []event, ok bool) {
	for {
		q.mu.Lock()
		if n := len(q.items); n > 0 {
			if n > max {
				n = max
			}
			buf = append(buf, q.items[:n]...)
			clear(q.items[:n])
			q.items = q.items[n:]
			if len(q.items) == 0 {
				q.items = nil // let the backing array go
			}
			q.mu.Unlock()
			return buf, true
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return buf, false
		}
		<-q.wake
	}
}

func (q *eventQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// close ends the queue: later pushes are dropped, pop drains what is left.
func (q *eventQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}
