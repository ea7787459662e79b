package images

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/config"
)

// containerEvent is a CRI container event of container id, whose status
// names its image by imageRef (ID or digest) and spec (tag), at the time at.
func containerEvent(typ runtimeapi.ContainerEventType, id, imageRef, spec string, at time.Time) *runtimeapi.ContainerEventResponse {
	ev := &runtimeapi.ContainerEventResponse{ContainerId: id, ContainerEventType: typ, CreatedAt: at.UnixNano()}
	if typ != runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT {
		ev.ContainersStatuses = []*runtimeapi.ContainerStatus{{Id: id, ImageRef: imageRef, Image: &runtimeapi.ImageSpec{Image: spec}}}
	}
	return ev
}

// TestUseOfUnknownImageIsRecorded: an image pulled after the last image
// listing, used by a container that is deleted before the next one, counts
// as used. The tracker asks for an image listing as soon as an event names
// an image it does not know; whichever order the listing and the events
// take, the use is kept, and no last-used time predates first-detected.
const (
	created = runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT
	started = runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT
	stopped = runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT
	deleted = runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT
)

func TestUseOfUnknownImageIsRecorded(t *testing.T) {
	newImg := criImage("sha256:new", "r/new:1")
	newImg.RepoDigests = []string{"r/new@sha256:d1"}
	old := criImage("sha256:old", "r/old:1")
	use := func(tr *Tracker, ref, spec string, from time.Time) {
		tr.observeEvent(containerEvent(created, "job", ref, spec, from))
		tr.observeEvent(containerEvent(started, "job", ref, spec, from.Add(time.Second)))
		tr.observeEvent(containerEvent(stopped, "job", ref, spec, from.Add(2*time.Second)))
		tr.observeEvent(containerEvent(deleted, "job", "", "", from.Add(3*time.Second)))
	}
	for name, tc := range map[string]struct {
		run  func(tr *Tracker)
		want Usage
	}{
		// The listing comes after the container is gone: the use counts as
		// made when nodegc first saw the image (no earlier last-used).
		"listed after the container is gone (by image ID)": {
			run: func(tr *Tracker) {
				use(tr, "sha256:new", "r/new:1", t0.Add(10*time.Second))
				tr.applyImages([]*runtimeapi.Image{old, newImg}, t0.Add(20*time.Second))
			},
			want: Usage{FirstDetected: t0.Add(20 * time.Second), LastUsed: t0.Add(20 * time.Second)},
		},
		"listed after the container is gone (by digest)": {
			run: func(tr *Tracker) {
				use(tr, "r/new@sha256:d1", "r/new:1", t0.Add(10*time.Second))
				tr.applyImages([]*runtimeapi.Image{old, newImg}, t0.Add(20*time.Second))
			},
			want: Usage{FirstDetected: t0.Add(20 * time.Second), LastUsed: t0.Add(20 * time.Second)},
		},
		"listed after the container is gone (by tag only)": {
			run: func(tr *Tracker) {
				use(tr, "", "r/new:1", t0.Add(10*time.Second))
				tr.applyImages([]*runtimeapi.Image{old, newImg}, t0.Add(20*time.Second))
			},
			want: Usage{FirstDetected: t0.Add(20 * time.Second), LastUsed: t0.Add(20 * time.Second)},
		},
		// The listing the tracker asked for comes between the events: the
		// later ones count to the second.
		"listed while the container runs": {
			run: func(tr *Tracker) {
				tr.observeEvent(containerEvent(created, "job", "sha256:new", "r/new:1", t0.Add(10*time.Second)))
				tr.applyImages([]*runtimeapi.Image{old, newImg}, t0.Add(10500*time.Millisecond))
				tr.observeEvent(containerEvent(started, "job", "sha256:new", "r/new:1", t0.Add(11*time.Second)))
				tr.observeEvent(containerEvent(deleted, "job", "", "", t0.Add(13*time.Second)))
			},
			want: Usage{FirstDetected: t0.Add(10500 * time.Millisecond), LastUsed: t0.Add(13 * time.Second)},
		},
		// A listing begun before the events (the image was not pulled
		// yet) and applied after them does not drop what they said: the
		// next listing applies it.
		"listing begun before the events, applied after": {
			run: func(tr *Tracker) {
				start := tr.beginListing()
				use(tr, "sha256:new", "r/new:1", t0.Add(10*time.Second))
				tr.reconcileImages(start, []*runtimeapi.Image{old}, t0.Add(15*time.Second))
				tr.applyImages([]*runtimeapi.Image{old, newImg}, t0.Add(20*time.Second))
			},
			want: Usage{FirstDetected: t0.Add(20 * time.Second), LastUsed: t0.Add(20 * time.Second)},
		},
	} {
		t.Run(name, func(t *testing.T) {
			tr, _ := newTestTracker(t)
			tr.applyImages([]*runtimeapi.Image{old}, t0)
			drain(tr.unknownImages())
			tc.run(tr)
			if diff := cmp.Diff(tc.want, tr.Usage()["sha256:new"]); diff != "" {
				t.Errorf("usage of the image used before it was listed (-want +got):\n%s", diff)
			}
			if got := tr.Usage()["sha256:old"]; got.LastUsed != (time.Time{}) {
				t.Errorf("unused image got last-used %v", got.LastUsed)
			}
		})
	}

	t.Run("the tracker asks for an image listing", func(t *testing.T) {
		tr, _ := newTestTracker(t)
		tr.applyImages([]*runtimeapi.Image{old}, t0)
		drain(tr.unknownImages())
		tr.observeEvent(containerEvent(created, "c", "sha256:old", "r/old:1", t0.Add(time.Second)))
		select {
		case <-tr.unknownImages():
			t.Fatal("an event naming a known image asked for an image listing")
		default:
		}
		tr.observeEvent(containerEvent(created, "job", "sha256:new", "r/new:1", t0.Add(time.Second)))
		select {
		case <-tr.unknownImages():
		default:
			t.Fatal("an event naming an unknown image did not ask for an image listing")
		}
		// So does a container listing (polling, or the check before a
		// removal) that names one.
		drain(tr.unknownImages())
		tr.applyContainers(tr.beginListing(), []*runtimeapi.Container{criContainer("c", "sha256:old", runtimeapi.ContainerState_CONTAINER_RUNNING)})
		select {
		case <-tr.unknownImages():
			t.Fatal("a listing naming known images only asked for an image listing")
		default:
		}
		tr.applyContainers(tr.beginListing(), []*runtimeapi.Container{criContainer("c", "sha256:old", runtimeapi.ContainerState_CONTAINER_RUNNING),
			criContainer("polled", "r/new@sha256:d1", runtimeapi.ContainerState_CONTAINER_RUNNING)})
		select {
		case <-tr.unknownImages():
		default:
			t.Fatal("a container listing naming an unknown image did not ask for an image listing")
		}
		tr.applyContainers(tr.beginListing(), nil)
		// A reference no listing resolves (the image was removed) is
		// dropped by the first listing begun after the event.
		tr.observeEvent(containerEvent(deleted, "job", "", "", t0.Add(1500*time.Millisecond)))
		tr.applyImages([]*runtimeapi.Image{old}, t0.Add(2*time.Second))
		tr.applyImages([]*runtimeapi.Image{old, newImg}, t0.Add(3*time.Second))
		if got := tr.Usage()["sha256:new"]; got != (Usage{FirstDetected: t0.Add(3 * time.Second)}) {
			t.Errorf("image pulled again after the listing that dropped the reference = %+v, want first detected at its listing and never used", got)
		}
	})
}

func drain(c <-chan struct{}) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// TestReplayedEventsNeverMoveBack: containerd keeps the container events
// made while nobody subscribed and delivers them, with their own times,
// when nodegc subscribes. Such an event never moves a last-used time
// backwards, and never gives an image a last-used time before nodegc first
// saw it.
func TestReplayedEventsNeverMoveBack(t *testing.T) {
	tr, _ := newTestTracker(t)
	a, b := criImage("sha256:a", "r/a:1"), criImage("sha256:b", "r/b:1")
	reconcile(tr, []*runtimeapi.Image{a}, []*runtimeapi.Container{criContainer("ca", "sha256:a", runtimeapi.ContainerState_CONTAINER_RUNNING)}, t0)
	reconcile(tr, []*runtimeapi.Image{a}, []*runtimeapi.Container{criContainer("ca", "sha256:a", runtimeapi.ContainerState_CONTAINER_RUNNING)}, t0.Add(time.Hour))
	reconcile(tr, []*runtimeapi.Image{a, b}, nil, t0.Add(2*time.Hour))

	// Events of 30 minutes and of 90 minutes, replayed now.
	tr.observeEvent(containerEvent(stopped, "ca", "sha256:a", "r/a:1", t0.Add(30*time.Minute)))
	tr.observeEvent(containerEvent(stopped, "cb", "sha256:b", "r/b:1", t0.Add(90*time.Minute)))
	want := map[string]Usage{
		"sha256:a": {FirstDetected: t0, LastUsed: t0.Add(time.Hour)},                        // not back to 30m
		"sha256:b": {FirstDetected: t0.Add(2 * time.Hour), LastUsed: t0.Add(2 * time.Hour)}, // not 90m, before it was first seen
	}
	if diff := cmp.Diff(want, tr.Usage()); diff != "" {
		t.Errorf("usage after replayed events (-want +got):\n%s", diff)
	}
	for id, u := range tr.Usage() {
		if !u.LastUsed.IsZero() && u.LastUsed.Before(u.FirstDetected) {
			t.Errorf("%s: last used %v before first detected %v", id, u.LastUsed, u.FirstDetected)
		}
	}
}

// TestOlderImageListingIsDropped: the GC run and the usage watcher list
// images concurrently; a listing begun before the newest applied one (it
// lacks an image pulled in between) does not take that image for gone,
// which would lose its first-detected and last-used times.
func TestOlderImageListingIsDropped(t *testing.T) {
	tr, _ := newTestTracker(t)
	old, pulled := criImage("sha256:old", "r/old:1"), criImage("sha256:new", "r/new:1")
	tr.applyImages([]*runtimeapi.Image{old}, t0)
	early := tr.beginListing()
	tr.observeEvent(containerEvent(started, "job", "sha256:new", "r/new:1", t0.Add(time.Second)))
	tr.observeEvent(containerEvent(deleted, "job", "", "", t0.Add(2*time.Second)))
	late := tr.beginListing()
	tr.reconcileImages(late, []*runtimeapi.Image{old, pulled}, t0.Add(3*time.Second))
	tr.reconcileImages(early, []*runtimeapi.Image{old}, t0.Add(4*time.Second))
	want := Usage{FirstDetected: t0.Add(3 * time.Second), LastUsed: t0.Add(3 * time.Second)}
	if diff := cmp.Diff(want, tr.Usage()["sha256:new"]); diff != "" {
		t.Errorf("image pulled between two listings, after the older one was applied last (-want +got):\n%s", diff)
	}
}

// TestSaveRetryBacksOff: failed writes of the usage records (a full
// filesystem) are tried again after 2 s, then twice as long each time, up
// to a minute: not a log line every 2 s for as long as the disk is full.
func TestSaveRetryBacksOff(t *testing.T) {
	var got []time.Duration
	for d := time.Duration(0); len(got) < 8; {
		d = nextSaveRetry(d)
		got = append(got, d)
	}
	want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute, time.Minute}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("waits between tries (-want +got):\n%s", diff)
	}
}

// TestFailedSaveIsRetried: a write of the usage records that fails (here
// the state directory cannot be made) is counted and tried again without a
// new change, and the records reach the disk once it can be written.
func TestFailedSaveIsRetried(t *testing.T) {
	cfg := config.Defaulted().ImageGC
	cfg.HighThresholdPercent = ptr.To[int32](100)
	blocked := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(blocked, nil, 0o600); err != nil { // a file where the directory should be
		t.Fatal(err)
	}
	rt := &imagesRuntime{streamRuntime: &streamRuntime{opened: make(chan struct{})}, images: []*runtimeapi.Image{criImage("sha256:a", "r/a:1")}}
	m, err := NewManager(Options{Config: cfg, StateDirectory: blocked, Runtime: rt, Disk: fixedDisk{}, Clock: clocktesting.NewFakeClock(t0)})
	if err != nil {
		t.Fatal(err)
	}
	RunUntilCleanup(t, m)

	// The manager lists the runtime when it finds no event stream: the
	// image's record is a change to write.
	saves := func(result string) float64 { return testutil.ToFloat64(m.metrics.stateSaves.WithLabelValues(result)) }
	testbed.WaitFor(t, 5*time.Second, "a failed write counted", func() bool { return saves(resultError) >= 1 })
	if err := os.Remove(blocked); err != nil {
		t.Fatal(err)
	}
	testbed.WaitFor(t, 10*time.Second, "the write tried again, without a new change, and done", func() bool { return saves(resultSuccess) >= 1 })
	again, warn := NewTracker(blocked, t0.Add(time.Hour))
	if warn != nil {
		t.Fatal(warn)
	}
	if diff := cmp.Diff(map[string]Usage{"sha256:a": {FirstDetected: t0}}, again.Usage()); diff != "" {
		t.Errorf("records on disk (-want +got):\n%s", diff)
	}
}

// imagesRuntime is a streamRuntime that lists images.
type imagesRuntime struct {
	*streamRuntime
	images []*runtimeapi.Image
}

func (r *imagesRuntime) ListImages(context.Context) ([]*runtimeapi.Image, error) {
	return r.images, nil
}
