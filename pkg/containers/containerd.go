package containers

import (
	"context"
	"fmt"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/errdefs"

	"github.com/nodegc/nodegc/internal/containerdapi"
)

// ContainerdWritableLayers reads, through containerd's own API on the
// runtime's socket, how many bytes each container's writable layer holds:
// the usage of the rootfs snapshot its containerd container record names
// (the CRI plugin keys it by the container's ID, in the snapshotter the
// container was created with; a sandbox's pause container likewise). For
// the overlayfs snapshotter that is the allocated size of the layer's own
// files (its upper directory). It is also the Reclaimer of containerd.
// Safe for concurrent use.
type ContainerdWritableLayers struct {
	client  *containerd.Client
	timeout time.Duration
}

// NewContainerdWritableLayers connects to containerd at socketPath (the CRI
// socket) in the k8s.io namespace. Each WritableLayer call is bounded by
// timeout (0: only by its context).
func NewContainerdWritableLayers(ctx context.Context, socketPath string, timeout time.Duration) (*ContainerdWritableLayers, error) {
	c, err := containerdapi.Dial(ctx, socketPath, timeout)
	if err != nil {
		return nil, err
	}
	return &ContainerdWritableLayers{client: c, timeout: timeout}, nil
}

// Close closes the connection.
func (c *ContainerdWritableLayers) Close() error { return c.client.Close() }

// WritableLayer returns the usage of the rootfs snapshot of the container
// or sandbox id; 0 when containerd has no such container or snapshot.
func (c *ContainerdWritableLayers) WritableLayer(ctx context.Context, id string) (uint64, error) {
	ctx, cancel := containerdapi.WithTimeout(ctx, c.timeout)
	defer cancel()
	rec, err := c.client.ContainerService().Get(ctx, id)
	switch {
	case errdefs.IsNotFound(err):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("containerd record of %s: %w", id, err)
	case rec.SnapshotKey == "" || rec.Snapshotter == "":
		return 0, nil // no rootfs snapshot of containerd's
	}
	u, err := c.client.SnapshotService(rec.Snapshotter).Usage(ctx, rec.SnapshotKey)
	switch {
	case errdefs.IsNotFound(err):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("usage of snapshot %s/%s of %s: %w", rec.Snapshotter, rec.SnapshotKey, id, err)
	case u.Size < 0:
		return 0, nil
	}
	return uint64(u.Size), nil
}

// reclaimLeaseTTL bounds the life of the empty lease Reclaim creates, should
// the agent stop between creating and deleting it (containerd removes an
// expired lease itself).
const reclaimLeaseTTL = time.Hour

// Reclaim has containerd collect its garbage now and returns once the
// collection ended. A container removed through CRI leaves its snapshot
// to containerd's next collection, which containerd schedules on its own:
// by default at once if none is scheduled, else at the scheduled one, up
// to 49 times its average collection time after the last. Reclaim asks for
// one the way `ctr leases delete --sync` does: it creates an empty lease
// and deletes it synchronously.
func (c *ContainerdWritableLayers) Reclaim(ctx context.Context) error {
	ctx, cancel := containerdapi.WithTimeout(ctx, c.timeout)
	defer cancel()
	ls := c.client.LeasesService()
	l, err := ls.Create(ctx, leases.WithRandomID(), leases.WithExpiration(reclaimLeaseTTL),
		leases.WithLabel("nodegc.io/purpose", "reclaim"))
	if err != nil {
		return fmt.Errorf("creating the lease whose deletion has containerd collect garbage: %w", err)
	}
	if err := ls.Delete(ctx, l, leases.SynchronousDelete); err != nil {
		return fmt.Errorf("containerd's garbage collection (deleting lease %s synchronously): %w", l.ID, err)
	}
	return nil
}
