package images_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/registry"
	"github.com/nodegc/nodegc/pkg/images"
)

// TestFailedRemovalIsReplanned, on a real containerd of each version:
// images a and b share a large base layer, c stands alone; a is the least
// recently used, then b, then c. The GC must free more than a frees alone
// but less than a and b together, so the plan is "a, then b" with b's
// estimate including the base layer, which only b's removal after a's
// frees. The runtime fails a's removal. b alone frees only its own layer:
// the run must plan again without a, remove c as well, and report as freed
// only what the removals really freed (the estimate within 5% of the
// measured growth of free space) — or say it could not free enough.
func TestFailedRemovalIsReplanned(t *testing.T) {
	t.Parallel()
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			t.Parallel()
			b := newBed(t, v, 192*mib)
			ctx := t.Context()
			base := registry.LayerSpec{Seed: "replan-base", Size: 24 * mib}
			a := b.pushPull("replan/a", 4, base)
			bb := b.pushPull("replan/b", 4, base)
			c := b.pushPull("replan/c", 24)
			clk := clocktesting.NewFakeClock(time.Now())
			rt := &failingRuntime{recordingRuntime: b.runtime, fail: map[string]bool{a.ID(): true}}
			stateDir := t.TempDir()
			m := b.manager(stateDir, clk, setThresholds(100, 99)) // learn the images first
			if _, err := m.Plan(ctx); err != nil {
				t.Fatal(err)
			}
			for _, img := range []*registry.Image{a, bb, c} { // LRU order: a, b, c
				clk.Step(time.Minute)
				b.useImage(img)
				if _, err := m.Plan(ctx); err != nil {
					t.Fatal(err)
				}
				b.removePods()
			}
			if _, err := m.GarbageCollect(ctx, images.TriggerManual); err != nil { // saves the usage
				t.Fatal(err)
			}
			// Free ~13% of 192 MiB (~25 MiB): a frees ~8 MiB (its own blob
			// and snapshot), a then b ~64 MiB, c ~48 MiB.
			high, low := thresholdsAround(b.diskStats(), 13)
			m = b.managerWith(rt, stateDir, clk, setThresholds(high, low))
			r, err := m.GarbageCollect(ctx, images.TriggerManual)
			if r == nil {
				t.Fatal(err)
			}
			var removed []string
			for _, d := range r.Outcome.Removed {
				removed = append(removed, fmt.Sprintf("%s (%.1f MiB)", d.Image.RepoTags[0], float64(d.Bytes)/mib))
			}
			var planned []string
			for _, d := range r.Plan.Remove {
				planned = append(planned, d.Image.RepoTags[0])
			}
			t.Logf("to free %.1f MiB; first plan %v; removed %v; estimated %.1f MiB, measured %.1f MiB; err: %v",
				float64(r.Plan.BytesToFree)/mib, planned, removed, float64(r.Outcome.EstimatedFreed)/mib, float64(r.MeasuredFreed)/mib, err)
			if len(planned) != 2 || planned[0] != a.Ref || planned[1] != bb.Ref {
				t.Fatalf("first plan %v, want [a b]: the scenario did not set up as intended", planned)
			}
			if !errors.Is(err, errInjected) {
				t.Errorf("the run's error does not report a's failed removal: %v", err)
			}
			est, measured := float64(r.Outcome.EstimatedFreed), float64(r.MeasuredFreed)
			if !r.Measured || measured <= 0 {
				t.Fatalf("freed space not measured: %+v", r)
			}
			if d := (est - measured) / measured; d > 0.05 || d < -0.05 {
				t.Errorf("reported %.1f MiB freed, measured %.1f MiB (off by %.0f%%): bytes planned but not freed were counted",
					est/mib, measured/mib, d*100)
			}
			var fe *images.FreeDiskSpaceError
			if measured < float64(r.Plan.BytesToFree)*0.95 && !errors.As(err, &fe) {
				t.Errorf("freed %.1f MiB of the %.1f MiB asked, and no FreeDiskSpaceError", measured/mib, float64(r.Plan.BytesToFree)/mib)
			}
			if ids := b.imageIDs(); ids[c.ID()] && !errors.As(err, &fe) {
				t.Errorf("c was kept although b alone could not free enough")
			}
		})
	}
}

var errInjected = status.Error(codes.Unknown, "injected removal failure")

// failingRuntime fails the removal of chosen images.
type failingRuntime struct {
	*recordingRuntime
	fail map[string]bool
}

func (r *failingRuntime) RemoveImage(ctx context.Context, id string) error {
	if r.fail[id] {
		return fmt.Errorf("removing image %s: %w", id, errInjected)
	}
	return r.recordingRuntime.RemoveImage(ctx, id)
}
