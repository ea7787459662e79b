package images

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/klog/v2"
)

// imageRemover is what the executor needs of the runtime.
type imageRemover interface {
	RemoveImage(ctx context.Context, id string) error
}

// FreeDiskSpaceError says a GC run could not free what the threshold rule
// asked for because not enough images may be removed (kubelet's
// FreeDiskSpaceFailed): every removal it tried happened. Freed is what it
// removed, Gone what others removed since the plan; both count toward
// BytesToFree. A run whose removals the runtime refused returns their
// errors instead, as the kubelet does.
type FreeDiskSpaceError struct {
	BytesToFree uint64
	Freed       uint64
	Gone        uint64
}

func (e *FreeDiskSpaceError) Error() string {
	return shortfall(e.BytesToFree, e.Freed, e.Gone) + " (not enough removable images)"
}

// shortfall says what a run had to free and what it, and others since the
// plan, freed.
func shortfall(required, freed, gone uint64) string {
	s := fmt.Sprintf("failed to free %d bytes on the image filesystem: freed %d bytes", required, freed)
	if gone > 0 {
		s += fmt.Sprintf(", and %d bytes of images removed by another since the plan", gone)
	}
	return s
}

// Outcome is what applying a plan did.
type Outcome struct {
	// Removed lists the images removed (or, in dry-run, that would be), in
	// order, with the reason and the bytes each freed given the removals
	// that really happened before it.
	Removed []Decision
	// Skipped lists planned images the check right before their removal
	// kept, each with its keep reason: a container started to use it
	// (in_use), a sandbox to run it (sandbox), a pod bound since names it
	// (scheduled), or it gained a name since the plan that is pinned,
	// excluded, the sandbox image's, a bound pod's, or a tag of a
	// repository the plan did not rank it in (newest_tags), or containerd
	// can no longer read what it holds (unreadable).
	Skipped []Decision
	// Failed lists planned images the runtime failed to remove.
	Failed []Decision
	// Gone lists planned images the runtime no longer had at the check
	// right before their removal: another removed them since the plan.
	// Neither EstimatedFreed nor the removal metrics count them; what the
	// run had to free does (the disk got their bytes back).
	Gone []Decision
	// EstimatedFreed sums the Bytes of Removed.
	EstimatedFreed uint64
	// Short is by how much Removed and Gone fall short of what the
	// threshold rule asked (Plan.Required); 0 when they do not. In dry run,
	// by how much they would.
	Short uint64
	// Replans counts the plans made again after a skip or a failure.
	Replans int
	// LeftAtGoal counts the planned space removals not made because the
	// image filesystem, read before each, had reached the run's goal
	// (spaceGauge): the estimates only order the candidates, the
	// measurement bounds how many go.
	LeftAtGoal int
	// LeftDiskUnresponsive counts the planned space removals not made
	// because removals free nothing on the image filesystem as nodegc
	// reads it (Manager.feedback): what it reads is likely not the
	// filesystem the images are on.
	LeftDiskUnresponsive int
	// DryRun says nothing was removed.
	DryRun bool
}

// removalCheck is asked right before each removal: keep is the reason to
// keep the image after all ("" to remove it; checkGone when the runtime no
// longer has it), and an error says the check could not be made (the
// runtime did not answer).
type removalCheck func(*Image) (keep string, err error)

// checkGone is what a removalCheck answers for an image the runtime no
// longer has.
const checkGone = "gone"

// spaceGauge reads the image filesystem during a run, for its space
// removals (ReasonSpace; age removals go whatever the disk).
type spaceGauge interface {
	// stop is asked before the check of each space removal: stopAtGoal
	// when the filesystem has reached the run's goal (the space removals
	// left are not needed), "" to go on (also when it cannot be read: the
	// estimates decide then), stopDiskUnresponsive when removals free
	// nothing on it.
	stop(ctx context.Context) string
	// remove removes d's image with rt, reading the filesystem right
	// before and right after.
	remove(ctx context.Context, rt imageRemover, d Decision) error
}

// Why a spaceGauge stops a run's space removals.
const (
	stopAtGoal           = "goal"
	stopDiskUnresponsive = "disk_unresponsive"
)

// replanner plans again within a run (see Policy.replan): removed names the
// images removed so far in the run, held those that stay and why, and
// target is what the threshold rule still asks to free.
type replanner func(removed map[string]bool, held map[string]string, target uint64) *Plan

// execute applies plan: it removes the plan's images in order (age removals,
// then space removals in LRU order). check is asked right before each
// removal (a container may have started since planning); when it cannot be
// made, the run stops there with its error: nothing is removed on doubt,
// and a runtime that does not answer is not asked again for every other
// candidate. space, if set, is asked before each space removal whether the
// disk still needs it, and removes them: once it says no, the space
// removals left are not made (Outcome.LeftAtGoal, LeftDiskUnresponsive),
// and no shortfall is returned. The estimate of
// each removal holds only if the ones before it happened: when one is
// skipped (in use) or fails, execute plans again with replan, that image
// held and what was really removed left out, and goes on with the new plan,
// until a plan is carried out whole. So the bytes reported freed are those
// of removals that happened, and FreeDiskSpaceError is returned whenever
// they fall short of plan.Required and none failed. One failure does not
// stop the others: failures are joined into the error, with the shortfall
// when there is one. A cancelled ctx stops between removals. In dry-run
// nothing is removed, the outcome lists what would have been, and a
// shortfall is logged and left in Outcome.Short, not returned.
func execute(ctx context.Context, rt imageRemover, plan *Plan, check removalCheck, space spaceGauge, replan replanner, dryRun bool) (*Outcome, error) {
	out := &Outcome{DryRun: dryRun}
	var (
		errs    []error
		removed = map[string]bool{} // by nodegc, or gone
		held    = map[string]string{}
		gone    uint64 // the bytes of out.Gone
	)
	// apply removes d's image; false means it stays (kept at the check, or
	// failed). A check that cannot be made is returned.
	apply := func(d Decision) (bool, error) {
		keep, err := check(d.Image)
		if err != nil {
			return false, fmt.Errorf("image GC stopped after %d removals: cannot check image %s before removing it: %w", len(out.Removed), d.Image.ID, err)
		}
		if keep == checkGone {
			// Its layers went as the plan assumed: later estimates hold.
			klog.FromContext(ctx).Info("Image already gone at the check before its removal: another removed it since the plan", "imageID", d.Image.ID, "tags", d.Image.RepoTags)
			removed[d.Image.ID] = true
			out.Gone = append(out.Gone, d)
			gone += d.Bytes
			return true, nil
		}
		if keep != "" {
			klog.FromContext(ctx).Info("Image kept at the check before its removal", "imageID", d.Image.ID, "tags", d.Image.RepoTags, "reason", keep)
			d.Reason = keep
			out.Skipped = append(out.Skipped, d)
			held[d.Image.ID] = keep
			return false, nil
		}
		// Each removal is logged at the default verbosity, as the kubelet
		// logs each: which image went is what an operator asks first.
		if dryRun {
			klog.FromContext(ctx).Info("Image would be removed (dry run)", "imageID", d.Image.ID, "tags", d.Image.RepoTags, "digests", d.Image.RepoDigests, "reason", d.Reason, "estimatedBytes", d.Bytes)
		} else {
			remove := rt.RemoveImage
			if space != nil && d.Reason == ReasonSpace {
				remove = func(ctx context.Context, _ string) error { return space.remove(ctx, rt, d) }
			}
			if err := remove(ctx, d.Image.ID); err != nil {
				errs = append(errs, err)
				out.Failed = append(out.Failed, d)
				held[d.Image.ID] = KeepRemoveFailed
				return false, nil
			}
			klog.FromContext(ctx).Info("Removed image", "imageID", d.Image.ID, "tags", d.Image.RepoTags, "digests", d.Image.RepoDigests, "reason", d.Reason, "estimatedBytes", d.Bytes)
		}
		removed[d.Image.ID] = true
		out.Removed = append(out.Removed, d)
		out.EstimatedFreed += d.Bytes
		return true, nil
	}
	stopped := ""
	for current := plan; current != nil && stopped == ""; {
		next := (*Plan)(nil)
		for i, d := range current.Remove {
			if ctx.Err() != nil {
				errs = append(errs, fmt.Errorf("image GC stopped after %d removals: %w", len(out.Removed), ctx.Err()))
				return out, errors.Join(errs...)
			}
			if space != nil && !dryRun && d.Reason == ReasonSpace {
				if stopped = space.stop(ctx); stopped != "" {
					left := 0
					for _, l := range current.Remove[i:] {
						if l.Reason == ReasonSpace {
							left++
						}
					}
					if stopped == stopAtGoal {
						out.LeftAtGoal = left
						klog.FromContext(ctx).Info("Image filesystem reached the run's goal: the space removals left are not needed",
							"left", left, "removed", len(out.Removed), "estimatedFreedBytes", out.EstimatedFreed)
					} else {
						out.LeftDiskUnresponsive = left
						klog.FromContext(ctx).V(2).Info("Image removals free nothing on the image filesystem as nodegc reads it: the space removals left are held",
							"left", left, "removed", len(out.Removed))
					}
					break
				}
			}
			ok, err := apply(d)
			if err != nil {
				return out, errors.Join(append(errs, err)...)
			}
			if !ok {
				// Later estimates assumed this removal: plan again.
				out.Replans++
				next = replan(removed, held, plan.Target-min(plan.Target, out.EstimatedFreed+gone))
				break
			}
		}
		current = next
	}
	// Only what the high threshold asks now must be freed: the bytes a
	// projection adds (Plan.Ahead) are freed when images allow.
	// A run stopped at its goal measured what the estimates would guess;
	// one stopped because the disk does not answer is told apart
	// (Manager.feedback), not as too few removable images.
	if plan.Required > 0 && out.EstimatedFreed+gone < plan.Required && stopped == "" {
		out.Short = plan.Required - out.EstimatedFreed - gone
		switch {
		case dryRun:
			// Nothing was freed, nor failed: what a run would do is logged.
			klog.FromContext(ctx).Info("Dry run: the removals would not free what the threshold asks (not enough removable images)",
				"bytesToFree", plan.Required, "wouldFreeBytes", out.EstimatedFreed, "goneBytes", gone, "shortBytes", out.Short)
		case len(out.Failed) > 0:
			// The runtime's errors are why, not what may be removed.
			errs = append(errs, fmt.Errorf("%s; %d removals failed", shortfall(plan.Required, out.EstimatedFreed, gone), len(out.Failed)))
		default:
			errs = append(errs, &FreeDiskSpaceError{BytesToFree: plan.Required, Freed: out.EstimatedFreed, Gone: gone})
		}
	}
	return out, errors.Join(errs...)
}
