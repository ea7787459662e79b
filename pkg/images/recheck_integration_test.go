package images_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/pkg/images"
)

// hookedSandboxes is a sandbox source that calls hook, when set, before it
// lists the sandboxes.
type hookedSandboxes struct {
	images.SandboxSource
	hook func(ctx context.Context) error
}

func (h *hookedSandboxes) SandboxImages(ctx context.Context) ([]string, error) {
	if err := h.hook(ctx); err != nil {
		return nil, err
	}
	return h.SandboxSource.SandboxImages(ctx)
}

// TestContainerMadeDuringTheCheck, on each real containerd: the check
// right before a removal lists the containers, then makes calls that take
// time (the sandbox list, a container's status). A container created from
// the image meanwhile, which the agent knows of when the check ends, keeps
// it: containerd's RemoveImage removes an image a container uses.
func TestContainerMadeDuringTheCheck(t *testing.T) {
	t.Parallel()
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			t.Parallel()
			b := newBed(t, v, 256*mib)
			ctx := t.Context()
			var pulled, refs []string
			for i := range 3 {
				img := b.pushPull(repoName(i), 2)
				pulled, refs = append(pulled, img.ID()), append(refs, img.Ref)
				time.Sleep(10 * time.Millisecond) // first-detected times in pull order
			}
			var m *images.Manager
			var armed atomic.Bool
			hooked := &hookedSandboxes{SandboxSource: b.layers, hook: func(ctx context.Context) error {
				if !armed.Swap(false) {
					return nil
				}
				// The check of the second image lists the sandboxes: a
				// container of it is created now, and the agent learns of
				// it (a plan lists the containers, as events would tell).
				pod, err := b.node.RunPod(ctx, node.PodSpec{Name: "late", Namespace: "default"})
				if err != nil {
					return err
				}
				if _, err := b.node.CreateContainer(ctx, pod, node.ContainerSpec{Name: "c", Image: refs[1], Args: []string{"exit", "0"}}); err != nil {
					return err
				}
				plan, err := m.Plan(ctx)
				if err != nil {
					return err
				}
				if !slices.ContainsFunc(plan.Keep, func(d images.Decision) bool { return d.Image.ID == pulled[1] && d.Reason == images.KeepInUse }) {
					t.Errorf("a plan made after the container's creation does not keep %s in use", pulled[1])
				}
				return nil
			}}
			b.sandboxes = hooked
			rt := &afterFirstRemoval{recordingRuntime: b.runtime, then: func(context.Context, string) error {
				armed.Store(true)
				return nil
			}}
			m = b.managerWith(rt, t.TempDir(), clocktesting.NewFakeClock(time.Now()), setThresholds(1, 0))
			r, err := m.GarbageCollect(ctx, images.TriggerManual)
			if r == nil || r.Outcome == nil {
				t.Fatalf("no run: %v", err)
			}
			removed, skipped := outcome(r)
			t.Logf("containerd %s: removed %d, skipped at the check %v; run error: %v", v, len(removed), skipped, err)
			if want := []string{pulled[0], pulled[2]}; !slices.Equal(removed, want) {
				t.Errorf("removed %v, want the first and last %v", removed, want)
			}
			if want := []string{pulled[1] + " " + images.KeepInUse}; !slices.Equal(skipped, want) {
				t.Errorf("skipped at the check %v, want %v", skipped, want)
			}
			if !b.imageIDs()[pulled[1]] {
				t.Errorf("%s, which a container uses, is gone from the runtime", pulled[1])
			}
		})
	}
}
