package images_test

import (
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/registry"
	"github.com/nodegc/nodegc/pkg/images"
)

// TestAccountingFollowsTheImagesStorage, on each real containerd: what an
// image holds changes while its ID stays. Its layers' snapshots are pruned
// (`ctr snapshots rm`; an image pulled without unpacking has none), then it
// is pulled again, which unpacks them, then a layer blob goes
// (discard_unpacked_layers). Each
// plan counts what the image holds then: the estimate of its removal drops
// by the snapshots' usage, comes back, and drops by the blob's size. It
// stayed at the first read's for the process's life.
func TestAccountingFollowsTheImagesStorage(t *testing.T) {
	t.Parallel()
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			t.Parallel()
			b := newBed(t, v, 0)
			ctx := t.Context()
			img := b.pushPull("presence/app", 3, registry.LayerSpec{Seed: "presence/base", Size: 4 * mib})
			info, err := b.cri.ImageFsInfo(ctx)
			if err != nil {
				t.Fatal(err)
			}
			snapshotter := images.SnapshotterFromMountpoint(info.GetImageFilesystems()[0].GetFsId().GetMountpoint())
			c := b.containerd()
			ci, err := c.GetImage(ctx, img.Ref)
			if err != nil {
				t.Fatal(err)
			}
			diffIDs, err := ci.RootFS(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// The image's own layers, the base and its top: the first
			// (the test binary's) is every test image's.
			chain := identity.ChainIDs(diffIDs)[1:]
			sn := c.SnapshotService(snapshotter)
			usage := func() int64 {
				t.Helper()
				var n int64
				for _, id := range chain {
					u, err := sn.Usage(ctx, id.String())
					if err != nil {
						t.Fatalf("usage of snapshot %s: %v", id, err)
					}
					n += u.Size
				}
				return n
			}

			// Plans only: high 1%, low 0% plan every image's removal.
			m := b.manager(t.TempDir(), clocktesting.NewFakeClock(time.Now()), setThresholds(1, 0))
			estimate := func(when string) int64 {
				t.Helper()
				// A lease (a pull's, until it ends) holds what it names,
				// which the plan leaves out.
				testbed.WaitFor(t, 30*time.Second, "containerd's leases to end", func() bool {
					ls, err := b.node.Leases(ctx)
					if err != nil {
						t.Fatal(err)
					}
					return len(ls) == 0
				})
				p, err := m.Plan(ctx)
				if err != nil {
					t.Fatalf("plan %s: %v", when, err)
				}
				if !p.ExactAccounting {
					t.Fatalf("plan %s did not use containerd's layer accounting", when)
				}
				for _, d := range append(p.Remove, p.Spare...) {
					if d.Image.ID == img.ID() {
						t.Logf("%s: the removal of %s frees %.2f MiB", when, img.Repo, float64(d.Bytes)/mib)
						return int64(d.Bytes)
					}
				}
				t.Fatalf("plan %s does not remove %s: %+v", when, img.ID(), p.Keep)
				return 0
			}

			unpacked := estimate("unpacked")
			snapshots := usage()
			// Top first; containerd's own collector may take a parent
			// the removal left unreferenced before the loop does.
			for i := len(chain) - 1; i >= 0; i-- {
				if err := sn.Remove(ctx, chain[i].String()); err != nil && !errdefs.IsNotFound(err) {
					t.Fatalf("removing snapshot %s: %v", chain[i], err)
				}
			}
			if got, want := estimate("snapshots pruned"), unpacked-snapshots; got != want {
				t.Errorf("with its snapshots pruned: %d bytes, want %d (%d less: the snapshots' usage)", got, want, snapshots)
			}

			// Pulled again: containerd unpacks what has no snapshot.
			if _, err := b.node.PullImage(ctx, img.Ref); err != nil {
				t.Fatal(err)
			}
			again := estimate("pulled again")
			if want := unpacked - snapshots + usage(); again != want {
				t.Errorf("pulled again: %d bytes, want %d", again, want)
			}

			top := digest.Digest(img.Layers[len(img.Layers)-1].Digest)
			blob, err := c.ContentStore().Info(ctx, top)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.ContentStore().Delete(ctx, top); err != nil {
				t.Fatal(err)
			}
			if got, want := estimate("top layer's blob discarded"), again-blob.Size; got != want {
				t.Errorf("with its top layer's blob discarded: %d bytes, want %d (%d less: the blob's size)", got, want, blob.Size)
			}
		})
	}
}
