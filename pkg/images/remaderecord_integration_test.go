package images_test

import (
	"context"
	"testing"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/registry"
	"github.com/nodegc/nodegc/pkg/images"
)

// TestRecordMadeAgainIsReadAgain, on each real containerd: a container
// record removed and made again under the same ID and snapshot key (`ctr
// -n k8s.io run --rm imgA x`, then `ctr -n k8s.io run imgB x`), with no
// listing of the records in between, has its root filesystem on another
// image's top layer. The listing tells the new one, not the one cached for
// the old record: else the second image, once the name its record gives
// moved to another image, would be protected neither by name nor by layer.
func TestRecordMadeAgainIsReadAgain(t *testing.T) {
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			b := newBed(t, v, 256*mib)
			ctx := t.Context()
			first := b.pushPull("remade/first", 1)
			second := b.pushPull("remade/second", 1)
			c := b.containerd()
			// The record names a tag that is not the image's (it moved
			// since): only its root filesystem tells the image.
			moved := b.node.Registry.Ref("remade/moved", "v1")
			record := func(img *registry.Image) {
				t.Helper()
				ci, err := c.GetImage(ctx, img.Ref)
				if err != nil {
					t.Fatal(err)
				}
				_, err = c.NewContainer(ctx, "x", containerd.WithImage(ci), containerd.WithNewSnapshot("x", ci), containerd.WithNewSpec(oci.WithImageConfig(ci)),
					func(_ context.Context, _ *containerd.Client, r *containers.Container) error {
						r.Image = moved
						return nil
					})
				if err != nil {
					t.Fatal(err)
				}
			}
			top := func(img *registry.Image) string {
				t.Helper()
				l, err := b.layers.TopLayer(ctx, &images.Image{ID: img.ID()})
				if err != nil || l == "" {
					t.Fatalf("top layer of %s: %q, %v", img.Ref, l, err)
				}
				return l
			}
			layers := func() map[string]bool {
				t.Helper()
				recs, err := b.layers.ContainerRecords(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return recs.Layers
			}

			record(first)
			if got := layers(); !got[top(first)] {
				t.Fatalf("the record on %s: layers %v, want its top layer %s", first.Ref, got, top(first))
			}
			x, err := c.LoadContainer(ctx, "x")
			if err != nil {
				t.Fatal(err)
			}
			if err := x.Delete(ctx, containerd.WithSnapshotCleanup); err != nil {
				t.Fatal(err)
			}
			record(second)
			got := layers()
			if !got[top(second)] {
				t.Errorf("the record made again on %s: layers %v, want its top layer %s", second.Ref, got, top(second))
			}
			if got[top(first)] {
				t.Errorf("the record made again: layers %v still hold the old record's parent %s", got, top(first))
			}
		})
	}
}
