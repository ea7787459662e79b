package images_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/oci"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
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
			pulled, refs := b.pullInOrder(3)
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

// hookedArrivals is an arrival source that calls hook before each read
// (the plan reads every image's arrival, the check right before a removal,
// arrivedYoung, one image's after most of its reads).
type hookedArrivals struct {
	images.ArrivalSource
	hook func(ctx context.Context, imgs []*runtimeapi.Image) error
}

func (h *hookedArrivals) Arrivals(ctx context.Context, imgs []*runtimeapi.Image) (map[string]time.Time, error) {
	if err := h.hook(ctx, imgs); err != nil {
		return nil, err
	}
	return h.ArrivalSource.Arrivals(ctx, imgs)
}

// TestRecordMadeLateInTheCheck, on each real containerd: a container
// record of the k8s.io namespace (ctr -n k8s.io run, nerdctl, buildkit's
// containerd worker) made from the image late in the check right before
// its removal, when the check reads the image's arrival, keeps it, as a
// CRI container made then does (TestContainerMadeDuringTheCheck). Before,
// the check read the records before that, and its end listed the CRI
// containers only: the image was removed, and the record's image lost
// (review nodegc r10 B1).
func TestRecordMadeLateInTheCheck(t *testing.T) {
	t.Parallel()
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			t.Parallel()
			b := newBed(t, v, 256*mib)
			ctx := t.Context()
			pulled, refs := b.pullInOrder(3)
			c := b.containerd()
			var made atomic.Bool
			b.arrivals = &hookedArrivals{ArrivalSource: b.layers, hook: func(ctx context.Context, imgs []*runtimeapi.Image) error {
				if len(imgs) != 1 || imgs[0].GetId() != pulled[1] || made.Swap(true) {
					return nil
				}
				ci, err := c.GetImage(ctx, refs[1])
				if err != nil {
					return err
				}
				_, err = c.NewContainer(ctx, "made-late-in-the-check", containerd.WithImage(ci),
					containerd.WithNewSnapshot("made-late-in-the-check-rootfs", ci), containerd.WithNewSpec(oci.WithImageConfig(ci)))
				return err
			}}
			m := b.manager(t.TempDir(), clocktesting.NewFakeClock(time.Now()), setThresholds(1, 0))
			r, err := m.GarbageCollect(ctx, images.TriggerManual)
			if r == nil || r.Outcome == nil {
				t.Fatalf("no run: %v", err)
			}
			removed, skipped := outcome(r)
			t.Logf("containerd %s: removed %v, skipped at the check %v; run error: %v", v, removed, skipped, err)
			if !made.Load() {
				t.Fatal("the check never read the second image's arrival")
			}
			if want := []string{pulled[0], pulled[2]}; !slices.Equal(removed, want) {
				t.Errorf("removed %v, want the first and last %v", removed, want)
			}
			if want := []string{pulled[1] + " " + images.KeepInUse}; !slices.Equal(skipped, want) {
				t.Errorf("skipped at the check %v, want %v", skipped, want)
			}
			if _, err := c.GetImage(ctx, refs[1]); err != nil {
				t.Errorf("image %s, which a container record uses, is gone: %v", refs[1], err)
			}
		})
	}
}
