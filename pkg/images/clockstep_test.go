package images

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
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
	b.m.tracker.steps.Monotonic = func() time.Duration { return mono }
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

// TestShiftDropsMonotonicReadings: a time this process dated carries a
// monotonic reading, by which Go reads its age against another such time:
// a moved record must not keep it, or its age would be read off the moved
// monotonic reading, younger by the step than it is. (Before, a step of 72h
// made an image listed 2.5µs ago -71h59m old.)
func TestShiftDropsMonotonicReadings(t *testing.T) {
	tr, err := newTracker(t.TempDir(), t0, false, "")
	if err != nil {
		t.Fatal(err)
	}
	seen := time.Now() // with its monotonic reading
	tr.usage["sha256:a"] = Usage{FirstDetected: seen, LastUsed: seen}
	tr.mu.Lock()
	tr.shiftLocked(72 * time.Hour)
	tr.mu.Unlock()
	u := tr.usage["sha256:a"]
	for name, at := range map[string]time.Time{"first-detected": u.FirstDetected, "last-used": u.LastUsed} {
		if at != at.Round(0) {
			t.Errorf("%s time %v kept a monotonic reading", name, at)
		}
		if want := seen.Round(0).Add(72 * time.Hour); !at.Equal(want) {
			t.Errorf("%s time %v, want %v", name, at, want)
		}
	}
}

// TestRecordsDatedAfterAStepStayPut: the wall clock is stepped, and before
// any disk check an image is listed (the usage watcher lists the images an
// event named): the tracker applies the step to the records it has before
// it dates the new one, which the step does not move again. (Before, the
// manager applied the step at its next check, to the new record too: first
// detected 72h in the future.)
func TestRecordsDatedAfterAStepStayPut(t *testing.T) {
	b, rt := newShrinkingBed(t, 1, nil)
	var mono time.Duration
	b.m.tracker.steps.Monotonic = func() time.Duration { return mono }
	if _, err := b.m.Plan(t.Context()); err != nil {
		t.Fatal(err)
	}
	mono += time.Second
	b.clk.Step(time.Second + 72*time.Hour)
	rt.images = append(rt.images, &runtimeapi.Image{Id: "sha256:new", Size: 20, RepoTags: []string{"x/new:1"}})
	b.m.tracker.applyImages(slices.Clone(rt.images), b.clk.Now())
	b.m.tracker.follow()
	u := b.m.tracker.Usage()
	if got := u["sha256:new"].FirstDetected; !got.Equal(b.clk.Now()) {
		t.Errorf("the image listed after the step was first detected %v after it was listed", got.Sub(b.clk.Now()))
	}
	if got, want := u["sha256:a"].FirstDetected, b.clk.Now().Add(-time.Second); !got.Equal(want) {
		t.Errorf("the image listed before the step was first detected %v ago, want 1s", b.clk.Now().Sub(got))
	}
}

// TestClockSteppedThereAndBack: the wall clock is stepped 30 days forward,
// then back (a wrong time set, then corrected): both steps are applied, and
// the images keep their ages: two hours later they are old enough to go
// for space. (Before, only the forward step was: the images stayed 30 days
// in the future, too young to go.)
func TestClockSteppedThereAndBack(t *testing.T) {
	b, _ := newShrinkingBed(t, 2, func(o *Options) {
		o.Config.MinimumGCAge = &metav1.Duration{Duration: time.Hour}
		o.Config.HighThresholdPercent, o.Config.LowThresholdPercent = ptr.To[int32](80), ptr.To[int32](0)
	})
	var mono time.Duration
	b.m.tracker.steps.Monotonic = func() time.Duration { return mono }
	if _, err := b.m.Plan(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, step := range []time.Duration{30 * 24 * time.Hour, -30 * 24 * time.Hour} {
		mono += time.Second
		b.clk.Step(time.Second + step)
		b.m.tracker.follow()
	}
	mono += 2 * time.Hour
	b.clk.Step(2 * time.Hour)
	b.disk.set(90)
	plan, err := b.m.Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Remove) != 2 {
		t.Errorf("%d images planned for removal two hours after they were seen, at 90%%, want 2; kept: %v", len(plan.Remove), plan.Keep)
	}
	if got := testutil.ToFloat64(b.m.metrics.clockSteps); got != 2 {
		t.Errorf("nodegc_image_gc_clock_steps_total = %v, want 2", got)
	}
}

// TestArrivalsAfterAClockStepBack: the runtime keeps when an image arrived
// on the wall clock of then, which a step does not move. After a step back
// moved the records, the same arrival, later than the moved first-detected
// time, is not taken for a new copy of the image (which would date it anew
// and drop its last use); a new arrival is.
func TestArrivalsAfterAClockStepBack(t *testing.T) {
	tr, err := newTracker(t.TempDir(), t0, false, "")
	if err != nil {
		t.Fatal(err)
	}
	arrived := t0.Add(-time.Minute)
	tr.usage["sha256:a"] = Usage{FirstDetected: t0, LastUsed: t0.Add(time.Minute)}
	tr.observeArrivals(map[string]time.Time{"sha256:a": arrived}, tr.follow())
	tr.mu.Lock()
	tr.shiftLocked(-24 * time.Hour)
	tr.mu.Unlock()
	tr.observeArrivals(map[string]time.Time{"sha256:a": arrived}, tr.follow())
	want := Usage{FirstDetected: t0.Add(-24 * time.Hour), LastUsed: t0.Add(-24*time.Hour + time.Minute), Arrived: arrived}
	if got := tr.usage["sha256:a"]; got != want {
		t.Errorf("after the same arrival: %+v, want %+v", got, want)
	}
	again := t0.Add(-time.Hour) // pulled again (later than the moved record)
	tr.observeArrivals(map[string]time.Time{"sha256:a": again}, tr.follow())
	if got := tr.usage["sha256:a"]; got != (Usage{FirstDetected: again, Arrived: again}) {
		t.Errorf("after a new arrival: %+v, want first detected at it, no last use", got)
	}
}

// TestStepWhileNodegcWasDown: the wall clock is stepped while nodegc is
// down, on the same boot (a node without a working real-time clock, set by
// NTP during a rollout of the agent). The state file records the boot and
// the time since boot at each write, and the next start moves the records
// by the step, either way, before anything else is made of them: an image
// first seen a minute before the write, two minutes ago by the boot clock,
// is two minutes old, however far the wall clock moved. Another boot, a
// file without the boot, or a step within the tolerance moves nothing.
// The first plan's read of when the image arrived (containerd's time, on
// the clock of before the step, which the running agent had read) does
// not undo the move. (Before, after a step back it was later than the
// moved first-detected time and taken for a new pull: first detected a
// day in the future, its last use dropped.)
func TestStepWhileNodegcWasDown(t *testing.T) {
	const up = 100 * time.Second
	for _, tc := range []struct {
		name    string
		now     time.Time
		boot    bootReading
		shift   time.Duration
		saveOld bool // a file written without the boot
	}{
		{name: "forward three days", now: t0.Add(72*time.Hour + time.Minute), boot: bootReading{"b1", up + time.Minute}, shift: 72 * time.Hour},
		{name: "back a day", now: t0.Add(-24*time.Hour + time.Minute), boot: bootReading{"b1", up + time.Minute}, shift: -24 * time.Hour},
		{name: "within the tolerance", now: t0.Add(time.Minute + time.Second), boot: bootReading{"b1", up + time.Minute}},
		{name: "another boot", now: t0.Add(72*time.Hour + time.Minute), boot: bootReading{"b2", time.Minute}},
		{name: "boot unknown now", now: t0.Add(72*time.Hour + time.Minute)},
		{name: "file without the boot", now: t0.Add(72*time.Hour + time.Minute), boot: bootReading{"b1", up + time.Minute}, saveOld: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			saved := bootReading{"b1", up}
			if tc.saveOld {
				saved = bootReading{}
			}
			tr, err := newTrackerAt(dir, t0.Add(-time.Hour), false, "node-a", func() bootReading { return saved })
			if err != nil {
				t.Fatal(err)
			}
			tr.clock = func() time.Time { return t0 }
			tr.usage["sha256:a"] = Usage{FirstDetected: t0.Add(-time.Minute), LastUsed: t0.Add(-30 * time.Second)}
			arrivals := map[string]time.Time{"sha256:a": t0.Add(-2 * time.Minute)}
			tr.observeArrivals(arrivals, tr.follow()) // the running agent's plans
			tr.markDirtyLocked()
			if _, err := tr.saveFinal(); err != nil {
				t.Fatal(err)
			}

			again, err := newTrackerAt(dir, tc.now, false, "node-a", func() bootReading { return tc.boot })
			if err != nil {
				t.Fatalf("loading after the step: %v", err)
			}
			again.clock = func() time.Time { return tc.now }
			again.observeArrivals(arrivals, again.follow()) // the first plan's
			if again.fileWatch.shift != tc.shift {
				t.Errorf("shift %v, want %v", again.fileWatch.shift, tc.shift)
			}
			if tc.shift != 0 && !again.dirty {
				t.Error("the moved records are not to be written: a crash before the next change would lose the move")
			}
			u := again.usage["sha256:a"]
			if want := t0.Add(-time.Minute + tc.shift); !u.FirstDetected.Equal(want) {
				t.Errorf("first detected %v, want %v (age %v by the wall clock now)", u.FirstDetected, want, tc.now.Sub(u.FirstDetected))
			}
			if want := t0.Add(-30*time.Second + tc.shift); !u.LastUsed.Equal(want) {
				t.Errorf("last used %v, want %v", u.LastUsed, want)
			}
		})
	}
}

// fixedArrivals answers, as containerd does, the creation time of each
// image's record: on the wall clock of when it was pulled, which no later
// step of the clock moves.
type fixedArrivals map[string]time.Time

func (a fixedArrivals) Arrivals(_ context.Context, imgs []*runtimeapi.Image) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	for _, img := range imgs {
		if at, ok := a[img.GetId()]; ok {
			out[img.GetId()] = at
		}
	}
	return out, nil
}

// TestRestartAfterAStepBack: the node's clock ran a day ahead (an RTC set
// wrong) when image a was pulled (containerd dates its record on that
// clock) and nodegc first saw it, used by a container. NTP steps the clock
// back a day while nodegc runs, which moves its records by the step; then
// nodegc is restarted (a rollout) and the container goes. Two hours later
// (every clock), the image, unused since, is over the minimum age (1h), and
// the disk asks for it: it is removable, its last use kept. (Before, the
// restarted tracker had forgotten which arrival it had checked the record
// against, took containerd's time, unmoved by the step, for a new pull,
// dated the image a day into the future (kept min_age) and dropped its last
// use (first in the LRU order).)
func TestRestartAfterAStepBack(t *testing.T) {
	const day = 24 * time.Hour
	ahead := t0.Add(day)
	rt := &listingRuntime{statusRuntime: statusRuntime{&removalsRuntime{images: []*runtimeapi.Image{
		{Id: "sha256:aa", RepoTags: []string{"registry.example/a:1"}, Size: 30 * mib},
	}}}}
	rt.add(&runtimeapi.Container{Id: "c1", ImageRef: "sha256:aa", State: runtimeapi.ContainerState_CONTAINER_EXITED})
	dir := t.TempDir()
	clk := clocktesting.NewFakeClock(ahead)
	start := func() *Manager {
		t.Helper()
		cfg := policyConfig()
		cfg.MinimumGCAge = &metav1.Duration{Duration: time.Hour}
		cfg.HighThresholdPercent, cfg.LowThresholdPercent = ptr.To[int32](1), ptr.To[int32](0)
		m, err := NewManager(Options{Config: cfg, StateDirectory: dir, Runtime: rt, Clock: clk,
			Arrivals: fixedArrivals{"sha256:aa": ahead.Add(-time.Minute)}, Disk: statsDisk{Capacity: 100 * mib, Available: 10 * mib}})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	first := start()
	var mono time.Duration
	first.tracker.steps.Monotonic = func() time.Duration { return mono }
	if _, err := first.Plan(t.Context()); err != nil { // a seen, and used by c1
		t.Fatal(err)
	}
	mono += time.Second
	clk.SetTime(ahead.Add(time.Second - day))
	first.tracker.follow()
	before := first.tracker.Usage()["sha256:aa"]
	if err := first.saveState(true); err != nil { // SIGTERM
		t.Fatal(err)
	}

	rt.lmu.Lock()
	rt.containers = nil
	rt.lmu.Unlock()
	clk.Step(time.Second)
	second := start()
	clk.Step(2 * time.Hour)
	plan, err := second.Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range plan.Keep {
		t.Errorf("image %s first seen 2h2s ago, unused since, kept as %q (minimum age 1h); first detected %v from now",
			d.Image.ID, d.Reason, d.Image.FirstDetected.Sub(plan.Now))
	}
	if len(plan.Remove) != 1 {
		t.Errorf("planned removals %d, want 1", len(plan.Remove))
	}
	if got := second.tracker.Usage()["sha256:aa"].LastUsed; !got.Equal(before.LastUsed) {
		t.Errorf("last used %v after the restart, want %v", got, before.LastUsed)
	}
}

// TestPodViewLapseAcrossAClockStep: the pod view is authoritative at a
// plan; then the wall clock is stepped an hour (NTP correcting a clock
// that ran ahead, or behind) and the view lapses (nodegc cannot reach the
// API). The kubelet pulls the image of a pod bound since, which the view
// does not know. Five minutes later, past the minimum age (2m), the disk
// asking for every image, that image is kept as arrived since the view
// last was authoritative (README, safety rule 1), whichever way the clock
// was stepped, and an image first seen two hours before the lapse goes.
// (Before, a step back left when the view was last authoritative on the
// clock of before the step, an hour after the image's first-detected and
// arrival times on the clock of after it: the image was removed.)
func TestPodViewLapseAcrossAClockStep(t *testing.T) {
	for _, tc := range []struct {
		name string
		step time.Duration
	}{{"no step", 0}, {"stepped back", -time.Hour}, {"stepped forward", time.Hour}} {
		t.Run(tc.name, func(t *testing.T) {
			pods := &lockedPods{view: PodImages{Authoritative: true}}
			arrivals := fixedArrivals{"sha256:a": t0.Add(-48 * time.Hour)}
			b, rt := newShrinkingBed(t, 1, func(o *Options) {
				o.Pods, o.Arrivals, o.SettleTimeout = pods, arrivals, time.Millisecond
				o.Config.MinimumGCAge = &metav1.Duration{Duration: 2 * time.Minute}
				o.Config.LowThresholdPercent = ptr.To[int32](0)
			})
			var mono time.Duration
			b.m.tracker.steps.Monotonic = func() time.Duration { return mono }
			elapse := func(d, step time.Duration) {
				mono += d
				b.clk.Step(d + step)
			}
			plan := func() {
				t.Helper()
				if _, err := b.m.Plan(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			plan() // a is seen
			elapse(2*time.Hour, 0)
			plan() // the view is authoritative
			elapse(time.Second, tc.step)
			b.m.tracker.follow()
			pods.mu.Lock()
			pods.view = PodImages{Reason: "API unreachable"}
			pods.mu.Unlock()

			elapse(time.Minute, 0)
			rt.mu.Lock()
			rt.images = append(rt.images, &runtimeapi.Image{Id: "sha256:new", Size: 20, RepoTags: []string{"x/new:1"}})
			rt.mu.Unlock()
			arrivals["sha256:new"] = b.clk.Now()
			plan() // new is seen
			elapse(5*time.Minute, 0)
			b.disk.set(90)
			r, err := b.m.GarbageCollect(t.Context(), TriggerManual)
			if r == nil || r.Outcome == nil {
				t.Fatalf("no run: %v", err)
			}
			got := map[string]string{}
			for _, d := range r.Plan.Keep {
				got[d.Image.ID] = "kept " + d.Reason
			}
			for _, d := range r.Outcome.Removed {
				got[d.Image.ID] = "removed " + d.Reason
			}
			want := map[string]string{"sha256:a": "removed " + ReasonSpace, "sha256:new": "kept " + KeepScheduled}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("collection 5m after the pull, the view lapsed 6m ago (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNewCopyBeforeAForwardStepWhileDown: image a's record, saved with its
// arrival, was first detected an hour before nodegc stopped. While it was
// down, another client removed a and pulled it again (containerd dates the
// new copy on the clock of then), and the clock stepped a day forward on
// the same boot: the record moves a day forward at the start, past the new
// copy's arrival. Another arrival than the record's is a new copy: it
// counts from its arrival plus the step forward since the record's arrival
// was read (a minute ago, as old as it is), unused. Before, it kept the old
// copy's first-detected time and counted as 1h2m old a minute after its
// pull, removable before the minimum age.
func TestNewCopyBeforeAForwardStepWhileDown(t *testing.T) {
	const up = 100 * time.Second
	dir := t.TempDir()
	tr, err := newTrackerAt(dir, t0.Add(-2*time.Hour), false, "node-a", func() bootReading { return bootReading{"b1", up} })
	if err != nil {
		t.Fatal(err)
	}
	tr.clock = func() time.Time { return t0 }
	oldArrival := t0.Add(-time.Hour - time.Minute)
	tr.usage["sha256:a"] = Usage{FirstDetected: t0.Add(-time.Hour), LastUsed: t0.Add(-time.Minute)}
	tr.observeArrivals(map[string]time.Time{"sha256:a": oldArrival}, tr.follow())
	tr.markDirtyLocked()
	if _, err := tr.saveFinal(); err != nil {
		t.Fatal(err)
	}

	pulled := t0.Add(time.Minute) // on the clock before the step
	now := t0.Add(2*time.Minute + 24*time.Hour)
	again, err := newTrackerAt(dir, now, false, "node-a", func() bootReading { return bootReading{"b1", up + 2*time.Minute} })
	if err != nil {
		t.Fatal(err)
	}
	if again.fileWatch.shift != 24*time.Hour {
		t.Fatalf("step found at the start %v, want 24h", again.fileWatch.shift)
	}
	again.clock = func() time.Time { return now }
	again.observeArrivals(map[string]time.Time{"sha256:a": pulled}, again.follow())
	u := again.usage["sha256:a"]
	want := pulled.Add(24 * time.Hour)
	if !u.FirstDetected.Equal(want) || !u.LastUsed.IsZero() || !u.Arrived.Equal(pulled) {
		t.Errorf("a copy pulled a minute ago (arrival %v, the record's %v): first detected %v (%v old), last used %v, arrival %v; want first detected a minute ago, unused, arrival %v",
			pulled, oldArrival, u.FirstDetected, now.Sub(u.FirstDetected), u.LastUsed, u.Arrived, pulled)
	}
	// The same arrival again changes nothing.
	later := now.Add(time.Hour)
	again.clock = func() time.Time { return later }
	again.observeArrivals(map[string]time.Time{"sha256:a": pulled}, again.follow())
	if got := again.usage["sha256:a"].FirstDetected; !got.Equal(want) {
		t.Errorf("the same arrival read again moved first detected to %v, want %v", got, want)
	}
}

// TestStepForwardSinceTheArrivalOutlivesARestart: the wall clock steps
// 30m forward while nodegc runs, after the last read of image a's
// arrival; nodegc saves and restarts (on another boot: no step is found
// at the start), and another client had meanwhile removed a and pulled it
// again, on the clock of before the step. The state file keeps the step
// with the record: the new copy counts from its arrival plus the step, a
// minute old. Forgotten, it would count 31m old.
func TestStepForwardSinceTheArrivalOutlivesARestart(t *testing.T) {
	dir := t.TempDir()
	tr, err := newTracker(dir, t0, false, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	tr.clock = func() time.Time { return t0 }
	tr.usage["sha256:a"] = Usage{FirstDetected: t0.Add(-5 * time.Hour)}
	tr.observeArrivals(map[string]time.Time{"sha256:a": t0.Add(-5 * time.Hour)}, tr.follow())
	pulled := t0.Add(time.Minute)
	tr.mu.Lock()
	tr.shiftLocked(30 * time.Minute)
	tr.mu.Unlock()
	if _, err := tr.saveFinal(); err != nil {
		t.Fatal(err)
	}

	now := t0.Add(32 * time.Minute)
	again, err := newTracker(dir, now, false, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	again.clock = func() time.Time { return now }
	again.observeArrivals(map[string]time.Time{"sha256:a": pulled}, again.follow())
	u := again.usage["sha256:a"]
	if want := pulled.Add(30 * time.Minute); !u.FirstDetected.Equal(want) {
		t.Errorf("a copy pulled a minute before the restart, before a step of 30m: first detected %v (%v old), want %v (a minute old)",
			u.FirstDetected, now.Sub(u.FirstDetected), want)
	}
	if u.SteppedForward != 0 {
		t.Errorf("steps forward since the arrival was read %v, want 0", u.SteppedForward)
	}
}

// TestStepBeforeASave: the wall clock steps a day forward after the
// tracker last read it, and the next thing the tracker does is save (at
// shutdown). The save applies the step first: the file's records and its
// wall and boot readings are on one timeline, and the next start, on the
// same boot, finds image a as young as it is. Before, the file held the
// records unmoved beside the readings after the step: the start found no
// step while nodegc was down, and a one-minute-old image counted a day old,
// removable before the minimum age.
func TestStepBeforeASave(t *testing.T) {
	const up = 100 * time.Second
	dir := t.TempDir()
	boot := up
	tr, err := newTrackerAt(dir, t0, false, "node-a", func() bootReading { return bootReading{"b1", boot} })
	if err != nil {
		t.Fatal(err)
	}
	wall, mono := t0, time.Duration(0)
	tr.clock = func() time.Time { return wall }
	tr.steps.Monotonic = func() time.Duration { return mono }
	tr.follow()
	tr.usage["sha256:a"] = Usage{FirstDetected: t0.Add(-time.Minute)}
	tr.markDirtyLocked()

	wall, mono, boot = t0.Add(24*time.Hour+time.Second), time.Second, up+time.Second // stepped a day forward
	if _, err := tr.saveFinal(); err != nil {
		t.Fatal(err)
	}
	now := wall.Add(time.Second)
	again, err := newTrackerAt(dir, now, false, "node-a", func() bootReading { return bootReading{"b1", up + 2*time.Second} })
	if err != nil {
		t.Fatal(err)
	}
	if age := now.Sub(again.usage["sha256:a"].FirstDetected); age != time.Minute+2*time.Second {
		t.Errorf("image a, first seen a minute before the step, counts %v old at the next start; want %v", age, time.Minute+2*time.Second)
	}
}
