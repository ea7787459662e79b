package images

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/diskstats"
)

// scriptedWrites is a WriteSource the test drives: each stream opens,
// passes on the writes sent to it, and breaks with the error sent to it.
type scriptedWrites struct {
	writes chan struct{}
	breaks chan error
	mu     sync.Mutex
	opens  int
}

func (s *scriptedWrites) WatchWrites(ctx context.Context, opened, wrote func()) error {
	s.mu.Lock()
	s.opens++
	s.mu.Unlock()
	opened()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.writes:
			wrote()
		case err := <-s.breaks:
			return err
		}
	}
}

func (s *scriptedWrites) openCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opens
}

// countingDisk is a disk at 20% that counts its readings.
type countingDisk struct {
	mu    sync.Mutex
	reads int
}

func (d *countingDisk) Stat(string) (diskstats.Stats, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reads++
	return diskstats.Stats{Capacity: 100, Available: 80}, nil
}

func (d *countingDisk) readings() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.reads
}

// TestWritesHaveTheDiskRead: with the disk checked every minute, a write of
// the runtime's has the disk read at once (the clock does not move); a
// burst of writes within writeCheckSpacing of that check is met by one more
// check when the spacing has passed, not one per write; a stream that
// breaks is reopened after a second, and the gauge says whether writes are
// followed meanwhile.
func TestWritesHaveTheDiskRead(t *testing.T) {
	cfg := policyConfig()
	cfg.HighThresholdPercent, cfg.LowThresholdPercent = ptr.To[int32](80), ptr.To[int32](75)
	cfg.DiskCheckInterval = metav1.Duration{Duration: time.Minute}
	cfg.Period = metav1.Duration{Duration: time.Hour}
	clk := clocktesting.NewFakeClock(t0)
	disk := &countingDisk{}
	writes := &scriptedWrites{writes: make(chan struct{}), breaks: make(chan error)}
	reg := prometheus.NewRegistry()
	m, err := NewManager(Options{Config: cfg, StateDirectory: t.TempDir(), Runtime: &streamRuntime{opened: make(chan struct{})},
		Disk: disk, Clock: clk, Writes: writes, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	RunUntilCleanup(t, m)
	checks := func(cause string) float64 { return testutil.ToFloat64(m.metrics.diskChecks.WithLabelValues(cause)) }
	followed := func() float64 { return testutil.ToFloat64(m.metrics.writesFollowed) }

	testbed.WaitFor(t, 5*time.Second, "the check at start and the stream open", func() bool {
		return checks(checkAtInterval) == 1 && disk.readings() == 1 && followed() == 1
	})
	reads := disk.readings()

	// Past the spacing since the check at start: a write is met at once.
	clk.Step(time.Second)
	writes.writes <- struct{}{}
	// The counter moves as a check begins, the disk is read within it.
	testbed.WaitFor(t, 5*time.Second, "a check right after a write, and the disk read in it", func() bool {
		return checks(checkAfterWrite) == 1 && disk.readings() > reads
	})

	// A burst within the spacing: one check once it passed.
	for range 20 {
		writes.writes <- struct{}{}
	}
	// The loop reads the clock as it takes the burst's first write: a step
	// made while it does so may come before the wait it sets, so the clock
	// moves by a spacing at each look.
	moved := time.Second
	testbed.WaitFor(t, 5*time.Second, "one check for the burst once the spacing passed", func() bool {
		clk.Step(writeCheckSpacing)
		moved += writeCheckSpacing
		return checks(checkAfterWrite) >= 2
	})
	for range 3 { // the loop may still hold the burst's last write: a check after one more spacing at most
		clk.Step(writeCheckSpacing)
		moved += writeCheckSpacing
	}
	if got := checks(checkAfterWrite); got > 3 {
		t.Errorf("%v checks after 21 writes, want at most 3", got)
	}
	if got := checks(checkAtInterval); got != 1 { // the waits above move it 51.3s at most
		t.Errorf("%v checks at the interval, want 1 (the clock moved %v of the %v interval)", got, moved, cfg.DiskCheckInterval.Duration)
	}

	// The stream breaks: not followed, reopened after a second.
	writes.breaks <- errors.New("connection reset")
	testbed.WaitFor(t, 5*time.Second, "the gauge to say writes are not followed", func() bool { return followed() == 0 })
	testbed.WaitFor(t, 5*time.Second, "the stream reopened after a second", func() bool {
		clk.Step(100 * time.Millisecond)
		return writes.openCount() == 2 && followed() == 1
	})
	before := checks(checkAfterWrite)
	writes.writes <- struct{}{}
	testbed.WaitFor(t, 5*time.Second, "a check after a write on the reopened stream", func() bool {
		clk.Step(writeCheckSpacing)
		return checks(checkAfterWrite) > before
	})
}

// refusingWrites opens a stream and breaks it at once, every time (a server
// that refuses the subscription at its first read), noting when each
// opened on clk.
type refusingWrites struct {
	clk   *clocktesting.FakeClock
	mu    sync.Mutex
	opens []time.Time
}

func (r *refusingWrites) WatchWrites(_ context.Context, opened, _ func()) error {
	r.mu.Lock()
	r.opens = append(r.opens, r.clk.Now())
	r.mu.Unlock()
	opened()
	return errors.New("subscription refused")
}

func (r *refusingWrites) openTimes() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.opens)
}

// afterClock is a fake clock that passes on the wait of each After it is
// asked for, so that a test moves the clock once that wait has begun, and
// by that much.
type afterClock struct {
	*clocktesting.FakeClock
	waits chan time.Duration
}

func (c afterClock) After(d time.Duration) <-chan time.Time {
	ch := c.FakeClock.After(d)
	select {
	case c.waits <- d:
	default: // more waits than the test looks at
	}
	return ch
}

// TestRefusedWriteStreamBacksOff: a stream that breaks right after it
// opened is reopened 1, 2, 4 s later, not every second (the open alone
// started the backoff over: a reopen and a log line every second for
// good).
func TestRefusedWriteStreamBacksOff(t *testing.T) {
	cfg := policyConfig()
	cfg.DiskCheckInterval = metav1.Duration{Duration: time.Hour}
	cfg.Period = metav1.Duration{Duration: time.Hour}
	clk := afterClock{FakeClock: clocktesting.NewFakeClock(t0), waits: make(chan time.Duration, 16)}
	writes := &refusingWrites{clk: clk.FakeClock}
	// The container event stream opens at once: the stream of writes'
	// reopening is the only wait on the clock's After.
	rt := &streamRuntime{open: true, opened: make(chan struct{})}
	m, err := NewManager(Options{Config: cfg, StateDirectory: t.TempDir(), Runtime: rt,
		Disk: &countingDisk{}, Clock: clk, Writes: writes})
	if err != nil {
		t.Fatal(err)
	}
	RunUntilCleanup(t, m)
	// The clock moves only once the watcher waits to reopen, and by the
	// wait it chose. Stepped at every look instead, it could move while
	// the watcher dated an open or set its wait, which lengthens the gap
	// measured by a step each time.
	for i := range 3 {
		select {
		case d := <-clk.waits:
			clk.Step(d)
		case <-time.After(10 * time.Second):
			t.Fatalf("no wait to reopen the stream after open %d (opens at %v)", i+1, writes.openTimes())
		}
	}
	testbed.WaitFor(t, 10*time.Second, "four opens", func() bool { return len(writes.openTimes()) >= 4 })
	opens := writes.openTimes()
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		if gap := opens[i+1].Sub(opens[i]); gap != want {
			t.Errorf("reopen %d came %v after the last open, want %v", i+1, gap, want)
		}
	}
}
