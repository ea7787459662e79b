package images_test

import (
	"context"
	"strings"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	ctrimages "github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/nodegc/nodegc/internal/containerdapi"
	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/internal/testbed/registry"
)

// copyToNamespace puts the image named name in containerd's k8s.io
// namespace into namespace ns too, as `ctr -n ns pull` of the same image
// would: its blobs (which containerd stores once for every namespace), with
// the labels that make the manifest hold its config and layers, and an
// image record.
func copyToNamespace(ctx context.Context, c *containerd.Client, name, ns string) error {
	k8s, other := namespaces.WithNamespace(ctx, containerdapi.Namespace), namespaces.WithNamespace(ctx, ns)
	img, err := c.ImageService().Get(k8s, name)
	if err != nil {
		return err
	}
	cs := c.ContentStore()
	copyBlob := ctrimages.HandlerFunc(func(ctx context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
		info, err := cs.Info(k8s, desc.Digest)
		if err != nil {
			return nil, err
		}
		labels := map[string]string{}
		for k, v := range info.Labels {
			if strings.HasPrefix(k, "containerd.io/gc.ref.content.") {
				labels[k] = v
			}
		}
		ra, err := cs.ReaderAt(k8s, desc)
		if err != nil {
			return nil, err
		}
		defer ra.Close()
		if err := content.WriteBlob(other, cs, "copy-"+desc.Digest.String(), content.NewReader(ra), desc, content.WithLabels(labels)); err != nil {
			return nil, err
		}
		return nil, nil
	})
	if err := ctrimages.Walk(k8s, ctrimages.Handlers(copyBlob, ctrimages.ChildrenHandler(cs)), img.Target); err != nil {
		return err
	}
	_, err = c.ImageService().Create(other, ctrimages.Image{Name: "example.com/elsewhere:1", Target: img.Target})
	return err
}

// TestAccountingHeldOutsideKubernetes, on a real containerd of each
// version: storage something else holds is not freed by removing the
// Kubernetes images that share it, and the estimate no longer counts it.
// Image A is also in containerd's "default" namespace (`ctr -n default
// pull`, nerdctl, buildkit: containerd keeps one copy of each blob for all
// namespaces), and a lease (a pull under way) holds the base layer of image
// B. Removing both frees their unpacked layers and their own blobs only:
// the estimate is within 5% of the measured growth of free space. It
// counted the held blobs as freed (45 MiB more).
func TestAccountingHeldOutsideKubernetes(t *testing.T) {
	t.Parallel()
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			t.Parallel()
			b := newBedWith(t, node.Options{Version: v, SmallFS: 256 * mib, RareGC: true})
			ctx := t.Context()
			a := b.pushPull(repoName(0), 3, registry.LayerSpec{Seed: "base-a", Size: 25 * mib})
			bImg := b.pushPull(repoName(1), 3, registry.LayerSpec{Seed: "base-b", Size: 20 * mib})

			c, err := containerd.New(b.node.Socket)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := copyToNamespace(ctx, c, a.ID(), "default"); err != nil {
				t.Fatalf("putting image A in namespace default: %v", err)
			}
			k8s := namespaces.WithNamespace(ctx, containerdapi.Namespace)
			ls := c.LeasesService()
			lease, err := ls.Create(k8s, leases.WithRandomID(), leases.WithExpiration(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if err := ls.AddResource(k8s, lease, leases.Resource{ID: bImg.Layers[0].Digest, Type: "content"}); err != nil {
				t.Fatal(err)
			}

			r, removed := b.collectAllExact()
			if !removed[a.ID()] || !removed[bImg.ID()] {
				t.Fatalf("removed %v, want A %s and B %s", removed, a.ID(), bImg.ID())
			}
			est, measured := float64(r.Outcome.EstimatedFreed), float64(r.MeasuredFreed)
			t.Logf("estimated %.1f MiB, measured %.1f MiB (held: A's blobs, %.1f MiB, and B's base blob, %.1f MiB)",
				est/mib, measured/mib, float64(a.ManifestSize+a.ConfigSize+a.Layers[0].CompressedSize+a.Layers[1].CompressedSize)/mib,
				float64(bImg.Layers[0].CompressedSize)/mib)
			if !r.Measured || measured <= 0 {
				t.Fatalf("freed space not measured: %+v", r)
			}
			if diff := (est - measured) / measured; diff > 0.05 || diff < -0.05 {
				t.Errorf("estimate off by %.1f%% from the measured freed bytes (want within 5%%)", diff*100)
			}
		})
	}
}
