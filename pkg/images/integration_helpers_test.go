package images_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/containerdapi"
	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/internal/testbed/registry"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/cri"
	"github.com/nodegc/nodegc/pkg/diskstats"
	"github.com/nodegc/nodegc/pkg/images"
)

const mib = 1 << 20

// bed is one real containerd node with nodegc's CRI client, containerd
// layer reader and disk reader pointed at it.
type bed struct {
	t      *testing.T
	node   *node.Node
	cri    *cri.Client
	layers *images.ContainerdLayers
	disk   *diskstats.Reader
	// runtime records RemoveImage calls on top of the CRI client.
	runtime *recordingRuntime
	// settleTimeout, if set, bounds the wait before measuring freed space.
	settleTimeout time.Duration
	// onRun, if set, receives the report of every run of the managers.
	onRun func(*images.Report)
	// nodeName is the node the managers' state describes (Options.NodeName).
	nodeName string
	// registry, if set, receives the managers' metrics.
	registry *prometheus.Registry
	// sandboxes, if set, is the managers' sandbox source (else layers).
	sandboxes images.SandboxSource
	// arrivals, if set, is the managers' arrival source (else layers);
	// noArrivals gives them none (CRI-O, or containerd's API did not
	// answer at their build).
	arrivals   images.ArrivalSource
	noArrivals bool
	// pods, if set, is the managers' pod source (the scheduled rule).
	pods images.PodImageSource
}

// metric is the sum of the samples of name in b.registry that match every
// filter ("label=value"); -1 when there is none.
func (b *bed) metric(name string, filters ...string) float64 {
	b.t.Helper()
	families, err := b.registry.Gather()
	if err != nil {
		b.t.Fatal(err)
	}
	v, ok := testbed.MetricSum(families, name, filters...)
	if !ok {
		return -1
	}
	return v
}

// newBed starts a bed on a containerd of version v; smallFS > 0 puts
// containerd's root on a filesystem of its own of that many bytes.
//
// A bed shares nothing with another: its node has its own containerd
// (instance directory, socket, cgroup parent, loop device) and registry,
// and a starting node sweeps only nodes whose test process is gone. So the
// integration tests, and their subtests over containerd versions (or over
// modes, each with its own bed), run in parallel (t.Parallel): they spend
// most of their time waiting on their runtime. A test that times the
// runtime's answers (TestEventStreamNeverStallsTheRuntime) does not: go
// test runs it before the parallel ones, alone.
func newBed(t *testing.T, v testbed.ContainerdVersion, smallFS int64) *bed {
	t.Helper()
	return newBedWith(t, node.Options{Version: v, SmallFS: smallFS})
}

// newBedWith is newBed on a node started with opts.
func newBedWith(t *testing.T, opts node.Options) *bed {
	t.Helper()
	testbed.RequireRoot(t)
	ctx := t.Context()
	n := node.Start(t, opts)
	c, err := cri.Dial(ctx, cri.Options{RuntimeEndpoint: n.Endpoint, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	info, err := c.ImageFsInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := images.NewContainerdLayers(ctx, n.Socket, info.GetImageFilesystems()[0].GetFsId().GetMountpoint(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { layers.Close() })
	if _, err := n.PullImage(ctx, n.Pause.Ref); err != nil {
		t.Fatal(err)
	}
	return &bed{t: t, node: n, cri: c, layers: layers, disk: diskstats.NewReader(), runtime: &recordingRuntime{Client: c}}
}

// push pushes an image of one own layer of ownMiB on top of the given
// shared layers, and pulls it.
func (b *bed) pushPull(repo string, ownMiB int64, shared ...registry.LayerSpec) *registry.Image {
	b.t.Helper()
	layers := append(append([]registry.LayerSpec(nil), shared...), registry.LayerSpec{Seed: repo, Size: ownMiB * mib})
	img, err := b.node.Registry.Push(b.t.Context(), registry.ImageSpec{Repo: repo, Tag: "v1", Layers: layers})
	if err != nil {
		b.t.Fatal(err)
	}
	if _, err := b.node.PullImage(b.t.Context(), img.Ref); err != nil {
		b.t.Fatal(err)
	}
	return img
}

// repull removes img through CRI, waits until it is gone, and pulls it
// again: the runtime then has it as a new arrival of the same ID.
func (b *bed) repull(img *registry.Image) {
	b.t.Helper()
	if err := b.cri.RemoveImage(b.t.Context(), img.ID()); err != nil {
		b.t.Fatal(err)
	}
	testbed.WaitFor(b.t, 30*time.Second, "the image to be gone", func() bool { return !b.imageIDs()[img.ID()] })
	if _, err := b.node.PullImage(b.t.Context(), img.Ref); err != nil {
		b.t.Fatal(err)
	}
}

func (b *bed) diskStats() images.DiskStats {
	b.t.Helper()
	st, err := b.node.FSStats()
	if err != nil {
		b.t.Fatal(err)
	}
	return images.DiskStats{Capacity: st.Capacity, Available: st.Available}
}

// manager builds an image GC manager on this bed; mutate adjusts the
// image GC config (defaults otherwise, minimum age 0).
func (b *bed) manager(stateDir string, clk clock.WithTicker, mutate func(*config.ImageGCConfiguration)) *images.Manager {
	b.t.Helper()
	return b.managerWith(b.runtime, stateDir, clk, mutate)
}

// managerWith is manager with another runtime (a wrapper of b.cri).
func (b *bed) managerWith(rt images.RuntimeService, stateDir string, clk clock.WithTicker, mutate func(*config.ImageGCConfiguration)) *images.Manager {
	b.t.Helper()
	cfg := config.Defaulted().ImageGC
	cfg.MinimumGCAge = &metav1.Duration{}
	if mutate != nil {
		mutate(&cfg)
	}
	sandbox, err := b.cri.SandboxImage(b.t.Context())
	if err != nil {
		b.t.Fatal(err)
	}
	var sandboxes images.SandboxSource = b.layers
	if b.sandboxes != nil {
		sandboxes = b.sandboxes
	}
	opts := images.Options{
		Config: cfg, StateDirectory: stateDir, NodeName: b.nodeName, Runtime: rt, Layers: b.layers, Arrivals: b.layers, Writes: b.layers,
		Disk: b.disk, Clock: clk, SandboxImages: []string{sandbox}, Sandboxes: sandboxes, ContainerRecords: b.layers,
		SettleTimeout: b.settleTimeout, OnRun: b.onRun, Pods: b.pods,
	}
	if b.registry != nil {
		opts.Registerer = b.registry
	}
	switch {
	case b.noArrivals:
		opts.Arrivals = nil
	case b.arrivals != nil:
		opts.Arrivals = b.arrivals
	}
	m, err := images.NewManager(opts)
	if err != nil {
		b.t.Fatal(err)
	}
	return m
}

// pullInOrder pushes and pulls n images of two layers (repoName(0) ...),
// 10 ms apart so that their first-detected times follow the pull order,
// and returns their IDs and references.
func (b *bed) pullInOrder(n int) (ids, refs []string) {
	b.t.Helper()
	for i := range n {
		img := b.pushPull(repoName(i), 2)
		ids, refs = append(ids, img.ID()), append(refs, img.Ref)
		time.Sleep(10 * time.Millisecond)
	}
	return ids, refs
}

// containerd is a client of containerd's own API on the bed's node, in the
// CRI plugin's namespace (k8s.io), closed when the test ends.
func (b *bed) containerd() *containerd.Client {
	b.t.Helper()
	c, err := containerd.New(b.node.Socket, containerd.WithDefaultNamespace(containerdapi.Namespace))
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { c.Close() })
	return c
}

// useImage runs a container of img in a new pod until it exits, so that
// the image counts as used at that moment. The exited container stays, and
// holds the image in use until it is removed (removePods).
func (b *bed) useImage(img *registry.Image) {
	b.t.Helper()
	ctx := b.t.Context()
	pod, err := b.node.RunPod(ctx, node.PodSpec{Name: "use", Namespace: "default"})
	if err != nil {
		b.t.Fatal(err)
	}
	id, err := b.node.RunContainer(ctx, pod, node.ContainerSpec{Name: "c", Image: img.Ref, Args: []string{"exit", "0"}})
	if err != nil {
		b.t.Fatal(err)
	}
	if _, err := b.node.WaitContainerState(ctx, id, runtimeapi.ContainerState_CONTAINER_EXITED, time.Minute); err != nil {
		b.t.Fatal(err)
	}
}

func (b *bed) removePods() {
	b.t.Helper()
	ctx := b.t.Context()
	pods, err := b.cri.ListPodSandboxes(ctx, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	for _, p := range pods {
		if err := b.node.StopPod(ctx, p.GetId()); err != nil {
			b.t.Fatal(err)
		}
		if err := b.node.RemovePod(ctx, p.GetId()); err != nil {
			b.t.Fatal(err)
		}
	}
}

func (b *bed) imageIDs() map[string]bool {
	b.t.Helper()
	list, err := b.cri.ListImages(b.t.Context())
	if err != nil {
		b.t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, img := range list {
		ids[img.GetId()] = true
	}
	return ids
}

// thresholdsAround returns high/low thresholds such that the disk as it is
// now is at or above high and a GC must free about freePercent.
func thresholdsAround(d images.DiskStats, freePercent int) (high, low int32) {
	u := int32(d.UsagePercent())
	return u, max(0, u-int32(freePercent))
}

// noThresholdGC turns the threshold GC off (a high threshold of 100%). A
// node started without a small filesystem has its image filesystem on the
// host's root filesystem, whose usage is the machine's, not the test's (a
// CI machine's disk can be 85% full): a test there that does not mean to
// free space must not collect on it.
func noThresholdGC(c *config.ImageGCConfiguration) { c.HighThresholdPercent = ptr.To[int32](100) }

// noProjection turns the fill-rate trigger (projected) off.
func noProjection(c *config.ImageGCConfiguration) { c.FillRateHorizon = &metav1.Duration{} }

func setThresholds(high, low int32) func(*config.ImageGCConfiguration) {
	return func(c *config.ImageGCConfiguration) {
		c.HighThresholdPercent = ptr.To(high)
		c.LowThresholdPercent = ptr.To(low)
	}
}

// outcome returns the IDs a run removed and, as "ID reason", those it kept
// at the check right before their removal.
func outcome(r *images.Report) (removed, skipped []string) {
	for _, d := range r.Outcome.Removed {
		removed = append(removed, d.Image.ID)
	}
	for _, d := range r.Outcome.Skipped {
		skipped = append(skipped, d.Image.ID+" "+d.Reason)
	}
	return removed, skipped
}

// collectAllExact runs one manual collection on a new manager that may
// remove every image (high 1%, low 0%), fails the test unless it planned
// with containerd's layer accounting (a run that could not free enough is
// fine), and returns its report and the IDs it removed.
func (b *bed) collectAllExact() (*images.Report, map[string]bool) {
	b.t.Helper()
	m := b.manager(b.t.TempDir(), clocktesting.NewFakeClock(time.Now()), setThresholds(1, 0))
	r, err := m.GarbageCollect(b.t.Context(), images.TriggerManual)
	var fe *images.FreeDiskSpaceError
	if err != nil && !errors.As(err, &fe) {
		b.t.Fatal(err)
	}
	if !r.Plan.ExactAccounting {
		b.t.Fatal("plan did not use containerd layer accounting")
	}
	removed := map[string]bool{}
	for _, d := range r.Outcome.Removed {
		removed[d.Image.ID] = true
	}
	return r, removed
}

// recordingRuntime passes calls to the CRI client and records when each
// image removal was asked for.
type recordingRuntime struct {
	*cri.Client
	mu      sync.Mutex
	removed []removal
}

type removal struct {
	id string
	at time.Time
}

func (r *recordingRuntime) RemoveImage(ctx context.Context, id string) error {
	r.mu.Lock()
	r.removed = append(r.removed, removal{id: id, at: time.Now()})
	r.mu.Unlock()
	return r.Client.RemoveImage(ctx, id)
}

func (r *recordingRuntime) removals() []removal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]removal(nil), r.removed...)
}

// afterFirstRemoval runs then once, right after the first removal of
// nodegc's the runtime answered with success: what a test makes happen in
// the middle of a run. err is what then returned; done says it ran.
type afterFirstRemoval struct {
	*recordingRuntime
	then func(ctx context.Context, removed string) error

	mu   sync.Mutex
	done bool
	err  error
}

func (r *afterFirstRemoval) RemoveImage(ctx context.Context, id string) error {
	err := r.recordingRuntime.RemoveImage(ctx, id)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil && !r.done {
		r.done = true
		r.err = r.then(ctx, id)
	}
	return err
}

// thenErr is what then returned (nil before it ran).
func (r *afterFirstRemoval) thenErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func repoName(i int) string { return fmt.Sprintf("gc/img%d", i) }
