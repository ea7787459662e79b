package images_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/internal/testbed/registry"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/cri"
	"github.com/nodegc/nodegc/pkg/images"
)

// inuseSeed seeds the random listing delays of TestNoContainerLosesItsImage;
// 0 (the default) seeds from the time. Each subtest logs its seed.
var inuseSeed = flag.Uint64("inuse-seed", 0, "seed of TestNoContainerLosesItsImage's listing delays (0: from the time)")

// TestNoContainerLosesItsImage, on a real containerd of each version (and
// containerd 2.x once more with imageGC.containerEvents on): the
// image filesystem is held above the high threshold (1%), so the image GC
// runs back to back and wants every unused image gone, while the test
// creates containers, one after the other, from old unused images. nodegc's
// container listings are slow and of random latency (0-400ms, as on a busy
// node), so that listings return out of order and after container events.
//
// The rule checked: once nodegc knew of a container, it never removes its
// image. nodegc knew of container X once it applied X's CREATED event
// (containerd 2.x with imageGC.containerEvents), or once a container
// listing that began after X was created came back. A removal that began
// earlier is the runtime's own race (the kubelet has it too: an image
// removed while CreateContainer runs) and is only counted; a removal that
// began more than settle after nodegc knew is a violation. The property
// must be exercised: the GC removed images meanwhile, and some containers
// kept their image through the GC runs (not every iteration a runtime
// race or a refused create).
func TestNoContainerLosesItsImage(t *testing.T) {
	t.Parallel()
	const (
		poolSize   = 6
		iterations = 24
		maxDelay   = 400 * time.Millisecond
		settle     = 100 * time.Millisecond // from knowing to a removal decided without that knowledge
	)
	type mode struct {
		v      testbed.ContainerdVersion
		events bool // imageGC.containerEvents
	}
	var modes []mode
	for _, v := range testbed.ContainerdVersions {
		modes = append(modes, mode{v, false})
		if v == testbed.Containerd2 { // the one with a container event stream
			modes = append(modes, mode{v, true})
		}
	}
	for _, md := range modes {
		name := "containerd" + string(md.v)
		if md.events {
			name += "-events"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v := md.v
			b := newBed(t, v, 192*mib)
			ctx := t.Context()
			var pool []*registry.Image
			for i := range poolSize {
				img, err := b.node.Registry.Push(ctx, registry.ImageSpec{Repo: fmt.Sprintf("race/app%d", i),
					Layers: []registry.LayerSpec{{Seed: fmt.Sprintf("race-%d", i), Size: mib}}})
				if err != nil {
					t.Fatal(err)
				}
				pool = append(pool, img)
			}
			seed := *inuseSeed
			if seed == 0 {
				seed = uint64(time.Now().UnixNano())
			}
			t.Logf("listing delays seeded with %d (rerun with -args -inuse-seed=%d)", seed, seed)
			rt := &observedRuntime{Client: b.cri, maxDelay: maxDelay, rng: rand.New(rand.NewPCG(seed, 3)),
				removeStarted: map[string][]time.Time{}, eventApplied: map[string]time.Time{}}
			var runs atomic.Int64
			cfg := config.Defaulted().ImageGC
			cfg.MinimumGCAge = &metav1.Duration{}
			cfg.HighThresholdPercent, cfg.LowThresholdPercent = ptr.To[int32](1), ptr.To[int32](0)
			cfg.DiskCheckInterval = metav1.Duration{Duration: 50 * time.Millisecond}
			cfg.Period = metav1.Duration{Duration: 200 * time.Millisecond}
			cfg.ContainerEvents = md.events
			sandbox, err := b.cri.SandboxImage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			m, err := images.NewManager(images.Options{
				Config: cfg, StateDirectory: t.TempDir(), Runtime: rt, Layers: b.layers, Arrivals: b.layers, Disk: b.disk,
				SandboxImages: []string{sandbox}, SettleTimeout: time.Millisecond,
				OnRun: func(*images.Report) { runs.Add(1) },
			})
			if err != nil {
				t.Fatal(err)
			}
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); _ = m.Run(runCtx) }()
			defer func() { stop(); <-done }()

			pod, err := b.node.RunPod(ctx, node.PodSpec{Name: "race", Namespace: "default"})
			if err != nil {
				t.Fatal(err)
			}
			created, refused, runtimeRace, kept := 0, 0, 0, 0
			for i := range iterations {
				img := pool[i%poolSize]
				id, err := b.node.PullImage(ctx, img.Ref)
				if err != nil {
					t.Fatal(err)
				}
				began := time.Now()
				cid, err := b.node.CreateContainer(ctx, pod, node.ContainerSpec{Name: fmt.Sprintf("c%d", i), Image: id})
				if err != nil {
					refused++ // the image went between the pull and the create: the runtime refused
					continue
				}
				visible := time.Now()
				created++
				// Two GC runs that began after the container existed.
				n := runs.Load()
				testbed.WaitFor(t, 30*time.Second, "two image GC runs", func() bool { return runs.Load() >= n+3 })
				if b.imageIDs()[id] {
					kept++
					if err := b.node.RemoveContainer(ctx, cid); err != nil {
						t.Fatal(err)
					}
					continue
				}
				knew, how := rt.knewOf(cid, began, visible)
				removed := rt.removalsOf(id, began)
				switch {
				case len(removed) == 0:
					t.Errorf("iteration %d: image %s of container %s is gone, but nodegc did not remove it", i, id, cid)
				case knew.IsZero() || removed[len(removed)-1].Before(knew.Add(settle)):
					runtimeRace++
					t.Logf("iteration %d: image removed while the container was being created (runtime race), removal at +%v",
						i, removed[len(removed)-1].Sub(began).Round(time.Millisecond))
				default:
					t.Errorf("iteration %d: container %s lost its image %s: removed %v after nodegc knew of the container (%s)",
						i, cid, img.Ref, removed[len(removed)-1].Sub(knew).Round(time.Millisecond), how)
				}
				if err := b.node.RemoveContainer(ctx, cid); err != nil {
					t.Fatal(err)
				}
			}
			removals := rt.removals()
			t.Logf("%d containers created from images the GC wanted gone (%d kept their image; %d creates refused: image already gone; %d images removed by the runtime's own race), %d GC runs, %d image removals",
				created, kept, refused, runtimeRace, runs.Load(), removals)
			if created < iterations/2 {
				t.Errorf("only %d of %d containers could be created: the property was barely exercised", created, iterations)
			}
			if kept == 0 {
				t.Errorf("no container kept its image through the GC runs (%d runtime races, %d refused creates of %d): the property was not exercised", runtimeRace, refused, iterations)
			}
			if removals == 0 {
				t.Errorf("the image GC removed no image: it never wanted one gone, so keeping the containers' images proved nothing")
			}
		})
	}
}

// observedRuntime is the CRI client with container listings delayed at
// random after they were taken, and a record of when listings began and
// returned, when nodegc applied each container event, and when each image
// removal began.
type observedRuntime struct {
	*cri.Client
	maxDelay time.Duration

	mu            sync.Mutex
	rng           *rand.Rand
	lists         []listCall
	removeStarted map[string][]time.Time // image ID -> starts of RemoveImage
	eventApplied  map[string]time.Time   // container ID -> when its CREATED event was applied
}

type listCall struct{ began, returned time.Time }

func (r *observedRuntime) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	began := time.Now()
	cs, err := r.Client.ListContainers(ctx, filter)
	r.mu.Lock()
	delay := time.Duration(r.rng.Int64N(int64(r.maxDelay)))
	r.mu.Unlock()
	select {
	case <-time.After(delay):
	case <-ctx.Done():
	}
	r.mu.Lock()
	r.lists = append(r.lists, listCall{began: began, returned: time.Now()})
	r.mu.Unlock()
	return cs, err
}

func (r *observedRuntime) RemoveImage(ctx context.Context, id string) error {
	r.mu.Lock()
	r.removeStarted[id] = append(r.removeStarted[id], time.Now())
	r.mu.Unlock()
	return r.Client.RemoveImage(ctx, id)
}

func (r *observedRuntime) WatchContainerEvents(ctx context.Context, connected func(), handle func(*runtimeapi.ContainerEventResponse)) error {
	return r.Client.WatchContainerEvents(ctx, connected, func(ev *runtimeapi.ContainerEventResponse) {
		handle(ev)
		if ev.GetContainerEventType() == runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT {
			r.mu.Lock()
			r.eventApplied[ev.GetContainerId()] = time.Now()
			r.mu.Unlock()
		}
	})
}

// knewOf returns the earliest moment nodegc knew of container id, created
// between began and visible: its CREATED event applied, or a listing that
// began after visible returned.
func (r *observedRuntime) knewOf(id string, began, visible time.Time) (time.Time, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var at time.Time
	how := ""
	if e, ok := r.eventApplied[id]; ok {
		at, how = e, "its CREATED event was applied"
	}
	for _, l := range r.lists {
		if l.began.After(visible) && (at.IsZero() || l.returned.Before(at)) {
			at, how = l.returned, "a container listing taken after its creation came back"
		}
	}
	return at, how
}

// removals returns how many image removals began.
func (r *observedRuntime) removals() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, starts := range r.removeStarted {
		n += len(starts)
	}
	return n
}

// removalsOf returns the starts of RemoveImage(id) since.
func (r *observedRuntime) removalsOf(id string, since time.Time) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Time
	for _, at := range r.removeStarted[id] {
		if !at.Before(since) {
			out = append(out, at)
		}
	}
	return out
}
