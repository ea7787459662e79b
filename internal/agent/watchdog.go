package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/nodegc/nodegc/pkg/cri"
)

// stallMargin is how long a GC iteration may work between two runtime calls
// on something that is not a runtime call: planning, the wait for the
// runtime's own cleanup after image removals (images.Options.SettleTimeout,
// 20s), statfs, removing pod log directories. Calls to containerd's own
// API (layers, arrivals, sandbox sizes) are runtime calls, as CRI calls
// are (containerdapi.Dial). With runtimeRequestTimeout (the deadline of
// most runtime calls) it makes the stall bound, and a call in flight whose
// deadline is later (stopping a container, with its grace period) has until
// its deadline plus stallMargin; see the package comment.
const stallMargin = time.Minute

// watchdog follows the node's GC loops for /healthz and /readyz. Each loop
// has a loopWatch; its lock guards it whole. The watchdog's own lock guards
// the list and the shutdown flag.
type watchdog struct {
	clock clock.PassiveClock

	mu       sync.Mutex
	loops    []*loopWatch
	stopping bool
}

func newWatchdog(clk clock.PassiveClock) *watchdog { return &watchdog{clock: clk} }

// add starts watching a loop named name that waits at most wait between two
// iterations and whose runtime calls have the deadline timeout.
func (w *watchdog) add(name string, wait, timeout time.Duration) *loopWatch {
	now := w.clock.Now()
	lw := &loopWatch{name: name, wait: wait, timeout: timeout, clock: w.clock, owner: w, since: now}
	w.mu.Lock()
	w.loops = append(w.loops, lw)
	w.mu.Unlock()
	return lw
}

// shutdown says the agent is stopping: loops that stop now are not wedged.
func (w *watchdog) shutdown() {
	w.mu.Lock()
	w.stopping = true
	w.mu.Unlock()
}

// wedged returns why loops are wedged now, or nil.
func (w *watchdog) wedged() error {
	w.mu.Lock()
	loops, stopping := w.loops, w.stopping
	w.mu.Unlock()
	if stopping {
		return nil
	}
	now := w.clock.Now()
	var errs []error
	for _, lw := range loops {
		errs = append(errs, lw.wedged(now))
	}
	return errors.Join(errs...)
}

// notReady returns why loops do not work now: wedged, or never started.
func (w *watchdog) notReady() error {
	w.mu.Lock()
	loops := w.loops
	w.mu.Unlock()
	var errs []error
	for _, lw := range loops {
		lw.mu.Lock()
		if lw.startErr != nil {
			errs = append(errs, fmt.Errorf("%s loop not running: %w", lw.name, lw.startErr))
		}
		lw.mu.Unlock()
	}
	return errors.Join(append(errs, w.wedged())...)
}

// loopWatch follows one GC loop: the loop runs each iteration through
// iteration (the managers' Supervise hook), and every runtime call the
// iteration makes reports through the iteration's context
// (cri.WithActivity: loopWatch is the cri.Activity).
type loopWatch struct {
	name    string
	wait    time.Duration // the longest wait between two iterations
	timeout time.Duration // runtimeRequestTimeout
	clock   clock.PassiveClock
	owner   *watchdog

	mu sync.Mutex
	// busy: an iteration runs, since since; else since is when the last
	// one ended (or when watching began).
	busy  bool
	since time.Time
	// progress is, while busy, when the iteration began or last started
	// or finished a runtime call.
	progress time.Time
	// inflight holds the deadline of each runtime call in flight (the
	// zero time for a call without one), by a number of its own.
	inflight map[uint64]time.Time
	calls    uint64
	// stoppedAt is when Run returned while the agent was running; err is
	// what it returned.
	stoppedAt time.Time
	err       error
	// startErr: the loop could not be made. It is not watched; /readyz
	// says why.
	startErr error
}

// stall is the longest an iteration may go without a runtime call.
func (l *loopWatch) stall() time.Duration { return l.timeout + stallMargin }

// iteration runs work as one iteration of the loop. It has the signature
// of images.Options.Supervise and containers.Options.Supervise.
func (l *loopWatch) iteration(ctx context.Context, work func(context.Context)) {
	now := l.clock.Now()
	l.mu.Lock()
	l.busy, l.since, l.progress = true, now, now
	l.mu.Unlock()
	defer func() {
		now := l.clock.Now()
		l.mu.Lock()
		l.busy, l.since = false, now
		l.mu.Unlock()
	}()
	work(cri.WithActivity(ctx, l))
}

var _ cri.Activity = (*loopWatch)(nil)

// Start records a runtime call starting, with the time left until its
// deadline (0: none), and returns what records its end. The deadline is
// kept on the watchdog's clock.
func (l *loopWatch) Start(timeout time.Duration) func() {
	now := l.clock.Now()
	var deadline time.Time
	if timeout > 0 {
		deadline = now.Add(timeout)
	}
	l.mu.Lock()
	l.progressed(now)
	if l.inflight == nil {
		l.inflight = map[uint64]time.Time{}
	}
	l.calls++
	id := l.calls
	l.inflight[id] = deadline
	l.mu.Unlock()
	return sync.OnceFunc(func() {
		now := l.clock.Now()
		l.mu.Lock()
		l.progressed(now)
		delete(l.inflight, id)
		l.mu.Unlock()
	})
}

// Progress records a message of a streamed list arriving.
func (l *loopWatch) Progress() {
	now := l.clock.Now()
	l.mu.Lock()
	l.progressed(now)
	l.mu.Unlock()
}

// progressed records progress at now. l.mu is held.
func (l *loopWatch) progressed(now time.Time) {
	if l.busy && now.After(l.progress) {
		l.progress = now
	}
}

// lastDeadline returns the latest deadline of the runtime calls in flight
// and how many there are; the zero time when none has a deadline. l.mu is
// held.
func (l *loopWatch) lastDeadline() (time.Time, int) {
	var last time.Time
	for _, d := range l.inflight {
		if d.After(last) {
			last = d
		}
	}
	return last, len(l.inflight)
}

// stopped records that the loop's Run returned. While the agent runs, that
// means the loop stopped for good: wedged.
func (l *loopWatch) stopped(err error) {
	l.owner.mu.Lock()
	stopping := l.owner.stopping
	l.owner.mu.Unlock()
	if stopping {
		return
	}
	now := l.clock.Now()
	l.mu.Lock()
	l.stoppedAt, l.err = now, err
	l.mu.Unlock()
}

// notStarted records that the loop could not be made: it is not watched
// (restarting the agent would meet the same error), /readyz says why. nil
// records that it was made (again, for another runtime).
func (l *loopWatch) notStarted(err error) {
	l.mu.Lock()
	l.startErr = err
	l.mu.Unlock()
}

// wedged says why the loop is wedged at now, or returns nil:
//   - its Run returned while the agent runs;
//   - an iteration has made no runtime call (and began none) for longer
//     than the stall bound, runtimeRequestTimeout + stallMargin, nor has a
//     call in flight whose deadline plus stallMargin is still ahead: a
//     call ends by its deadline, so the iteration is blocked on something
//     that is not a runtime call, or that has no deadline;
//   - no iteration began for longer than the loop's wait plus the stall
//     bound.
func (l *loopWatch) wedged(now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	bound := fmt.Sprintf("bound %v: runtimeRequestTimeout %v + %v", l.stall(), l.timeout, stallMargin)
	deadline, inflight := l.lastDeadline()
	switch {
	case l.startErr != nil:
		return nil
	case !l.stoppedAt.IsZero():
		return fmt.Errorf("%s loop stopped at %s (%v ago): %v", l.name, stamp(l.stoppedAt), since(now, l.stoppedAt), l.err)
	case l.busy && now.Sub(l.progress) > l.stall() && !deadline.IsZero() && !now.After(deadline.Add(stallMargin)):
		return nil // a call in flight may still return by its own deadline
	case l.busy && now.Sub(l.progress) > l.stall():
		return fmt.Errorf("%s loop wedged: iteration running since %s (%v ago), no runtime call for %v%s (%s)",
			l.name, stamp(l.since), since(now, l.since), since(now, l.progress), inFlight(now, inflight, deadline), bound)
	case !l.busy && now.Sub(l.since) > l.wait+l.stall():
		return fmt.Errorf("%s loop wedged: no iteration since %s (%v ago; it waits at most %v between iterations, %s)",
			l.name, stamp(l.since), since(now, l.since), l.wait, bound)
	}
	return nil
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// inFlight describes the n runtime calls in flight whose latest deadline is
// deadline (zero: none has one) for a wedged loop's message.
func inFlight(now time.Time, n int, deadline time.Time) string {
	calls := "1 runtime call"
	if n != 1 {
		calls = fmt.Sprintf("%d runtime calls", n)
	}
	switch {
	case n == 0:
		return ""
	case deadline.IsZero():
		return ", " + calls + " in flight without a deadline"
	}
	return fmt.Sprintf(", %s in flight past the latest deadline %s (%v ago) + %v", calls, stamp(deadline), since(now, deadline), stallMargin)
}

func since(now, t time.Time) time.Duration { return now.Sub(t).Round(time.Second) }

// setupIteration runs build, the node GC's setup for a runtime (reading its
// profile, building the managers), as one iteration of every loop in
// loops, its runtime calls reported to all of them: it waits on calls
// within their deadlines (Status and ImageFsInfo may each take
// runtimeRequestTimeout), which is progress for loops that do not exist
// yet, not a wedge; one blocked beyond a call's deadline is.
func setupIteration(ctx context.Context, loops []*loopWatch, build func(context.Context)) {
	work := func(context.Context) { build(cri.WithActivity(ctx, activities(loops))) }
	for _, l := range loops { // each loop's iteration holds the next one's
		inner := work
		work = func(context.Context) { l.iteration(ctx, inner) }
	}
	work(ctx)
}

// activities passes each runtime call's report to every loop.
type activities []*loopWatch

func (a activities) Start(timeout time.Duration) func() {
	ends := make([]func(), len(a))
	for i, l := range a {
		ends[i] = l.Start(timeout)
	}
	return func() {
		for _, end := range ends {
			end()
		}
	}
}

func (a activities) Progress() {
	for _, l := range a {
		l.Progress()
	}
}
