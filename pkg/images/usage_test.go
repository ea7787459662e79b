package images

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/diskstats"
)

// streamRuntime is a runtime whose container event stream fails until
// opened, and which counts container listings: all of them, and those begun
// once a stream was live (about to be reported connected, or since).
type streamRuntime struct {
	mu        sync.Mutex
	lists     int
	liveLists int
	open      bool
	live      bool
	opened    chan struct{} // closed when a stream is open
}

func (r *streamRuntime) ListImages(context.Context) ([]*runtimeapi.Image, error) { return nil, nil }
func (r *streamRuntime) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lists++
	if r.live {
		r.liveLists++
	}
	return nil, nil
}
func (r *streamRuntime) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{{FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: "/images"}}}}, nil
}
func (r *streamRuntime) RemoveImage(context.Context, string) error { return nil }
func (r *streamRuntime) WatchContainerEvents(ctx context.Context, connected func(), _ func(*runtimeapi.ContainerEventResponse)) error {
	r.mu.Lock()
	open := r.open
	r.live = open
	r.mu.Unlock()
	if !open {
		return status.Error(codes.Unavailable, "connection refused")
	}
	defer func() {
		r.mu.Lock()
		r.live = false
		r.mu.Unlock()
	}()
	connected()
	close(r.opened)
	<-ctx.Done()
	return ctx.Err()
}

func (r *streamRuntime) listings() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lists
}

// liveListings counts the listings begun once a stream was live.
func (r *streamRuntime) liveListings() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.liveLists
}

type fixedDisk struct{}

func (fixedDisk) Stat(string) (diskstats.Stats, error) {
	return diskstats.Stats{Capacity: 100 << 30, Available: 90 << 30}, nil
}

// TestUsagePolledWhileStreamBroken: while the container event stream cannot
// be opened (an error other than "unsupported"), last-used times must not
// go stale: containers are listed every diskCheckInterval. Once the stream
// is open, the ticks list no more.
func TestUsagePolledWhileStreamBroken(t *testing.T) {
	cfg := config.Defaulted().ImageGC
	cfg.HighThresholdPercent = ptr.To[int32](100)
	cfg.DiskCheckInterval = metav1.Duration{Duration: 10 * time.Second}
	cfg.ContainerEvents = true
	// A sweep's run lists containers too: none comes within the minutes
	// the fake clock moves here (the reopening below steps a minute per
	// look, for ten seconds at most).
	cfg.Period = metav1.Duration{Duration: 24 * time.Hour}
	clk := clocktesting.NewFakeClock(t0)
	rt := &streamRuntime{opened: make(chan struct{})}
	m, err := NewManager(Options{Config: cfg, StateDirectory: t.TempDir(), Runtime: rt, Disk: fixedDisk{}, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	RunUntilCleanup(t, m)
	// step moves the fake clock once Run's goroutines wait on it.
	step := func(d time.Duration) {
		t.Helper()
		testbed.WaitFor(t, 10*time.Second, "Run's goroutines to wait on the fake clock", clk.HasWaiters)
		clk.Step(d)
	}
	for range 3 {
		before := rt.listings()
		step(cfg.DiskCheckInterval.Duration)
		testbed.WaitFor(t, 10*time.Second, "a listing on the tick while the stream is broken", func() bool { return rt.listings() > before })
	}
	rt.mu.Lock()
	rt.open = true
	rt.mu.Unlock()
	// The ticker alone makes the clock have waiters, so one step may land
	// before the stream's reader waits out its backoff: step until it
	// reopens.
	testbed.WaitFor(t, 10*time.Second, "the stream reopened", func() bool {
		step(time.Minute)
		select {
		case <-rt.opened:
			return true
		case <-time.After(10 * time.Millisecond):
			return false
		}
	})
	// The step that reopened the stream also ticked: the usage watcher may
	// have taken that tick, seen the stream not yet live and be listing
	// still. It lists one at a time, so once a listing has begun with the
	// stream live, one made on a tick before is counted, and at most the
	// listing made when the stream opened is still to come (when the one
	// seen is the tick's).
	testbed.WaitFor(t, 10*time.Second, "a listing begun with the stream live", func() bool {
		return m.eventsLive.Load() && rt.liveListings() >= 1
	})
	settled := rt.listings()
	for range 3 {
		step(cfg.DiskCheckInterval.Duration)
	}
	if got := rt.listings(); got > settled+1 { // the listing made when the stream opened may land now
		t.Errorf("%d listings on ticks while the stream was live, want none", got-settled)
	}
}

// watcherConfig is the default image GC configuration for tests of the
// usage watcher alone: threshold GC off, a check every 10s, and no sweep
// (which would list) within the test.
func watcherConfig() config.ImageGCConfiguration {
	cfg := config.Defaulted().ImageGC
	cfg.HighThresholdPercent = ptr.To[int32](100)
	cfg.DiskCheckInterval = metav1.Duration{Duration: 10 * time.Second}
	cfg.Period = metav1.Duration{Duration: 24 * time.Hour}
	return cfg
}

// TestNoStreamByDefault: with imageGC.containerEvents unset, the image GC
// subscribes to no container event stream, though the runtime offers one
// (containerd 2.x blocks its container lifecycle while a subscriber does
// not read): it lists the containers at once, then every diskCheckInterval,
// and says so in nodegc_image_usage_source.
func TestNoStreamByDefault(t *testing.T) {
	cfg := watcherConfig()
	clk := clocktesting.NewFakeClock(t0)
	rt := &streamRuntime{open: true, opened: make(chan struct{})}
	reg := prometheus.NewRegistry()
	m, err := NewManager(Options{Config: cfg, StateDirectory: t.TempDir(), Runtime: rt, Disk: fixedDisk{}, Clock: clk, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	RunUntilCleanup(t, m)
	testbed.WaitFor(t, 10*time.Second, "the listing at start", func() bool { return rt.listings() >= 1 })
	for range 3 {
		before := rt.listings()
		testbed.WaitFor(t, 10*time.Second, "Run's goroutines to wait on the fake clock", clk.HasWaiters)
		clk.Step(cfg.DiskCheckInterval.Duration)
		testbed.WaitFor(t, 10*time.Second, "a listing on the tick", func() bool { return rt.listings() > before })
	}
	select {
	case <-rt.opened:
		t.Error("the image GC opened the runtime's container event stream with imageGC.containerEvents unset")
	default:
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for source, want := range map[string]float64{usageFromPolling: 1, usageFromEvents: 0} {
		if got, _ := testbed.MetricSum(families, "nodegc_image_usage_source", "source="+source); got != want {
			t.Errorf("nodegc_image_usage_source{source=%s} = %v, want %v", source, got, want)
		}
	}
}

// pollingRuntime lists one image, and one container using it; it counts
// its listings.
type pollingRuntime struct {
	streamRuntime
	mu                  sync.Mutex
	imageLists, ctLists int
}

func (r *pollingRuntime) ListImages(context.Context) ([]*runtimeapi.Image, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.imageLists++
	return []*runtimeapi.Image{{Id: "sha256:aa", RepoTags: []string{"registry.example/a:1"}, Size: 20}}, nil
}

func (r *pollingRuntime) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ctLists++
	return []*runtimeapi.Container{{Id: "c1", Image: &runtimeapi.ImageSpec{Image: "sha256:aa"}, ImageRef: "sha256:aa",
		State: runtimeapi.ContainerState_CONTAINER_RUNNING}}, nil
}

func (r *pollingRuntime) counts() (images, containers int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.imageLists, r.ctLists
}

// TestPollingListsImagesSeldom: polling (the default) lists the containers
// at every diskCheckInterval, and dates the uses of the images listed last
// from them; the images themselves are listed at start, when a container
// names one not listed yet, and every 5 minutes (liveRelistInterval), not
// at every tick: ListImages' cost grows with the node's images, and a
// second's poll of hundreds of them is the runtime's CPU.
func TestPollingListsImagesSeldom(t *testing.T) {
	cfg := watcherConfig()
	clk := clocktesting.NewFakeClock(t0)
	rt := &pollingRuntime{}
	m, err := NewManager(Options{Config: cfg, StateDirectory: t.TempDir(), Runtime: rt, Disk: fixedDisk{}, Clock: clk, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	RunUntilCleanup(t, m)
	testbed.WaitFor(t, 10*time.Second, "the listing at start", func() bool { _, c := rt.counts(); return c >= 1 })
	const ticks = 12 // two minutes
	for range ticks {
		_, before := rt.counts()
		testbed.WaitFor(t, 10*time.Second, "Run's goroutines to wait on the fake clock", clk.HasWaiters)
		clk.Step(cfg.DiskCheckInterval.Duration)
		testbed.WaitFor(t, 10*time.Second, "a container listing on the tick", func() bool { _, c := rt.counts(); return c > before })
	}
	images, containers := rt.counts()
	if images > 2 || containers < ticks {
		t.Errorf("%d image listings and %d container listings in %d ticks, want images listed at start only, containers at every tick", images, containers, ticks)
	}
	testbed.WaitFor(t, 10*time.Second, "the last tick's use of aa", func() bool {
		return m.tracker.Usage()["sha256:aa"].LastUsed.Equal(clk.Now())
	})
	// Five minutes on, the images are listed again.
	for range 20 {
		testbed.WaitFor(t, 10*time.Second, "Run's goroutines to wait on the fake clock", clk.HasWaiters)
		clk.Step(cfg.DiskCheckInterval.Duration)
	}
	testbed.WaitFor(t, 10*time.Second, "an image listing after 5 minutes", func() bool { i, _ := rt.counts(); return i > images })
}
