package cri

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// WatchContainerEvents streams container events (created, started, stopped,
// deleted) to handle until ctx ends or the stream breaks. It blocks; the
// stream has no deadline other than ctx. connected, if not nil, is called
// once the stream is open, so that a caller can list what exists then. When the runtime does
// not offer the stream (containerd 1.6 without it enabled), the error wraps
// ErrUnsupported; callers then fall back to polling ListContainers.
func (c *Client) WatchContainerEvents(ctx context.Context, connected func(), handle func(*runtimeapi.ContainerEventResponse)) error {
	stream, err := c.runtime.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		return classifyStreamError(err)
	}
	// A runtime that lacks the call says so on the first Recv, and one that
	// has it may send nothing before its first event, so there is no earlier
	// sign of acceptance: callers list after connected and reconcile
	// periodically, which covers both.
	if connected != nil {
		connected()
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return classifyStreamError(err)
		}
		handle(ev)
	}
}

func classifyStreamError(err error) error {
	switch {
	case status.Code(err) == codes.Unimplemented:
		return fmt.Errorf("container events: %w", ErrUnsupported)
	case errors.Is(err, io.EOF):
		return errors.New("container events: the runtime closed the stream")
	default:
		return fmt.Errorf("container events: %w", err)
	}
}
