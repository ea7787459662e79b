// Package containerdapi is what the image and container GCs share to read
// containerd through its own API, beside CRI, on the runtime's socket: the
// namespace the CRI plugin keeps Kubernetes' images, containers and
// sandboxes in, a connection checked to answer, and the per-call deadline
// (the runtime request timeout, as CRI calls have).
package containerdapi

import (
	"context"
	"fmt"
	"time"

	containerd "github.com/containerd/containerd/v2/client"

	"github.com/nodegc/nodegc/pkg/cri"
)

// Namespace is the containerd namespace of the CRI plugin.
const Namespace = "k8s.io"

// Dial connects to containerd at socketPath in Namespace and checks, within
// timeout (0: only by ctx), that it answers. Its calls report to the
// cri.Activity of their context, as CRI calls do (the agent's watchdog).
func Dial(ctx context.Context, socketPath string, timeout time.Duration) (*containerd.Client, error) {
	c, err := containerd.New(socketPath, containerd.WithDefaultNamespace(Namespace), containerd.WithExtraDialOpts(cri.ActivityDialOptions()))
	if err != nil {
		return nil, fmt.Errorf("connecting to containerd at %s: %w", socketPath, err)
	}
	vctx, cancel := WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := c.Version(vctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("containerd at %s does not answer: %w", socketPath, err)
	}
	return c, nil
}

// WithTimeout bounds ctx by d; d <= 0 leaves it as it is.
func WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}
