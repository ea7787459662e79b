package images_test

import (
	"context"
	"slices"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/images"
)

// TestRecordOnAnUnservedSnapshotter, on each real containerd: a container
// record of the k8s.io namespace made on a snapshotter containerd does not
// serve (a proxy snapshotter, nydus, stargz or soci, whose daemon is down
// or was removed; devmapper that failed to load at containerd's start).
// Its snapshot cannot be asked what its root filesystem was made on.
// Before, that failed every plan and every check of the image GC, from the
// agent's next start, until someone removed the record by hand (review
// images r9 #1). Now that record's root filesystem is left unread (logged
// once): it still keeps the image it names, by name, and the run removes
// the images nothing uses.
func TestRecordOnAnUnservedSnapshotter(t *testing.T) {
	t.Parallel()
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			t.Parallel()
			b := newBed(t, v, 256*mib)
			ctx := t.Context()
			free := b.pushPull("unserved/free", 1)
			named := b.pushPull("unserved/named", 1)
			c, err := containerd.New(b.node.Socket, containerd.WithDefaultNamespace("k8s.io"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			onNydus := func(_ context.Context, _ *containerd.Client, r *containers.Container) error {
				r.Image, r.Snapshotter, r.SnapshotKey = named.Ref, "nydus", "on-nydus"
				return nil
			}
			if _, err := c.NewContainer(ctx, "on-nydus", containerd.WithNewSpec(oci.WithRootFSPath("/var/lib/elsewhere/on-nydus")), onNydus); err != nil {
				t.Fatal(err)
			}
			m := b.manager(t.TempDir(), clocktesting.NewFakeClock(time.Now()), setThresholds(1, 0))
			r, err := m.GarbageCollect(ctx, images.TriggerManual)
			if r == nil || r.Outcome == nil {
				t.Fatalf("no run: %v", err)
			}
			removed, skipped := outcome(r)
			t.Logf("containerd %s: removed %v, skipped at the check %v; run error: %v", v, removed, skipped, err)
			if !slices.Equal(removed, []string{free.ID()}) {
				t.Errorf("removed %v, want the image nothing uses %s", removed, free.ID())
			}
			var keptAs string
			for _, d := range r.Plan.Keep {
				if d.Image.ID == named.ID() {
					keptAs = d.Reason
				}
			}
			if keptAs != images.KeepInUse {
				t.Errorf("the image the record names kept as %q, want %q", keptAs, images.KeepInUse)
			}
		})
	}
}
