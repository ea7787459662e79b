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
// asked for (kubelet's FreeDiskSpaceFailed).
type FreeDiskSpaceError struct {
	BytesToFree uint64
	Freed       uint64
}

func (e *FreeDiskSpaceError) Error() string {
	return fmt.Sprintf("failed to free %d bytes on the image filesystem: freed %d bytes (not enough removable images)", e.BytesToFree, e.Freed)
}

// Outcome is what applying a plan did.
type Outcome struct {
	// Removed lists the images removed (or, in dry-run, that would be), in
	// order, with the reason and estimated bytes of each.
	Removed []Decision
	// SkippedInUse lists planned images a container started to use after
	// planning; they were kept.
	SkippedInUse []Decision
	// EstimatedFreed sums the Bytes of Removed.
	EstimatedFreed uint64
	// DryRun says nothing was removed.
	DryRun bool
}

// Execute applies plan: it removes the age removals, then the space
// removals in LRU order until the estimate reaches plan.BytesToFree, taking
// spare candidates when a planned one fails or is in use. inUse is asked
// right before each removal (a container may have started since planning).
// One failure does not stop the others: failures are joined into the error.
// A cancelled ctx stops between removals. In dry-run nothing is removed and
// the outcome lists what would have been.
func Execute(ctx context.Context, rt imageRemover, plan *Plan, inUse func(*Image) bool, dryRun bool) (*Outcome, error) {
	out := &Outcome{DryRun: dryRun}
	var (
		errs       []error
		spaceFreed uint64
	)
	apply := func(d Decision) bool {
		if inUse(d.Image) {
			klog.V(2).InfoS("Image came into use after planning, keeping it", "imageID", d.Image.ID, "tags", d.Image.RepoTags)
			out.SkippedInUse = append(out.SkippedInUse, d)
			return false
		}
		if !dryRun {
			klog.V(2).InfoS("Removing image", "imageID", d.Image.ID, "tags", d.Image.RepoTags, "reason", d.Reason, "estimatedBytes", d.Bytes)
			if err := rt.RemoveImage(ctx, d.Image.ID); err != nil {
				errs = append(errs, err)
				return false
			}
		}
		out.Removed = append(out.Removed, d)
		out.EstimatedFreed += d.Bytes
		return true
	}

	queue := append(append([]Decision(nil), plan.Remove...), plan.Spare...)
	for i, d := range queue {
		if ctx.Err() != nil {
			errs = append(errs, fmt.Errorf("image GC stopped after %d of %d removals: %w", len(out.Removed), len(plan.Remove), ctx.Err()))
			break
		}
		if d.Reason != ReasonAge {
			if spaceFreed >= plan.BytesToFree {
				break // spares only make up for planned removals that did not happen
			}
			if i >= len(plan.Remove) {
				d.Reason = ReasonSpace
			}
		}
		if apply(d) && d.Reason == ReasonSpace {
			spaceFreed += d.Bytes
		}
	}
	if plan.BytesToFree > 0 && spaceFreed < plan.BytesToFree {
		errs = append(errs, &FreeDiskSpaceError{BytesToFree: plan.BytesToFree, Freed: spaceFreed})
	}
	return out, errors.Join(errs...)
}
