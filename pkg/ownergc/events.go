package ownergc

import (
	"sync"
	"sync/atomic"
	"time"

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
	// progress is the resource version up to which the graph applied
	// every change of the resource its monitor delivered (see
	// ownerWatchBehind): set by the builder as it applies the watch's
	// events, the end of a list, and bookmarks (evProgress). 0 before the
	// first list is applied, or where versions are not numbers.
	progress atomic.Uint64
}

func newResource(gvr schema.GroupVersionResource, kind string, namespaced bool) *resource {
	gvk := gvr.GroupVersion().WithKind(kind)
	return &resource{gvr: gvr, gvk: gvk, apiVersion: gvk.GroupVersion().String(), namespaced: namespaced}
}

// sameAs reports whether res and o are the same resource: the same group,
// version and plural, of the same kind and scope. A CRD deleted and
// created again may keep the first and change the others; its monitor
// must then start again, or the graph would give new objects the old kind
// and the finalizer holds would look at the resource with the old scope.
func (res *resource) sameAs(o *resource) bool {
	return res.gvr == o.gvr && res.gvk == o.gvk && res.namespaced == o.namespaced
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
	// evResourceUnmonitored: discovery lists a resource without list,
	// watch or delete, and its monitor stopped.
	evResourceUnmonitored
	// evRefresh: a worker, or a dependent's lookup, read an object of an
	// unmonitored resource.
	evRefresh
	// evSynced: every object of a monitor's initial list was delivered
	// before this event.
	evSynced
	// evBarrier: closes done once every earlier event is applied.
	evBarrier
	// evRunSynced: every monitor synced (or failed) for the first time in
	// this run; the workers start.
	evRunSynced
	// evRelisted: a monitor listed its resource again; uids are the
	// objects of the list (whose upserts came before). Observed objects
	// of the resource not among them were deleted.
	evRelisted
	// evCaughtUp: a monitor's watch that resumed after a failure
	// delivered, before this event, every change up to the resource
	// version it awaited (monitor.resume); seq is the monitor's failure
	// count then.
	evCaughtUp
	// evProgress: a monitor delivered, before this event, every change
	// of its resource up to the resource version obj carries (the end of
	// a list, a watch's bookmark).
	evProgress
)

// fromWatch marks, in event.seq, an evUpsert or evDelete of a watch: the
// watch delivers changes in resource-version order, so applying one
// applies every change of the resource up to its version (a list's
// objects come in any order).
const fromWatch = 1

// ownerKey names a live lookup: the owner's UID at the coordinates a
// reference states, with the namespace resolved ("" if cluster-scoped).
type ownerKey struct {
	uid       types.UID
	group     string
	kind      string
	name      string
	namespace string
}

// event is one change for the graph builder. It is kept small (the
// initial lists queue one per object); the rare events' data is behind
// pointers.
type event struct {
	typ   eventType
	seq   uint32                        // evCaughtUp: the failure count; evUpsert, evDelete: fromWatch (in what would be padding)
	obj   *metav1.PartialObjectMetadata // evUpsert, evDelete, evRefresh; evProgress (its resource version only)
	res   *resource                     // evUpsert, evDelete, evResourceGone, evResourceUnmonitored, evRelisted
	uids  map[types.UID]struct{}        // evRelisted
	mon   *monitor                      // evSynced, evRelisted, evCaughtUp
	owner *ownerKey                     // evOwnerAbsent; evRefresh of a lookup's read (nil: a worker's)
	done  chan struct{}                 // evBarrier
}

// eventChunk is how many events the queue allocates at a time.
const eventChunk = 512

// eventQueue is the unbounded FIFO between the monitors (and workers) and
// the graph builder. push never blocks, so reflectors never stall. It
// holds events in chunks of eventChunk: a backlog of a whole initial list
// grows chunk by chunk, never copying what is queued, and the chunks go
// as they are drained, but for one that stays for the next events (most
// of the time the queue holds a few events, and would otherwise allocate
// a chunk for each).
type eventQueue struct {
	// now, when set, dates waiting (see waiting); set before first use.
	now func() time.Time

	mu sync.Mutex
	// chunks hold the queued events: chunks[0][head:], then the others
	// whole; each chunk has capacity eventChunk.
	chunks [][]event
	head   int
	n      int
	wake   chan struct{}
	closed bool
	// since is, while events are queued, when the builder last took
	// some or, if it has not since, when the first of them was queued.
	since time.Time
}

func newEventQueue() *eventQueue {
	return &eventQueue{wake: make(chan struct{}, 1)}
}

func (q *eventQueue) push(ev event) {
	q.pushAll([]event{ev})
}

// pushAll queues evs, in order. Once the queue is closed they are dropped
// (their barriers released).
func (q *eventQueue) pushAll(evs []event) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		releaseBarriers(evs)
		return
	}
	for len(evs) > 0 {
		last := len(q.chunks) - 1
		if last < 0 || len(q.chunks[last]) == eventChunk {
			q.chunks = append(q.chunks, make([]event, 0, eventChunk))
			last++
		}
		n := min(len(evs), eventChunk-len(q.chunks[last]))
		q.chunks[last] = append(q.chunks[last], evs[:n]...)
		if q.n == 0 && q.now != nil {
			q.since = q.now()
		}
		q.n += n
		evs = evs[n:]
	}
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
		if q.n > 0 {
			for len(buf) < max && q.n > 0 {
				first := q.chunks[0]
				n := min(len(first)-q.head, max-len(buf))
				buf = append(buf, first[q.head:q.head+n]...)
				clear(first[q.head : q.head+n])
				q.head += n
				q.n -= n
				if q.head < len(first) {
					continue
				}
				// The first chunk is drained: reuse it if it is the only one,
				// let it go otherwise.
				q.head = 0
				if len(q.chunks) == 1 {
					q.chunks[0] = first[:0]
				} else {
					q.chunks[0] = nil
					q.chunks = q.chunks[1:]
				}
			}
			if q.now != nil {
				q.since = q.now()
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

// waiting returns how many events are queued and, when some are, since
// when the builder has not taken any (see since; zero without now).
func (q *eventQueue) waiting() (int, time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n, q.since
}

func (q *eventQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// close ends the queue: what is queued and later pushes are dropped, and
// pop reports the end. Only a stopping run closes its queue, and it throws
// its graph away: applying a backlog first would only delay the exit (a
// few microseconds an event; the initial lists of a large cluster queue
// millions) past the shutdown margin. The barriers among the dropped
// events are released, so that no waiter hangs.
func (q *eventQueue) close() {
	q.mu.Lock()
	q.closed = true
	chunks := q.chunks
	if len(chunks) > 0 {
		chunks[0] = chunks[0][q.head:]
	}
	q.chunks, q.head, q.n = nil, 0, 0
	q.mu.Unlock()
	for _, c := range chunks {
		releaseBarriers(c)
	}
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// isClosed reports whether close was called.
func (q *eventQueue) isClosed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

func releaseBarriers(evs []event) {
	for i := range evs {
		if evs[i].typ == evBarrier {
			close(evs[i].done)
		}
	}
}
