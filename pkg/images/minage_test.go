package images_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	const minAge = 10 * time.Minute
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
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
			if err := b.cri.RemoveImage(ctx, repulled.ID()); err != nil {
				t.Fatal(err)
			}
			testbed.WaitFor(t, 30*time.Second, "the image to be gone", func() bool { return !b.imageIDs()[repulled.ID()] })
			if _, err := b.node.PullImage(ctx, repulled.Ref); err != nil {
				t.Fatal(err)
			}
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
