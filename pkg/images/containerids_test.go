package images

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/testbed"
)

// inUseOf says, for each image of images, whether a container the tracker
// knows uses it.
func inUseOf(tr *Tracker, images []*runtimeapi.Image) map[string]bool {
	got := map[string]bool{}
	for _, img := range images {
		got[img.GetId()] = tr.inUse(&Image{ID: img.GetId(), RepoTags: img.GetRepoTags()})
	}
	return got
}

// TestListingWithoutDistinctIDs: a runtime that lists containers without
// an ID, or two containers under one ID, is misbehaving; still, every
// container it lists keeps its image (the kubelet's image GC counts every
// listed container's image, whatever its ID), whichever way the tracker
// applies the listing (the first one, one that differs from the last by a
// few entries, the same again in another order), and once the runtime
// lists them with IDs of their own again, the tracker holds exactly them.
func TestListingWithoutDistinctIDs(t *testing.T) {
	images := []*runtimeapi.Image{criImage("sha256:a", "r/a:1"), criImage("sha256:b", "r/b:1"), criImage("sha256:c", "r/c:1")}
	running := runtimeapi.ContainerState_CONTAINER_RUNNING
	for _, id := range []string{"", "dup"} {
		t.Run(fmt.Sprintf("id %q", id), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			steps := []struct {
				name    string
				listing []*runtimeapi.Container
				want    map[string]bool
			}{
				{"one container", []*runtimeapi.Container{criContainer(id, "sha256:b", running)},
					map[string]bool{"sha256:a": false, "sha256:b": true, "sha256:c": false}},
				{"a second one under its ID", []*runtimeapi.Container{criContainer(id, "sha256:a", running), criContainer(id, "sha256:b", running)},
					map[string]bool{"sha256:a": true, "sha256:b": true, "sha256:c": false}},
				{"the same in another order", []*runtimeapi.Container{criContainer(id, "sha256:b", running), criContainer(id, "sha256:a", running)},
					map[string]bool{"sha256:a": true, "sha256:b": true, "sha256:c": false}},
				{"a third, and one of its own", []*runtimeapi.Container{criContainer(id, "sha256:a", running), criContainer(id, "sha256:b", running),
					criContainer(id, "r/c:1", running), criContainer("own", "sha256:a", running)},
					map[string]bool{"sha256:a": true, "sha256:b": true, "sha256:c": true}},
				{"IDs of their own again", []*runtimeapi.Container{criContainer("c1", "sha256:a", running)},
					map[string]bool{"sha256:a": true, "sha256:b": false, "sha256:c": false}},
			}
			// Applied in turn on one tracker, and each on a tracker that
			// knew the first listing (a listing that differs from the last
			// by a few entries).
			tr, _ := newTestTracker(t)
			for _, step := range steps {
				listing := slices.Clone(step.listing)
				rng.Shuffle(len(listing), func(i, j int) { listing[i], listing[j] = listing[j], listing[i] })
				reconcile(tr, images, listing, t0)
				if diff := cmp.Diff(step.want, inUseOf(tr, images)); diff != "" {
					t.Errorf("%s: in use (-want +got):\n%s", step.name, diff)
				}
				after, _ := newTestTracker(t)
				reconcile(after, images, steps[0].listing, t0)
				reconcile(after, images, listing, t0)
				if diff := cmp.Diff(step.want, inUseOf(after, images)); diff != "" {
					t.Errorf("%s, after the first listing: in use (-want +got):\n%s", step.name, diff)
				}
			}
			// The last listing gave IDs of their own: the tracker holds
			// exactly its containers, as one that never saw the others.
			fresh, _ := newTestTracker(t)
			reconcile(fresh, images, steps[len(steps)-1].listing, t0)
			if diff := cmp.Diff(fresh.refs, tr.refs); diff != "" {
				t.Errorf("image references (-fresh tracker +tracker):\n%s", diff)
			}
			if got := slices.Sorted(maps.Keys(tr.containers)); !slices.Equal(got, []string{"c1"}) {
				t.Errorf("containers %q, want c1 alone", got)
			}
		})
	}
}

// TestListingWithoutDistinctIDsAfterDeletion: a DELETED event of an ID,
// after a listing began that gives two containers under that ID: which one
// is gone cannot be told, so both keep their images until a listing begun
// after the event.
func TestListingWithoutDistinctIDsAfterDeletion(t *testing.T) {
	images := []*runtimeapi.Image{criImage("sha256:a"), criImage("sha256:b")}
	running := runtimeapi.ContainerState_CONTAINER_RUNNING
	tr, _ := newTestTracker(t)
	reconcile(tr, images, nil, t0)
	start := tr.beginListing()
	tr.observeEvent(&runtimeapi.ContainerEventResponse{ContainerId: "dup", CreatedAt: t0.UnixNano(),
		ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT})
	tr.applyContainers(start, []*runtimeapi.Container{criContainer("dup", "sha256:a", running), criContainer("dup", "sha256:b", running)})
	if diff := cmp.Diff(map[string]bool{"sha256:a": true, "sha256:b": true}, inUseOf(tr, images)); diff != "" {
		t.Errorf("in use (-want +got):\n%s", diff)
	}
	reconcile(tr, images, nil, t0)
	if diff := cmp.Diff(map[string]bool{"sha256:a": false, "sha256:b": false}, inUseOf(tr, images)); diff != "" {
		t.Errorf("after a listing without them, in use (-want +got):\n%s", diff)
	}
}

// TestEventWithoutDistinctIDs: an event whose statuses give containers
// without an ID, or two under one ID: each keeps its image, until a listing
// begun after the event lacks it.
func TestEventWithoutDistinctIDs(t *testing.T) {
	images := []*runtimeapi.Image{criImage("sha256:a"), criImage("sha256:b"), criImage("sha256:c")}
	for _, id := range []string{"", "dup"} {
		t.Run(fmt.Sprintf("id %q", id), func(t *testing.T) {
			tr, _ := newTestTracker(t)
			reconcile(tr, images, nil, t0)
			tr.observeEvent(&runtimeapi.ContainerEventResponse{ContainerId: id, CreatedAt: t0.UnixNano(),
				ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT,
				ContainersStatuses: []*runtimeapi.ContainerStatus{{Id: id, ImageRef: "sha256:a"}, {Id: id, ImageRef: "sha256:b"}}})
			if diff := cmp.Diff(map[string]bool{"sha256:a": true, "sha256:b": true, "sha256:c": false}, inUseOf(tr, images)); diff != "" {
				t.Errorf("in use (-want +got):\n%s", diff)
			}
			reconcile(tr, images, []*runtimeapi.Container{criContainer("c1", "sha256:c", runtimeapi.ContainerState_CONTAINER_RUNNING)}, t0)
			if diff := cmp.Diff(map[string]bool{"sha256:a": false, "sha256:b": false, "sha256:c": true}, inUseOf(tr, images)); diff != "" {
				t.Errorf("after a listing without them, in use (-want +got):\n%s", diff)
			}
		})
	}
}

// statusingRuntime is a listingRuntime that gives every container's status,
// without image mounts.
type statusingRuntime struct{ *listingRuntime }

func (statusingRuntime) ContainerStatus(_ context.Context, id string) (*runtimeapi.ContainerStatus, error) {
	return &runtimeapi.ContainerStatus{Id: id}, nil
}

// TestContainersWithoutDistinctIDsKeepTheirImages: a runtime lists two
// running containers, of images aa and bb, both without an ID or both under
// one ID. Each keeps its image (the kubelet's image GC counts every listed
// container's image), and the listing is counted and logged as the
// runtime's fault. Where the runtime gives container statuses (for the
// images containers mount as image volumes), the status of such a container
// cannot be asked for: the run fails, as when a status cannot be read.
func TestContainersWithoutDistinctIDsKeepTheirImages(t *testing.T) {
	for _, id := range []string{"", "dup"} {
		for _, statuses := range []bool{false, true} {
			t.Run(fmt.Sprintf("id %q, statuses %v", id, statuses), func(t *testing.T) {
				rt := &listingRuntime{statusRuntime: statusRuntime{&removalsRuntime{images: threeImages()}}}
				rt.add(&runtimeapi.Container{Id: id, ImageRef: "sha256:aa", ImageId: "sha256:aa",
					Image: &runtimeapi.ImageSpec{Image: "registry.example/a:1"}, State: runtimeapi.ContainerState_CONTAINER_RUNNING})
				rt.add(&runtimeapi.Container{Id: id, ImageRef: "sha256:bb", ImageId: "sha256:bb",
					Image: &runtimeapi.ImageSpec{Image: "registry.example/b:1"}, State: runtimeapi.ContainerState_CONTAINER_RUNNING})
				var runtime RuntimeService = rt
				if statuses {
					runtime = statusingRuntime{rt}
				}
				reg := prometheus.NewRegistry()
				m := everythingNeeded(t, Options{Runtime: runtime, Registerer: reg})
				r, err := m.GarbageCollect(t.Context(), TriggerManual)
				switch {
				case statuses:
					if !errors.Is(err, errSharedContainerIDs) {
						t.Errorf("run error %v, want errSharedContainerIDs", err)
					}
				case r == nil || r.Outcome == nil:
					t.Fatalf("no run: %v", err)
				default:
					var kept []string
					for _, d := range r.Plan.Keep {
						kept = append(kept, d.Image.ID+" "+d.Reason)
					}
					slices.Sort(kept)
					if diff := cmp.Diff([]string{"sha256:aa " + KeepInUse, "sha256:bb " + KeepInUse}, kept); diff != "" {
						t.Errorf("kept (-want +got):\n%s", diff)
					}
				}
				if slices.ContainsFunc(rt.removed, func(id string) bool { return id != "sha256:cc" }) {
					t.Errorf("removed %v although every listed container uses one of the images", rt.removed)
				}
				families, err := reg.Gather()
				if err != nil {
					t.Fatal(err)
				}
				if got, ok := testbed.MetricSum(families, "nodegc_image_gc_container_id_faults_total", "source=listing"); !ok || got == 0 {
					t.Errorf("nodegc_image_gc_container_id_faults_total{source=listing} = %v (exported: %v), want the listings counted", got, ok)
				}
			})
		}
	}
}
