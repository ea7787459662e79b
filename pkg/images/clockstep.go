package images

import (
	"context"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// clockStepTolerance is how far the wall clock's elapsed time may differ
// from the monotonic clock's between two readings (a second apart, at each
// disk check) before nodegc takes the wall clock to have been stepped. NTP
// slews at most 0.5 ms per second; it steps by 128 ms or more.
const clockStepTolerance = 2 * time.Second

// clockFollower finds steps of the wall clock. The usage records keep
// wall-clock times (containerd's event times are, and the state file
// outlives the process), and ages are read off the wall clock: a step of
// days forward (a node without a working real-time clock, set by NTP after
// nodegc started) would age every image by as much. Each forward step found
// is applied to the records, which keeps their ages what the monotonic
// clock says they are, as the kubelet's in-memory ones. A system suspend
// looks like a forward step too (the monotonic clock stops): the images
// then count as younger by its length, which only keeps them longer. A
// backward step is not applied: it makes images younger until the wall
// clock is back where it was, which only keeps them longer, while the
// runtime's own times (when an image arrived) stay on the old timeline and
// would not match records moved back.
type clockFollower struct {
	// monotonic is the time elapsed on a clock that is never stepped; nil
	// with a fake clock (tests: its time is the only time).
	monotonic func() time.Duration

	mu   sync.Mutex
	wall time.Time // the wall clock at the last reading (no monotonic part)
	mono time.Duration
}

// follow reads both clocks and returns the step the wall clock made since
// the last reading, 0 when it made none (or at the first reading).
func (c *clockFollower) follow(now time.Time) time.Duration {
	if c.monotonic == nil {
		return 0
	}
	wall, mono := now.Round(0), c.monotonic()
	c.mu.Lock()
	defer c.mu.Unlock()
	var step time.Duration
	if !c.wall.IsZero() {
		step = wall.Sub(c.wall) - (mono - c.mono)
		if step > -clockStepTolerance && step < clockStepTolerance {
			step = 0
		}
	}
	c.wall, c.mono = wall, mono
	return step
}

// followClock applies a forward step of the wall clock since the last
// reading to the usage records, and says so; it only says a backward one.
func (m *Manager) followClock(ctx context.Context) {
	step := m.steps.follow(m.clock.Now())
	if step == 0 {
		return
	}
	m.guard.restart()
	m.metrics.clockSteps.Inc()
	if step < 0 {
		klog.FromContext(ctx).Info("Warning: the wall clock was stepped back; images count as younger by as much until it is back where it was",
			"step", step.Round(time.Millisecond))
		return
	}
	m.tracker.shift(step)
	klog.FromContext(ctx).Info("Warning: the wall clock was stepped forward; the image usage records move with it, so that images keep their ages",
		"step", step.Round(time.Millisecond))
}
