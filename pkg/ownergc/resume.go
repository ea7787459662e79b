package ownergc

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// resume reads where the API server is now for a watch that resumed after
// a failure, from the last resource version its reflector saw, without a
// relist (a refused connection or a 429 is retried so). The watch first
// sends what changed meanwhile: objects created while the monitor failed
// may still be on their way to the graph when it opens, and an orphaning
// that found none of them would turn into the deletion of each. The
// failure ends when the graph has applied an event or bookmark of the
// watch at or after the version read here (a consistent list of one
// object: at least every write before it), which can only come after
// every change before it (see passed). kube-apiserver sends a bookmark
// about once a minute, so a resource that does not change catches up
// within that.
//
// Where resource versions are not etcd's (an aggregated API server of
// its own storage), they cannot be compared: the watch ends as expired,
// and the reflector relists.
func (m *monitor) resume(ctx context.Context, client *metaClient) error {
	list, err := client.list(ctx, m.res.gvr, metav1.ListOptions{Limit: 1})
	if err != nil {
		return fmt.Errorf("read the resource version a resumed watch of %s must reach: %w", m.res.gvr, err)
	}
	rv, err := strconv.ParseUint(list.ResourceVersion, 10, 64)
	if err != nil || rv == 0 {
		return apierrors.NewResourceExpired(fmt.Sprintf("resource version %q of %s cannot be compared: relisting to catch up", list.ResourceVersion, m.res.gvr))
	}
	m.awaitCatchUp(rv)
	return nil
}

// awaitCatchUp records that the failure ends once the graph applied the
// watch's changes up to resource version rv.
func (m *monitor) awaitCatchUp(rv uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.catchingUp, m.catchUpAt = true, m.errors
	m.catchUp.Store(rv)
}

// passed records that the feed delivered an event or bookmark of the
// watch at resource version rv. Once it reaches what a resumed watch
// awaits, the feed queues evCaughtUp behind it: the graph has caught up
// when the builder applies that.
func (m *monitor) passed(rv string) {
	target := m.catchUp.Load()
	if target == 0 {
		return
	}
	if v, err := strconv.ParseUint(rv, 10, 64); err != nil || v < target || !m.catchUp.CompareAndSwap(target, 0) {
		return
	}
	m.mu.Lock()
	seq := m.catchUpAt
	m.mu.Unlock()
	m.push(event{typ: evCaughtUp, mon: m, seq: seq})
}

// caughtUp: the graph applied a resumed watch's events up to the version
// it awaited (evCaughtUp, queued when the failure count was seq). That
// ends the failure, unless another one came since, or a relist began.
func (m *monitor) caughtUp(seq uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.catchingUp || m.catchUpAt != seq || m.errors != seq || m.relisting {
		return
	}
	m.catchingUp = false
	m.failing = false
}

// catchingUpNow reports whether a resumed watch's catch-up is awaited.
func (m *monitor) catchingUpNow() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.catchingUp
}

// catchUpWithin is how long a resumed watch may take to catch up before
// the monitor relists instead: twice kube-apiserver's bookmark period. A
// watch served by etcd directly (a resource whose watch cache is off)
// gets bookmarks only every ten minutes, and one that never changes would
// otherwise stay failing, holding orphaning and foreground deletions
// until unsyncedResourceHold expires, each time.
const catchUpWithin = 2 * time.Minute

// expireUnlessCaughtUp passes w's events on and, if the watch has not
// delivered the version it awaits within catchUpWithin, ends it with an
// "expired" error, which
// the reflector answers with a (consistent) relist; listWatch's filter
// marks the monitor relisting as it passes the error on.
func (m *monitor) expireUnlessCaughtUp(w watch.Interface) watch.Interface {
	clk, within := m.clk(), m.catchUpWithin
	if within <= 0 {
		within = catchUpWithin
	}
	out := &relayWatch{inner: w, out: make(chan watch.Event), done: make(chan struct{})}
	go func() {
		defer close(out.out)
		defer w.Stop()
		deadline := clk.NewTimer(within)
		defer deadline.Stop()
		due := deadline.C()
		for {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				select {
				case out.out <- ev:
				case <-out.done:
					return
				}
			case <-due:
				due = nil
				// What the relist would bring is what the watch has not
				// delivered: one that reached the version, and whose
				// mark only waits for the graph builder, goes on.
				if m.catchUp.Load() == 0 {
					continue
				}
				expired := apierrors.NewResourceExpired(fmt.Sprintf("the resumed watch of %s did not catch up within %v: relisting", m.res.gvr, within))
				select {
				case out.out <- watch.Event{Type: watch.Error, Object: &expired.ErrStatus}:
				case <-out.done:
				}
				return
			case <-out.done:
				return
			}
		}
	}()
	return out
}

// relayWatch is a watch whose events a goroutine relays (see
// expireUnlessCaughtUp).
type relayWatch struct {
	inner watch.Interface
	out   chan watch.Event
	done  chan struct{}
	once  sync.Once
}

func (r *relayWatch) Stop() {
	r.once.Do(func() {
		close(r.done)
		r.inner.Stop()
	})
}

func (r *relayWatch) ResultChan() <-chan watch.Event { return r.out }
