package images_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/images"
)

// TestMinimumAgeSurvivesRepullWhileDown, on a real containerd of each
// version: nodegc first saw two images an hour ago and recorded them in its
// state file; while nodegc was down one was removed and pulled again, and
// the record of the other got a zero first-detected time (hand-edited, or
// written by a buggy version). nodegc restarts with the disk over the high
// threshold and a minimum age of 10 minutes: the re-pulled image arrived
// seconds ago and the zero time says nothing, so both must stay (min_age),
// whatever the state file says; 11 minutes later both may go.
func TestMinimumAgeSurvivesRepullWhileDown(t *testing.T) {
	t.Parallel()
	const minAge = 10 * time.Minute
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			t.Parallel()
			b := newBed(t, v, 128*mib)
			b.settleTimeout = time.Millisecond
			ctx := t.Context()
			repulled := b.pushPull("minage/repulled", 1)
			zero := b.pushPull("minage/zero", 1)
			stateDir := t.TempDir()

			// An hour ago (for nodegc's clock), nodegc saw both.
			clk := clocktesting.NewFakeClock(time.Now().Add(-time.Hour))
			first := b.manager(stateDir, clk, func(c *config.ImageGCConfiguration) { c.HighThresholdPercent = ptr.To[int32](100) })
			if _, err := first.GarbageCollect(ctx, images.TriggerManual); err != nil {
				t.Fatal(err)
			}
			// nodegc stops. The image is removed and pulled again.
			b.repull(repulled)
			// Someone zeroes the first-detected time of the other.
			statePath := filepath.Join(stateDir, images.StateFileName)
			data, err := os.ReadFile(statePath)
			if err != nil {
				t.Fatal(err)
			}
			data = zeroFirstDetected(t, data, zero.ID())
			if err := os.WriteFile(statePath, data, 0o600); err != nil {
				t.Fatal(err)
			}

			// nodegc restarts now, the disk over the threshold.
			clk.SetTime(time.Now())
			second := b.manager(stateDir, clk, func(c *config.ImageGCConfiguration) {
				c.HighThresholdPercent, c.LowThresholdPercent = ptr.To[int32](1), ptr.To[int32](0)
				c.MinimumGCAge = &metav1.Duration{Duration: minAge}
			})
			cases := map[string]string{"re-pulled while nodegc was down": repulled.ID(), "zero first-detected time in the state": zero.ID()}
			gc := func() (removed map[string]bool, kept map[string]string) {
				t.Helper()
				r, err := second.GarbageCollect(ctx, images.TriggerManual)
				if err != nil && r == nil {
					t.Fatal(err)
				}
				removed, kept = map[string]bool{}, map[string]string{}
				for _, d := range r.Outcome.Removed {
					removed[d.Image.ID] = true
				}
				for _, d := range r.Plan.Keep {
					kept[d.Image.ID] = d.Reason
				}
				return removed, kept
			}
			removed, kept := gc()
			for name, id := range cases {
				if removed[id] || kept[id] != images.KeepMinAge {
					t.Errorf("image %s: removed %v, kept as %q; want kept as %q (it is younger than the minimum age %v)",
						name, removed[id], kept[id], images.KeepMinAge, minAge)
					delete(cases, name)
				}
			}
			clk.Step(minAge + time.Minute)
			removed, kept = gc()
			for name, id := range cases {
				if !removed[id] {
					t.Errorf("image %s: kept as %q %v after nodegc's restart; want it removed", name, kept[id], minAge+time.Minute)
				}
			}
		})
	}
}

// zeroFirstDetected sets the first-detected time of image id in a state
// file to the zero time.
func zeroFirstDetected(t *testing.T, data []byte, id string) []byte {
	t.Helper()
	var f struct {
		Version int                       `json:"version"`
		Images  map[string]map[string]any `json:"images"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	rec, ok := f.Images[id]
	if !ok {
		t.Fatalf("image %s not in the state file", id)
	}
	rec["firstDetected"] = time.Time{}
	out, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// failingArrivals is an arrival source that cannot be read (containerd's
// API does not answer this once).
type failingArrivals struct{}

func (failingArrivals) Arrivals(context.Context, []*runtimeapi.Image) (map[string]time.Time, error) {
	return nil, errors.New("containerd: connection refused")
}

// TestMinimumAgeWithoutArrivalTimes: as TestMinimumAgeSurvivesRepullWhileDown,
// but nodegc cannot tell when the re-pulled image arrived: the arrival
// times cannot be read at the restart (failing), or there are none to read
// (absent: CRI-O; containerd's API did not answer when the GC was built).
// The minimum age then counts from the start of nodegc's current watch at
// the earliest, as the kubelet counts from its own start: the image stays
// (min_age), whatever first-detected time the state file gives, and may go
// once the minimum age has passed since the restart. On containerd 2.x
// only: what is tested is nodegc's, whichever runtime answers.
func TestMinimumAgeWithoutArrivalTimes(t *testing.T) {
	t.Parallel()
	const minAge = 10 * time.Minute
	for _, mode := range []string{"failing", "absent"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			b := newBed(t, testbed.Containerd2, 128*mib)
			b.settleTimeout = time.Millisecond
			ctx := t.Context()
			repulled := b.pushPull("minage/repulled", 1)
			stateDir := t.TempDir()

			// An hour ago (for nodegc's clock), nodegc saw it. Without
			// arrival times: containerd's record of the image is dated on
			// the real clock, a few seconds ago, and would bound the
			// first-detected time.
			clk := clocktesting.NewFakeClock(time.Now().Add(-time.Hour))
			b.noArrivals = true
			first := b.manager(stateDir, clk, noThresholdGC)
			if _, err := first.GarbageCollect(ctx, images.TriggerManual); err != nil {
				t.Fatal(err)
			}
			// nodegc stops. The image is removed and pulled again.
			b.repull(repulled)

			// nodegc restarts now, the disk over the threshold, without
			// arrival times.
			clk.SetTime(time.Now())
			if mode == "failing" {
				b.arrivals, b.noArrivals = failingArrivals{}, false
			}
			b.registry = prometheus.NewRegistry()
			second := b.manager(stateDir, clk, func(c *config.ImageGCConfiguration) {
				c.HighThresholdPercent, c.LowThresholdPercent = ptr.To[int32](1), ptr.To[int32](0)
				c.MinimumGCAge = &metav1.Duration{Duration: minAge}
			})
			gc := func() (removed bool, kept string, first time.Time) {
				t.Helper()
				r, err := second.GarbageCollect(ctx, images.TriggerManual)
				if err != nil && r == nil {
					t.Fatal(err)
				}
				for _, d := range r.Outcome.Removed {
					if d.Image.ID == repulled.ID() {
						return true, "", d.Image.FirstDetected
					}
				}
				for _, d := range r.Plan.Keep {
					if d.Image.ID == repulled.ID() {
						return false, d.Reason, d.Image.FirstDetected
					}
				}
				return false, "", time.Time{}
			}
			if removed, kept, first := gc(); removed || kept != images.KeepMinAge {
				t.Errorf("image pulled again seconds ago (first detected %v by the state file): removed %v, kept as %q; want kept as %q (minimum age %v)",
					first, removed, kept, images.KeepMinAge, minAge)
			}
			clk.Step(minAge + time.Minute)
			if removed, kept, _ := gc(); !removed {
				t.Errorf("image kept as %q %v after nodegc's restart; want it removed", kept, minAge+time.Minute)
			}
			want := 0.0
			if mode == "failing" {
				want = 3 // one per plan, and the check before the removal
			}
			if got := b.metric("nodegc_image_gc_containerd_read_errors_total", "read=arrivals"); got != want {
				t.Errorf("nodegc_image_gc_containerd_read_errors_total{read=arrivals} = %v, want %v", got, want)
			}
		})
	}
}

// TestPulledAgainDuringTheCheck, on a real containerd of each version: the
// only removable image is old enough at the plan (minimum age 2 s, on the
// real clock, which containerd dates its records by),
// but while the check right before its removal runs, another client
// removes it and pulls it again. The copy on the node then arrived seconds
// ago: the check reads when it arrived, keeps it (min_age) and dates it
// anew, so the next plan keeps it too. Without that read, the plan's
// dating (of the copy that went) would remove the image pulled a moment
// ago, most likely for a pod about to start.
func TestPulledAgainDuringTheCheck(t *testing.T) {
	t.Parallel()
	const minAge = 2 * time.Second
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			t.Parallel()
			b := newBed(t, v, 128*mib)
			b.settleTimeout = time.Millisecond
			ctx := t.Context()
			img := b.pushPull("arrival/again", 1)
			// Once armed, the image is pulled again right before the
			// second read of arrivals: the plan reads them first, then the
			// check.
			var armed atomic.Bool
			var listings atomic.Int32
			b.arrivals = &hookedArrivals{ArrivalSource: b.layers, hook: func(context.Context, []*runtimeapi.Image) error {
				if armed.Load() && listings.Add(1) == 2 {
					b.repull(img)
				}
				return nil
			}}
			clk := clock.RealClock{}
			m := b.manager(t.TempDir(), clk, func(c *config.ImageGCConfiguration) {
				c.HighThresholdPercent, c.LowThresholdPercent = ptr.To[int32](1), ptr.To[int32](0)
				c.MinimumGCAge = &metav1.Duration{Duration: minAge}
			})
			if _, err := m.Plan(ctx); err != nil { // nodegc first sees the image now
				t.Fatal(err)
			}
			time.Sleep(minAge + 500*time.Millisecond)
			armed.Store(true)
			r, err := m.GarbageCollect(ctx, images.TriggerManual)
			if r == nil || r.Outcome == nil {
				t.Fatalf("no run: %v", err)
			}
			if !slices.ContainsFunc(r.Plan.Remove, func(d images.Decision) bool { return d.Image.ID == img.ID() }) {
				t.Fatalf("the plan does not remove %s (old enough, unused); the test proves nothing", img.ID())
			}
			if listings.Load() < 2 {
				t.Fatal("the check did not read when the image arrived: the image was not pulled again during the check")
			}
			removed, skipped := outcome(r)
			if want := []string{img.ID() + " " + images.KeepMinAge}; len(removed) != 0 || !slices.Equal(skipped, want) {
				t.Errorf("image pulled again during the check: removed %v, kept at the check %v; want kept %v", removed, skipped, want)
			}
			if !b.imageIDs()[img.ID()] {
				t.Errorf("image %s pulled again a moment ago is gone from the runtime", img.ID())
			}
			plan, err := m.Plan(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(plan.Keep, func(d images.Decision) bool { return d.Image.ID == img.ID() && d.Reason == images.KeepMinAge }) {
				t.Errorf("the next plan does not keep the image pulled again as %s", images.KeepMinAge)
			}
		})
	}
}
