package gcrun

import (
	"context"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"
)

// settleCalls runs Settle on a fake clock, moving it a poll at a time, and
// returns how many times it read and how much clock time passed.
func settleCalls(t *testing.T, timeout time.Duration, read func(call int) (grew, more bool)) (int, time.Duration) {
	t.Helper()
	start := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	clk := testclock.NewFakeClock(start)
	calls := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		Settle(context.Background(), clk, timeout, func() (bool, bool) { calls++; return read(calls) })
	}()
	for {
		select {
		case <-done:
			return calls, clk.Since(start)
		case <-time.After(time.Millisecond):
			if clk.HasWaiters() {
				clk.Step(SettlePoll)
			}
		}
	}
}

// TestSettle: reads until SettleQuiet passed without growth, within the
// timeout; a read that says stop ends it at once.
func TestSettle(t *testing.T) {
	cases := map[string]struct {
		timeout   time.Duration
		read      func(call int) (grew, more bool)
		wantCalls int
	}{
		// The first read, three that grew, then six polls (1.5 s) without.
		"quiet after growth":                {time.Minute, func(c int) (bool, bool) { return c > 1 && c <= 4, true }, 10},
		"never grows":                       {time.Minute, func(int) (bool, bool) { return false, true }, 7},
		"always grows: the timeout ends it": {2 * time.Second, func(int) (bool, bool) { return true, true }, 9},
		"the first read stops it":           {time.Minute, func(int) (bool, bool) { return false, false }, 1},
		"a later read stops it":             {time.Minute, func(c int) (bool, bool) { return true, c < 3 }, 3},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if calls, _ := settleCalls(t, tc.timeout, tc.read); calls != tc.wantCalls {
				t.Errorf("%d reads, want %d", calls, tc.wantCalls)
			}
		})
	}
}
