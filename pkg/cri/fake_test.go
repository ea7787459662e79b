package cri

import (
	"cmp"
	"context"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/testbed"
)

// fakeRuntime is a small in-memory CRI server, served over a real gRPC unix
// socket. It holds state; it does not script expectations.
type fakeRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer

	mu         sync.Mutex
	apiVersion string
	// name and version are what Version reports of the runtime ("fake",
	// "1.0" when empty).
	name, version string
	images        map[string]*runtimeapi.Image
	containers    map[string]*runtimeapi.Container
	sandboxes     map[string]*runtimeapi.PodSandbox
	streaming     bool // offer the Stream* list calls
	removeErr     error
	// listErr, when set, is what ListContainers, ListImages and
	// StreamImages answer.
	listErr  error
	block    chan struct{} // ListImages waits on it (or on the deadline) when set
	events   chan *runtimeapi.ContainerEventResponse
	noEvents bool
	// eventsOff makes GetContainerEvents return at once, cleanly, as CRI-O
	// does with enable_pod_events = false; endEvents, when closed, ends an
	// open event stream cleanly, as a runtime shutting down does.
	eventsOff   bool
	endEvents   chan struct{}
	calls       map[string]int
	streamCalls int
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{
		apiVersion: "v1",
		images:     map[string]*runtimeapi.Image{},
		containers: map[string]*runtimeapi.Container{},
		sandboxes:  map[string]*runtimeapi.PodSandbox{},
		events:     make(chan *runtimeapi.ContainerEventResponse, 16),
		calls:      map[string]int{},
	}
}

// serve starts the fake on a unix socket in a short temp dir and returns its
// endpoint. The server stops when the test ends.
func (f *fakeRuntime) serve(t *testing.T) string {
	t.Helper()
	return testbed.ServeCRI(t, f)
}

func (f *fakeRuntime) count(method string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[method]++
}

func (f *fakeRuntime) callCount(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

func (f *fakeRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	name, version := cmp.Or(f.name, "fake"), cmp.Or(f.version, "1.0")
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: name, RuntimeVersion: version, RuntimeApiVersion: f.apiVersion}, nil
}

func (f *fakeRuntime) ListImages(ctx context.Context, _ *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	f.count("ListImages")
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			f.count("ListImages cancelled") // seen by the runtime
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listErr != nil {
		return nil, f.listErr
	}
	resp := &runtimeapi.ListImagesResponse{}
	for _, img := range f.images {
		resp.Images = append(resp.Images, img)
	}
	return resp, nil
}

func (f *fakeRuntime) StreamImages(_ *runtimeapi.StreamImagesRequest, s grpc.ServerStreamingServer[runtimeapi.StreamImagesResponse]) error {
	f.mu.Lock()
	f.streamCalls++
	if f.listErr != nil {
		f.mu.Unlock()
		return f.listErr
	}
	if !f.streaming {
		f.mu.Unlock()
		return status.Error(codes.Unimplemented, "no streaming")
	}
	var imgs []*runtimeapi.Image
	for _, img := range f.images {
		imgs = append(imgs, img)
	}
	f.mu.Unlock()
	// One image per message, to prove the client gathers every message.
	for _, img := range imgs {
		if err := s.Send(&runtimeapi.StreamImagesResponse{Images: []*runtimeapi.Image{img}}); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeRuntime) RemoveImage(_ context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.removeErr != nil {
		return nil, f.removeErr
	}
	id := req.GetImage().GetImage()
	if _, ok := f.images[id]; !ok {
		return nil, status.Errorf(codes.NotFound, "image %q not found", id)
	}
	delete(f.images, id)
	return &runtimeapi.RemoveImageResponse{}, nil
}

func (f *fakeRuntime) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	f.count("ImageFsInfo")
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{{
		FsId:      &runtimeapi.FilesystemIdentifier{Mountpoint: "/var/lib/fake"},
		UsedBytes: &runtimeapi.UInt64Value{Value: 42},
	}}}, nil
}

func (f *fakeRuntime) ListContainers(_ context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	f.count("ListContainers")
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listErr != nil {
		return nil, f.listErr
	}
	resp := &runtimeapi.ListContainersResponse{}
	for _, c := range f.containers {
		if st := req.GetFilter().GetState(); st != nil && st.State != c.State {
			continue
		}
		resp.Containers = append(resp.Containers, c)
	}
	return resp, nil
}

func (f *fakeRuntime) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &runtimeapi.ListPodSandboxResponse{}
	for _, s := range f.sandboxes {
		resp.Items = append(resp.Items, s)
	}
	return resp, nil
}

func (f *fakeRuntime) ContainerStatus(_ context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[req.ContainerId]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %q not found", req.ContainerId)
	}
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: c.Id, State: c.State, ImageRef: c.ImageRef}}, nil
}

func (f *fakeRuntime) PodSandboxStatus(_ context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sandboxes[req.PodSandboxId]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "sandbox %q not found", req.PodSandboxId)
	}
	return &runtimeapi.PodSandboxStatusResponse{Status: &runtimeapi.PodSandboxStatus{Id: s.Id, State: s.State}}, nil
}

func (f *fakeRuntime) StopContainer(_ context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[req.ContainerId]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %q not found", req.ContainerId)
	}
	c.State = runtimeapi.ContainerState_CONTAINER_EXITED
	return &runtimeapi.StopContainerResponse{}, nil
}

func (f *fakeRuntime) RemoveContainer(_ context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.containers[req.ContainerId]; !ok {
		return nil, status.Errorf(codes.NotFound, "container %q not found", req.ContainerId)
	}
	delete(f.containers, req.ContainerId)
	return &runtimeapi.RemoveContainerResponse{}, nil
}

func (f *fakeRuntime) StopPodSandbox(_ context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sandboxes[req.PodSandboxId]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "sandbox %q not found", req.PodSandboxId)
	}
	s.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

func (f *fakeRuntime) RemovePodSandbox(_ context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.sandboxes[req.PodSandboxId]; !ok {
		return nil, status.Errorf(codes.NotFound, "sandbox %q not found", req.PodSandboxId)
	}
	delete(f.sandboxes, req.PodSandboxId)
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

func (f *fakeRuntime) GetContainerEvents(_ *runtimeapi.GetEventsRequest, s grpc.ServerStreamingServer[runtimeapi.ContainerEventResponse]) error {
	f.count("GetContainerEvents")
	if f.noEvents {
		return status.Error(codes.Unimplemented, "no events")
	}
	if f.eventsOff {
		return nil
	}
	for {
		select {
		case <-f.endEvents:
			return nil
		case ev := <-f.events:
			if err := s.Send(ev); err != nil {
				return err
			}
		case <-s.Context().Done():
			return s.Context().Err()
		}
	}
}
