package node

import (
	"context"
	"fmt"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"

	"github.com/nodegc/nodegc/internal/containerdapi"
)

// Leases lists containerd's leases in the CRI plugin's namespace (k8s.io)
// that match filters (containerd's filter syntax, e.g.
// `labels."example.io/purpose"`; none: every lease).
func (n *Node) Leases(ctx context.Context, filters ...string) ([]leases.Lease, error) {
	c, err := containerd.New(n.Socket, containerd.WithDefaultNamespace(containerdapi.Namespace))
	if err != nil {
		return nil, fmt.Errorf("connecting to containerd at %s: %w", n.Socket, err)
	}
	defer c.Close()
	ls, err := c.LeasesService().List(ctx, filters...)
	if err != nil {
		return nil, fmt.Errorf("listing containerd's leases: %w", err)
	}
	return ls, nil
}
