package images

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// mountingRuntime lists the containers the test sets, and gives each one's
// image mounts in its status; removals go to removalsRuntime.
type mountingRuntime struct {
	*removalsRuntime
	mu         sync.Mutex
	containers map[string][]string // container ID -> images it mounts
	fail       map[string]error
	statuses   map[string]int // ContainerStatus calls per container
}

func (r *mountingRuntime) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*runtimeapi.Container
	for id := range r.containers {
		out = append(out, &runtimeapi.Container{Id: id, ImageRef: "sha256:app", Image: &runtimeapi.ImageSpec{Image: "sha256:app"},
			State: runtimeapi.ContainerState_CONTAINER_EXITED})
	}
	return out, nil
}

func (r *mountingRuntime) ContainerStatus(_ context.Context, id string) (*runtimeapi.ContainerStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.statuses == nil {
		r.statuses = map[string]int{}
	}
	r.statuses[id]++
	if err := r.fail[id]; err != nil {
		return nil, err
	}
	images, ok := r.containers[id]
	if !ok {
		return nil, status.Error(codes.NotFound, "no such container")
	}
	st := &runtimeapi.ContainerStatus{Id: id}
	for _, img := range images {
		st.Mounts = append(st.Mounts, &runtimeapi.Mount{ContainerPath: "/data", Readonly: true, Image: &runtimeapi.ImageSpec{Image: img}})
	}
	return st, nil
}

// TestVolumeMountsRefs: each container's status is read once; a container
// gone mounts nothing; the containers no longer listed are forgotten; a
// status that cannot be read fails the answer, and what was read before it
// is not read again.
func TestVolumeMountsRefs(t *testing.T) {
	rt := &mountingRuntime{containers: map[string][]string{"c1": {"sha256:x"}, "c2": nil, "c3": {"sha256:x", "sha256:y"}}}
	var v volumeMounts
	ctx := t.Context()
	got, err := v.refs(ctx, rt, []string{"c1", "c2", "c3", "gone"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]bool{"sha256:x": true, "sha256:y": true}, got); diff != "" {
		t.Errorf("refs (-want +got):\n%s", diff)
	}
	if _, err := v.refs(ctx, rt, []string{"c1", "c2", "c3", "gone"}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{"c1": 1, "c2": 1, "c3": 1, "gone": 1}, rt.statuses); diff != "" {
		t.Errorf("status reads per container (-want +got):\n%s", diff)
	}
	got, err = v.refs(ctx, rt, []string{"c1"})
	if err != nil || !cmp.Equal(map[string]bool{"sha256:x": true}, got) {
		t.Errorf("after c2, c3 left: %v, %v; want x alone", got, err)
	}
	rt.containers["c5"] = []string{"sha256:z"}
	rt.fail = map[string]error{"c4": status.Error(codes.Unavailable, "connection refused")}
	if _, err := v.refs(ctx, rt, []string{"c1", "c5", "c4"}); err == nil {
		t.Error("a status that cannot be read: no error")
	}
	rt.fail = nil
	rt.containers["c4"] = nil
	if _, err := v.refs(ctx, rt, []string{"c1", "c5", "c4"}); err != nil {
		t.Fatal(err)
	}
	if rt.statuses["c5"] != 1 {
		t.Errorf("c5, read before the failure, read %d times; want once", rt.statuses["c5"])
	}
}

// TestVolumeMatchedInEveryForm: a mount that names its image by a tag in
// its familiar form (a client other than the kubelet, which passes the
// ID) keeps the image listed under the qualified tag.
func TestVolumeMatchedInEveryForm(t *testing.T) {
	rt := &mountingRuntime{removalsRuntime: &removalsRuntime{}, containers: map[string][]string{"c": {"team/data:v1"}}}
	m := everythingNeeded(t, Options{Runtime: rt})
	if _, err := m.tracker.syncContainers(t.Context(), m.listContainers); err != nil {
		t.Fatal(err)
	}
	in := []Image{
		{ID: "sha256:dd", RepoTags: []string{"docker.io/team/data:v1"}},
		{ID: "sha256:ee", RepoTags: []string{"docker.io/team/data:v2"}},
	}
	if err := m.markVolumes(t.Context(), in); err != nil {
		t.Fatal(err)
	}
	if !in[0].InUse || in[1].InUse {
		t.Errorf("in use: data:v1 %v, data:v2 %v; want v1 alone", in[0].InUse, in[1].InUse)
	}
}

// TestVolumeRecheckedBeforeEachRemoval: a container created after the plan
// mounts an image the plan means to remove as an image volume. The check
// right before each removal reads the new container's mounts, so the image
// is kept as in use. And a run whose check cannot read a container's status
// stops there.
func TestVolumeRecheckedBeforeEachRemoval(t *testing.T) {
	rt := &mountingRuntime{removalsRuntime: &removalsRuntime{images: threeImages()}, containers: map[string][]string{}}
	rt.onRemove = func(id string) {
		if id == "sha256:aa" { // meanwhile, a container mounting b is created
			rt.mu.Lock()
			rt.containers["late"] = []string{"sha256:bb"}
			rt.mu.Unlock()
		}
	}
	m := everythingNeeded(t, Options{Runtime: rt})
	removeAllButSkipped(t, m, rt.removalsRuntime, "sha256:bb "+KeepInUse)
	// A mount is a use, dated when it was seen (as the kubelet dates it).
	if got := m.Tracker().Usage()["sha256:bb"].LastUsed; !got.Equal(t0.Add(time.Hour)) {
		t.Errorf("last-used of the mounted image = %v, want %v", got, t0.Add(time.Hour))
	}

	// A container created mid-run whose status cannot be read: the check
	// before the next removal fails, and the run stops there.
	rt.mu.Lock()
	rt.removed = nil
	rt.onRemove = func(id string) {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		if id == "sha256:aa" {
			rt.containers["slow"] = nil
			rt.fail = map[string]error{"slow": status.Error(codes.DeadlineExceeded, "slow")}
		}
	}
	rt.mu.Unlock()
	rt.containers = map[string][]string{}
	if _, err := m.GarbageCollect(t.Context(), TriggerManual); err == nil {
		t.Error("a run whose check cannot read a new container's status: no error")
	}
	if diff := cmp.Diff([]string{"sha256:aa"}, rt.removed); diff != "" {
		t.Errorf("removed (-want +got), the check failing after the first removal:\n%s", diff)
	}

	// The status of a new container cannot be read at the plan: the plan
	// fails, and nothing is removed.
	rt.mu.Lock()
	rt.removed, rt.onRemove = nil, nil
	rt.containers["unreadable"] = nil
	rt.fail = map[string]error{"unreadable": status.Error(codes.DeadlineExceeded, "slow")}
	rt.mu.Unlock()
	if _, err := m.GarbageCollect(t.Context(), TriggerManual); err == nil {
		t.Error("GC with an unreadable container status: no error, want the runtime's")
	}
	if len(rt.removed) != 0 {
		t.Errorf("removed %v with a container whose mounts could not be read", rt.removed)
	}
}
