package cri

import (
	"math"
	"time"
)

// secondsDuration is s seconds, 0 when negative, and the longest
// time.Duration (about 292 years) when longer than that: a pod's
// terminationGracePeriodSeconds can be any int64, and multiplying it out
// would wrap around.
func secondsDuration(s int64) time.Duration {
	switch {
	case s < 0:
		return 0
	case s > math.MaxInt64/int64(time.Second):
		return math.MaxInt64
	}
	return time.Duration(s) * time.Second
}

// addDurations is a + b for non-negative a and b, the longest
// time.Duration when the sum is longer.
func addDurations(a, b time.Duration) time.Duration {
	if b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + b
}
