// Package clockstep finds steps of the wall clock: a node without a working
// real-time clock set by NTP after boot, an operator's date, a VM resumed
// from a snapshot. The image and container GC compare wall-clock times (the
// runtime's, the state file's) with the wall clock, so a step of hours
// would age everything by as much, or make it young for as long. A Follower
// reads the wall clock against a monotonic one, which is never stepped, and
// says by how much the wall clock moved beyond it between two readings.
package clockstep

import "time"

// Tolerance is how far the wall clock's elapsed time may differ from the
// monotonic clock's between two readings before it counts as stepped: it
// absorbs the time between reading one clock and the other (Linux slews
// both alike). NTP steps by 128 ms or more; a step smaller than this is not
// worth following.
const Tolerance = 2 * time.Second

// Follower finds steps of the wall clock between its readings. A system
// suspend looks like a forward step (the monotonic clock stops).
type Follower struct {
	// Monotonic is the time elapsed on a clock that is never stepped; nil
	// with a fake clock (tests: its time is the only time), and then no
	// step is ever found.
	Monotonic func() time.Duration

	wall time.Time // the wall clock at the last reading (no monotonic part)
	mono time.Duration
}

// Step is a step of the wall clock found between two readings.
type Step struct {
	// By is how far the wall clock moved beyond the monotonic clock: more
	// than 0 forward, less than 0 back; 0 for no step.
	By time.Duration
	// Before and After are the wall clock at the readings before and after
	// the step: it happened in between.
	Before, After time.Time
}

// Follow reads both clocks, the wall clock being now, and returns the step
// the wall clock made since the last reading (By 0 when it made none, and
// at the first reading).
func (f *Follower) Follow(now time.Time) Step {
	if f.Monotonic == nil {
		return Step{}
	}
	wall, mono := now.Round(0), f.Monotonic()
	s := Step{Before: f.wall, After: wall}
	if !f.wall.IsZero() {
		s.By = wall.Sub(f.wall) - (mono - f.mono)
		if s.By > -Tolerance && s.By < Tolerance {
			s.By = 0
		}
	}
	f.wall, f.mono = wall, mono
	return s
}

// Since returns a Monotonic for a Follower of the real clock: the time
// elapsed since began, read off began's monotonic reading (began must be
// time.Now()).
func Since(began time.Time) func() time.Duration {
	return func() time.Duration { return time.Since(began) }
}
