package images

import (
	"time"

	"golang.org/x/sys/unix"
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
// nodegc started) would age every image by as much, and one back would make
// every image too young to go for as long. Each step found is applied to
// the records (Tracker.shiftLocked), which keeps their ages what the
// monotonic clock says they are, as the kubelet's in-memory ones. A system
// suspend looks like a forward step (the monotonic clock stops): the images
// then count as younger by its length, which only keeps them longer. The
// tracker reads it under its lock.
type clockFollower struct {
	// monotonic is the time elapsed on a clock that is never stepped; nil
	// with a fake clock (tests: its time is the only time).
	monotonic func() time.Duration

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

// clockStepped is told each step of the wall clock the tracker applied
// (Tracker.onStep; called with the tracker's lock held).
func (m *Manager) clockStepped(step time.Duration) {
	m.guard.restart()
	m.metrics.clockSteps.Inc()
	klog.Background().Info("Warning: the wall clock was stepped; the image usage records move with it, so that images keep their ages",
		"step", step.Round(time.Millisecond))
}

// timeSinceBoot reads CLOCK_BOOTTIME: the time since the machine booted,
// suspends included, on a clock that is never stepped.
func timeSinceBoot() (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
