package gcrun

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// ErrInProgress is returned when a run, or a plan that must not interleave
// with one, is asked for while a run is going on.
var ErrInProgress = errors.New("a GC run is already in progress")

// Run is the part of a run's report every node collector shares. Embed it
// in the collector's Report.
type Run struct {
	// Trigger says what started the run (a metric label: periodic,
	// threshold, manual).
	Trigger  string
	Start    time.Time
	Duration time.Duration
	// Err joins every failure of the run; the rest of the report says what
	// was done despite them.
	Err error
}

// run lets Collect reach the Run a report embeds.
func (r *Run) run() *Run { return r }

// Collect is a collector's GarbageCollect: one run of trigger under s's
// lock. If a run holds the lock it returns ErrInProgress at once, calls
// nothing and makes no report. Otherwise it makes a report of type T, fills
// in its Run (trigger and start, then body's error and the duration), and
// calls every non-nil after in order still under the lock (record metrics,
// save state, hand the report on). It returns the report and its error.
func Collect[R interface {
	*T
	run() *Run
}, T any](s *Serial, trigger string, body func(R) error, after ...func(R)) (R, error) {
	if !s.mu.TryLock() {
		return nil, ErrInProgress
	}
	defer s.mu.Unlock()
	r := R(new(T))
	run := r.run()
	run.Trigger, run.Start = trigger, s.clock.Now()
	run.Err = body(r)
	run.Duration = s.clock.Since(run.Start)
	for _, f := range after {
		if f != nil {
			f(r)
		}
	}
	return r, run.Err
}

// Serial allows one run at a time and times it.
type Serial struct {
	mu    sync.Mutex
	clock clock.PassiveClock
}

// NewSerial returns a Serial timing runs with c.
func NewSerial(c clock.PassiveClock) *Serial { return &Serial{clock: c} }

// Exclusive runs fn under the lock of Collect, or returns ErrInProgress at once
// if a run holds it.
func (s *Serial) Exclusive(fn func()) error {
	if !s.mu.TryLock() {
		return ErrInProgress
	}
	defer s.mu.Unlock()
	fn()
	return nil
}

// Supervisor runs one iteration of a collector's loop: it calls work once,
// with ctx or a context derived from it, and returns when work does. The
// agent's watchdog is one: it tells a wedged loop from a slow one.
type Supervisor func(ctx context.Context, work func(context.Context))

// Call runs work through s, or directly when s is nil.
func (s Supervisor) Call(ctx context.Context, work func(context.Context)) {
	if s == nil {
		work(ctx)
		return
	}
	s(ctx, work)
}

// Every calls work through sup at once, and again each time next, which
// waits for the time of the next iteration (a ticker's tick), returns
// true; it returns when next returns false (ctx ended).
func Every(ctx context.Context, sup Supervisor, next func(context.Context) bool, work func(context.Context)) {
	for {
		sup.Call(ctx, work)
		if !next(ctx) {
			return
		}
	}
}

// LogEnd logs how a run of collector (a display name: "Image GC",
// "Container GC") ended when it did not simply succeed: skipped because
// another run held the lock and interrupted because ctx ended, both at
// V(2), failed as an error with kv. It returns whether it logged.
func LogEnd(ctx context.Context, collector, trigger string, err error, kv ...any) bool {
	logger := klog.FromContext(ctx)
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrInProgress):
		logger.V(2).Info(collector+" run skipped: another is in progress", "trigger", trigger)
	case ctx.Err() != nil:
		logger.V(2).Info(collector+" run interrupted", append([]any{"trigger", trigger, "err", err}, kv...)...)
	default:
		logger.Error(err, collector+" run failed", append([]any{"trigger", trigger}, kv...)...)
	}
	return true
}
