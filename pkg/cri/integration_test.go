package cri_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/internal/testbed/registry"
	"github.com/nodegc/nodegc/pkg/cri"
)

// TestAgainstContainerd, for each real containerd: pulls 3 images from the
// local registry, runs a pod with a container that exits and one that runs,
// lists them through pkg/cri with the right states and image IDs, removes
// them, and sees ImageFsInfo's used bytes go down.
func TestAgainstContainerd(t *testing.T) {
	testbed.RequireRoot(t)
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			ctx := t.Context()
			n := node.Start(t, node.Options{Version: v, SmallFS: 256 << 20})
			c, err := cri.Dial(ctx, cri.Options{RuntimeEndpoint: n.Endpoint, Timeout: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got := c.RuntimeVersion().GetRuntimeName(); got != "containerd" {
				t.Errorf("runtime name %q, want containerd", got)
			}

			base := registry.LayerSpec{Seed: "cri-base", Size: 8 << 20}
			var imgs []*registry.Image
			for i := range 3 {
				img, err := n.Registry.Push(ctx, registry.ImageSpec{
					Repo: fmt.Sprintf("cri/img%d", i), Tag: "v1",
					Layers: []registry.LayerSpec{base, {Seed: fmt.Sprintf("cri-%d", i), Size: 6 << 20}},
				})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := n.PullImage(ctx, img.Ref); err != nil {
					t.Fatal(err)
				}
				imgs = append(imgs, img)
			}
			listed, err := c.ListImages(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := n.PullImage(ctx, n.Pause.Ref); err != nil {
				t.Fatal(err)
			}
			byID := map[string]*runtimeapi.Image{}
			for _, img := range listed {
				byID[img.GetId()] = img
			}
			for _, img := range imgs {
				if got := byID[img.ID()]; got == nil || !slices.Contains(got.GetRepoTags(), img.Ref) {
					t.Errorf("ListImages: %s (%s) missing or untagged: %v", img.Ref, img.ID(), got)
				}
			}

			podID, err := n.RunPod(ctx, node.PodSpec{Name: "cri-test", Namespace: "default"})
			if err != nil {
				t.Fatal(err)
			}
			exited, err := n.RunContainer(ctx, podID, node.ContainerSpec{Name: "exits", Image: imgs[0].Ref, Args: []string{"exit", "7"}})
			if err != nil {
				t.Fatal(err)
			}
			running, err := n.RunContainer(ctx, podID, node.ContainerSpec{Name: "runs", Image: imgs[1].Ref, Args: []string{"sleep"}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := n.WaitContainerState(ctx, exited, runtimeapi.ContainerState_CONTAINER_EXITED, time.Minute); err != nil {
				t.Fatal(err)
			}

			containers, err := c.ListContainers(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, ctr := range containers {
				got[ctr.GetId()] = ctr.GetState().String() + " " + ctr.GetImageRef()
				if ctr.GetLabels()[node.LabelPodUID] == "" {
					t.Errorf("container %s lacks the pod UID label", ctr.GetId())
				}
			}
			want := map[string]string{
				exited:  "CONTAINER_EXITED " + imgs[0].ID(),
				running: "CONTAINER_RUNNING " + imgs[1].ID(),
			}
			for id, w := range want {
				if got[id] != w {
					t.Errorf("ListContainers: container %s is %q, want %q", id, got[id], w)
				}
			}
			st, err := c.ContainerStatus(ctx, exited)
			if err != nil || st.GetExitCode() != 7 {
				t.Errorf("ContainerStatus(exited) = exit code %d, %v; want 7", st.GetExitCode(), err)
			}
			sandboxes, err := c.ListPodSandboxes(ctx, nil)
			if err != nil || len(sandboxes) != 1 || sandboxes[0].GetId() != podID ||
				sandboxes[0].GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
				t.Errorf("ListPodSandboxes = %v, %v; want the one ready pod", sandboxes, err)
			}
			// The sandbox image: 1.6 names it in its status (config.sandboxImage);
			// 2.x names none there (its verbose status gives the CRI plugin's
			// runtime config only), but marks the image pinned. Either way the
			// GC can tell.
			sb, err := c.SandboxImage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			all, err := c.ListImages(ctx)
			if err != nil {
				t.Fatal(err)
			}
			pinned := false
			for _, img := range all {
				if slices.Contains(img.GetRepoTags(), n.Pause.Ref) {
					pinned = img.GetPinned()
				}
			}
			if sb != n.Pause.Ref && !pinned {
				t.Errorf("sandbox image %s neither named by SandboxImage (%q) nor pinned", n.Pause.Ref, sb)
			}
			if v != testbed.Containerd16 && sb != "" {
				t.Errorf("containerd %s: SandboxImage = %q; its status names no sandbox image", v, sb)
			}
			t.Logf("sandbox image: SandboxImage=%q pinned=%v", sb, pinned)

			// ImageFsInfo is a cache the runtime refreshes every few seconds:
			// wait until it counts the pulled images (26 MiB of layers).
			usedBefore := waitImageFsUsed(t, c, func(used uint64) bool { return used >= 20<<20 })

			// Stop and remove through pkg/cri; a second removal is a no-op.
			for _, id := range []string{running, exited} {
				if err := c.StopContainer(ctx, id, 5); err != nil {
					t.Fatal(err)
				}
				if err := c.RemoveContainer(ctx, id); err != nil {
					t.Fatal(err)
				}
				if err := c.RemoveContainer(ctx, id); err != nil {
					t.Errorf("removing container %s again: %v, want success", id, err)
				}
			}
			if _, err := c.ContainerStatus(ctx, exited); !cri.IsNotFound(err) {
				t.Errorf("ContainerStatus(removed) error = %v, want NotFound", err)
			}
			if err := c.StopPodSandbox(ctx, podID); err != nil {
				t.Fatal(err)
			}
			if err := c.RemovePodSandbox(ctx, podID); err != nil {
				t.Fatal(err)
			}
			if err := c.RemovePodSandbox(ctx, podID); err != nil {
				t.Errorf("removing sandbox again: %v, want success", err)
			}
			for _, img := range imgs {
				if err := c.RemoveImage(ctx, img.ID()); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.RemoveImage(ctx, imgs[0].ID()); err != nil {
				t.Errorf("removing a removed image: %v, want success", err)
			}
			listed, err = c.ListImages(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, img := range listed {
				for _, removed := range imgs {
					if img.GetId() == removed.ID() {
						t.Errorf("image %s still listed after RemoveImage", removed.Ref)
					}
				}
			}

			usedAfter := waitImageFsUsed(t, c, func(used uint64) bool { return used < usedBefore-16<<20 })
			t.Logf("image filesystem used bytes: %d -> %d", usedBefore, usedAfter)
		})
	}
}

// waitImageFsUsed polls ImageFsInfo, a cache the runtime refreshes every
// few seconds, until ok accepts its used bytes, and returns them.
func waitImageFsUsed(t *testing.T, c *cri.Client, ok func(uint64) bool) uint64 {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		info, err := c.ImageFsInfo(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		fss := info.GetImageFilesystems()
		if len(fss) == 0 {
			t.Fatal("ImageFsInfo reports no image filesystem")
		}
		used := fss[0].GetUsedBytes().GetValue()
		if ok(used) {
			return used
		}
		if time.Now().After(deadline) {
			t.Fatalf("ImageFsInfo used bytes stayed at %d", used)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// TestEventsAgainstContainerd: containerd 2.x streams container events;
// 1.6 (without the event stream) answers in a way pkg/cri classifies as
// ErrUnsupported, or streams as well. Either way the call is classified,
// and counted in nodegc_cri_requests_total with how it ended, as are the
// streamed lists.
func TestEventsAgainstContainerd(t *testing.T) {
	testbed.RequireRoot(t)
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			n := node.Start(t, node.Options{Version: v})
			reg := prometheus.NewPedanticRegistry()
			c, err := cri.Dial(ctx, cri.Options{RuntimeEndpoint: n.Endpoint, Timeout: 30 * time.Second, Metrics: cri.NewMetrics(reg)})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			requests := func(method, code string) float64 {
				t.Helper()
				families, err := reg.Gather()
				if err != nil {
					t.Fatal(err)
				}
				n, _ := testbed.MetricSum(families, "nodegc_cri_requests_total", "method="+method, "code="+code)
				return n
			}
			// A runtime with list streaming streams every list; one without
			// answers Unimplemented once, counted as such and never as OK,
			// and is asked with the unary call from then on.
			for range 2 {
				if _, err := c.ListImages(ctx); err != nil {
					t.Fatal(err)
				}
			}
			streamed, unimplemented, unary := requests("StreamImages", "OK"), requests("StreamImages", "Unimplemented"), requests("ListImages", "OK")
			t.Logf("StreamImages: OK %v, Unimplemented %v; ListImages: OK %v", streamed, unimplemented, unary)
			if !(streamed == 2 && unimplemented == 0 && unary == 0) && !(streamed == 0 && unimplemented == 1 && unary == 2) {
				t.Errorf("two image lists counted StreamImages OK %v, Unimplemented %v and ListImages OK %v; want 2, 0, 0 or 0, 1, 2",
					streamed, unimplemented, unary)
			}
			img, err := n.Registry.Push(ctx, registry.ImageSpec{Repo: "cri/events", Tag: "v1"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := n.PullImage(ctx, img.Ref); err != nil {
				t.Fatal(err)
			}

			events := make(chan *runtimeapi.ContainerEventResponse, 64)
			connected := make(chan struct{})
			watchCtx, stop := context.WithCancel(ctx)
			defer stop()
			done := make(chan error, 1)
			go func() {
				done <- c.WatchContainerEvents(watchCtx, func() { close(connected) }, func(ev *runtimeapi.ContainerEventResponse) {
					events <- ev
				})
			}()
			select {
			case <-connected:
			case err := <-done: // 1.6 without its event feature says so at once
				if v == testbed.Containerd16 && errors.Is(err, cri.ErrUnsupported) {
					if ok := requests("GetContainerEvents", "OK"); ok != 0 {
						t.Errorf("an event stream the runtime does not offer counted OK %v times", ok)
					}
					t.Logf("containerd %s: %v", v, err)
					return
				}
				t.Fatalf("WatchContainerEvents ended before it subscribed: %v", err)
			}
			podID, err := n.RunPod(ctx, node.PodSpec{Name: "events", Namespace: "default"})
			if err != nil {
				t.Fatal(err)
			}
			id, err := n.RunContainer(ctx, podID, node.ContainerSpec{Name: "c", Image: img.Ref, Args: []string{"exit", "0"}})
			if err != nil {
				t.Fatal(err)
			}
			if v == testbed.Containerd16 {
				// 1.6 has the call but only with its event feature on; both
				// outcomes are valid, and both must be classified.
				select {
				case err := <-done:
					if !errors.Is(err, cri.ErrUnsupported) {
						t.Errorf("WatchContainerEvents on 1.6 = %v, want ErrUnsupported or a stream", err)
					}
					return
				case <-time.After(10 * time.Second):
				}
			}
			for {
				select {
				case ev := <-events:
					if ev.GetContainerId() == id && ev.GetContainerEventType() == runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT {
						stop()
						if err := <-done; !errors.Is(err, context.Canceled) {
							t.Errorf("WatchContainerEvents after cancel = %v", err)
						}
						testbed.WaitFor(t, 10*time.Second, "the ended event stream counted Canceled", func() bool {
							return requests("GetContainerEvents", "Canceled") == 1
						})
						if ok := requests("GetContainerEvents", "OK"); ok != 0 {
							t.Errorf("an event stream nodegc ended counted OK %v times", ok)
						}
						return
					}
				case err := <-done:
					t.Fatalf("event stream ended: %v", err)
				case <-ctx.Done():
					t.Fatal("no CONTAINER_STARTED_EVENT for the container")
				}
			}
		})
	}
}
