package node

import (
	"strconv"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/containerdapi"
	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/registry"
)

// TestRareGC, for each containerd: with Options.RareGC a container removed
// through CRI keeps its writable layer on disk for longer than the GC's
// measurement waits (2x gcrun's SettleQuiet here), until a client deletes
// a lease synchronously, which has containerd collect at once. Tests that
// need a containerd slow to free space rely on both. Node.Leases finds the
// lease by its label.
func TestRareGC(t *testing.T) {
	const layer = 8 << 20
	reg := registry.Start(t)
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			ctx := t.Context()
			n := Start(t, Options{Version: v, SmallFS: 128 << 20, Registry: reg, RareGC: true})
			img, err := reg.Push(ctx, registry.ImageSpec{Repo: "gc/rare"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := n.PullImage(ctx, img.Ref); err != nil {
				t.Fatal(err)
			}
			sb, err := n.RunPod(ctx, PodSpec{Name: "rare", Namespace: "default", UID: "rare-uid"})
			if err != nil {
				t.Fatal(err)
			}
			id, err := n.RunContainer(ctx, sb, ContainerSpec{Name: "w", Image: img.Ref, Args: []string{"write", "/data", strconv.Itoa(layer), "exit", "0"}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := n.WaitContainerState(ctx, id, runtimeapi.ContainerState_CONTAINER_EXITED, time.Minute); err != nil {
				t.Fatal(err)
			}
			before, err := n.FSStats()
			if err != nil {
				t.Fatal(err)
			}
			if err := n.RemoveContainer(ctx, id); err != nil {
				t.Fatal(err)
			}
			time.Sleep(3 * time.Second)
			waited, err := n.FSStats()
			if err != nil {
				t.Fatal(err)
			}
			if grew := int64(waited.Available) - int64(before.Available); grew > layer/2 {
				t.Fatalf("containerd freed %d bytes within 3 s of the removal: it does not collect rarely", grew)
			}

			c, err := containerd.New(n.Socket, containerd.WithDefaultNamespace(containerdapi.Namespace))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			const label = "testbed.nodegc.io/purpose"
			l, err := c.LeasesService().Create(ctx, leases.WithRandomID(), leases.WithLabel(label, "rare-gc"))
			if err != nil {
				t.Fatal(err)
			}
			// Leases finds a lease by its label (tests check with it that
			// none of theirs is left).
			if got, err := n.Leases(ctx, `labels."`+label+`"`); err != nil || len(got) != 1 || got[0].ID != l.ID {
				t.Fatalf("Leases by label: %+v, %v; want lease %s", got, err, l.ID)
			}
			if err := c.LeasesService().Delete(ctx, l, leases.SynchronousDelete); err != nil {
				t.Fatal(err)
			}
			if got, err := n.Leases(ctx, `labels."`+label+`"`); err != nil || len(got) != 0 {
				t.Fatalf("Leases by label after the deletion: %+v, %v; want none", got, err)
			}
			after, err := n.FSStats()
			if err != nil {
				t.Fatal(err)
			}
			grew := int64(after.Available) - int64(before.Available)
			t.Logf("free space: %d bytes more 3 s after the removal, %d after a synchronous lease deletion (layer %d)",
				int64(waited.Available)-int64(before.Available), grew, layer)
			if grew < layer*9/10 {
				t.Errorf("a synchronous lease deletion freed %d bytes, want the removed %d-byte layer", grew, layer)
			}
		})
	}
}
