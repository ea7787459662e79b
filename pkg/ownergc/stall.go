package ownergc

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
)

// stallRequests is how many request timeouts the collector may go without
// progress while work waits before Stalled says it is stalled: an item
// takes a few requests (lookups of its owners, a read, a write, a read
// after a conflict), each ended by the request timeout at the latest (the
// client-side rate limiter's wait included), and every request ended, an
// item taken or finished, or a batch of events taken counts as progress.
const stallRequests = 10

// pool is the workers of one queue: how many of them are processing an
// item, and when one last made progress.
type pool struct {
	name    string
	queue   workqueue.TypedRateLimitingInterface[types.UID]
	workers int32
	busy    atomic.Int32
	// at is when the last progress was made, as the time since base: on
	// the monotonic clock (when the clock's readings carry it, as the
	// real clock's do), so that a step of the wall clock neither hides a
	// stall nor makes one.
	base time.Time
	at   atomic.Int64
}

func (p *pool) mark(now time.Time) { p.at.Store(int64(now.Sub(p.base))) }

// stalled returns why p's workers are stalled at now, or nil: items are
// ready, every worker is busy, and none has made progress within bound. A
// worker that is not busy takes a ready item at once.
func (p *pool) stalled(now time.Time, bound time.Duration) error {
	ready := p.queue.Len()
	if ready == 0 || p.busy.Load() < p.workers {
		return nil
	}
	if idle := now.Sub(p.base) - time.Duration(p.at.Load()); idle > bound {
		return fmt.Errorf("owner GC: none of the %d %s workers made progress for %s (ready items: %d)",
			p.workers, p.name, idle.Round(time.Second), ready)
	}
	return nil
}

type poolKey struct{}

// madeProgress marks progress for the pool ctx's item belongs to (a
// request ended); a no-op outside a worker.
func (r *run) madeProgress(ctx context.Context) {
	if p, ok := ctx.Value(poolKey{}).(*pool); ok {
		p.mark(r.c.clock.Now())
	}
}

// stalled returns why the run makes no progress while work waits, or nil:
// the graph builder has taken no event for longer than the bound while
// some are queued, or a queue's workers are all busy and none made
// progress within it while items are ready (see pool.stalled). Neither
// waits on the API server for longer than a request timeout, so a stall is
// a fault of the process (a lock never released), not of the cluster: a
// restart ends it, and the lease moves on meanwhile.
func (r *run) stalled(now time.Time) error {
	bound := r.c.stallAfter
	var errs []error
	if n, since := r.events.waiting(); n > 0 && !since.IsZero() && now.Sub(since) > bound {
		errs = append(errs, fmt.Errorf("owner GC: the graph builder has taken no event for %s while %d wait",
			now.Sub(since).Round(time.Second), n))
	}
	for _, p := range r.pools() {
		errs = append(errs, p.stalled(now, bound))
	}
	return errors.Join(errs...)
}

// pools returns the run's worker pools, once their workers started.
func (r *run) pools() []*pool {
	if !r.working.Load() {
		return nil
	}
	return []*pool{&r.deletePool, &r.orphanPool}
}
