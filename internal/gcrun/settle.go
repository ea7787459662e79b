package gcrun

import (
	"context"
	"time"

	"k8s.io/utils/clock"
)

// How a collector waits for the runtime's asynchronous cleanup before it
// measures the space a run freed (containerd removes content and snapshots
// after the image or container record): free space is read every
// SettlePoll until it has not grown by more than SettleNoise for
// SettleQuiet. Only growth counts as progress: other writers on a shared
// filesystem keep free space moving down, which must not hold the run open.
const (
	SettlePoll  = 250 * time.Millisecond
	SettleQuiet = 1500 * time.Millisecond
	SettleNoise = 256 << 10
)

// Settle calls read once, then every SettlePoll, until read has reported no
// growth for SettleQuiet, timeout has passed since Settle began, ctx ended
// or read says stop. read reports whether free space grew by more than
// SettleNoise since the best reading it kept. clk times the wait (the real
// runtime's cleanup takes real time).
func Settle(ctx context.Context, clk clock.Clock, timeout time.Duration, read func() (grew, more bool)) {
	deadline := clk.Now().Add(timeout)
	if _, more := read(); !more {
		return
	}
	progressAt := clk.Now()
	for clk.Now().Before(deadline) && clk.Since(progressAt) < SettleQuiet {
		select {
		case <-ctx.Done():
			return
		case <-clk.After(SettlePoll):
		}
		grew, more := read()
		if !more {
			return
		}
		if grew {
			progressAt = clk.Now()
		}
	}
}
