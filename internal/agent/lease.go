package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nodegc/nodegc/internal/kubeconn"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
)

// leaseUserAgent is the user agent of the election's requests, followed by
// "/" and the instance's identity.
const leaseUserAgent = "nodegc-leader-election"

// leaseFence says whether this instance may write, from the lease's own
// requests and nothing else (not client-go's callbacks, which can come
// late: see pkg/ownergc's "Leader election").
//
// The instance may write while less than window (renewDeadline) has passed
// since the last successful renewal of the lease was sent. Another
// instance measures leaseDuration from when it saw that renewal, which is
// after it was sent, so it can take the lease no earlier than
// leaseDuration after the send: writes are sent no later than
// leaseDuration - renewDeadline before that, each with a server-side
// timeout that ends with the window (ownergc.Options.WriteWindow).
//
// Time since the send is the larger of the monotonic and the wall-clock
// difference: a suspended machine's monotonic clock stands still, its wall
// clock does not (a wall clock set back only makes the difference smaller,
// and the monotonic one then counts).
type leaseFence struct {
	clock  clock.Clock
	window time.Duration

	mu      sync.Mutex
	renewed time.Time     // when the last successful renewal was sent; zero: revoked
	revoked time.Time     // renewals sent before this do not count
	changed chan struct{} // closed and replaced when renewed changes
}

func newLeaseFence(clk clock.Clock, window time.Duration) *leaseFence {
	return &leaseFence{clock: clk, window: window, changed: make(chan struct{})}
}

// renewedAt records a successful renewal (or acquisition) of the lease
// whose request was sent at sent.
func (f *leaseFence) renewedAt(sent time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !sent.After(f.revoked) || !sent.After(f.renewed) {
		return
	}
	f.renewed = sent
	f.notifyLocked()
}

// revoke closes the fence until the next renewal sent after now: the
// lease is being released, or this instance stopped leading.
func (f *leaseFence) revoke() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.revoked = f.clock.Now()
	if !f.renewed.IsZero() {
		f.renewed = time.Time{}
		f.notifyLocked()
	}
}

func (f *leaseFence) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// remaining returns how long the fence stays open (<= 0: closed) and a
// channel closed at the next renewal or revocation.
func (f *leaseFence) remaining() (time.Duration, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.renewed.IsZero() {
		return 0, f.changed
	}
	now := f.clock.Now()
	elapsed := max(now.Sub(f.renewed), now.Round(0).Sub(f.renewed.Round(0)))
	return f.window - elapsed, f.changed
}

// open says whether this instance may write now.
func (f *leaseFence) open() bool {
	return f.left() > 0
}

// left is how long this instance may still write (<= 0: not now):
// ownergc.Options.WriteWindow.
func (f *leaseFence) left() time.Duration {
	left, _ := f.remaining()
	return left
}

// waitOpen waits until the fence is open and returns true, or returns
// false when ctx has ended or ends first.
func (f *leaseFence) waitOpen(ctx context.Context) bool {
	for ctx.Err() == nil {
		left, changed := f.remaining()
		if left > 0 {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
		}
	}
	return false
}

// waitClosed waits until the fence is closed and returns true, or returns
// false when ctx ends first.
func (f *leaseFence) waitClosed(ctx context.Context) bool {
	for {
		left, changed := f.remaining()
		if left <= 0 {
			return true
		}
		t := f.clock.NewTimer(left)
		select {
		case <-t.C():
		case <-changed:
		case <-ctx.Done():
			t.Stop()
			return false
		}
		t.Stop()
	}
}

// fencedLock is the election's lock as the fence sees it. Every
// successful Create or Update that makes this instance the holder opens
// the fence for another window from when it was sent. An Update that
// gives the lease up (client-go's release, ReleaseOnCancel) first closes
// the fence and waits for the collector to stop (beforeRelease): released,
// the lease passes at once. It is not sent at all when the last Get showed
// another holder: client-go releases by overwriting whatever record the
// Get returned, which after a long pause is the new leader's.
type fencedLock struct {
	resourcelock.Interface
	fence *leaseFence
	clock clock.PassiveClock
	// beforeRelease returns once the collector has stopped, or an error
	// when ctx ends first (the lease is then not released; it expires).
	beforeRelease func(ctx context.Context) error

	mu     sync.Mutex
	holder string // the holder in the record the last Get returned
}

// Get reads the record; one that names another holder, or none, closes the
// fence at once: this instance does not lead (the Lease was deleted or
// taken over by hand, and made again), whatever its last renewal said.
func (l *fencedLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.Interface.Get(ctx)
	if err == nil {
		l.mu.Lock()
		l.holder = rec.HolderIdentity
		l.mu.Unlock()
		if rec.HolderIdentity != l.Identity() {
			l.fence.revoke()
		}
	}
	return rec, raw, err
}

func (l *fencedLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.renew(ctx, ler, l.Interface.Create)
}

func (l *fencedLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if ler.HolderIdentity != l.Identity() {
		return l.release(ctx, ler)
	}
	return l.renew(ctx, ler, l.Interface.Update)
}

func (l *fencedLock) renew(ctx context.Context, ler resourcelock.LeaderElectionRecord,
	send func(context.Context, resourcelock.LeaderElectionRecord) error) error {
	sent := l.clock.Now()
	if err := send(ctx, ler); err != nil {
		return err
	}
	if ler.HolderIdentity == l.Identity() {
		l.fence.renewedAt(sent)
	}
	return nil
}

func (l *fencedLock) release(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	l.fence.revoke()
	l.mu.Lock()
	holder := l.holder
	l.mu.Unlock()
	if holder != l.Identity() {
		return fmt.Errorf("not releasing the lease: its holder is %q", holder)
	}
	if err := l.beforeRelease(ctx); err != nil {
		return fmt.Errorf("not releasing the lease: %w", err)
	}
	return l.Interface.Update(ctx, ler)
}

// leaseClient returns the election's API client: a copy of rc with a user
// agent, a rate limiter and a connection of its own, so that renewals
// never queue behind the collector's requests, in client-go's rate limiter
// or on a shared HTTP/2 connection. Each request ends by renewDeadline/2
// (at least 1s), as client-go's resourcelock.NewFromKubeconfig does: one
// hung request leaves time to retry within the renew deadline.
func leaseClient(rc *rest.Config, identity string, renewDeadline time.Duration) (kubernetes.Interface, error) {
	lc := rest.CopyConfig(rc)
	lc.UserAgent = leaseUserAgent + "/" + identity
	lc.RateLimiter = nil // a token bucket of its own, from QPS and Burst
	lc.Timeout = max(time.Second, renewDeadline/2)
	kubeconn.Own(lc)
	return kubernetes.NewForConfig(lc)
}
