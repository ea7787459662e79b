package images

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// steppingArrivals is containerd's arrival source whose listing takes the
// moment the wall clock is stepped (chrony/NTP, a VM's time sync), when a
// step is set: the step lands between the plan's first readings and the
// tracker's copy of its records.
type steppingArrivals struct {
	mu      sync.Mutex
	clk     *clocktesting.FakeClock
	mono    *time.Duration
	at      map[string]time.Time
	stepNow time.Duration // applied once, at the next call
}

func (s *steppingArrivals) Arrivals(_ context.Context, imgs []*runtimeapi.Image) (map[string]time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stepNow != 0 {
		*s.mono += time.Millisecond
		s.clk.Step(time.Millisecond + s.stepNow)
		s.stepNow = 0
	}
	out := map[string]time.Time{}
	for _, img := range imgs {
		if at, ok := s.at[img.GetId()]; ok {
			out[img.GetId()] = at
		}
	}
	return out, nil
}

func (s *steppingArrivals) set(id string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.at[id] = at
}

// steppedBed is a manager on one unused image, sha256:a, that arrived and
// was first seen at t0, with containerd's arrivals (src), a monotonic
// clock the test moves (mono), and config edited by edit.
func steppedBed(t *testing.T, edit func(*Options)) (*backoffBed, *shrinkingRuntime, *steppingArrivals, *time.Duration) {
	t.Helper()
	mono := new(time.Duration)
	var src *steppingArrivals
	b, rt := newShrinkingBed(t, 1, func(o *Options) {
		src = &steppingArrivals{clk: o.Clock.(*clocktesting.FakeClock), mono: mono, at: map[string]time.Time{"sha256:a": t0.Add(-time.Second)}}
		o.Arrivals = src
		if edit != nil {
			edit(o)
		}
	})
	b.m.tracker.steps.Monotonic = func() time.Duration { return *mono }
	if _, err := b.m.Plan(t.Context()); err != nil { // first seen now, its arrival recorded
		t.Fatal(err)
	}
	return b, rt, src, mono
}

// TestStepBackDuringThePlanAgesNothing: a step of the wall clock that the
// tracker applies to its records while a plan reads the node (here while it
// lists containerd's arrivals) ages no image: the plan reads now on the
// records' timeline, after the step moved them. An image first seen a
// minute ago stays under minimumGCAge (1h) with or without a step back of
// 3h during the plan, and one used a minute ago is not unused for
// maximumGCAge (2h), on a disk nearly empty.
func TestStepBackDuringThePlanAgesNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(*Options)
		usage   uint64
		trigger string
		kept    string
	}{
		{"minimumGCAge", func(o *Options) {
			o.Config.MinimumGCAge = &metav1.Duration{Duration: time.Hour}
			o.Config.HighThresholdPercent, o.Config.LowThresholdPercent = ptr.To[int32](80), ptr.To[int32](0)
		}, 90, TriggerManual, KeepMinAge},
		{"maximumGCAge", func(o *Options) {
			o.Config.MaximumGCAge = &metav1.Duration{Duration: 2 * time.Hour}
		}, 10, TriggerPeriodic, ""},
	} {
		for _, step := range []time.Duration{0, -3 * time.Hour} {
			t.Run(tc.name+"/step "+step.String(), func(t *testing.T) {
				b, rt, src, mono := steppedBed(t, tc.edit)
				*mono += time.Minute
				b.clk.Step(time.Minute)
				b.disk.set(tc.usage)
				src.mu.Lock()
				src.stepNow = step
				src.mu.Unlock()
				r, err := b.m.GarbageCollect(t.Context(), tc.trigger)
				if err != nil {
					t.Logf("run: %v", err)
				}
				for _, d := range r.Outcome.Removed {
					t.Errorf("image %s removed (%s) a minute after it arrived (step %v during the plan)", d.Image.ID, d.Reason, step)
				}
				if len(rt.images) != 1 {
					t.Errorf("%d images left, want 1", len(rt.images))
				}
				if tc.kept != "" && (len(r.Plan.Keep) != 1 || r.Plan.Keep[0].Reason != tc.kept) {
					t.Errorf("kept %v, want sha256:a kept %s", r.Plan.Keep, tc.kept)
				}
			})
		}
	}
}

// runRepulledInTheCheck runs a GC on a disk at 90% (high 80, low 0) whose
// one image, sha256:a, is 2 hours old: the plan removes it, and in the
// check before the removal another client pulls it again and the wall
// clock steps forward by step.
func runRepulledInTheCheck(t *testing.T, minAge, step time.Duration) (*backoffBed, *shrinkingRuntime, *time.Duration, *Report, error) {
	t.Helper()
	// At the second read of arrivals of the run (the plan reads them,
	// then the check before the removal), once armed.
	var armed atomic.Bool
	var reads atomic.Int32
	var repull func()
	b, rt, src, mono := steppedBed(t, func(o *Options) {
		o.Config.MinimumGCAge = &metav1.Duration{Duration: minAge}
		o.Config.HighThresholdPercent, o.Config.LowThresholdPercent = ptr.To[int32](80), ptr.To[int32](0)
		o.Arrivals = hookArrivals{src: o.Arrivals, hook: func() {
			if armed.Load() && reads.Add(1) == 2 {
				repull()
			}
		}}
	})
	*mono += 2 * time.Hour
	b.clk.Step(2 * time.Hour) // sha256:a is 2h old: the plan removes it
	b.disk.set(90)
	repull = func() { // in the check: pulled again, then the step
		src.set("sha256:a", b.clk.Now())
		*mono += time.Millisecond
		b.clk.Step(time.Millisecond + step)
	}
	armed.Store(true)
	r, err := b.m.GarbageCollect(t.Context(), TriggerManual)
	return b, rt, mono, r, err
}

// TestCopyPulledBeforeAStepForwardIsYoungAtTheCheck: between the plan and
// the check before the removal, another client removed the planned image and
// pulled it again, and the wall clock was then stepped forward by more than
// minimumGCAge. The copy's arrival is on the clock of before the step: the
// check counts it from its arrival plus the steps forward the tracker
// applied since the plan read arrivals, and keeps it (min_age), as it keeps
// a copy pulled without a step.
func TestCopyPulledBeforeAStepForwardIsYoungAtTheCheck(t *testing.T) {
	for _, step := range []time.Duration{0, 3 * time.Hour} {
		t.Run("step "+step.String(), func(t *testing.T) {
			_, rt, _, r, err := runRepulledInTheCheck(t, time.Hour, step)
			if err != nil {
				t.Logf("run: %v", err)
			}
			wantKeptAtTheCheck(t, rt, r, fmt.Sprintf("pulled a moment before a step of %v", step))
		})
	}
}

// TestCopyPulledAgainBeforeAStepForwardIsYoungAtThePlan: an image first
// seen 5h ago is removed and pulled again by another client between two
// listings of nodegc (its record stays), then the wall clock is stepped
// forward by more than minimumGCAge, and a plan runs a minute later. The
// copy's arrival is on the clock of before the step, which moved the
// record: the plan counts it from its arrival plus the steps forward since
// the record was last checked against one, so the copy is a minute old, and
// kept (min_age), as without a step.
func TestCopyPulledAgainBeforeAStepForwardIsYoungAtThePlan(t *testing.T) {
	for _, step := range []time.Duration{0, 30 * time.Minute} {
		t.Run("step "+step.String(), func(t *testing.T) {
			b, rt, src, mono := steppedBed(t, func(o *Options) {
				o.Config.MinimumGCAge = &metav1.Duration{Duration: 10 * time.Minute}
				o.Config.HighThresholdPercent, o.Config.LowThresholdPercent = ptr.To[int32](80), ptr.To[int32](0)
			})
			*mono += 5 * time.Hour
			b.clk.Step(5 * time.Hour)
			src.set("sha256:a", b.clk.Now()) // removed and pulled again
			*mono += time.Millisecond
			b.clk.Step(time.Millisecond + step)
			*mono += time.Minute
			b.clk.Step(time.Minute)
			b.disk.set(90)
			r, err := b.m.GarbageCollect(t.Context(), TriggerManual)
			if err != nil {
				t.Logf("run: %v", err)
			}
			for _, d := range r.Outcome.Removed {
				t.Errorf("the copy of %s pulled a minute ago, before a step of %v, removed (%s), minimumGCAge 10m", d.Image.ID, step, d.Reason)
			}
			if len(rt.images) != 1 || len(r.Plan.Keep) != 1 || r.Plan.Keep[0].Reason != KeepMinAge {
				t.Errorf("%d images left, kept %v; want sha256:a kept %s", len(rt.images), r.Plan.Keep, KeepMinAge)
			}
		})
	}
}

// TestCopyKeptAtTheCheckIsYoungAtTheNextRun: the case of
// TestCopyPulledBeforeAStepForwardIsYoungAtTheCheck (pulled again between
// the plan and the check, then a step forward of more than minimumGCAge),
// with a record older than the step; the disk stays over the threshold,
// and the next run comes a second later. The check's read of the arrival
// dates the record by it plus the steps forward since the plan read it, so
// the next plan finds the copy a second old, and keeps it (min_age).
func TestCopyKeptAtTheCheckIsYoungAtTheNextRun(t *testing.T) {
	for _, step := range []time.Duration{0, 30 * time.Minute} {
		t.Run("step "+step.String(), func(t *testing.T) {
			b, rt, mono, r, err := runRepulledInTheCheck(t, 10*time.Minute, step)
			if err != nil {
				t.Logf("first run: %v", err)
			}
			if len(r.Plan.Remove) != 1 || len(r.Outcome.Removed) != 0 || len(rt.images) != 1 {
				t.Fatalf("first run: planned %v, removed %v; want sha256:a planned and kept at the check", r.Plan.Remove, r.Outcome.Removed)
			}
			*mono += time.Second
			b.clk.Step(time.Second)
			r, err = b.m.GarbageCollect(t.Context(), TriggerManual)
			if err != nil {
				t.Logf("second run: %v", err)
			}
			for _, d := range r.Outcome.Removed {
				t.Errorf("the copy of %s pulled a second before the run (step %v since) removed (%s), minimumGCAge 10m", d.Image.ID, step, d.Reason)
			}
			if len(rt.images) != 1 || len(r.Plan.Keep) != 1 || r.Plan.Keep[0].Reason != KeepMinAge {
				t.Errorf("%d images left, the second plan kept %v; want sha256:a kept %s", len(rt.images), r.Plan.Keep, KeepMinAge)
			}
		})
	}
}

// afterRead is an arrival source that runs hook, once, right after a
// read: a moment of the plan after containerd answered.
type afterRead struct {
	src  ArrivalSource
	mu   sync.Mutex
	hook func()
}

func (a *afterRead) Arrivals(ctx context.Context, imgs []*runtimeapi.Image) (map[string]time.Time, error) {
	out, err := a.src.Arrivals(ctx, imgs)
	a.mu.Lock()
	hook := a.hook
	a.hook = nil
	a.mu.Unlock()
	if hook != nil {
		hook()
	}
	return out, err
}

// TestCopyPulledAgainWhileThePlanReadsArrivalsIsYoungAtTheCheck: another
// client removes the image and pulls it again right after containerd told
// the plan when the image arrived, and the wall clock is stepped forward
// at once, before the plan copies the records. The check before the
// removal reads the new arrival, on the clock of before the step: it
// counts the steps forward since the plan began to read arrivals, so the
// copy is young, and kept (min_age).
func TestCopyPulledAgainWhileThePlanReadsArrivalsIsYoungAtTheCheck(t *testing.T) {
	for _, step := range []time.Duration{0, 3 * time.Hour} {
		t.Run("step "+step.String(), func(t *testing.T) {
			var read *afterRead
			b, rt, src, mono := steppedBed(t, func(o *Options) {
				o.Config.MinimumGCAge = &metav1.Duration{Duration: time.Hour}
				o.Config.HighThresholdPercent, o.Config.LowThresholdPercent = ptr.To[int32](80), ptr.To[int32](0)
				read = &afterRead{src: o.Arrivals}
				o.Arrivals = read
			})
			*mono += 2 * time.Hour
			b.clk.Step(2 * time.Hour) // sha256:a is 2h old: the plan removes it
			b.disk.set(90)
			read.mu.Lock()
			read.hook = func() {
				src.set("sha256:a", b.clk.Now())
				*mono += time.Millisecond
				b.clk.Step(time.Millisecond + step)
			}
			read.mu.Unlock()
			r, err := b.m.GarbageCollect(t.Context(), TriggerManual)
			if err != nil {
				t.Logf("run: %v", err)
			}
			wantKeptAtTheCheck(t, rt, r, fmt.Sprintf("pulled while the plan read arrivals, before a step of %v,", step))
		})
	}
}

// wantKeptAtTheCheck checks run r of a plan that removes sha256:a, the one
// image of rt, a copy pulled as what says: the check before the removal
// keeps it (min_age, minimumGCAge 1h).
func wantKeptAtTheCheck(t *testing.T, rt *shrinkingRuntime, r *Report, what string) {
	t.Helper()
	if len(r.Plan.Remove) != 1 {
		t.Fatalf("the plan removes %v, want sha256:a", r.Plan.Remove)
	}
	for _, d := range r.Outcome.Removed {
		t.Errorf("the copy of %s %s removed (%s), minimumGCAge 1h", d.Image.ID, what, d.Reason)
	}
	if len(rt.images) != 1 || len(r.Outcome.Skipped) != 1 || r.Outcome.Skipped[0].Reason != KeepMinAge {
		t.Errorf("skipped %v, want sha256:a skipped %s", r.Outcome.Skipped, KeepMinAge)
	}
}
