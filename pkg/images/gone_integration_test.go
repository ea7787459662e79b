package images_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/cri"
	"github.com/nodegc/nodegc/pkg/images"
)

// removeOthers removes, behind nodegc's back, every image the test pulled
// but removed (as the kubelet's eviction manager, or an operator's
// `crictl rmi --prune`, would), and returns their IDs.
func removeOthers(ctx context.Context, c *cri.Client, removed string) ([]string, error) {
	imgs, err := c.ListImages(ctx)
	if err != nil {
		return nil, err
	}
	var others []string
	for _, img := range imgs {
		if img.GetId() == removed || !slices.ContainsFunc(img.GetRepoTags(), isTestImage) {
			continue
		}
		if err := c.RemoveImage(ctx, img.GetId()); err != nil {
			return others, err
		}
		others = append(others, img.GetId())
	}
	return others, nil
}

// isTestImage says whether tag names one of the images the test pulled
// (repoName's).
func isTestImage(tag string) bool { return strings.Contains(tag, "/gc/img") }

// TestImageGoneBeforeItsRemoval, on a real containerd of each version: a
// run means to remove four images; right after its first removal, another
// removes the other three. The runtime answers a removal of an image it
// does not have with success, so each of them used to count as removed by
// nodegc, with its bytes as freed. The check before each removal now asks
// the runtime for the image: the three are reported gone, not removed, and
// neither the estimate nor images_removed_total counts them. They still
// count towards what the run had to free (the disk got their bytes back),
// so no other image is removed in their place.
func TestImageGoneBeforeItsRemoval(t *testing.T) {
	t.Parallel()
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			t.Parallel()
			b := newBed(t, v, 256*mib)
			ctx := t.Context()
			for i := range 4 {
				b.pushPull(repoName(i), 2)
			}
			// Right after nodegc's first removal, another removes the rest.
			var others []string
			rt := &afterFirstRemoval{recordingRuntime: b.runtime, then: func(ctx context.Context, removed string) (err error) {
				others, err = removeOthers(ctx, b.cri, removed)
				return err
			}}
			m := b.managerWith(rt, t.TempDir(), clocktesting.NewFakeClock(time.Now()), setThresholds(1, 0))
			r, err := m.GarbageCollect(ctx, images.TriggerManual)
			if err := rt.thenErr(); err != nil {
				t.Fatal(err)
			}
			if r == nil || r.Outcome == nil {
				t.Fatalf("no run made: %v", err)
			}
			o := r.Outcome
			t.Logf("removed %d, gone %d, skipped %d, failed %d, estimated freed %d; error: %v",
				len(o.Removed), len(o.Gone), len(o.Skipped), len(o.Failed), o.EstimatedFreed, err)
			if len(others) != 3 {
				t.Fatalf("removed %d images behind nodegc's back, want 3", len(others))
			}
			if len(o.Removed) != 1 || len(o.Gone) != 3 {
				t.Errorf("removed %d, gone %d; want 1 removed by nodegc, 3 gone before it got to them", len(o.Removed), len(o.Gone))
			}
			var gone []string
			for _, d := range o.Gone {
				gone = append(gone, d.Image.ID)
			}
			slices.Sort(gone)
			slices.Sort(others)
			if !slices.Equal(gone, others) {
				t.Errorf("gone %q, want the images removed behind nodegc's back %q", gone, others)
			}
			if len(o.Removed) == 1 && o.EstimatedFreed != o.Removed[0].Bytes {
				t.Errorf("estimated freed %d bytes, want only what nodegc's one removal freed (%d)", o.EstimatedFreed, o.Removed[0].Bytes)
			}
			if n := len(rt.removals()); n != 1 {
				t.Errorf("nodegc asked the runtime for %d removals, want 1", n)
			}
		})
	}
}
