package containers

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
)

// fakeRuntime is a small in-memory runtime with the cri.Client's contract:
// stopping or removing what is gone succeeds, ContainerStatus of a missing
// container is NotFound. It holds state; it does not script expectations.
type fakeRuntime struct {
	mu         sync.Mutex
	containers map[string]*runtimeapi.ContainerStatus
	sandboxIDs map[string]string // container ID -> sandbox ID
	sandboxes  map[string]*runtimeapi.PodSandbox
	fail       map[string]error // "Op id" -> error
	calls      []string
	// listing, if set, receives a value when a listing of all containers
	// starts (not of one sandbox's), which then waits for release.
	listing, release chan struct{}
	// imageFs is the image filesystem mountpoint ImageFsInfo reports.
	imageFs string
	// version is what Version answers (nil: nothing).
	version *runtimeapi.VersionResponse
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{
		containers: map[string]*runtimeapi.ContainerStatus{},
		sandboxIDs: map[string]string{},
		sandboxes:  map[string]*runtimeapi.PodSandbox{},
		fail:       map[string]error{},
	}
}

// addContainer adds c (from the policy's model) with a log path.
func (f *fakeRuntime) addContainer(c Container, logPath string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := map[State]runtimeapi.ContainerState{
		StateCreated: runtimeapi.ContainerState_CONTAINER_CREATED, StateRunning: runtimeapi.ContainerState_CONTAINER_RUNNING,
		StateExited: runtimeapi.ContainerState_CONTAINER_EXITED, StateUnknown: runtimeapi.ContainerState_CONTAINER_UNKNOWN,
	}[c.State]
	labels := map[string]string{}
	if c.Managed {
		labels = map[string]string{labelPodUID: c.PodUID, labelPodName: c.PodName, labelPodNamespace: c.PodNamespace, labelContainerName: c.Name}
	}
	s := &runtimeapi.ContainerStatus{
		Id: c.ID, Metadata: &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: c.Attempt}, State: st,
		CreatedAt: c.CreatedAt.UnixNano(), Labels: labels, LogPath: logPath,
		Annotations: map[string]string{annotationGracePeriod: fmt.Sprint(c.GracePeriod)},
	}
	if !c.FinishedAt.IsZero() {
		s.FinishedAt = c.FinishedAt.UnixNano()
	}
	f.containers[c.ID] = s
	f.sandboxIDs[c.ID] = c.SandboxID
}

func (f *fakeRuntime) addSandbox(s Sandbox) {
	f.mu.Lock()
	defer f.mu.Unlock()
	state := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	if s.Ready {
		state = runtimeapi.PodSandboxState_SANDBOX_READY
	}
	f.sandboxes[s.ID] = &runtimeapi.PodSandbox{
		Id: s.ID, Metadata: &runtimeapi.PodSandboxMetadata{Name: s.PodName, Namespace: s.PodNamespace, Uid: s.PodUID, Attempt: s.Attempt},
		State: state, CreatedAt: s.CreatedAt.UnixNano(),
		Labels:      map[string]string{labelPodUID: s.PodUID, labelPodName: s.PodName, labelPodNamespace: s.PodNamespace},
		Annotations: map[string]string{annotationConfigSource: s.Source},
	}
}

func (f *fakeRuntime) setState(id string, st runtimeapi.ContainerState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.containers[id].State = st
}

func (f *fakeRuntime) call(op, id string) error {
	f.calls = append(f.calls, op+" "+id)
	return f.fail[op+" "+id]
}

// containerIDs returns the IDs of the containers left.
func (f *fakeRuntime) containerIDs() map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := map[string]bool{}
	for id := range f.containers {
		ids[id] = true
	}
	return ids
}

func (f *fakeRuntime) sandboxIDSet() map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := map[string]bool{}
	for id := range f.sandboxes {
		ids[id] = true
	}
	return ids
}

func (f *fakeRuntime) callLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeRuntime) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	if sel := filter.GetLabelSelector(); len(sel) > 0 {
		return f.listLabelled(sel)
	}
	if f.listing != nil && filter.GetPodSandboxId() == "" {
		f.listing <- struct{}{}
		select {
		case <-f.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("ListContainers", filter.GetPodSandboxId()); err != nil {
		return nil, err
	}
	var out []*runtimeapi.Container
	for id, s := range f.containers {
		if sb := filter.GetPodSandboxId(); sb != "" && f.sandboxIDs[id] != sb {
			continue
		}
		out = append(out, f.listed(id, s))
	}
	return out, nil
}

// listed is container id of status s as a listing gives it. The caller
// holds f.mu.
func (f *fakeRuntime) listed(id string, s *runtimeapi.ContainerStatus) *runtimeapi.Container {
	return &runtimeapi.Container{
		Id: id, PodSandboxId: f.sandboxIDs[id], Metadata: s.Metadata, State: s.State,
		CreatedAt: s.CreatedAt, Labels: s.Labels, Annotations: s.Annotations,
	}
}

// listLabelled lists the containers that have every label of sel, as
// "ListContainers labels".
func (f *fakeRuntime) listLabelled(sel map[string]string) ([]*runtimeapi.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("ListContainers", "labels"); err != nil {
		return nil, err
	}
	var out []*runtimeapi.Container
	for id, s := range f.containers {
		if hasLabels(s.Labels, sel) {
			out = append(out, f.listed(id, s))
		}
	}
	return out, nil
}

// hasLabels says whether labels has every label of sel.
func hasLabels(labels, sel map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func (f *fakeRuntime) ListPodSandboxes(context.Context, *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("ListPodSandboxes", ""); err != nil {
		return nil, err
	}
	var out []*runtimeapi.PodSandbox
	for _, s := range f.sandboxes {
		out = append(out, s)
	}
	return out, nil
}

func (f *fakeRuntime) ContainerStatus(_ context.Context, id string) (*runtimeapi.ContainerStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("ContainerStatus", id); err != nil {
		return nil, err
	}
	s, ok := f.containers[id]
	if !ok {
		return nil, fmt.Errorf("status of container %s: %w", id, status.Error(codes.NotFound, "not found"))
	}
	return proto.Clone(s).(*runtimeapi.ContainerStatus), nil
}

func (f *fakeRuntime) StopContainer(_ context.Context, id string, _ int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("StopContainer", id); err != nil {
		return err
	}
	if s, ok := f.containers[id]; ok {
		s.State = runtimeapi.ContainerState_CONTAINER_EXITED
		s.FinishedAt = time.Now().UnixNano()
	}
	return nil
}

func (f *fakeRuntime) RemoveContainer(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("RemoveContainer", id); err != nil {
		return err
	}
	delete(f.containers, id)
	return nil
}

func (f *fakeRuntime) PodSandboxStatus(_ context.Context, id string) (*runtimeapi.PodSandboxStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("PodSandboxStatus", id); err != nil {
		return nil, err
	}
	s, ok := f.sandboxes[id]
	if !ok {
		return nil, fmt.Errorf("status of pod sandbox %s: %w", id, status.Error(codes.NotFound, "not found"))
	}
	return &runtimeapi.PodSandboxStatus{Id: s.Id, Metadata: s.Metadata, State: s.State, CreatedAt: s.CreatedAt, Labels: s.Labels, Annotations: s.Annotations}, nil
}

func (f *fakeRuntime) StopPodSandbox(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("StopPodSandbox", id); err != nil {
		return err
	}
	if s, ok := f.sandboxes[id]; ok {
		s.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	}
	return nil
}

func (f *fakeRuntime) RemovePodSandbox(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("RemovePodSandbox", id); err != nil {
		return err
	}
	delete(f.sandboxes, id)
	for cid, sb := range f.sandboxIDs {
		if sb == id {
			delete(f.containers, cid)
		}
	}
	return nil
}

func (f *fakeRuntime) Version(context.Context) (*runtimeapi.VersionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Version", ""); err != nil {
		return nil, err
	}
	return f.version, nil
}

func (f *fakeRuntime) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("ImageFsInfo", ""); err != nil {
		return nil, err
	}
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{
		{FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: f.imageFs}},
	}}, nil
}

// fakePods is a pod source that returns a set view and remembers Retain.
type fakePods struct {
	mu       sync.Mutex
	view     PodView
	retained map[string]bool
	// expected counts ExpectRuntimeChecks calls; verdicts holds what
	// RuntimeChecked reported, in order.
	expected int
	verdicts []string
	// lease is what NodeLease reads; leaseReads counts the reads. Unset
	// (zero), NodeLease reads a lease renewed at renewing's now, as a
	// kubelet renews it, if renewing is set.
	lease      NodeLease
	leaseReads int
	renewing   clock.PassiveClock
}

func (p *fakePods) ExpectRuntimeChecks() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expected++
}

func (p *fakePods) RuntimeChecked(reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.verdicts = append(p.verdicts, reason)
}

func (p *fakePods) NodeLease(context.Context) NodeLease {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.leaseReads++
	if p.lease == (NodeLease{}) && p.renewing != nil {
		return NodeLease{RenewTime: p.renewing.Now(), Duration: DefaultNodeLeaseDuration}
	}
	return p.lease
}

func (p *fakePods) View(time.Time) PodView {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.view
}

func (p *fakePods) Retain(onNode map[string]bool, _ time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.retained = onNode
}
