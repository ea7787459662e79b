package node

import (
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/registry"
)

// TestNode runs, for each containerd, a node on a small filesystem: pushes
// two images sharing a base layer, pulls them, runs a host-network pod
// with a sleeping container and one exiting with code 3, checks what CRI
// reports, and checks that teardown leaves nothing behind.
func TestNode(t *testing.T) {
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			ctx := t.Context()
			n := Start(t, Options{Version: v, SmallFS: 256 << 20})

			st, err := n.FSStats()
			if err != nil {
				t.Fatal(err)
			}
			if st.Capacity > 256<<20 || st.Capacity < 200<<20 || st.Available == 0 {
				t.Errorf("small fs %s: capacity %d, available %d; want about 256 MiB", n.FSKind, st.Capacity, st.Available)
			}

			base := registry.LayerSpec{Seed: "base", Size: 4 << 20}
			a, err := n.Registry.Push(ctx, registry.ImageSpec{Repo: "gc/a", Tag: "v1", Layers: []registry.LayerSpec{base, {Seed: "a", Size: 1 << 20}}})
			if err != nil {
				t.Fatal(err)
			}
			b, err := n.Registry.Push(ctx, registry.ImageSpec{Repo: "gc/b", Tag: "v1", Layers: []registry.LayerSpec{base, {Seed: "b", Size: 2 << 20}}})
			if err != nil {
				t.Fatal(err)
			}
			for _, img := range []*registry.Image{a, b} {
				id, err := n.PullImage(ctx, img.Ref)
				if err != nil {
					t.Fatal(err)
				}
				if id != img.ID() {
					t.Errorf("PullImage(%s) = %s, want the config digest %s", img.Ref, id, img.ID())
				}
			}
			images, err := n.Images.ListImages(ctx, &runtimeapi.ListImagesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			ids := map[string]*runtimeapi.Image{}
			for _, img := range images.GetImages() {
				ids[img.GetId()] = img
			}
			for _, img := range []*registry.Image{a, b} {
				got := ids[img.ID()]
				if got == nil {
					t.Errorf("ListImages lacks %s (%s)", img.Ref, img.ID())
					continue
				}
				if len(got.GetRepoTags()) != 1 || got.GetRepoTags()[0] != img.Ref {
					t.Errorf("image %s: repo tags %v, want [%s]", img.ID(), got.GetRepoTags(), img.Ref)
				}
				t.Logf("image %s: CRI size %d; registry: compressed %d, uncompressed %d, manifest %d, config %d",
					img.Ref, got.GetSize(), img.CompressedSize, img.UncompressedSize, img.ManifestSize, img.ConfigSize)
			}

			fsInfo, err := n.Images.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
			if err != nil {
				t.Fatal(err)
			}
			for _, fs := range fsInfo.GetImageFilesystems() {
				if mp := fs.GetFsId().GetMountpoint(); !within(mp, n.Root) {
					t.Errorf("ImageFsInfo mountpoint %s is not on the node's root %s", mp, n.Root)
				}
			}

			podID, err := n.RunPod(ctx, PodSpec{Name: "web", Namespace: "team", UID: "uid-web-1"})
			if err != nil {
				t.Fatal(err)
			}
			// The sandbox image came from our registry; 2.x pins it (config
			// pinned_images.sandbox), 1.6 has no pinning.
			pause, err := n.Images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: n.Pause.Ref}})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := pause.GetImage().GetId(), n.Pause.ID(); got != want {
				t.Errorf("sandbox image ID = %q, want %q", got, want)
			}
			if got, want := pause.GetImage().GetPinned(), v != testbed.Containerd16; got != want {
				t.Errorf("sandbox image pinned = %v, want %v", got, want)
			}
			sleeper, err := n.RunContainer(ctx, podID, ContainerSpec{Name: "sleeper", Image: a.Ref})
			if err != nil {
				t.Fatal(err)
			}
			exiter, err := n.RunContainer(ctx, podID, ContainerSpec{Name: "exiter", Image: b.Ref, Args: []string{"exit", "3"}, Attempt: 2})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := n.WaitContainerState(ctx, sleeper, runtimeapi.ContainerState_CONTAINER_RUNNING, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			exited, err := n.WaitContainerState(ctx, exiter, runtimeapi.ContainerState_CONTAINER_EXITED, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if exited.GetExitCode() != 3 {
				t.Errorf("exiter exit code = %d, want 3", exited.GetExitCode())
			}
			// ContainerStatus names the image by repo digest; only 2.x fills
			// ImageId. (ListContainers' ImageRef is the image ID, below.)
			if got, want := exited.GetImageRef(), b.RepoDigest(); got != want {
				t.Errorf("ContainerStatus.ImageRef = %q, want the repo digest %q", got, want)
			}
			wantImageID := b.ID()
			if v == testbed.Containerd16 {
				wantImageID = ""
			}
			if got := exited.GetImageId(); got != wantImageID {
				t.Errorf("ContainerStatus.ImageId = %q, want %q", got, wantImageID)
			}

			list, err := n.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if len(list.GetContainers()) != 2 {
				t.Fatalf("ListContainers: %d containers, want 2", len(list.GetContainers()))
			}
			for _, c := range list.GetContainers() {
				wantImage := map[string]string{sleeper: a.ID(), exiter: b.ID()}[c.GetId()]
				if c.GetImageRef() != wantImage {
					t.Errorf("container %s: ImageRef %s, want the image ID %s", c.GetMetadata().GetName(), c.GetImageRef(), wantImage)
				}
				l := c.GetLabels()
				if l[LabelPodUID] != "uid-web-1" || l[LabelPodName] != "web" || l[LabelPodNamespace] != "team" || l[LabelContainerName] != c.GetMetadata().GetName() {
					t.Errorf("container %s: kubelet labels wrong: %v", c.GetMetadata().GetName(), l)
				}
				if got, want := c.GetAnnotations()[AnnotationRestartCount], map[string]string{sleeper: "0", exiter: "2"}[c.GetId()]; got != want {
					t.Errorf("container %s: restartCount annotation %q, want %q", c.GetMetadata().GetName(), got, want)
				}
			}
			pods, err := n.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if len(pods.GetItems()) != 1 || pods.GetItems()[0].GetLabels()[LabelPodUID] != "uid-web-1" {
				t.Errorf("ListPodSandbox = %v, want one pod labelled %s=uid-web-1", pods.GetItems(), LabelPodUID)
			}

			if err := n.StopPod(ctx, podID); err != nil {
				t.Fatal(err)
			}
			if _, err := n.WaitContainerState(ctx, sleeper, runtimeapi.ContainerState_CONTAINER_EXITED, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			if err := n.RemovePod(ctx, podID); err != nil {
				t.Fatal(err)
			}

			if err := n.Teardown(); err != nil {
				t.Fatalf("teardown: %v", err)
			}
			if left := n.Leftovers(); len(left) > 0 {
				t.Errorf("left after teardown:\n%v", left)
			}
		})
	}
}

// TestSmallFSFills checks that the small filesystem really bounds
// containerd: an image larger than it fails to pull with ENOSPC. Both
// nodes share one registry.
func TestSmallFSFills(t *testing.T) {
	reg := registry.Start(t)
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			ctx := t.Context()
			n := Start(t, Options{Version: v, SmallFS: 48 << 20, Registry: reg})
			big, err := reg.Push(ctx, registry.ImageSpec{Repo: "big", Layers: []registry.LayerSpec{{Seed: "big", Size: 64 << 20}}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = n.PullImage(ctx, big.Ref)
			if err == nil || !strings.Contains(err.Error(), "no space left on device") {
				t.Fatalf("pulling a %d MiB image onto a 48 MiB %s: err = %v, want ENOSPC", big.CompressedSize>>20, n.FSKind, err)
			}
			// The small filesystem is what filled: its stats read, it is no
			// larger than asked, and the pull left it (nearly) full (the
			// partial download stays; 0 bytes free on both versions).
			st, err := n.FSStats()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("after the failed pull: %+v", st)
			if st.Capacity == 0 || st.Capacity > 48<<20 || st.Used > st.Capacity || st.Available > st.Capacity-st.Used {
				t.Errorf("after the failed pull, the small filesystem's stats %+v are not those of a filesystem of at most 48 MiB", st)
			}
			if st.Available > st.Capacity/10 {
				t.Errorf("after the failed pull, %d of %d bytes still available: the pull did not fill the small filesystem", st.Available, st.Capacity)
			}
		})
	}
}
