package images

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/cri"
	"github.com/nodegc/nodegc/pkg/diskstats"
)

// threeImages are sha256:aa, bb and cc, of 30 MiB each, one tag each
// (registry.example/a:1 ...).
func threeImages() []*runtimeapi.Image {
	return []*runtimeapi.Image{
		{Id: "sha256:aa", RepoTags: []string{"registry.example/a:1"}, Size: 30 * mib},
		{Id: "sha256:bb", RepoTags: []string{"registry.example/b:1"}, Size: 30 * mib},
		{Id: "sha256:cc", RepoTags: []string{"registry.example/c:1"}, Size: 30 * mib},
	}
}

// removalsRuntime lists a fixed set of images and no container; each
// removal calls onRemove first.
type removalsRuntime struct {
	streamRuntime
	mu       sync.Mutex
	images   []*runtimeapi.Image
	removed  []string
	onRemove func(id string)
}

func (r *removalsRuntime) ListImages(context.Context) ([]*runtimeapi.Image, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*runtimeapi.Image
	for _, img := range r.images {
		if !slices.Contains(r.removed, img.GetId()) {
			out = append(out, img)
		}
	}
	return out, nil
}

func (r *removalsRuntime) RemoveImage(_ context.Context, id string) error {
	if r.onRemove != nil {
		r.onRemove(id)
	}
	r.mu.Lock()
	r.removed = append(r.removed, id)
	r.mu.Unlock()
	return nil
}

// freedBytes sums the CRI sizes of the images removed.
func (r *removalsRuntime) freedBytes() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n uint64
	for _, img := range r.images {
		if slices.Contains(r.removed, img.GetId()) {
			n += img.GetSize()
		}
	}
	return n
}

// freeingDisk is an image filesystem of capacity bytes, available of them
// free before the removals of rt, whose removals free the images' CRI sizes
// as the runtime returns (containerd and CRI-O free an image's last
// reference synchronously).
type freeingDisk struct {
	capacity, available uint64
	rt                  interface{ freedBytes() uint64 }
}

func (d freeingDisk) Stat(string) (diskstats.Stats, error) {
	return diskstats.Stats{Capacity: d.capacity, Available: min(d.capacity, d.available+d.rt.freedBytes())}, nil
}

// statsDisk is an image filesystem whose usage never changes.
type statsDisk diskstats.Stats

func (d statsDisk) Stat(string) (diskstats.Stats, error) { return diskstats.Stats(d), nil }

// noSettle is the SettleTimeout of managers on a fake disk (statsDisk,
// scriptedDisk): its free space does not grow after a removal, so the
// settle before measuring what a run freed would only wait out
// gcrun.SettleQuiet, 1.5 s of real time per run that removed images. The
// settle still reads the disk once.
const noSettle = time.Millisecond

// lockedPods is a pod source whose answer the test changes while a run
// goes on.
type lockedPods struct {
	mu   sync.Mutex
	view PodImages
}

func (p *lockedPods) PodImages() PodImages {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.view
}

// TestScheduledRecheckedBeforeEachRemoval: a pod bound to the node after
// the plan was made names an image the plan means to remove. The check
// right before each removal asks the pod view again (as it lists the
// containers again), so the image is kept as scheduled: between the
// kubelet seeing the image present and creating the container, only the
// pod names it.
func TestScheduledRecheckedBeforeEachRemoval(t *testing.T) {
	rt := &removalsRuntime{images: threeImages()}
	pods := &lockedPods{view: PodImages{Authoritative: true, Refs: map[string]string{}}}
	rt.onRemove = func(id string) {
		if id == "sha256:aa" { // meanwhile, a pod naming b is bound here
			pods.mu.Lock()
			pods.view = PodImages{Authoritative: true, Refs: map[string]string{"registry.example/b:1": "web/late"}}
			pods.mu.Unlock()
		}
	}
	removeAllButSkipped(t, everythingNeeded(t, Options{Runtime: rt, Pods: pods}), rt, "sha256:bb "+KeepScheduled)
}

// hookSandboxes lists no sandbox image, and calls hook first each time.
type hookSandboxes struct{ hook func() }

func (h hookSandboxes) SandboxImages(context.Context) ([]string, error) {
	h.hook()
	return nil, nil
}

// TestEventDuringTheCheckKeepsTheImage: the check right before a removal
// makes calls to the runtime after it listed the containers (the sandbox
// list here, a container's status for its image volumes); a container
// created from the image meanwhile, whose CREATED event the tracker has
// when the check ends, keeps the image. containerd's RemoveImage removes
// an image whatever uses it.
func TestEventDuringTheCheckKeepsTheImage(t *testing.T) {
	rt := &removalsRuntime{images: threeImages()}
	var m *Manager
	var armed atomic.Bool
	rt.onRemove = func(id string) { armed.Store(id == "sha256:aa") } // bb is checked next
	sandboxes := hookSandboxes{hook: func() {
		if !armed.Swap(false) {
			return
		}
		m.tracker.observeEvent(&runtimeapi.ContainerEventResponse{
			ContainerId:        "late",
			ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT,
			CreatedAt:          m.clock.Now().UnixNano(),
			ContainersStatuses: []*runtimeapi.ContainerStatus{{Id: "late", ImageRef: "sha256:bb", ImageId: "sha256:bb",
				Image: &runtimeapi.ImageSpec{Image: "registry.example/b:1"}, State: runtimeapi.ContainerState_CONTAINER_CREATED}},
		})
	}}
	m = everythingNeeded(t, Options{Runtime: statusRuntime{rt}, Sandboxes: sandboxes})
	m.eventsLive.Store(true) // as Run does while the stream is open
	removeAllButSkipped(t, m, rt, "sha256:bb "+KeepInUse)
}

// everythingNeeded makes a manager on opts (Runtime, Pods, SandboxImages;
// the rest here) with every image over the minimum age and the disk so
// full that every image is needed (high 1%, low 0%); mutate, if given,
// changes the configuration further.
func everythingNeeded(t *testing.T, opts Options, mutate ...func(*config.ImageGCConfiguration)) *Manager {
	t.Helper()
	opts.Config = policyConfig()
	opts.Config.MinimumGCAge = &metav1.Duration{}
	opts.Config.HighThresholdPercent, opts.Config.LowThresholdPercent = ptr.To[int32](1), ptr.To[int32](0)
	for _, f := range mutate {
		f(&opts.Config)
	}
	opts.StateDirectory, opts.Disk = t.TempDir(), statsDisk{Capacity: 100 * mib, Available: 10 * mib}
	if rt, ok := opts.Runtime.(interface{ freedBytes() uint64 }); ok {
		// Removals show on the disk: one whose reading never moves at
		// removals is another filesystem (diskFeedback).
		opts.Disk = freeingDisk{capacity: 100 * mib, available: 10 * mib, rt: rt}
	}
	opts.SettleTimeout = noSettle
	opts.Clock = clocktesting.NewFakeClock(t0.Add(time.Hour))
	m, err := NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// removeAllButSkipped runs one manual collection of sha256:aa, bb and cc,
// and checks that aa and cc were removed and bb skipped at the check right
// before its removal, as skipped says ("ID reason").
func removeAllButSkipped(t *testing.T, m *Manager, rt *removalsRuntime, skipped string) {
	t.Helper()
	r, err := m.GarbageCollect(t.Context(), TriggerManual)
	if r == nil || r.Outcome == nil {
		t.Fatalf("no run: %v", err)
	}
	if diff := cmp.Diff([]string{"sha256:aa", "sha256:cc"}, rt.removed); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	var got []string
	for _, d := range r.Outcome.Skipped {
		got = append(got, d.Image.ID+" "+d.Reason)
	}
	if diff := cmp.Diff([]string{skipped}, got); diff != "" {
		t.Errorf("skipped at the check before removal (-want +got):\n%s", diff)
	}
}

// statusRuntime answers ImageStatus as containerd does: the image as it is
// listed now, with every name it has now.
type statusRuntime struct{ *removalsRuntime }

func (r statusRuntime) ImageStatus(_ context.Context, id string) (*runtimeapi.Image, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, img := range r.images {
		if img.GetId() == id && !slices.Contains(r.removed, id) {
			return img, nil
		}
	}
	return nil, nil
}

// TestNamesGainedSinceThePlan: while a run removes sha256:aa, a pull of
// another name of sha256:bb ends (the same image: the runtime only adds the
// name, in well under a second). RemoveImage would remove every name of
// bb, so the check before its removal judges bb by its names as the
// runtime gives them now: a new name that is excluded, pinned, the sandbox
// image, or one a pod bound to the node names keeps it. A new name that
// protects nothing does not. (bb was removed in every case: the check read
// the image but judged the plan's copy of its names.)
func TestNamesGainedSinceThePlan(t *testing.T) {
	const newName = "registry.example/critical:2"
	for _, tc := range []struct {
		name    string
		pinned  bool
		pods    map[string]string
		sandbox []string
		mutate  func(*config.ImageGCConfiguration)
		want    string // the reason bb is kept for; "" removed
	}{
		{name: "excluded", mutate: func(c *config.ImageGCConfiguration) { c.Exclude = []string{"registry.example/critical:*"} }, want: KeepExcluded},
		{name: "pinned", pinned: true, want: KeepPinned},
		{name: "scheduled", pods: map[string]string{newName: "web/late"}, want: KeepScheduled},
		{name: "sandbox image", sandbox: []string{"registry.example/critical:2@sha256:" + strings.Repeat("e", 64)}, want: KeepSandbox},
		{name: "protects nothing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &removalsRuntime{images: threeImages()}
			pods := &lockedPods{view: PodImages{Authoritative: true, Refs: map[string]string{}}}
			rt.onRemove = func(id string) {
				if id != "sha256:aa" {
					return
				}
				rt.mu.Lock()
				rt.images[1] = &runtimeapi.Image{Id: "sha256:bb", RepoTags: []string{"registry.example/b:1", newName}, Size: 30 * mib, Pinned: tc.pinned}
				rt.mu.Unlock()
				if tc.pods != nil {
					pods.mu.Lock()
					pods.view = PodImages{Authoritative: true, Refs: tc.pods}
					pods.mu.Unlock()
				}
			}
			var mutate []func(*config.ImageGCConfiguration)
			if tc.mutate != nil {
				mutate = append(mutate, tc.mutate)
			}
			m := everythingNeeded(t, Options{Runtime: statusRuntime{rt}, Pods: pods, SandboxImages: tc.sandbox}, mutate...)
			if tc.want != "" {
				removeAllButSkipped(t, m, rt, "sha256:bb "+tc.want)
				return
			}
			if _, err := m.GarbageCollect(t.Context(), TriggerManual); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"sha256:aa", "sha256:bb", "sha256:cc"}, rt.removed); diff != "" {
				t.Errorf("removed (-want +got):\n%s", diff)
			}
		})
	}
}

// threeOfApp is a runtime holding app:1, app:2 and app:3, one image each,
// sha256:cc, bb and aa.
func threeOfApp() *removalsRuntime {
	return &removalsRuntime{images: []*runtimeapi.Image{
		{Id: "sha256:aa", RepoTags: []string{"registry.example/app:3"}, Size: 30 * mib},
		{Id: "sha256:bb", RepoTags: []string{"registry.example/app:2"}, Size: 30 * mib},
		{Id: "sha256:cc", RepoTags: []string{"registry.example/app:1"}, Size: 30 * mib},
	}}
}

// TestNewRepositoryKeepsTheNewest: keeping the newest tag of every
// repository, a run removes the older two of app:1-3; while it removes the
// first, the last gains a tag of another repository. The plan could not
// rank it there (it may be that repository's newest), so it stays.
func TestNewRepositoryKeepsTheNewest(t *testing.T) {
	rt := threeOfApp()
	rt.onRemove = func(id string) {
		if id == "sha256:bb" {
			rt.mu.Lock()
			rt.images[2] = &runtimeapi.Image{Id: "sha256:cc", RepoTags: []string{"registry.example/app:1", "registry.example/critical:2"}, Size: 30 * mib}
			rt.mu.Unlock()
		}
	}
	m := everythingNeeded(t, Options{Runtime: statusRuntime{rt}}, func(c *config.ImageGCConfiguration) { c.KeepNewestPerRepository = 1 })
	r, err := m.GarbageCollect(t.Context(), TriggerManual)
	if r == nil || r.Outcome == nil {
		t.Fatalf("no run: %v", err)
	}
	var skipped []string
	for _, d := range r.Outcome.Skipped {
		skipped = append(skipped, d.Image.ID+" "+d.Reason)
	}
	if diff := cmp.Diff([]string{"sha256:bb"}, rt.removed); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"sha256:cc " + KeepNewestTags}, skipped); diff != "" {
		t.Errorf("skipped at the check before removal (-want +got):\n%s", diff)
	}
}

// TestTagMovedWithinTheRepositoryKeepsIt: keeping the newest tag of every
// repository, a run removes app:2 and app:1 (app:3 is the newest); while it
// removes app:2, app:3 moves onto app:1's image (a rollback: ctr images tag
// --force, or a pull of app:3 whose registry tag went back). That image
// is then the repository's only one, holding its newest tag, as a plan
// would rank it now: it stays. Before, the check asked only for a tag of a
// new repository, and the repository was left with no image.
func TestTagMovedWithinTheRepositoryKeepsIt(t *testing.T) {
	rt := threeOfApp()
	rt.onRemove = func(id string) {
		if id == "sha256:bb" {
			rt.mu.Lock()
			rt.images[0] = &runtimeapi.Image{Id: "sha256:aa", Size: 30 * mib}
			rt.images[2] = &runtimeapi.Image{Id: "sha256:cc", RepoTags: []string{"registry.example/app:1", "registry.example/app:3"}, Size: 30 * mib}
			rt.mu.Unlock()
		}
	}
	m := everythingNeeded(t, Options{Runtime: statusRuntime{rt}}, func(c *config.ImageGCConfiguration) { c.KeepNewestPerRepository = 1 })
	if r, err := m.GarbageCollect(t.Context(), TriggerManual); r == nil || r.Outcome == nil {
		t.Fatalf("no run: %v", err)
	}
	if diff := cmp.Diff([]string{"sha256:bb"}, rt.removed); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
}

// listingRuntime is a removalsRuntime whose container listing the test
// sets.
type listingRuntime struct {
	statusRuntime
	lmu        sync.Mutex
	containers []*runtimeapi.Container
}

func (r *listingRuntime) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	r.lmu.Lock()
	defer r.lmu.Unlock()
	return slices.Clone(r.containers), nil
}

func (r *listingRuntime) add(c *runtimeapi.Container) {
	r.lmu.Lock()
	r.containers = append(r.containers, c)
	r.lmu.Unlock()
}

// TestListedLastAtTheCheck: a container created while the check right
// before a removal makes its slow calls (the sandbox list here) keeps its
// image, for the check lists the containers again as its last step:
//   - polled: the runtime has no container event stream (containerd 1.x,
//     CRI-O without pod events, while the stream is reopened), or
//     imageGC.containerEvents is off, so no event tells of it;
//   - live stream: the stream is open but no event of that container is
//     delivered: a stream that stays open and sends nothing (a stalled
//     runtime or CRI proxy counts as subscribed once it has not failed for
//     a while), or an event still on its way (containerd queues it after
//     CreateContainer returned).
func TestListedLastAtTheCheck(t *testing.T) {
	for name, live := range map[string]bool{"polled": false, "live stream": true} {
		t.Run(name, func(t *testing.T) {
			rt := &listingRuntime{statusRuntime: statusRuntime{&removalsRuntime{images: threeImages()}}}
			var armed atomic.Bool
			rt.onRemove = func(id string) { armed.Store(id == "sha256:aa") } // bb is checked next
			sandboxes := hookSandboxes{hook: func() {
				if armed.Swap(false) {
					rt.add(&runtimeapi.Container{Id: "late", ImageRef: "sha256:bb", ImageId: "sha256:bb",
						Image: &runtimeapi.ImageSpec{Image: "registry.example/b:1"}, State: runtimeapi.ContainerState_CONTAINER_CREATED})
				}
			}}
			m := everythingNeeded(t, Options{Runtime: rt, Sandboxes: sandboxes})
			m.eventsLive.Store(live) // as Run does while the stream is open; no event comes
			removeAllButSkipped(t, m, rt.removalsRuntime, "sha256:bb "+KeepInUse)
		})
	}
}

// statusFailsFor is a listingRuntime whose ImageStatus of one image fails
// (the runtime does not answer).
type statusFailsFor struct {
	*listingRuntime
	id string
}

func (r statusFailsFor) ImageStatus(ctx context.Context, id string) (*runtimeapi.Image, error) {
	if id == r.id {
		return nil, status.Error(codes.Unavailable, "connection refused")
	}
	return r.listingRuntime.ImageStatus(ctx, id)
}

// TestCheckOutcomesCounted: every outcome of the check right before a
// removal is counted, the event it is there for first: an image kept
// (by reason), one gone (another removed it since the plan), one that
// passed it, and a check that could not be made (by why).
func TestCheckOutcomesCounted(t *testing.T) {
	rt := &listingRuntime{statusRuntime: statusRuntime{&removalsRuntime{images: []*runtimeapi.Image{
		{Id: "sha256:aa", RepoTags: []string{"registry.example/a:1"}, Size: 30 * mib},
		{Id: "sha256:bb", RepoTags: []string{"registry.example/b:1"}, Size: 30 * mib},
		{Id: "sha256:cc", RepoTags: []string{"registry.example/c:1"}, Size: 30 * mib},
		{Id: "sha256:dd", RepoTags: []string{"registry.example/d:1"}, Size: 30 * mib},
	}}}}
	rt.onRemove = func(id string) {
		if id != "sha256:aa" {
			return
		}
		// Meanwhile another removes bb, and a container of cc is made.
		rt.mu.Lock()
		rt.removed = append(rt.removed, "sha256:bb")
		rt.mu.Unlock()
		rt.add(&runtimeapi.Container{Id: "late", ImageRef: "sha256:cc", ImageId: "sha256:cc",
			Image: &runtimeapi.ImageSpec{Image: "registry.example/c:1"}, State: runtimeapi.ContainerState_CONTAINER_CREATED})
	}
	reg := prometheus.NewRegistry()
	m := everythingNeeded(t, Options{Runtime: statusFailsFor{rt, "sha256:dd"}, Registerer: reg})
	if _, err := m.GarbageCollect(t.Context(), TriggerManual); !cri.HasCode(err, codes.Unavailable) {
		t.Errorf("run error %v, want the runtime's Unavailable", err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		filters []string
		want    float64
	}{
		{[]string{"outcome=passed"}, 1},
		{[]string{"outcome=gone"}, 1},
		{[]string{"outcome=kept", "reason=" + KeepInUse}, 1},
		{[]string{"outcome=kept", "reason=" + KeepPinned}, 0},
		{[]string{"outcome=failed", "reason=error"}, 1},
		{[]string{"outcome=failed", "reason=held"}, 0},
	} {
		if got, ok := testbed.MetricSum(families, "nodegc_image_gc_check_outcomes_total", tc.filters...); !ok || got != tc.want {
			t.Errorf("nodegc_image_gc_check_outcomes_total%v = %v (exported: %v), want %v", tc.filters, got, ok, tc.want)
		}
	}
}

// hookArrivals calls hook before each read, then reads src (dates no
// image without one).
type hookArrivals struct {
	src  ArrivalSource
	hook func()
}

func (h hookArrivals) Arrivals(ctx context.Context, imgs []*runtimeapi.Image) (map[string]time.Time, error) {
	h.hook()
	if h.src == nil {
		return nil, nil
	}
	return h.src.Arrivals(ctx, imgs)
}

// switchedSandboxes lists the sandbox images the test sets while a run goes
// on.
type switchedSandboxes struct {
	mu    sync.Mutex
	names []string
}

func (s *switchedSandboxes) SandboxImages(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.names), nil
}

// TestBoundOrStartedLateInTheCheck: a pod bound to the node that names the
// image, or a pod sandbox started from it, while the check right before
// the image's removal makes its slow calls to the runtime (the arrival
// read here), keeps it, as a container made then does
// (TestListedLastAtTheCheck). The check reads the running sandboxes and the
// pod view after those calls: a pod bound then is not pulled again, nor a
// sandbox's image removed under it. Before, both were read before the
// arrival, and the image was removed.
func TestBoundOrStartedLateInTheCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		late func(pods *lockedPods, sandboxes *switchedSandboxes)
		want string
	}{
		{name: "pod bound", want: KeepScheduled, late: func(pods *lockedPods, _ *switchedSandboxes) {
			pods.mu.Lock()
			pods.view = PodImages{Authoritative: true, Refs: map[string]string{"registry.example/b:1": "web/late"}}
			pods.mu.Unlock()
		}},
		{name: "sandbox started", want: KeepSandbox, late: func(_ *lockedPods, sandboxes *switchedSandboxes) {
			sandboxes.mu.Lock()
			sandboxes.names = []string{"registry.example/b:1"}
			sandboxes.mu.Unlock()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &removalsRuntime{images: threeImages()}
			pods := &lockedPods{view: PodImages{Authoritative: true, Refs: map[string]string{}}}
			sandboxes := &switchedSandboxes{}
			var armed, fired atomic.Bool
			rt.onRemove = func(id string) { armed.Store(id == "sha256:aa") } // bb is checked next
			arrivals := hookArrivals{hook: func() {
				if armed.Swap(false) {
					tc.late(pods, sandboxes)
					fired.Store(true)
				}
			}}
			m := everythingNeeded(t, Options{Runtime: statusRuntime{rt}, Pods: pods, Sandboxes: sandboxes, Arrivals: arrivals})
			removeAllButSkipped(t, m, rt, "sha256:bb "+tc.want)
			if !fired.Load() {
				t.Error("the check never read bb's arrival")
			}
		})
	}
}

// goneRuntime answers, while gone is set, that no image exists when the
// check before a removal asks (another client removed it since the plan).
type goneRuntime struct {
	statusRuntime
	gone *atomic.Bool
}

func (r goneRuntime) ImageStatus(ctx context.Context, id string) (*runtimeapi.Image, error) {
	if r.gone.Load() {
		return nil, nil
	}
	return r.statusRuntime.ImageStatus(ctx, id)
}

// TestGoneAtTheCheckIsForgotten: an image the check before its removal
// finds gone (another client removed it since the plan) loses its usage
// record, as one nodegc removes does: the same image pulled again before
// the next listing is first seen then, and kept under minimumGCAge (1h),
// on a runtime that does not tell when images arrived (CRI-O). Before,
// the record stayed, and the copy pulled a moment ago was as old as the
// first, and removed.
func TestGoneAtTheCheckIsForgotten(t *testing.T) {
	rt := &removalsRuntime{images: []*runtimeapi.Image{{Id: "sha256:aa", RepoTags: []string{"registry.example/a:1"}, Size: 30 * mib}}}
	gone := new(atomic.Bool)
	m := everythingNeeded(t, Options{Runtime: goneRuntime{statusRuntime{rt}, gone}}, func(c *config.ImageGCConfiguration) {
		c.MinimumGCAge = &metav1.Duration{Duration: time.Hour}
	})
	if _, err := m.Plan(t.Context()); err != nil { // first seen now
		t.Fatal(err)
	}
	m.clock.(*clocktesting.FakeClock).Step(2 * time.Hour)
	gone.Store(true)
	r, err := m.GarbageCollect(t.Context(), TriggerManual)
	if r == nil || r.Outcome == nil || len(r.Outcome.Gone) != 1 {
		t.Fatalf("the first run does not find sha256:aa gone at its check: %+v, %v", r, err)
	}
	gone.Store(false) // pulled again, the same image
	r, err = m.GarbageCollect(t.Context(), TriggerManual)
	if r == nil || r.Plan == nil {
		t.Fatalf("no second plan: %v", err)
	}
	if len(rt.removed) != 0 || !slices.ContainsFunc(r.Plan.Keep, func(d Decision) bool { return d.Image.ID == "sha256:aa" && d.Reason == KeepMinAge }) {
		t.Errorf("copy pulled again after the first was found gone: removed %v, plan kept %v; want it kept %s", rt.removed, r.Plan.Keep, KeepMinAge)
	}
}

// callLog is a listingRuntime that logs, in order, its container listings,
// its ImageFsInfo calls and its removals.
type callLog struct {
	*listingRuntime
	cmu   sync.Mutex
	calls []string
}

func (r *callLog) log(call string) {
	r.cmu.Lock()
	r.calls = append(r.calls, call)
	r.cmu.Unlock()
}

func (r *callLog) ListContainers(ctx context.Context, f *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	r.log("list")
	return r.listingRuntime.ListContainers(ctx, f)
}

func (r *callLog) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	r.log("imageFsInfo")
	return r.listingRuntime.ImageFsInfo(ctx)
}

func (r *callLog) RemoveImage(ctx context.Context, id string) error {
	r.log("remove " + id)
	return r.listingRuntime.RemoveImage(ctx, id)
}

// failingStat is a disk whose reading fails once, at the failIn-th Stat
// from when the test sets failIn.
type failingStat struct {
	DiskReader
	failIn atomic.Int32
}

func (d *failingStat) Stat(path string) (diskstats.Stats, error) {
	if d.failIn.Load() > 0 && d.failIn.Add(-1) == 0 {
		return diskstats.Stats{}, errors.New("statfs: input/output error")
	}
	return d.DiskReader.Stat(path)
}

// TestNoRuntimeCallBetweenTheCheckAndTheRemoval: a space removal reads the
// image filesystem right before it, for the manager's feedback; that read
// never asks the runtime, also when the read before the check failed and
// the mountpoint must be asked for again: ImageFsInfo may be as slow as
// any call of a loaded runtime, and a container created meanwhile would not
// be seen. The check's last listing comes right before every removal.
// Before, bb's removal followed an ImageFsInfo call.
func TestNoRuntimeCallBetweenTheCheckAndTheRemoval(t *testing.T) {
	rt := &callLog{listingRuntime: &listingRuntime{statusRuntime: statusRuntime{&removalsRuntime{images: threeImages()}}}}
	m := everythingNeeded(t, Options{Runtime: rt})
	disk := &failingStat{DiskReader: m.opts.Disk}
	m.opts.Disk = disk
	rt.onRemove = func(id string) {
		if id == "sha256:aa" {
			disk.failIn.Store(2) // after aa's removal, the read before bb's check
		}
	}
	r, err := m.GarbageCollect(t.Context(), TriggerManual)
	if r == nil || r.Outcome == nil {
		t.Fatalf("no run: %v", err)
	}
	if diff := cmp.Diff([]string{"sha256:aa", "sha256:bb", "sha256:cc"}, rt.removed); diff != "" {
		t.Fatalf("removed (-want +got):\n%s", diff)
	}
	if disk.failIn.Load() != 0 {
		t.Fatal("the disk reading never failed: the test proves nothing")
	}
	rt.cmu.Lock()
	defer rt.cmu.Unlock()
	for i, c := range rt.calls {
		if strings.HasPrefix(c, "remove ") && (i == 0 || rt.calls[i-1] != "list") {
			t.Errorf("%s right after %q, want right after the check's last listing; calls %q", c, rt.calls[max(i-1, 0)], rt.calls)
		}
	}
}
