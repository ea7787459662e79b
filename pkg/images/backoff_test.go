package images

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/pkg/diskstats"
)

// slowRuntime has no image to remove, so a threshold run cannot relieve
// the disk; each listing of images takes runTime of the fake clock, as a
// run's calls to the runtime take a few milliseconds.
type slowRuntime struct {
	streamRuntime
	clk     *clocktesting.FakeClock
	runTime time.Duration
}

func (r *slowRuntime) ListImages(context.Context) ([]*runtimeapi.Image, error) {
	r.clk.Step(r.runTime)
	return nil, nil
}

// scriptedDisk is an image filesystem of 100 bytes whose usage the test
// sets.
type scriptedDisk struct {
	mu    sync.Mutex
	usage uint64
}

func (d *scriptedDisk) set(usagePercent uint64) {
	d.mu.Lock()
	d.usage = usagePercent
	d.mu.Unlock()
}

func (d *scriptedDisk) Stat(string) (diskstats.Stats, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return diskstats.Stats{Capacity: 100, Available: 100 - d.usage}, nil
}

// backoffBed drives checkDisk as Run's ticker does: one check per second
// of the fake clock, on a fixed grid; the runs it started are counted.
type backoffBed struct {
	t       *testing.T
	clk     *clocktesting.FakeClock
	disk    *scriptedDisk
	m       *Manager
	backoff thresholdBackoff
	tick    time.Time
	runs    int
	ctx     context.Context // the checks' (context.Background when nil)
}

func newBackoffBed(t *testing.T) *backoffBed {
	cfg := policyConfig()
	cfg.HighThresholdPercent, cfg.LowThresholdPercent = ptr.To[int32](80), ptr.To[int32](75)
	cfg.DiskCheckInterval = metav1.Duration{Duration: time.Second}
	cfg.FillRateHorizon = &metav1.Duration{} // threshold runs only
	clk := clocktesting.NewFakeClock(t0)
	b := &backoffBed{t: t, clk: clk, disk: &scriptedDisk{}, tick: t0}
	rt := &slowRuntime{clk: clk, runTime: 7 * time.Millisecond} // its event stream is never opened: checkDisk alone runs
	m, err := NewManager(Options{Config: cfg, StateDirectory: t.TempDir(), Runtime: rt, Disk: b.disk, Clock: clk,
		OnRun: func(*Report) { b.runs++ }})
	if err != nil {
		t.Fatal(err)
	}
	b.m = m
	return b
}

// withRuntime makes the bed's manager one on rt, whose images become
// removable minAge after they are first seen.
func (b *backoffBed) withRuntime(rt RuntimeService, minAge time.Duration) *Manager {
	b.t.Helper()
	cfg := b.m.opts.Config
	cfg.MinimumGCAge = &metav1.Duration{Duration: minAge}
	m, err := NewManager(Options{Config: cfg, StateDirectory: b.t.TempDir(), Runtime: rt, Disk: b.disk, Clock: b.clk,
		SettleTimeout: noSettle, OnRun: func(*Report) { b.runs++ }})
	if err != nil {
		b.t.Fatal(err)
	}
	b.m = m
	return m
}

// listed has m's tracker apply a container listing of rt, as the usage
// watcher's poll does between checks.
func listed(t *testing.T, m *Manager, rt RuntimeService) {
	t.Helper()
	if _, err := m.tracker.syncContainers(t.Context(), func(ctx context.Context) ([]*runtimeapi.Container, error) { return rt.ListContainers(ctx, nil) }); err != nil {
		t.Fatal(err)
	}
}

// check runs the check of the next tick and says whether it started a run.
func (b *backoffBed) check() bool {
	b.tick = b.tick.Add(time.Second)
	b.clk.SetTime(b.tick)
	before := b.runs
	ctx := b.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	b.m.checkDisk(ctx, &b.backoff, checkAtInterval)
	return b.runs > before
}

// checks runs n ticks and returns the ones (1-based) that started a run.
func (b *backoffBed) checks(n int) []int {
	var ran []int
	for i := 1; i <= n; i++ {
		if b.check() {
			ran = append(ran, i)
		}
	}
	return ran
}

// TestThresholdBackoffDoubles: over the high threshold with nothing to
// remove, runs are spaced 1, 2, 4, 8 ticks apart, counted from the tick
// that ran: the few milliseconds a run takes do not push the next one a
// tick later (it did: 2, 3, 5, 9 ticks apart).
func TestThresholdBackoffDoubles(t *testing.T) {
	b := newBackoffBed(t)
	b.disk.set(90)
	got := b.checks(16)
	want := []int{1, 2, 4, 8, 16}
	if !slices.Equal(got, want) {
		t.Errorf("runs at ticks %v, want %v", got, want)
	}
}

// TestThresholdBackoffEndsUnderLow: a long episode over the high threshold
// built a long backoff; usage went back under the low threshold (the disk
// was cleaned by other means); the next crossing is met at the first check
// that sees it, not when the old backoff runs out. Usage between the
// thresholds does not end the episode: the backoff goes on.
func TestThresholdBackoffEndsUnderLow(t *testing.T) {
	b := newBackoffBed(t)
	b.disk.set(90)
	for i := 0; b.backoff.delay < 16*time.Second; i++ {
		if i == 64 {
			t.Fatalf("backoff %v after 64 checks over the high threshold, want 16s", b.backoff.delay)
		}
		b.check()
	}

	b.disk.set(78) // under high, over low: the same episode
	if b.check() {
		t.Fatal("a run at 78%")
	}
	b.disk.set(90)
	if b.check() {
		t.Errorf("usage came back over the high threshold from 78%% (over the low threshold): ran at once, want the backoff kept")
	}

	b.disk.set(20) // under low: the episode is over
	if b.check() {
		t.Fatal("a run at 20%")
	}
	b.disk.set(90)
	if !b.check() {
		t.Errorf("a new crossing after usage went under the low threshold waited for the last episode's backoff (%v, next run in %v)",
			b.backoff.delay, b.backoff.next.Sub(b.tick))
	}
}

// shrinkingRuntime holds unused images of 20 bytes; each removal takes one
// away. Listings take runTime of the fake clock, as slowRuntime's.
type shrinkingRuntime struct {
	slowRuntime
	mu     sync.Mutex
	images []*runtimeapi.Image
}

func (r *shrinkingRuntime) ListImages(context.Context) ([]*runtimeapi.Image, error) {
	r.clk.Step(r.runTime)
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.images), nil
}

func (r *shrinkingRuntime) RemoveImage(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.images = slices.DeleteFunc(r.images, func(i *runtimeapi.Image) bool { return i.Id == id })
	return nil
}

// refillingDisk is an image filesystem of 100 bytes at 90% at each check,
// whose removals free their 20 bytes as the runtime returns: other writers
// fill them again by the next check (refill).
type refillingDisk struct {
	rt   *shrinkingRuntime
	mu   sync.Mutex
	mark int // images at the last refill
}

func (d *refillingDisk) refill() {
	d.rt.mu.Lock()
	n := len(d.rt.images)
	d.rt.mu.Unlock()
	d.mu.Lock()
	d.mark = n
	d.mu.Unlock()
}

func (d *refillingDisk) Stat(string) (diskstats.Stats, error) {
	d.rt.mu.Lock()
	n := len(d.rt.images)
	d.rt.mu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	return diskstats.Stats{Capacity: 100, Available: 10 + 20*uint64(d.mark-n)}, nil
}

// TestThresholdBackoffOnlyWhenNothingRemoved: the disk fills faster than
// the runs free it (usage is 90% at every check), but each run removes
// images: the next check runs again, as long as there is something to
// remove. Only runs that removed nothing are spaced out. (Before, every
// run that left the disk over the threshold doubled the wait: runs at
// ticks 1, 2, 4, 8, with images left to remove.) Each removal shows on the
// disk, which others fill again before the next check: a reading that
// never moves at a removal is one of another filesystem
// (TestRemovalsThatFreeNothingHold).
func TestThresholdBackoffOnlyWhenNothingRemoved(t *testing.T) {
	b := newBackoffBed(t)
	cfg := b.m.opts.Config
	cfg.MinimumGCAge = &metav1.Duration{}
	rt := &shrinkingRuntime{slowRuntime: slowRuntime{clk: b.clk, runTime: 7 * time.Millisecond}}
	for i := range 4 {
		rt.images = append(rt.images, &runtimeapi.Image{Id: "sha256:" + string(rune('a'+i)), Size: 20, RepoTags: []string{"x/" + string(rune('a'+i)) + ":1"}})
	}
	m, err := NewManager(Options{Config: cfg, StateDirectory: t.TempDir(), Runtime: rt, Disk: b.disk, Clock: b.clk,
		SettleTimeout: noSettle, OnRun: func(*Report) { b.runs++ }})
	if err != nil {
		t.Fatal(err)
	}
	b.m = m
	disk := &refillingDisk{rt: rt}
	m.opts.Disk = disk // 15 bytes to free per run (down to 75%): one image each time

	var got []int
	for i := 1; i <= 12; i++ {
		disk.refill()
		if b.check() {
			got = append(got, i)
		}
	}
	// Four runs remove the four images; the fifth removes nothing and the
	// backoff starts: the sixth run 2 ticks later, the seventh 4 later.
	want := []int{1, 2, 3, 4, 5, 6, 8, 12}
	if !slices.Equal(got, want) {
		t.Errorf("runs at ticks %v, want %v (images left %d)", got, want, len(rt.images))
	}
}

// TestWriteChecksKeepTheBackoff: over the high threshold with nothing to
// remove, checks after the runtime's writes (a pull going on) come at any
// moment, not on the check ticker's grid: they wait for the backoff as it
// is, within half a write spacing, not half a diskCheckInterval. With a
// 10-minute interval and a 1-minute period, a run at t0 that removed
// nothing is followed by the next a minute later, not by one per write (21
// runs in 4 seconds of writes before).
func TestWriteChecksKeepTheBackoff(t *testing.T) {
	b := newBackoffBed(t)
	b.m.opts.Config.DiskCheckInterval = metav1.Duration{Duration: 10 * time.Minute}
	b.m.opts.Config.Period = metav1.Duration{Duration: time.Minute}
	b.disk.set(90)
	b.clk.SetTime(t0)
	b.m.checkDisk(context.Background(), &b.backoff, checkAtInterval)
	if b.runs != 1 {
		t.Fatalf("runs after the first check: %d, want 1", b.runs)
	}
	var ranAt []time.Duration
	for at := 200 * time.Millisecond; at <= 70*time.Second; at += 200 * time.Millisecond {
		b.clk.SetTime(t0.Add(at))
		before := b.runs
		b.m.checkDisk(context.Background(), &b.backoff, checkAfterWrite)
		if b.runs > before {
			ranAt = append(ranAt, at)
		}
	}
	if len(ranAt) != 1 || ranAt[0] < time.Minute-writeCheckSpacing || ranAt[0] > time.Minute+writeCheckSpacing {
		t.Errorf("write checks every 200ms for 70s started runs at %v after the first, want one, a minute after it", ranAt)
	}
}

// newShrinkingBed is a backoffBed whose runtime holds n unused images of
// 20 bytes, old enough to go, with the config changed by edit.
func newShrinkingBed(t *testing.T, n int, edit func(*Options)) (*backoffBed, *shrinkingRuntime) {
	b := newBackoffBed(t)
	cfg := b.m.opts.Config
	cfg.MinimumGCAge = &metav1.Duration{}
	rt := &shrinkingRuntime{slowRuntime: slowRuntime{clk: b.clk, runTime: 7 * time.Millisecond}}
	for i := range n {
		rt.images = append(rt.images, &runtimeapi.Image{Id: "sha256:" + string(rune('a'+i)), Size: 20, RepoTags: []string{"x/" + string(rune('a'+i)) + ":1"}})
	}
	opts := Options{Config: cfg, StateDirectory: t.TempDir(), Runtime: rt, Disk: b.disk, Clock: b.clk,
		SettleTimeout: noSettle, OnRun: func(*Report) { b.runs++ }}
	if edit != nil {
		edit(&opts)
	}
	m, err := NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	b.m = m
	return b, rt
}

// TestEpisodeCollectsUntilLow: usage reached the high threshold; the run
// freed what it planned, but pulls beside it left usage over the low
// threshold (78%). The checks go on collecting toward low, without a new
// crossing, until usage is under low. (Before, nothing ran between the
// thresholds: usage stayed at 78% until the next crossing.)
func TestEpisodeCollectsUntilLow(t *testing.T) {
	b, rt := newShrinkingBed(t, 4, nil)
	b.disk.set(90)
	if !b.check() {
		t.Fatal("no run at 90%")
	}
	b.disk.set(78) // the run freed 20 bytes, pulls beside it wrote 8
	if !b.check() {
		t.Fatalf("no run at 78%% after a run at 90%%: usage left between the thresholds (images left %d)", len(rt.images))
	}
	if len(rt.images) != 2 {
		t.Fatalf("%d images left after the run at 78%%, want 2 (3 bytes to free down to 75%%: one image)", len(rt.images))
	}
	b.disk.set(74) // under low: the episode is over
	if b.check() {
		t.Fatal("a run at 74%")
	}
	b.disk.set(78) // between the thresholds, no crossing since
	if got := b.checks(5); len(got) > 0 {
		t.Errorf("runs at ticks %v at 78%% with no crossing since usage was under low, want none", got)
	}
}

// TestEpisodeEndsWhenNothingMoreGoes: between the thresholds after a
// crossing, a run that removes nothing (what is left is kept) ends the
// episode: no run at each check, nor a FreeDiskSpaceFailed, while usage
// stays between the thresholds.
func TestEpisodeEndsWhenNothingMoreGoes(t *testing.T) {
	b, rt := newShrinkingBed(t, 1, nil)
	b.disk.set(90)
	if !b.check() || len(rt.images) != 0 {
		t.Fatalf("the run at 90%% did not remove the one image (%d left)", len(rt.images))
	}
	b.disk.set(78)
	if !b.check() {
		t.Fatal("no run at 78% after a run that removed images at 90%")
	}
	if got := b.checks(10); len(got) > 0 {
		t.Errorf("runs at ticks %v after a run between the thresholds removed nothing, want none", got)
	}
	b.disk.set(90) // a new crossing is met at once: the episode ended under high
	if !b.check() {
		t.Error("no run at a new crossing of the high threshold")
	}
}

// TestDryRunBacksOff: a dry run removes nothing, whatever it lists, so over
// the high threshold its runs are spaced as those of a GC with nothing to
// remove. (Before, each dry run counted as one that removed images: a run,
// and its log line, at every check.)
func TestDryRunBacksOff(t *testing.T) {
	b, _ := newShrinkingBed(t, 4, func(o *Options) { o.Config.DryRun = true })
	b.disk.set(90)
	got := b.checks(16)
	want := []int{1, 2, 4, 8, 16}
	if !slices.Equal(got, want) {
		t.Errorf("dry runs at ticks %v, want %v", got, want)
	}
}

// TestEpisodeHoveringWithNothingToRemove: usage hovers around the high
// threshold (81%, 79%, ...) with nothing left to remove: the runs keep
// the backoff's spacing, whether a check sees usage over the high
// threshold or between the thresholds after a crossing.
func TestEpisodeHoveringWithNothingToRemove(t *testing.T) {
	b := newBackoffBed(t)
	var got []int
	for i := 1; i <= 16; i++ {
		b.disk.set(uint64(79 + 2*(i%2)))
		if b.check() {
			got = append(got, i)
		}
	}
	want := []int{1, 2, 4, 8, 16}
	if !slices.Equal(got, want) {
		t.Errorf("runs at ticks %v, want %v", got, want)
	}
}

// TestEpisodeEndsAtLow: a run that brought usage down to the low threshold
// (the plan's goal: usage at low, not under it) ends the episode; no run
// follows at the low threshold. (Before, usage at low read as "still over
// low": one more run, and its log line, ended nearly every episode.)
func TestEpisodeEndsAtLow(t *testing.T) {
	b, _ := newShrinkingBed(t, 4, nil)
	b.disk.set(90)
	if !b.check() {
		t.Fatal("no run at 90%")
	}
	b.disk.set(75) // the low threshold: where the run planned to be
	if got := b.checks(5); len(got) > 0 {
		t.Errorf("runs at ticks %v at the low threshold after a run at 90%%, want none", got)
	}
}

// outageRuntime has no image to remove; while down, its listings fail as
// a runtime that is restarting does (Unavailable), or with err when set.
// It counts the listings.
type outageRuntime struct {
	streamRuntime
	mu       sync.Mutex
	down     bool
	err      error
	listings int
}

func (r *outageRuntime) set(down bool) {
	r.mu.Lock()
	r.down = down
	r.mu.Unlock()
}

func (r *outageRuntime) ListImages(context.Context) ([]*runtimeapi.Image, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.listings++
	switch {
	case r.err != nil:
		return nil, r.err
	case r.down:
		return nil, status.Error(codes.Unavailable, "connection refused")
	}
	return nil, nil
}

// TestLastingRunFailureBacksOff: a run that fails for another reason than
// an unreachable runtime (here, an error the runtime gives at every
// listing) is tried again 1, 2, 4 ... checks later up to the period, not
// every 10 s for good, each with its error line.
func TestLastingRunFailureBacksOff(t *testing.T) {
	b := newBackoffBed(t)
	rt := &outageRuntime{err: status.Error(codes.Internal, "image store corrupt")}
	b.m.opts.Runtime = rt
	b.disk.set(90)
	b.checks(1000)
	// 1, 2, 4, ... 256, then every 300 s (the period): 1000 s hold 11.
	if rt.listings > 12 {
		t.Errorf("%d runs tried in 1000 s of a lasting failure, want them spaced up to the period (5m)", rt.listings)
	}
}

// TestRuntimeOutageUnderPressure: over the high threshold, the runtime is
// down for a while (containerd restarting, often what an operator does on
// a full disk). A run that failed says nothing of what is removable: its
// retries are spaced, up to failedRunRetryMax, and do not grow the
// backoff of runs that found nothing to remove; once the runtime answers,
// a run comes within that bound. (Before, each failed run doubled that
// backoff, up to the 5-minute period: after an outage of 130 s the first
// run came 126 s after the runtime was back.)
func TestRuntimeOutageUnderPressure(t *testing.T) {
	for _, outage := range []int{30, 70, 130, 400} {
		b := newBackoffBed(t)
		rt := &outageRuntime{}
		b.m.opts.Runtime = rt
		b.disk.set(90)
		rt.set(true)
		b.checks(outage)
		if rt.listings > outage/int(failedRunRetryMax/time.Second)+6 {
			t.Errorf("outage of %ds: %d runs tried, want them spaced up to %v", outage, rt.listings, failedRunRetryMax)
		}
		rt.set(false)
		before := rt.listings
		after := 0
		for rt.listings == before && after < 600 {
			b.check()
			after++
		}
		if after > int(failedRunRetryMax/time.Second) {
			t.Errorf("outage of %ds: the first run came %ds after the runtime was back, want at most %v", outage, after, failedRunRetryMax)
		}
	}
}

// failingDisk cannot be read, as when statfs fails (the runtime's root
// moved, the DaemonSet mounting the old one).
type failingDisk struct{}

func (failingDisk) Stat(string) (diskstats.Stats, error) {
	return diskstats.Stats{}, errors.New("statfs /var/lib/containerd: no such file or directory")
}

// TestDiskReadFailuresAreTold: the disk checks cannot read the image
// filesystem; each failure is counted, the first of the streak and one a
// minute after it are logged at the default verbosity, and so is the
// recovery. (Before, the failures were logged at -v=2 only and counted
// as checks like any other: no threshold run could start, and nothing
// said so until the periodic run.)
func TestDiskReadFailuresAreTold(t *testing.T) {
	b := newBackoffBed(t)
	var logs bytes.Buffer
	b.ctx = klog.NewContext(context.Background(), textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&logs))))
	working := b.m.opts.Disk
	b.m.opts.Disk = failingDisk{}
	b.checks(90)
	if got := testutil.ToFloat64(b.m.metrics.diskCheckErrors); got != 90 {
		t.Errorf("%v failed readings counted, want 90", got)
	}
	if got := strings.Count(logs.String(), "Image filesystem cannot be read"); got != 2 {
		t.Errorf("%d failure lines in 90 s of failed readings, want 2 (the first, a minute later):\n%s", got, logs.String())
	}
	b.m.opts.Disk = working
	b.check()
	if !strings.Contains(logs.String(), "Image filesystem can be read again") {
		t.Errorf("no line for the recovery:\n%s", logs.String())
	}
}

// releasingRuntime lists one image, and one container using it until the
// test removes the container; removals take the image away.
type releasingRuntime struct {
	slowRuntime
	mu        sync.Mutex
	container bool
	removed   bool
}

func (r *releasingRuntime) ListImages(context.Context) ([]*runtimeapi.Image, error) {
	r.clk.Step(r.runTime)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.removed {
		return nil, nil
	}
	return []*runtimeapi.Image{{Id: "sha256:aa", RepoTags: []string{"registry.example/a:1"}, Size: 20}}, nil
}

func (r *releasingRuntime) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.container {
		return nil, nil
	}
	return []*runtimeapi.Container{{Id: "c1", Image: &runtimeapi.ImageSpec{Image: "sha256:aa"}, ImageRef: "sha256:aa",
		State: runtimeapi.ContainerState_CONTAINER_RUNNING}}, nil
}

func (r *releasingRuntime) RemoveImage(context.Context, string) error {
	r.mu.Lock()
	r.removed = true
	r.mu.Unlock()
	return nil
}

// TestBackoffEndsWhenAnImageIsReleased: a disk held over the high
// threshold by an image in use backs its runs off toward the period. Usage
// falls between the thresholds (the backoff stays: usage that hovers does
// not run at every check), the container ends and its image is released,
// and usage crosses the high threshold again: the next check runs, and
// removes the image, rather than wait out the old backoff (minutes, up to
// the period). A run that removes nothing after a release backs off again.
func TestBackoffEndsWhenAnImageIsReleased(t *testing.T) {
	b := newBackoffBed(t)
	rt := &releasingRuntime{slowRuntime: slowRuntime{clk: b.clk, runTime: 7 * time.Millisecond}, container: true}
	m := b.withRuntime(rt, 0)
	b.disk.set(90)
	for b.backoff.delay < 2*time.Minute {
		b.check()
	}
	b.disk.set(78)
	b.checks(40)
	// The container ends: the usage watcher's next listing releases aa.
	rt.mu.Lock()
	rt.container = false
	rt.mu.Unlock()
	listed(t, m, rt)
	b.disk.set(90)
	if !b.check() {
		t.Fatalf("usage crossed the high threshold after aa was released: no run (backoff %v, next in %v)", b.backoff.delay, b.backoff.next.Sub(b.tick))
	}
	if !rt.removed {
		t.Error("the run did not remove aa")
	}
	// Nothing is released any more: the next runs back off again.
	if got := b.checks(10); len(got) > 4 {
		t.Errorf("runs at checks %v of 10 with nothing left to remove, want them backed off", got)
	}
}

// TestReleasesEndTheBackoffAtMostEvery30s: over the high threshold, the
// node's one container moves to another image every 5 checks, releasing
// the last (kept all the same: too young to go): the releases end the
// backoff, but runs come no more often than every releaseRunSpacing, not
// at every release.
func TestReleasesEndTheBackoffAtMostEvery30s(t *testing.T) {
	b := newBackoffBed(t)
	rt := &rotatingRuntime{slowRuntime: slowRuntime{clk: b.clk, runTime: 7 * time.Millisecond}, images: 10}
	m := b.withRuntime(rt, time.Hour)
	b.disk.set(90)
	var ran []int
	for i := 1; i <= 300; i++ {
		if i%5 == 0 {
			rt.rotate()
		}
		listed(t, m, rt)
		if b.check() {
			ran = append(ran, i)
		}
	}
	// The backoff doubles from a second (runs at checks 1, 2, 4 ... 32);
	// past 30s each release ends it, but no sooner than 30s after the last
	// run, rather than 64s, 128s, then the 5-minute period.
	for i := 1; i < len(ran); i++ {
		if gap := ran[i] - ran[i-1]; gap < int(releaseRunSpacing/time.Second) && ran[i-1] >= 32 {
			t.Errorf("runs at checks %d and %d: %ds apart, want at least %v", ran[i-1], ran[i], gap, releaseRunSpacing)
		}
	}
	if len(ran) < 12 {
		t.Errorf("runs at checks %v: the releases did not end the backoff", ran)
	}
	if rt.removedAny {
		t.Error("an image an hour younger than minimumGCAge was removed")
	}
	t.Logf("runs at checks %v", ran)
}

// rotatingRuntime runs one container at all times, under a new ID after
// each rotate (a CronJob's pods, a crash-looping container whose dead
// instances the container GC removes): of image aa, or, with images > 0,
// of the next of that many images (the one before is released).
type rotatingRuntime struct {
	slowRuntime
	images     int
	mu         sync.Mutex
	n          int
	removedAny bool
}

func (r *rotatingRuntime) imageID(n int) string {
	if r.images == 0 {
		return "sha256:aa"
	}
	return "sha256:a" + strconv.Itoa(n%r.images)
}

func (r *rotatingRuntime) rotate() {
	r.mu.Lock()
	r.n++
	r.mu.Unlock()
}

func (r *rotatingRuntime) ListImages(context.Context) ([]*runtimeapi.Image, error) {
	r.clk.Step(r.runTime)
	var out []*runtimeapi.Image
	for n := range max(r.images, 1) {
		id := r.imageID(n)
		out = append(out, &runtimeapi.Image{Id: id, RepoTags: []string{"registry.example/" + id[len("sha256:"):] + ":1"}, Size: 20})
	}
	return out, nil
}

func (r *rotatingRuntime) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := r.imageID(r.n)
	return []*runtimeapi.Container{{Id: "c" + strconv.Itoa(r.n), Image: &runtimeapi.ImageSpec{Image: id}, ImageRef: id,
		State: runtimeapi.ContainerState_CONTAINER_RUNNING}}, nil
}

func (r *rotatingRuntime) RemoveImage(context.Context, string) error {
	r.mu.Lock()
	r.removedAny = true
	r.mu.Unlock()
	return errors.New("no image may be removed here")
}

// TestChurnIsNoRelease: over the high threshold, the only image stays in
// use while its container is replaced every 10 checks: no image was
// released, and the runs back off to the period (1, 2, 4 ... 256 checks
// apart, then 300), not every 30s at each replacement.
func TestChurnIsNoRelease(t *testing.T) {
	b := newBackoffBed(t)
	rt := &rotatingRuntime{slowRuntime: slowRuntime{clk: b.clk, runTime: 7 * time.Millisecond}}
	m := b.withRuntime(rt, 0)
	b.disk.set(90)
	var ran []int
	for i := 1; i <= 600; i++ {
		if i%10 == 0 {
			rt.rotate()
		}
		listed(t, m, rt)
		if b.check() {
			ran = append(ran, i)
		}
	}
	if len(ran) > 12 {
		t.Errorf("runs at checks %v: %d in 600 checks with no image released; want the backoff's, about 10", ran, len(ran))
	}
	if rt.removedAny {
		t.Error("the image in use was removed")
	}
}

// TestReleasedSinceCountsImagesNotNames: an image two containers use, one
// by its tag and one by its ID, is not released when either goes; it is
// when both have; and one container replaced by another of the same image
// between two listings releases nothing.
func TestReleasedSinceCountsImagesNotNames(t *testing.T) {
	tr, _ := newTestTracker(t)
	images := []*runtimeapi.Image{criImage("sha256:a", "r/a:1"), criImage("sha256:b", "r/b:1")}
	running := runtimeapi.ContainerState_CONTAINER_RUNNING
	byTag := &runtimeapi.Container{Id: "c1", Image: &runtimeapi.ImageSpec{Image: "r/a:1"}, ImageRef: "r/a:1", State: running}
	byID := &runtimeapi.Container{Id: "c2", Image: &runtimeapi.ImageSpec{Image: "sha256:a"}, ImageRef: "sha256:a", State: running}
	reconcile(tr, images, []*runtimeapi.Container{byTag, byID}, t0)
	used := tr.usedIDs()
	if !used["sha256:a"] || used["sha256:b"] {
		t.Fatalf("used %v, want a only", used)
	}
	reconcile(tr, images, []*runtimeapi.Container{byID}, t0)
	if tr.releasedSince(used) {
		t.Error("released, with a still used by its ID")
	}
	reconcile(tr, images, []*runtimeapi.Container{criContainer("c3", "sha256:a", running)}, t0)
	if tr.releasedSince(used) {
		t.Error("released, with a's container replaced by another of a")
	}
	reconcile(tr, images, nil, t0)
	if !tr.releasedSince(used) {
		t.Error("not released, with no container left on a")
	}
	reconcile(tr, images[1:], nil, t0)
	if tr.releasedSince(used) {
		t.Error("released, with a gone from the runtime")
	}
}
