package cri

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListImages returns every image the image service knows.
func (c *Client) ListImages(ctx context.Context) ([]*runtimeapi.Image, error) {
	return listAll(ctx, c, "listing images",
		func(ctx context.Context) (grpc.ServerStreamingClient[runtimeapi.StreamImagesResponse], error) {
			return c.images.StreamImages(ctx, &runtimeapi.StreamImagesRequest{})
		},
		(*runtimeapi.StreamImagesResponse).GetImages,
		func(ctx context.Context) ([]*runtimeapi.Image, error) {
			resp, err := c.images.ListImages(ctx, &runtimeapi.ListImagesRequest{})
			return resp.GetImages(), err
		})
}

// RemoveImage removes an image by ID (or any reference of it). An image that
// is already gone counts as removed.
func (c *Client) RemoveImage(ctx context.Context, id string) error {
	return c.gone(ctx, 0, "removing image "+id, func(ctx context.Context) error {
		_, err := c.images.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: id}})
		return err
	})
}

// ImageStatus returns the image with the given ID, or nil when the runtime
// does not have it (CRI answers so with no image, some runtimes with
// NotFound).
func (c *Client) ImageStatus(ctx context.Context, id string) (*runtimeapi.Image, error) {
	ctx, cancel := c.withTimeout(ctx, 0)
	defer cancel()
	resp, err := c.images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: id}})
	if status.Code(err) == codes.NotFound {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("status of image %s: %w", id, err)
	}
	return resp.GetImage(), nil
}

// ImageFsInfo returns the filesystems holding images (and, with a split
// image filesystem, containers). Runtimes refresh it every few seconds.
func (c *Client) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	ctx, cancel := c.withTimeout(ctx, 0)
	defer cancel()
	resp, err := c.images.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
	if err != nil {
		return nil, fmt.Errorf("image filesystem info: %w", err)
	}
	return resp, nil
}

// ListContainers returns the containers matching filter (nil: all), in
// every state.
func (c *Client) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	return listAll(ctx, c, "listing containers",
		func(ctx context.Context) (grpc.ServerStreamingClient[runtimeapi.StreamContainersResponse], error) {
			return c.runtime.StreamContainers(ctx, &runtimeapi.StreamContainersRequest{Filter: filter})
		},
		(*runtimeapi.StreamContainersResponse).GetContainers,
		func(ctx context.Context) ([]*runtimeapi.Container, error) {
			resp, err := c.runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: filter})
			return resp.GetContainers(), err
		})
}

// ListPodSandboxes returns the sandboxes matching filter (nil: all).
func (c *Client) ListPodSandboxes(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	return listAll(ctx, c, "listing pod sandboxes",
		func(ctx context.Context) (grpc.ServerStreamingClient[runtimeapi.StreamPodSandboxesResponse], error) {
			return c.runtime.StreamPodSandboxes(ctx, &runtimeapi.StreamPodSandboxesRequest{Filter: filter})
		},
		(*runtimeapi.StreamPodSandboxesResponse).GetPodSandboxes,
		func(ctx context.Context) ([]*runtimeapi.PodSandbox, error) {
			resp, err := c.runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: filter})
			return resp.GetItems(), err
		})
}

// ContainerStatus returns the status of one container. A container that is
// gone gives an error for which IsNotFound is true.
func (c *Client) ContainerStatus(ctx context.Context, id string) (*runtimeapi.ContainerStatus, error) {
	ctx, cancel := c.withTimeout(ctx, 0)
	defer cancel()
	resp, err := c.runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		return nil, fmt.Errorf("status of container %s: %w", id, err)
	}
	if resp.GetStatus() == nil {
		return nil, fmt.Errorf("status of container %s: the runtime returned no status", id)
	}
	return resp.GetStatus(), nil
}

// PodSandboxStatus returns the status of one pod sandbox. A sandbox that is
// gone gives an error for which IsNotFound is true (StopPodSandbox and
// RemovePodSandbox succeed for it: this is how to tell).
func (c *Client) PodSandboxStatus(ctx context.Context, id string) (*runtimeapi.PodSandboxStatus, error) {
	ctx, cancel := c.withTimeout(ctx, 0)
	defer cancel()
	resp, err := c.runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		return nil, fmt.Errorf("status of pod sandbox %s: %w", id, err)
	}
	if resp.GetStatus() == nil {
		return nil, fmt.Errorf("status of pod sandbox %s: the runtime returned no status", id)
	}
	return resp.GetStatus(), nil
}

// StopContainer stops a container, giving it gracePeriodSeconds before it is
// killed. A container that is gone counts as stopped.
func (c *Client) StopContainer(ctx context.Context, id string, gracePeriodSeconds int64) error {
	return c.gone(ctx, secondsDuration(gracePeriodSeconds), "stopping container "+id, func(ctx context.Context) error {
		_, err := c.runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: gracePeriodSeconds})
		return err
	})
}

// RemoveContainer removes a container. A container that is gone counts as
// removed.
func (c *Client) RemoveContainer(ctx context.Context, id string) error {
	return c.gone(ctx, 0, "removing container "+id, func(ctx context.Context) error {
		_, err := c.runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
		return err
	})
}

// StopPodSandbox stops a sandbox and its containers. A sandbox that is gone
// counts as stopped.
func (c *Client) StopPodSandbox(ctx context.Context, id string) error {
	return c.gone(ctx, 0, "stopping pod sandbox "+id, func(ctx context.Context) error {
		_, err := c.runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
		return err
	})
}

// RemovePodSandbox removes a sandbox. A sandbox that is gone counts as
// removed.
func (c *Client) RemovePodSandbox(ctx context.Context, id string) error {
	return c.gone(ctx, 0, "removing pod sandbox "+id, func(ctx context.Context) error {
		_, err := c.runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
		return err
	})
}

// gone runs one stop or removal with its timeout (0: the default), a
// NotFound answer counting as done (what is gone is stopped and removed);
// what names the call and its object in the error.
func (c *Client) gone(ctx context.Context, timeout time.Duration, what string, call func(context.Context) error) error {
	ctx, cancel := c.withTimeout(ctx, timeout)
	defer cancel()
	if err := ignoreNotFound(call(ctx)); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// listAll lists through the streaming call (CRI list streaming, KEP-5825)
// and falls back for good to the unary call once the runtime answers
// Unimplemented, as kubelet's client does.
// The call has the client's timeout; what names it in the error.
func listAll[T any, R any](ctx context.Context, c *Client, what string,
	stream func(context.Context) (grpc.ServerStreamingClient[R], error),
	items func(*R) []T,
	unary func(context.Context) ([]T, error),
) ([]T, error) {
	ctx, cancel := c.withTimeout(ctx, 0)
	defer cancel()
	all, err := listEither(ctx, c, stream, items, unary)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return all, nil
}

func listEither[T any, R any](ctx context.Context, c *Client,
	stream func(context.Context) (grpc.ServerStreamingClient[R], error),
	items func(*R) []T,
	unary func(context.Context) ([]T, error),
) ([]T, error) {
	if c.noStreaming.Load() {
		return unary(ctx)
	}
	s, err := stream(ctx)
	var all []T
	for err == nil {
		var resp *R
		if resp, err = s.Recv(); err == nil {
			all = append(all, items(resp)...)
		}
	}
	switch {
	case errors.Is(err, io.EOF):
		return all, nil
	case status.Code(err) == codes.Unimplemented:
		c.noStreaming.Store(true)
		return unary(ctx)
	default:
		return nil, err
	}
}

// SandboxImage returns the image the runtime runs pod sandboxes with (the
// pause image), read from the runtime's verbose status: containerd 1.x
// reports it as config.sandboxImage. Empty when the runtime does not say:
// containerd 2.x's status gives its CRI plugin's runtime config only (the
// images' config, where pinned_images names the sandbox image, is not in
// it).
func (c *Client) SandboxImage(ctx context.Context) (string, error) {
	ctx, cancel := c.withTimeout(ctx, 0)
	defer cancel()
	resp, err := c.runtime.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		return "", fmt.Errorf("runtime status: %w", err)
	}
	raw, ok := resp.GetInfo()["config"]
	if !ok {
		return "", nil
	}
	var cfg struct {
		SandboxImage string `json:"sandboxImage"`
	}
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		return "", fmt.Errorf("runtime status: config is not JSON: %w", err)
	}
	return cfg.SandboxImage, nil
}
