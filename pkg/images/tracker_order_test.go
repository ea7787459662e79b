package images

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestStaleListingAfterCreateEvent: a container listing begun before a
// CREATED event but applied after it must not wipe the container the event
// reported.
func TestStaleListingAfterCreateEvent(t *testing.T) {
	tr, _ := newTestTracker(t)
	images := []*runtimeapi.Image{criImage("sha256:a", "r/a:1")}
	reconcile(tr, images, nil, t0)
	start := tr.beginListing()
	var stale []*runtimeapi.Container // the listing, taken now: no container yet
	tr.observeEvent(createdEvent("c1", "sha256:a"))
	tr.applyContainers(start, stale) // the listing arrives after the event
	if !tr.inUse(&Image{ID: "sha256:a"}) {
		t.Fatal("a listing older than a CREATED event wiped the container: its image is not in use")
	}
}

// TestListingOrder, in adversarial interleavings of a simulated runtime's
// containers coming and going, its container events (delivered in order,
// late), and listings of it that begin, are taken and come back in any
// order: the tracker never forgets a live container it was told of (by an
// event or by a listing taken after the container was created), and once
// every event is delivered and a fresh listing applied it holds exactly
// the runtime's containers.
func TestListingOrder(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	imageIDs := []string{"sha256:a", "sha256:b", "sha256:c"}
	var images []*runtimeapi.Image
	for _, id := range imageIDs {
		images = append(images, criImage(id))
	}
	type pendingListing struct {
		start    listingStart
		snapshot []*runtimeapi.Container // nil until taken
		taken    bool
	}
	for round := range 300 {
		tr, _ := newTestTracker(t)
		reconcile(tr, images, nil, t0)
		live := map[string]string{} // the runtime: container ID -> image
		known := map[string]bool{}  // live containers the tracker was told of
		var queue []*runtimeapi.ContainerEventResponse
		var pending []*pendingListing
		next := 0
		snapshotOf := func() []*runtimeapi.Container {
			var cs []*runtimeapi.Container
			for id, img := range live {
				cs = append(cs, criContainer(id, img, runtimeapi.ContainerState_CONTAINER_CREATED))
			}
			rng.Shuffle(len(cs), func(i, j int) { cs[i], cs[j] = cs[j], cs[i] })
			return cs
		}
		check := func(step int, what string) {
			for id := range known {
				if _, ok := tr.containers[id]; !ok {
					t.Fatalf("seed %d round %d step %d (%s): live container %s, which the tracker was told of, is forgotten", seed, round, step, what, id)
				}
			}
		}
		for step := range 60 {
			var what string
			switch op := rng.IntN(10); {
			case op < 2: // the runtime creates a container
				id := fmt.Sprintf("c%d", next)
				next++
				live[id] = imageIDs[rng.IntN(len(imageIDs))]
				queue = append(queue, createdEvent(id, live[id]))
				what = "create " + id
			case op < 3 && len(live) > 0: // the runtime deletes one
				ids := sortedKeys(live)
				id := ids[rng.IntN(len(ids))]
				delete(live, id)
				delete(known, id)
				queue = append(queue, &runtimeapi.ContainerEventResponse{ContainerId: id,
					ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT, CreatedAt: t0.UnixNano()})
				what = "delete " + id
			case op < 5 && len(queue) > 0: // the next event arrives
				ev := queue[0]
				queue = queue[1:]
				tr.observeEvent(ev)
				if _, ok := live[ev.GetContainerId()]; ok && ev.GetContainerEventType() == runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT {
					known[ev.GetContainerId()] = true
				}
				what = "event " + ev.GetContainerId()
			case op < 6: // a listing begins
				pending = append(pending, &pendingListing{start: tr.beginListing()})
				what = "listing begins"
			case op < 8: // a listing is taken by the runtime
				for _, p := range pending {
					if !p.taken {
						p.snapshot, p.taken = snapshotOf(), true
						break
					}
				}
				what = "listing taken"
			default: // a taken listing comes back, in any order
				var ready []int
				for k, p := range pending {
					if p.taken {
						ready = append(ready, k)
					}
				}
				if len(ready) == 0 {
					continue
				}
				k := ready[rng.IntN(len(ready))]
				p := pending[k]
				pending = slices.Delete(pending, k, k+1)
				applied := tr.applyContainers(p.start, p.snapshot)
				for _, c := range p.snapshot {
					if _, ok := live[c.GetId()]; ok && applied {
						known[c.GetId()] = true
					}
				}
				what = "listing applied"
			}
			check(step, what)
		}
		// Quiet: every event delivered, a fresh listing applied.
		for _, ev := range queue {
			tr.observeEvent(ev)
		}
		tr.applyContainers(tr.beginListing(), snapshotOf())
		got := map[string]string{}
		for id, tc := range tr.containers {
			got[id] = tc.refs[0]
		}
		if fmt.Sprint(got) != fmt.Sprint(live) {
			t.Fatalf("seed %d round %d: after a fresh listing the tracker holds %v, the runtime %v", seed, round, got, live)
		}
		for _, id := range imageIDs {
			used := slices.Contains(sortedValues(live), id)
			if tr.inUse(&Image{ID: id}) != used {
				t.Fatalf("seed %d round %d: image %s in use %v, want %v", seed, round, id, !used, used)
			}
		}
	}
}

func createdEvent(id, imageRef string) *runtimeapi.ContainerEventResponse {
	return &runtimeapi.ContainerEventResponse{
		ContainerId: id, ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT, CreatedAt: t0.UnixNano(),
		ContainersStatuses: []*runtimeapi.ContainerStatus{{Id: id, ImageRef: imageRef}},
	}
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sortedValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
