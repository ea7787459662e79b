package images

import (
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// clockStepped is told each step of the wall clock the tracker applied
// (Tracker.onStep; called with the tracker's lock held).
//
// The usage records keep wall-clock times (containerd's event times are,
// and the state file outlives the process), and ages are read off the wall
// clock: a step of days forward (a node without a working real-time clock,
// set by NTP after nodegc started) would age every image by as much, and
// one back would make every image too young to go for as long. Each step
// the tracker's clockstep.Follower finds is applied to the records
// (Tracker.shiftLocked), which keeps their ages what the monotonic clock
// says they are, as the kubelet's in-memory ones. A system suspend looks
// like a forward step: the images then count as younger by its length,
// which only keeps them longer. When the pod view was last authoritative
// moves with a step back (PodsMemory.steppedBack).
func (m *Manager) clockStepped(step time.Duration) {
	m.scheduled.steppedBack(step)
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
