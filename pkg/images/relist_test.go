package images

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/config"
)

// droppingRuntime has a live container event stream that sends nothing:
// the runtime dropped the events of the containers the test lists (CRI-O
// drops events when its channel is full; a second subscriber may take
// them). Its listings count as streamRuntime's do.
type droppingRuntime struct {
	streamRuntime
	lmu        sync.Mutex
	images     []*runtimeapi.Image
	containers []*runtimeapi.Container
}

func (r *droppingRuntime) ListImages(context.Context) ([]*runtimeapi.Image, error) {
	r.lmu.Lock()
	defer r.lmu.Unlock()
	return slices.Clone(r.images), nil
}

func (r *droppingRuntime) ListContainers(ctx context.Context, f *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	_, _ = r.streamRuntime.ListContainers(ctx, f) // counted
	r.lmu.Lock()
	defer r.lmu.Unlock()
	return slices.Clone(r.containers), nil
}

func (r *droppingRuntime) setContainers(cs ...*runtimeapi.Container) {
	r.lmu.Lock()
	r.containers = cs
	r.lmu.Unlock()
}

// TestLostEventsRelisted: the container event stream is live, but the
// runtime drops the CREATED and DELETED events of a container that lives a
// few minutes. Containers are listed every liveRelistInterval anyway, as
// the kubelet's evented PLEG relists, so its image's use is dated by the
// first listing while it lives; between those, the ticks that list while
// the stream is down list nothing.
func TestLostEventsRelisted(t *testing.T) {
	cfg := config.Defaulted().ImageGC
	cfg.HighThresholdPercent = ptr.To[int32](100)
	cfg.DiskCheckInterval = metav1.Duration{Duration: 10 * time.Second}
	cfg.Period = metav1.Duration{Duration: 24 * time.Hour} // no sweep lists meanwhile
	cfg.ContainerEvents = true
	clk := clocktesting.NewFakeClock(t0)
	rt := &droppingRuntime{streamRuntime: streamRuntime{open: true, opened: make(chan struct{})},
		images: []*runtimeapi.Image{{Id: "sha256:aa", RepoTags: []string{"registry.example/a:1"}, Size: mib}}}
	m, err := NewManager(Options{Config: cfg, StateDirectory: t.TempDir(), Runtime: rt, Disk: fixedDisk{}, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	RunUntilCleanup(t, m)
	<-rt.opened
	testbed.WaitFor(t, 10*time.Second, "the listing made when the stream opened", func() bool {
		return m.eventsLive.Load() && rt.liveListings() >= 1 && m.tracker.Usage()["sha256:aa"].FirstDetected.Equal(t0)
	})
	step := func(d time.Duration) {
		t.Helper()
		testbed.WaitFor(t, 10*time.Second, "Run's goroutines to wait on the fake clock", clk.HasWaiters)
		clk.Step(d)
	}
	// A container of aa is created; its events are lost.
	rt.setContainers(&runtimeapi.Container{Id: "lost", ImageRef: "sha256:aa", ImageId: "sha256:aa",
		Image: &runtimeapi.ImageSpec{Image: "registry.example/a:1"}, State: runtimeapi.ContainerState_CONTAINER_RUNNING})
	settled := rt.listings()
	for range int(liveRelistInterval/cfg.DiskCheckInterval.Duration) - 1 {
		step(cfg.DiskCheckInterval.Duration)
	}
	if got := rt.listings(); got > settled {
		t.Errorf("%d listings on ticks within %v of the last, with the stream live; want none", got-settled, liveRelistInterval)
	}
	step(cfg.DiskCheckInterval.Duration)
	relisted := clk.Now()
	testbed.WaitFor(t, 10*time.Second, "the use of aa dated by the listing made "+liveRelistInterval.String()+" after the last", func() bool {
		return !m.tracker.Usage()["sha256:aa"].LastUsed.Before(relisted)
	})
	rt.setContainers() // gone, its DELETED event lost too
}
