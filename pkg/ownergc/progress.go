package ownergc

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A reference that states a wrong name for an owner the graph has not
// observed is judged by a look-up of the stated name, which finds nothing
// there (judgeRef). That proves the owner absent only if the graph would
// have observed it, under its real name, were it alive: the owner's
// resource must be monitored, and its monitor must have delivered every
// change up to the dependent's version. The reference was written with
// the owner's UID, so the owner was created before the dependent's last
// write, and resource versions are etcd's revisions, one sequence for
// every resource: once the graph applied the owner's resource up to the
// dependent's version, an owner that exists is observed, and the
// reference is misnamed, not dangling. Until then (the owner's watch event
// is behind the dependent's, as between two resources' watches it often
// is) the dependent waits, at most ownerWatchLagBound: a resource whose
// versions do not reach the dependent's (stored in another etcd, as events
// often are) would otherwise hold it for good. An owner's resource with
// no monitor (ignored, without the watch verb, gone from discovery) is
// judged by the look-up alone, as kube-controller-manager judges it.

// ownerWatchLagBound is the longest a dependent waits for its owner's
// watch to reach its version (ownerWatchBehind).
const ownerWatchLagBound = 10 * time.Second

// ownerWatchRecheck is how soon a dependent that waits for its owner's
// watch is looked at again.
const ownerWatchRecheck = time.Second

// advance records that the graph applied every change of res up to
// resource version rv (when a number).
func (res *resource) advance(rv string) {
	v, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return
	}
	for {
		cur := res.progress.Load()
		if v <= cur || res.progress.CompareAndSwap(cur, v) {
			return
		}
	}
}

// pushProgress queues evProgress: every change of the monitor's resource
// up to rv was delivered before it.
func (m *monitor) pushProgress(rv string) {
	if rv == "" {
		return
	}
	m.push(event{typ: evProgress, res: m.res, obj: &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv}}})
}

// lagWaits holds, per dependent, when it first waited for its owner's
// watch (ownerWatchBehind).
type lagWaits struct {
	// n is len(since), read without the lock: most items never wait, and
	// done is called for each decided item.
	n     atomic.Int32
	mu    sync.Mutex
	since map[types.UID]time.Time
	swept time.Time
}

// ownerWatchBehind reports whether the graph may not have observed owner
// o of item v yet, although the look-up of its stated name found nothing:
// o's resource is monitored, and the graph has not applied its changes up
// to v's version, for less than ownerWatchLagBound since v first waited;
// or, whatever the wait, the graph has applied since the view was taken an
// object with o's UID that o may name (the next view finds it misnamed).
// See above.
func (r *run) ownerWatchBehind(v *itemView, o *ownerView) bool {
	switch r.ownerWatch(v, o) {
	case watchHoldsOwner:
		return true
	case watchBehind:
		return r.lag.waiting(v.id.uid, r.c.clock.Now())
	}
	r.lag.done(v.id.uid)
	return false
}

// ownerWatchPending is ownerWatchBehind without recording a wait: whether
// a worker looking at v now would wait for o's watch (explain).
func (r *run) ownerWatchPending(v *itemView, o *ownerView) bool {
	switch r.ownerWatch(v, o) {
	case watchHoldsOwner:
		return true
	case watchBehind:
		return r.lag.wouldWait(v.id.uid, r.c.clock.Now())
	}
	return false
}

// Where the graph stands on an owner a look-up found absent (ownerWatch).
const (
	watchCaughtUp   = iota // applied up to the dependent's version, or no watch to wait for
	watchBehind            // behind the dependent's version
	watchHoldsOwner        // holds an object with the owner's UID the reference may name
)

// ownerWatch says where the graph stands on owner o of item v.
func (r *run) ownerWatch(v *itemView, o *ownerView) int {
	itemRV, err := strconv.ParseUint(v.rv, 10, 64)
	if err != nil {
		return watchCaughtUp
	}
	m, err := r.mapping(o.apiVersion, o.kind)
	if err != nil {
		return watchCaughtUp
	}
	mon := r.monitors.get(m.Resource.GroupResource())
	if mon == nil {
		return watchCaughtUp
	}
	// The progress first, then the graph: an owner applied before the
	// progress was read is in the graph when it is read.
	caughtUp := mon.res.progress.Load() >= itemRV
	switch {
	case r.graph.observedOwnerOf(o, v.id.namespace):
		return watchHoldsOwner
	case caughtUp:
		return watchCaughtUp
	}
	return watchBehind
}

// waiting records that uid waits, and reports whether it has waited less
// than ownerWatchLagBound; once it has not, it is forgotten. A wait begun
// twice the bound ago or more is of an earlier episode (its item was
// decided otherwise since, or went): a new wait begins.
func (l *lagWaits) waiting(uid types.UID, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.since == nil {
		l.since = map[types.UID]time.Time{}
	}
	if now.Sub(l.swept) >= ownerWatchLagBound {
		// Waits of items that went meanwhile, at most once per bound.
		for u, at := range l.since {
			if now.Sub(at) >= 2*ownerWatchLagBound {
				delete(l.since, u)
			}
		}
		l.swept = now
	}
	first, ok := l.since[uid]
	wait := waitAt(first, ok, now)
	switch wait {
	case waitNew:
		l.since[uid] = now
	case waitRanOut:
		delete(l.since, uid)
	}
	l.n.Store(int32(len(l.since)))
	return wait != waitRanOut
}

// wouldWait reports whether waiting would say uid waits at now, without
// recording anything.
func (l *lagWaits) wouldWait(uid types.UID, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	first, ok := l.since[uid]
	return waitAt(first, ok, now) != waitRanOut
}

// Where a dependent's wait stands (waitAt).
const (
	waitGoesOn = iota // begun less than ownerWatchLagBound ago
	waitRanOut        // begun the bound ago or more, less than twice
	waitNew           // none, or of an earlier episode: one begins
)

// waitAt says where a wait first recorded at first (ok: one is recorded)
// stands at now.
func waitAt(first time.Time, ok bool, now time.Time) int {
	switch age := now.Sub(first); {
	case !ok || age >= 2*ownerWatchLagBound:
		return waitNew
	case age >= ownerWatchLagBound:
		return waitRanOut
	}
	return waitGoesOn
}

// done forgets that uid waited (an item decided without waiting).
func (l *lagWaits) done(uid types.UID) {
	if l.n.Load() == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.since, uid)
	l.n.Store(int32(len(l.since)))
}
