package node

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/testbed"
)

// ContainerSpec describes a container. Image is a reference or image ID of
// an image already pulled (PullImage): like the kubelet, CreateContainer
// passes the image ID to the runtime. Command replaces the image's
// entrypoint (/testbin) and Args its cmd (sleep), e.g. Args: {"exit", "3"}.
type ContainerSpec struct {
	Name                string
	Image               string
	Command, Args       []string
	Attempt             uint32
	Labels, Annotations map[string]string
	// ImageMounts maps container paths to images mounted there read-only,
	// as the kubelet passes a pod's image volumes (by image ID; containerd
	// 2.1 and later).
	ImageMounts map[string]string
}

// PullImage pulls ref and returns the image ID (the config digest).
func (n *Node) PullImage(ctx context.Context, ref string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, pullTimeout)
	defer cancel()
	resp, err := n.Images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err != nil {
		return "", fmt.Errorf("pull image %s: %w", ref, err)
	}
	return resp.GetImageRef(), nil
}

// CreateContainer creates a container in pod podID (made by RunPod),
// labelled and annotated like a kubelet's, and returns its ID.
func (n *Node) CreateContainer(ctx context.Context, podID string, spec ContainerSpec) (string, error) {
	n.mu.Lock()
	sb := n.pods[podID]
	n.mu.Unlock()
	if sb == nil {
		return "", fmt.Errorf("create container %s: pod %s was not started by RunPod", spec.Name, podID)
	}
	imageID, err := n.imageID(ctx, spec.Image)
	if err != nil {
		return "", fmt.Errorf("create container %s in pod %s: %w", spec.Name, podID, err)
	}
	md := sb.GetMetadata()
	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelPodUID], labels[LabelPodName], labels[LabelPodNamespace] = md.GetUid(), md.GetName(), md.GetNamespace()
	labels[LabelContainerName] = spec.Name
	annotations := map[string]string{
		AnnotationRestartCount: strconv.FormatUint(uint64(spec.Attempt), 10),
		AnnotationHash:         "0",
		AnnotationGracePeriod:  "30",
		"io.kubernetes.container.terminationMessagePath":   "/dev/termination-log",
		"io.kubernetes.container.terminationMessagePolicy": "File",
	}
	maps.Copy(annotations, spec.Annotations)
	if err := os.MkdirAll(filepath.Join(sb.GetLogDirectory(), spec.Name), 0o755); err != nil {
		return "", fmt.Errorf("create container %s in pod %s: %w", spec.Name, podID, err)
	}
	var mounts []*runtimeapi.Mount
	for _, path := range slices.Sorted(maps.Keys(spec.ImageMounts)) {
		id, err := n.imageID(ctx, spec.ImageMounts[path])
		if err != nil {
			return "", err
		}
		mounts = append(mounts, &runtimeapi.Mount{ContainerPath: path, Readonly: true, Image: &runtimeapi.ImageSpec{Image: id}})
	}
	cfg := &runtimeapi.ContainerConfig{
		Mounts:      mounts,
		Metadata:    &runtimeapi.ContainerMetadata{Name: spec.Name, Attempt: spec.Attempt},
		Image:       &runtimeapi.ImageSpec{Image: imageID, UserSpecifiedImage: spec.Image},
		Command:     spec.Command,
		Args:        spec.Args,
		Labels:      labels,
		Annotations: annotations,
		LogPath:     filepath.Join(spec.Name, fmt.Sprintf("%d.log", spec.Attempt)),
		Linux: &runtimeapi.LinuxContainerConfig{
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: hostNetwork()},
		},
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := n.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: sb})
	if err != nil {
		return "", fmt.Errorf("create container %s in pod %s: %w", spec.Name, podID, err)
	}
	return resp.GetContainerId(), nil
}

// imageID resolves an image reference to the ID of the pulled image.
func (n *Node) imageID(ctx context.Context, image string) (string, error) {
	if strings.HasPrefix(image, "sha256:") {
		return image, nil
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := n.Images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: image}})
	if err != nil {
		return "", fmt.Errorf("image status %s: %w", image, err)
	}
	if resp.GetImage() == nil {
		return "", fmt.Errorf("image %s is not pulled", image)
	}
	return resp.GetImage().GetId(), nil
}

// StartContainer starts a created container.
func (n *Node) StartContainer(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if _, err := n.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		return fmt.Errorf("start container %s: %w", id, err)
	}
	return nil
}

// RunContainer creates and starts a container and returns its ID.
func (n *Node) RunContainer(ctx context.Context, podID string, spec ContainerSpec) (string, error) {
	id, err := n.CreateContainer(ctx, podID, spec)
	if err != nil {
		return "", err
	}
	return id, n.StartContainer(ctx, id)
}

// StopContainer stops a container, killing it after timeout seconds.
func (n *Node) StopContainer(ctx context.Context, id string, timeout int64) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout+time.Duration(timeout)*time.Second)
	defer cancel()
	if _, err := n.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: timeout}); err != nil {
		return fmt.Errorf("stop container %s: %w", id, err)
	}
	return nil
}

// RemoveContainer removes a container.
func (n *Node) RemoveContainer(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if _, err := n.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		return fmt.Errorf("remove container %s: %w", id, err)
	}
	return nil
}

// WaitContainerState polls ContainerStatus until the container is in
// state, for at most timeout, and returns its last status.
func (n *Node) WaitContainerState(ctx context.Context, id string, state runtimeapi.ContainerState, timeout time.Duration) (*runtimeapi.ContainerStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last *runtimeapi.ContainerStatus
	var lastErr error
	err := testbed.Poll(ctx, 50*time.Millisecond, func(context.Context) (bool, error) {
		resp, err := n.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			lastErr = err
			return false, nil
		}
		last, lastErr = resp.GetStatus(), nil
		return last.GetState() == state, nil
	})
	if err != nil {
		return last, fmt.Errorf("container %s not %v after %v (state %v, last error %v): %w", id, state, timeout, last.GetState(), lastErr, err)
	}
	return last, nil
}

// ContainerPID returns the host PID of a running container's process, from
// the verbose status both containerd versions give.
func (n *Node) ContainerPID(ctx context.Context, id string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := n.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		return 0, fmt.Errorf("status of container %s: %w", id, err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(resp.GetInfo()["info"]), &info); err != nil {
		return 0, fmt.Errorf("verbose status of container %s: %w", id, err)
	}
	if info.Pid == 0 {
		return 0, fmt.Errorf("container %s has no process", id)
	}
	return info.Pid, nil
}
