package images_test

import (
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/pkg/images"
)

// TestImageVolumesAreInUse: an image a container mounts as an image volume
// (the kubelet passes a pod's image volumes to CreateContainer as mounts)
// is in use by that container, in any state, as the kubelet's image GC
// holds it (it reads each container's status for its mounts): a running
// container's, and an exited container's whose pod has finished (so no pod
// names it any more and the scheduled rule is off), and also without API
// access. CRI lists containers without their mounts. An image mounted by
// no container any more is removable again. containerd 2.1 and later
// mount image volumes.
func TestImageVolumesAreInUse(t *testing.T) {
	t.Parallel()
	b := newBedWith(t, node.Options{Version: testbed.Containerd2})
	ctx := t.Context()
	app := b.pushPull("volume/app", 1)
	running := b.pushPull("volume/running", 1)
	exited := b.pushPull("volume/exited", 1)
	loose := b.pushPull("volume/loose", 1)

	pod, err := b.node.RunPod(ctx, node.PodSpec{Name: "volumes", Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.node.RunContainer(ctx, pod, node.ContainerSpec{Name: "runs", Image: app.Ref,
		ImageMounts: map[string]string{"/data": running.Ref}}); err != nil {
		t.Fatal(err)
	}
	done, err := b.node.RunContainer(ctx, pod, node.ContainerSpec{Name: "ran", Image: app.Ref, Args: []string{"exit", "0"},
		ImageMounts: map[string]string{"/data": exited.Ref}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.node.WaitContainerState(ctx, done, runtimeapi.ContainerState_CONTAINER_EXITED, time.Minute); err != nil {
		t.Fatal(err)
	}

	r, removed := b.collectAllExact()
	if removed[running.ID()] || removed[exited.ID()] {
		t.Errorf("removed an image a container mounts: running's %v, exited's %v", removed[running.ID()], removed[exited.ID()])
	}
	if !removed[loose.ID()] {
		t.Errorf("the image no container mounts was not removed; removed %v", removed)
	}
	for _, d := range r.Plan.Keep {
		if d.Image.ID == running.ID() || d.Image.ID == exited.ID() {
			if d.Reason != images.KeepInUse {
				t.Errorf("image %s kept as %s, want %s", d.Image.RepoTags, d.Reason, images.KeepInUse)
			}
		}
	}

	// The pod is gone: its images are removable.
	b.removePods()
	_, removed = b.collectAllExact()
	if !removed[running.ID()] || !removed[exited.ID()] {
		t.Errorf("after the pod was removed: running's image removed %v, exited's %v; want both", removed[running.ID()], removed[exited.ID()])
	}
}
