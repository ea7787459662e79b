package images

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unique"

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

func never(*Image) (string, error) { return "", nil }

// planned is a plan with the replanner the manager would give execute.
type planned struct {
	*Plan
	replan replanner
}

func planFor(t *testing.T, images []Image, disk DiskStats, mutate func(*config.ImageGCConfiguration)) planned {
	t.Helper()
	p := policyFor(t, mutate)
	plan, err := p.Plan(images, disk, t0)
	if err != nil {
		t.Fatal(err)
	}
	return planned{Plan: plan, replan: func(removed map[string]bool, held map[string]string, target uint64) *Plan {
		var rest []Image
		for _, img := range images {
			if !removed[img.ID] {
				rest = append(rest, img)
			}
		}
		return p.replan(rest, held, target, disk, t0)
	}}
}

func executePlanned(ctx context.Context, rt imageRemover, p planned, check removalCheck, dryRun bool) (*Outcome, error) {
	return execute(ctx, rt, p.Plan, check, nil, p.replan, dryRun)
}

func TestExecuteStopsWhenEnoughIsFreed(t *testing.T) {
	images := []Image{img("a", 30, time.Hour, 3*time.Hour), img("b", 30, time.Hour, 2*time.Hour), img("c", 30, time.Hour, time.Hour)}
	plan := planFor(t, images, DiskStats{Capacity: 1000 * mib, Available: 150 * mib}, nil) // 50 MiB to free
	rt := &fakeRemover{}
	out, err := executePlanned(t.Context(), rt, plan, never, false)
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
// others; planning again takes a spare candidate to make up for it; the
// failure is reported.
func TestExecuteFailureTakesSpareAndGoesOn(t *testing.T) {
	images := []Image{img("a", 30, time.Hour, 3*time.Hour), img("b", 30, time.Hour, 2*time.Hour), img("c", 30, time.Hour, time.Hour)}
	plan := planFor(t, images, DiskStats{Capacity: 1000 * mib, Available: 150 * mib}, nil)
	boom := errors.New("boom")
	rt := &fakeRemover{fail: map[string]error{"a": boom}}
	out, err := executePlanned(t.Context(), rt, plan, never, false)
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
	startedSincePlanning := func(i *Image) (string, error) {
		if i.ID == "a" {
			return KeepInUse, nil
		}
		return "", nil
	}
	out, err := executePlanned(t.Context(), rt, plan, startedSincePlanning, false)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"b", "c"}, rt.removed); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	if len(out.Skipped) != 1 || out.Skipped[0].Image.ID != "a" || out.Skipped[0].Reason != KeepInUse {
		t.Errorf("skipped = %v, want a (in use)", out.Skipped)
	}
}

// TestExecuteStopsWhenTheCheckCannotBeMade: when the check before a
// removal cannot ask the runtime (it went down after planning), the run
// keeps that image and stops with the runtime's error: it does not go
// through every other candidate, one failed listing (each up to the
// request timeout) after another, nor report "not enough removable
// images" for a runtime that was not asked.
func TestExecuteStopsWhenTheCheckCannotBeMade(t *testing.T) {
	images := []Image{img("a", 30, time.Hour, 3*time.Hour), img("b", 30, time.Hour, 2*time.Hour), img("c", 30, time.Hour, time.Hour)}
	plan := planFor(t, images, DiskStats{Capacity: 1000 * mib, Available: 150 * mib}, nil)
	rt := &fakeRemover{}
	down := errors.New("rpc error: code = Unavailable desc = connection refused")
	checks := 0
	runtimeDown := func(i *Image) (string, error) {
		checks++
		if i.ID == "a" {
			return "", nil
		}
		return "", down
	}
	out, err := executePlanned(t.Context(), rt, plan, runtimeDown, false)
	if !errors.Is(err, down) {
		t.Fatalf("error = %v, want the runtime's", err)
	}
	var fe *FreeDiskSpaceError
	if errors.As(err, &fe) {
		t.Errorf("the runtime could not be asked, yet the error says not enough could be freed: %v", err)
	}
	if diff := cmp.Diff([]string{"a"}, rt.removed); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	if checks != 2 || len(out.Skipped) != 0 || out.Replans != 0 {
		t.Errorf("%d checks, skipped %v, %d replans; want 2 checks, none skipped, no replan", checks, out.Skipped, out.Replans)
	}
}

func TestExecuteNotEnough(t *testing.T) {
	plan := planFor(t, []Image{img("a", 10, time.Hour, -1)}, DiskStats{Capacity: 1000 * mib, Available: 0}, nil)
	rt := &fakeRemover{}
	_, err := executePlanned(t.Context(), rt, plan, never, false)
	var fe *FreeDiskSpaceError
	if !errors.As(err, &fe) || fe.BytesToFree != 200*mib || fe.Freed != 10*mib {
		t.Errorf("error = %v, want FreeDiskSpaceError{200 MiB, 10 MiB}", err)
	}
}

func TestExecuteDryRunRemovesNothing(t *testing.T) {
	images := []Image{img("a", 30, time.Hour, 3*time.Hour), img("b", 30, time.Hour, 2*time.Hour)}
	plan := planFor(t, images, DiskStats{Capacity: 1000 * mib, Available: 150 * mib}, nil)
	rt := &fakeRemover{}
	out, err := executePlanned(t.Context(), rt, plan, never, true)
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
	if _, err := executePlanned(t.Context(), rt, plan, never, false); err != nil {
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
	_, err := executePlanned(ctx, rt, plan, never, false)
	if !errors.Is(err, context.Canceled) || len(rt.removed) != 0 {
		t.Errorf("cancelled: error %v, removed %v", err, rt.removed)
	}
}

// TestExecuteReplansSharedLayers: a and b share a 100 MiB base; the plan
// removes a (its own 10 MiB: b still holds the base) then b (20 MiB and the
// base) for 120 MiB to free. When a's removal fails, or a container starts
// using a, b alone frees only its own 20 MiB: the run must plan again
// without a, take c, report only what the removals that happened freed,
// and say when that is not enough: with a's failure, as the runtime's error
// (not "not enough removable images", which blames the images).
func TestExecuteReplansSharedLayers(t *testing.T) {
	base := Layer{Key: unique.Make("sha256:base"), Size: 100 * mib}
	mk := func(id string, used time.Duration, own uint64, shared bool) Image {
		ls := []Layer{{Key: unique.Make("sha256:own-" + id), Size: own * mib}}
		if shared {
			ls = append(ls, base)
		}
		return Image{ID: id, Size: own * mib, FirstDetected: t0.Add(-10 * time.Hour), LastUsed: t0.Add(-used), Layers: ls}
	}
	images := []Image{mk("a", 3*time.Hour, 10, true), mk("b", 2*time.Hour, 20, true), mk("c", time.Hour, 60, false), mk("d", time.Minute, 60, false)}
	disk := DiskStats{Capacity: 1000 * mib, Available: 80 * mib} // 200 - 80 = 120 MiB to free
	boom := errors.New("boom")
	for name, tc := range map[string]struct {
		fail      map[string]error
		check     removalCheck
		images    []Image
		want      []string
		wantFreed uint64
		notEnough bool
		short     string // in the error
	}{
		"a's removal fails": {
			fail: map[string]error{"a": boom}, check: never, images: images,
			want: []string{"b:20", "c:60", "d:60"}, wantFreed: 140,
		},
		"a comes into use": {
			check: func(i *Image) (string, error) {
				if i.ID == "a" {
					return KeepInUse, nil
				}
				return "", nil
			}, images: images,
			want: []string{"b:20", "c:60", "d:60"}, wantFreed: 140,
		},
		"not enough without a": {
			fail: map[string]error{"a": boom}, check: never, images: images[:3],
			want: []string{"b:20", "c:60"}, wantFreed: 80, short: "failed to free 125829120 bytes on the image filesystem: freed 83886080 bytes",
		},
		"nothing fails": {
			check: never, images: images,
			want: []string{"a:10", "b:120"}, wantFreed: 130,
		},
	} {
		t.Run(name, func(t *testing.T) {
			plan := planFor(t, tc.images, disk, nil)
			if got := removalSummary(plan.Remove); !cmp.Equal(got, []string{"a:10", "b:120"}) {
				t.Fatalf("first plan %v, want [a:10 b:120]", got)
			}
			rt := &fakeRemover{fail: tc.fail}
			out, err := executePlanned(t.Context(), rt, plan, tc.check, false)
			if diff := cmp.Diff(tc.want, removalSummary(out.Removed)); diff != "" {
				t.Errorf("removed, with MiB each freed (-want +got):\n%s", diff)
			}
			if out.EstimatedFreed != tc.wantFreed*mib {
				t.Errorf("reported freed %d MiB, want %d", out.EstimatedFreed/mib, tc.wantFreed)
			}
			var fe *FreeDiskSpaceError
			if got := errors.As(err, &fe); got != tc.notEnough {
				t.Errorf("FreeDiskSpaceError: %v (%v), want %v", got, err, tc.notEnough)
			}
			if tc.fail != nil && !errors.Is(err, boom) {
				t.Errorf("error %v does not carry the failed removal", err)
			}
			if tc.short != "" && (err == nil || !strings.Contains(err.Error(), tc.short)) {
				t.Errorf("error %v does not say %q", err, tc.short)
			}
		})
	}
}

func removalSummary(ds []Decision) []string {
	var out []string
	for _, d := range ds {
		out = append(out, fmt.Sprintf("%s:%d", d.Image.ID, d.Bytes/mib))
	}
	return out
}

// TestExecuteGoneCountsTowardsTheTarget: an image another removed since
// the plan is reported gone, not removed, and its bytes are not counted as
// freed by the run; but the disk got them back, so no other image is
// removed in its place and the run did free what it had to.
func TestExecuteGoneCountsTowardsTheTarget(t *testing.T) {
	images := []Image{img("a", 30, time.Hour, 3*time.Hour), img("b", 30, time.Hour, 2*time.Hour), img("c", 30, time.Hour, time.Hour)}
	plan := planFor(t, images, DiskStats{Capacity: 1000 * mib, Available: 150 * mib}, nil) // 50 MiB to free
	rt := &fakeRemover{}
	goneB := func(i *Image) (string, error) {
		if i.ID == "b" {
			return checkGone, nil
		}
		return "", nil
	}
	out, err := executePlanned(t.Context(), rt, plan, goneB, false)
	if err != nil {
		t.Fatalf("the run did not free what it had to: %v", err)
	}
	if diff := cmp.Diff([]string{"a"}, rt.removed); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	var gone []string
	for _, d := range out.Gone {
		gone = append(gone, d.Image.ID)
	}
	if diff := cmp.Diff([]string{"b"}, gone); diff != "" {
		t.Errorf("gone (-want +got):\n%s", diff)
	}
	if len(out.Removed) != 1 || out.EstimatedFreed != 30*mib || out.Replans != 0 {
		t.Errorf("removed %d, estimated freed %d MiB, replans %d; want 1, 30 MiB (a's alone), 0", len(out.Removed), out.EstimatedFreed/mib, out.Replans)
	}
}
