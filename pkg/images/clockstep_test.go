package images

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestWallClockStepDoesNotAgeImages: the node's wall clock is stepped
// three days forward while nodegc runs (a node without a working real-time
// clock, set by NTP after its start), a minute after nodegc first saw its
// images. The images were seen a minute ago, not three days: they stay
// young for minimumGCAge (1h) and are not unused for maximumGCAge (2h),
// although the disk asks for space. (Before, every image went at once for
// age: the ages were read off the wall clock, as they are kept.) The step
// is told in the log and nodegc_image_gc_clock_steps_total. A monotonic
// clock, as the kubelet's ages in memory, does not step.
func TestWallClockStepDoesNotAgeImages(t *testing.T) {
	b, _ := newShrinkingBed(t, 3, func(o *Options) {
		o.Config.MinimumGCAge = &metav1.Duration{Duration: time.Hour}
		o.Config.MaximumGCAge = &metav1.Duration{Duration: 2 * time.Hour}
		o.Config.HighThresholdPercent, o.Config.LowThresholdPercent = ptr.To[int32](80), ptr.To[int32](0)
	})
	var mono time.Duration
	b.m.steps.monotonic = func() time.Duration { return mono }
	if _, err := b.m.Plan(t.Context()); err != nil { // the images are seen
		t.Fatal(err)
	}
	mono += time.Minute
	b.clk.Step(time.Minute + 72*time.Hour)
	b.disk.set(90)
	plan, err := b.m.Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range plan.Remove {
		t.Errorf("image %s planned for removal (%s) a minute after it was first seen", d.Image.ID, d.Reason)
	}
	for _, d := range plan.Keep {
		if d.Reason != KeepMinAge {
			t.Errorf("image %s kept as %s, want %s", d.Image.ID, d.Reason, KeepMinAge)
		}
	}
	if got := testutil.ToFloat64(b.m.metrics.clockSteps); got != 1 {
		t.Errorf("nodegc_image_gc_clock_steps_total = %v, want 1", got)
	}

	// An hour and a minute later (both clocks), the images are old enough
	// for the threshold rule, and still not unused for maximumGCAge.
	mono += time.Hour
	b.clk.Step(time.Hour)
	if plan, err = b.m.Plan(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, d := range plan.Remove {
		if d.Reason != ReasonSpace {
			t.Errorf("image %s planned for removal as %s, want %s", d.Image.ID, d.Reason, ReasonSpace)
		}
	}
	if len(plan.Remove) == 0 {
		t.Error("nothing planned for removal an hour and two minutes after the images were seen, at 90%")
	}
}

// TestClockFollower: the wall clock's drift against the monotonic clock
// between two readings is no step; a difference past the tolerance either
// way is, once.
func TestClockFollower(t *testing.T) {
	var mono time.Duration
	c := clockFollower{monotonic: func() time.Duration { return mono }}
	wall := t0
	read := func(wallStep, monoStep time.Duration) time.Duration {
		wall, mono = wall.Add(wallStep), mono+monoStep
		return c.follow(wall)
	}
	for _, tc := range []struct {
		name       string
		wall, mono time.Duration
		want       time.Duration
	}{
		{"first reading", time.Second, time.Second, 0},
		{"in step", time.Second, time.Second, 0},
		{"slewed", time.Second + time.Millisecond, time.Second, 0},
		{"stepped forward", time.Hour + time.Second, time.Second, time.Hour},
		{"in step after the step", time.Second, time.Second, 0},
		{"stepped back", -time.Hour + time.Second, time.Second, -time.Hour},
		{"suspended (the monotonic clock stopped)", 10 * time.Minute, 0, 10 * time.Minute},
	} {
		if got := read(tc.wall, tc.mono); got != tc.want {
			t.Errorf("%s: step %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := (&clockFollower{}).follow(t0); got != 0 {
		t.Errorf("without a monotonic clock (a fake clock): step %v, want 0", got)
	}
}
