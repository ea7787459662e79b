package images

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodegc/nodegc/pkg/config"
)

// fakeRemover records removals and fails the IDs in fail.
type fakeRemover struct {
	removed []string
	fail    map[string]error
}

func (f *fakeRemover) RemoveImage(_ context.Context, id string) error {
	if err := f.fail[id]; err != nil {
		return err
	}
	f.removed = append(f.removed, id)
	return nil
}

func never(*Image) bool { return false }

func planFor(t *testing.T, images []Image, disk DiskStats, mutate func(*config.ImageGCConfiguration)) *Plan {
	t.Helper()
	plan, err := policyFor(t, mutate).Plan(images, disk, t0)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

func TestExecuteStopsWhenEnoughIsFreed(t *testing.T) {
	images := []Image{img("a", 30, time.Hour, 3*time.Hour), img("b", 30, time.Hour, 2*time.Hour), img("c", 30, time.Hour, time.Hour)}
	plan := planFor(t, images, DiskStats{Capacity: 1000 * mib, Available: 150 * mib}, nil) // 50 MiB to free
	rt := &fakeRemover{}
	out, err := Execute(t.Context(), rt, plan, never, false)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a", "b"}, rt.removed); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	if out.EstimatedFreed != 60*mib {
		t.Errorf("estimated freed = %d MiB, want 60", out.EstimatedFreed/mib)
	}
}

// TestExecuteFailureTakesSpareAndGoesOn: one failure does not stop the
// others; a spare candidate makes up for it; the failure is reported.
func TestExecuteFailureTakesSpareAndGoesOn(t *testing.T) {
	images := []Image{img("a", 30, time.Hour, 3*time.Hour), img("b", 30, time.Hour, 2*time.Hour), img("c", 30, time.Hour, time.Hour)}
	plan := planFor(t, images, DiskStats{Capacity: 1000 * mib, Available: 150 * mib}, nil)
	boom := errors.New("boom")
	rt := &fakeRemover{fail: map[string]error{"a": boom}}
	out, err := Execute(t.Context(), rt, plan, never, false)
	if !errors.Is(err, boom) {
		t.Fatalf("error = %v, want it to carry the failure", err)
	}
	var fe *FreeDiskSpaceError
	if errors.As(err, &fe) {
		t.Errorf("enough was freed through the spare, yet FreeDiskSpaceError: %v", fe)
	}
	if diff := cmp.Diff([]string{"b", "c"}, rt.removed); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	if out.Removed[1].Reason != ReasonSpace {
		t.Errorf("spare removed with reason %q, want space", out.Removed[1].Reason)
	}
}

func TestExecuteRechecksInUse(t *testing.T) {
	images := []Image{img("a", 30, time.Hour, 3*time.Hour), img("b", 30, time.Hour, 2*time.Hour), img("c", 30, time.Hour, time.Hour)}
	plan := planFor(t, images, DiskStats{Capacity: 1000 * mib, Available: 150 * mib}, nil)
	rt := &fakeRemover{}
	startedSincePlanning := func(i *Image) bool { return i.ID == "a" }
	out, err := Execute(t.Context(), rt, plan, startedSincePlanning, false)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"b", "c"}, rt.removed); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	if len(out.SkippedInUse) != 1 || out.SkippedInUse[0].Image.ID != "a" {
		t.Errorf("skipped = %v, want a", out.SkippedInUse)
	}
}

func TestExecuteNotEnough(t *testing.T) {
	plan := planFor(t, []Image{img("a", 10, time.Hour, -1)}, DiskStats{Capacity: 1000 * mib, Available: 0}, nil)
	rt := &fakeRemover{}
	_, err := Execute(t.Context(), rt, plan, never, false)
	var fe *FreeDiskSpaceError
	if !errors.As(err, &fe) || fe.BytesToFree != 200*mib || fe.Freed != 10*mib {
		t.Errorf("error = %v, want FreeDiskSpaceError{200 MiB, 10 MiB}", err)
	}
}

func TestExecuteDryRunRemovesNothing(t *testing.T) {
	images := []Image{img("a", 30, time.Hour, 3*time.Hour), img("b", 30, time.Hour, 2*time.Hour)}
	plan := planFor(t, images, DiskStats{Capacity: 1000 * mib, Available: 150 * mib}, nil)
	rt := &fakeRemover{}
	out, err := Execute(t.Context(), rt, plan, never, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(rt.removed) != 0 || !out.DryRun || len(out.Removed) != 2 {
		t.Errorf("dry run: runtime saw %v, outcome lists %d", rt.removed, len(out.Removed))
	}
}

func TestExecuteAgeRemovalsWithoutPressure(t *testing.T) {
	images := []Image{img("stale", 10, 48*time.Hour, 30*time.Hour), img("recent", 10, 48*time.Hour, time.Hour)}
	plan := planFor(t, images, DiskStats{Capacity: 1000 * mib, Available: 1000 * mib}, func(c *config.ImageGCConfiguration) {
		c.MaximumGCAge = &metav1.Duration{Duration: 24 * time.Hour}
	})
	rt := &fakeRemover{}
	if _, err := Execute(t.Context(), rt, plan, never, false); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"stale"}, rt.removed); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
}

func TestExecuteStopsOnCancel(t *testing.T) {
	images := []Image{img("a", 30, time.Hour, 3*time.Hour), img("b", 30, time.Hour, 2*time.Hour)}
	plan := planFor(t, images, DiskStats{Capacity: 1000 * mib, Available: 0}, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	rt := &fakeRemover{}
	_, err := Execute(ctx, rt, plan, never, false)
	if !errors.Is(err, context.Canceled) || len(rt.removed) != 0 {
		t.Errorf("cancelled: error %v, removed %v", err, rt.removed)
	}
}
