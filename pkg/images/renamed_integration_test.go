package images_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	ctrimages "github.com/containerd/containerd/v2/core/images"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/cri"
	"github.com/nodegc/nodegc/pkg/images"
)

// addName gives the image target another name in containerd (as a pull of
// another name of the same image does: the name is added, nothing is
// fetched), and returns once CRI lists it.
func addName(ctx context.Context, ctr *containerd.Client, c *cri.Client, target, name string) error {
	imgs, err := ctr.ImageService().List(ctx)
	if err != nil {
		return err
	}
	for _, img := range imgs {
		if img.Target.MediaType == "" {
			continue
		}
		cfg, err := ctrimages.Config(ctx, ctr.ContentStore(), img.Target, nil)
		if err != nil || cfg.Digest.String() != target {
			continue
		}
		if _, err := ctr.ImageService().Create(ctx, ctrimages.Image{Name: name, Target: img.Target, Labels: img.Labels}); err != nil {
			return fmt.Errorf("naming %s %s: %w", img.Name, name, err)
		}
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			got, err := c.ImageStatus(ctx, target)
			if err != nil {
				return err
			}
			if slices.Contains(got.GetRepoTags(), name) {
				return nil
			}
		}
		return fmt.Errorf("CRI does not list %s for %s after 30s", name, target)
	}
	return fmt.Errorf("no image record of %s", target)
}

// TestExcludedNameGainedMidRun, on each real containerd: a run means to
// remove three images, oldest first; while it removes the first, the last
// gains a name the configuration excludes. containerd's RemoveImage by ID
// removes every name an image has, the new one too: the check before the
// removal judges the image by the names it has then, and keeps it (it was
// removed, both names with it).
func TestExcludedNameGainedMidRun(t *testing.T) {
	t.Parallel()
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			t.Parallel()
			b := newBed(t, v, 256*mib)
			ctx := t.Context()
			pulled, _ := b.pullInOrder(3)
			ctr := b.containerd()
			const critical = "registry.example/critical/agent:2"
			// While nodegc removes the first, the last gains the name.
			rt := &afterFirstRemoval{recordingRuntime: b.runtime, then: func(ctx context.Context, _ string) error {
				return addName(ctx, ctr, b.cri, pulled[2], critical)
			}}
			m := b.managerWith(rt, t.TempDir(), clocktesting.NewFakeClock(time.Now()), func(c *config.ImageGCConfiguration) {
				setThresholds(1, 0)(c) // free everything removable
				c.Exclude = []string{"registry.example/critical/**"}
			})
			r, err := m.GarbageCollect(ctx, images.TriggerManual)
			if err := rt.thenErr(); err != nil {
				t.Fatal(err)
			}
			if r == nil || r.Outcome == nil {
				t.Fatalf("no run: %v", err)
			}
			removed, skipped := outcome(r)
			t.Logf("containerd %s: removed %d, skipped at the check %v; run error: %v", v, len(removed), skipped, err)
			if !slices.Equal(removed, pulled[:2]) {
				t.Errorf("removed %v, want the two older images %v", removed, pulled[:2])
			}
			if want := []string{pulled[2] + " " + images.KeepExcluded}; !slices.Equal(skipped, want) {
				t.Errorf("skipped at the check %v, want %v", skipped, want)
			}
			got, err := b.cri.ImageStatus(ctx, pulled[2])
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(got.GetRepoTags(), critical) {
				t.Errorf("%s is gone from the runtime (image %v), want it kept with its excluded name", critical, got)
			}
		})
	}
}
