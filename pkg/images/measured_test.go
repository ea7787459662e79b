package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unique"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/pkg/diskstats"
)

// holdingDisk is an image filesystem of 1000 bytes: 100 bytes of other
// data plus what each image of rt really holds on it (perImage: its
// compressed blobs and unpacked snapshots), whatever CRI says its Size is.
// Removals free their bytes as the runtime returns, as containerd's and
// CRI-O's do.
type holdingDisk struct {
	rt       *shrinkingRuntime
	perImage uint64
}

func (d *holdingDisk) Stat(string) (diskstats.Stats, error) {
	d.rt.mu.Lock()
	n := uint64(len(d.rt.images))
	d.rt.mu.Unlock()
	return diskstats.Stats{Capacity: 1000, Available: 1000 - 100 - n*d.perImage}, nil
}

// reportsOf has the bed's manager options keep every run's report in
// reports, the bed's count of runs going on.
func reportsOf(reports *[]*Report) func(*Options) {
	return func(o *Options) {
		counted := o.OnRun
		o.OnRun = func(r *Report) {
			counted(r)
			*reports = append(*reports, r)
		}
	}
}

// TestSpaceRemovalsStopAtGoal: no exact accounting (containerd's API not
// answering, or CRI-O): CRI says each image holds 10 bytes (containerd:
// its compressed content), while removing it frees 40 (blobs and unpacked
// layers). 20 images: usage 90%, high 80, low 75: 150 bytes to free, 15
// images by CRI sizes, 4 on the disk. The run reads the image filesystem
// before each space removal and stops once it reached the low threshold:
// 4 removals, the 11 others left at the goal and said so in the report.
// (Before, the run trusted the CRI sizes to the end: 15 removed, usage
// 30%.)
func TestSpaceRemovalsStopAtGoal(t *testing.T) {
	var reports []*Report
	b, rt := newShrinkingBed(t, 20, reportsOf(&reports))
	for _, img := range rt.images {
		img.Size = 10
	}
	d := &holdingDisk{rt: rt, perImage: 40}
	b.m.opts.Disk = d
	if !b.check() {
		t.Fatal("no run at 90%")
	}
	st, _ := d.Stat("")
	usage := DiskStats{Capacity: st.Capacity, Available: st.Available}.UsagePercent()
	if removed := 20 - len(rt.images); removed != 4 || usage > 75 || usage < 72 {
		t.Errorf("one run removed %d images, usage now %d%%; want 4 removed, usage at or just under the low threshold (75%%)", removed, usage)
	}
	if len(reports) != 1 || reports[0].Outcome == nil {
		t.Fatalf("reports %v, want one with an outcome", reports)
	}
	o := reports[0].Outcome
	if o.LeftAtGoal != 11 || reports[0].Err != nil {
		t.Errorf("the report says %d planned removals left at the goal (error %v), want 11 and no error", o.LeftAtGoal, reports[0].Err)
	}
	if got := b.checks(5); len(got) > 0 {
		t.Errorf("runs at ticks %v after the run reached the low threshold, want none", got)
	}
}

// TestSpaceRemovalsStopAtProjectedGoal: a run started ahead of a fill
// (trigger projected: 200 bytes to arrive within the horizon) frees down to
// the low threshold from the projected usage: its goal is 450 bytes
// available, not the low threshold's 250, which the disk (300 available)
// is past already. 4 images of 40 bytes on disk go, not none.
func TestSpaceRemovalsStopAtProjectedGoal(t *testing.T) {
	b, rt := newShrinkingBed(t, 15, nil)
	for _, img := range rt.images {
		img.Size = 10
	}
	b.m.opts.Disk = &holdingDisk{rt: rt, perImage: 40} // 700 used: 70%
	r, err := b.m.collectFor(t.Context(), TriggerProjected, demand{ahead: 200})
	if err != nil {
		t.Fatal(err)
	}
	if removed := 15 - len(rt.images); removed != 4 || r.Outcome.LeftAtGoal != 11 {
		t.Errorf("the projected run removed %d images, left %d at the goal; want 4 removed (450 bytes available), 11 left", removed, r.Outcome.LeftAtGoal)
	}
}

// TestRemovalsThatFreeNothingHold: the filesystem nodegc reads is not the
// one the images are on (a disk mounted on the host at the runtime's root
// after nodegc's container started: its hostPath mount still shows the
// root filesystem underneath). That reading stays at 90% whatever is
// removed. Two removals (one per run, each planned to free 15 bytes) free
// nothing there of the 40 bytes they were estimated to free: space
// removals are held, said once in the log
// (naming the mountpoint and what to do) and by
// nodegc_image_gc_disk_unresponsive; no threshold run starts while the
// hold lasts, and a periodic run's space removals are left. A later
// reading that grew ends it. (Before, every image went, one per check, with
// 0 bytes measured freed of 200 estimated.)
func TestRemovalsThatFreeNothingHold(t *testing.T) {
	var reports []*Report
	b, rt := newShrinkingBed(t, 10, func(o *Options) { reportsOf(&reports)(o); o.Layers = ownLayers{} })
	var logs bytes.Buffer
	b.ctx = klog.NewContext(context.Background(), textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&logs))))
	b.m.mountpoint.Store(ptr.To("/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs"))
	b.disk.set(90)
	ran := b.checks(60)
	if removed := 10 - len(rt.images); removed > 2 || !slices.Equal(ran, []int{1, 2}) {
		t.Errorf("runs at ticks %v removed %d of 10 images (measured %v), want two runs removing 2, then none",
			ran, removed, testutil.ToFloat64(b.m.metrics.bytesMeasured))
	}
	if got := testutil.ToFloat64(b.m.metrics.diskUnresponsive); got != 1 {
		t.Errorf("nodegc_image_gc_disk_unresponsive %v, want 1", got)
	}
	lines := strings.Count(logs.String(), "free nothing on the image filesystem")
	if lines != 1 || !strings.Contains(logs.String(), "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs") ||
		!strings.Contains(logs.String(), "restart nodegc's pod") {
		t.Errorf("%d lines telling the hold, want one naming the mountpoint and what to do:\n%s", lines, logs.String())
	}
	r, err := b.m.collectFor(b.ctx, TriggerPeriodic, demand{})
	if err != nil || r.Outcome.LeftDiskUnresponsive == 0 || len(r.Outcome.Removed) > 0 {
		t.Errorf("a periodic run while held: err %v, %+v; want no error, the space removals left", err, r.Outcome)
	}

	b.disk.set(70) // something freed 20 bytes there: the reading answers
	if b.check() {
		t.Error("a run at 70%")
	}
	if got := testutil.ToFloat64(b.m.metrics.diskUnresponsive); got != 0 {
		t.Errorf("nodegc_image_gc_disk_unresponsive %v after the reading grew, want 0", got)
	}
	if !strings.Contains(logs.String(), "removing for space again") {
		t.Errorf("no line for the end of the hold:\n%s", logs.String())
	}
}

// TestRemovalsThatFreeNothingStopTheRun: a run that planned 8 removals on
// a filesystem reading that does not move stops after the second: what
// they freed there is nothing of what they were estimated to free.
func TestRemovalsThatFreeNothingStopTheRun(t *testing.T) {
	b, rt := newShrinkingBed(t, 10, func(o *Options) { o.Layers = ownLayers{} })
	for _, img := range rt.images {
		img.Size = 2
	}
	b.disk.set(90)
	r, err := b.m.collectFor(t.Context(), TriggerThreshold, demand{})
	if err != nil {
		t.Fatal(err)
	}
	if removed := len(r.Outcome.Removed); removed > 2 || r.Outcome.LeftDiskUnresponsive+removed != 8 {
		t.Errorf("the run removed %d, left %d as the disk did not answer; want at most 2 removed of the 8 planned, the rest left", removed, r.Outcome.LeftDiskUnresponsive)
	}
}

// TestProfileUnreadStartsNoThresholdRun: containerd 1.x whose sandbox
// image cannot be read (ProfileUnread): the manager removes nothing until
// the agent reads it and builds the GC again. With the disk over the high
// threshold, no threshold run starts (each would plan in full and fail at
// its first check), and that is said once. (Before: 63 runs in 600 s, each
// with its error line.)
func TestProfileUnreadStartsNoThresholdRun(t *testing.T) {
	b, rt := newShrinkingBed(t, 4, func(o *Options) { o.ProfileUnread = "sandbox image" })
	var logs bytes.Buffer
	b.ctx = klog.NewContext(context.Background(), textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&logs))))
	b.disk.set(90)
	ran := b.checks(600)
	if len(ran) > 0 || len(rt.images) != 4 {
		t.Errorf("%d runs in 600 s at ticks %v (images left %d), want none while removals are held for good", len(ran), ran[:min(len(ran), 12)], len(rt.images))
	}
	if got := strings.Count(logs.String(), "no threshold or projected run starts"); got != 1 {
		t.Errorf("%d lines saying why no run starts, want 1:\n%s", got, logs.String())
	}
	if got := testutil.ToFloat64(b.m.metrics.removalsHeld.WithLabelValues(heldProfileUnread)); got != 1 {
		t.Errorf("nodegc_image_gc_removals_held{reason=profile_unread} %v, want 1", got)
	}
}

// sharedBaseDisk is an image filesystem of 100 bytes at 90% where each
// removal of rt's images frees 1 byte of the 20 CRI says it holds: the
// images are built on a base that images kept hold (CRI sizes count it in
// each).
type sharedBaseDisk struct {
	rt    *shrinkingRuntime
	start int
}

func (d *sharedBaseDisk) Stat(string) (diskstats.Stats, error) {
	d.rt.mu.Lock()
	n := len(d.rt.images)
	d.rt.mu.Unlock()
	return diskstats.Stats{Capacity: 100, Available: 10 + uint64(d.start-n)}, nil
}

// TestRemovalsOfSharedLayersDoNotHold: with CRI sizes, images that share
// nearly everything with images kept free a twentieth of their estimate:
// the filesystem answers all the same, and space removals go on.
func TestRemovalsOfSharedLayersDoNotHold(t *testing.T) {
	b, rt := newShrinkingBed(t, 10, nil)
	b.m.opts.Disk = &sharedBaseDisk{rt: rt, start: 10}
	ran := b.checks(5)
	if got := testutil.ToFloat64(b.m.metrics.diskUnresponsive); got != 0 || len(ran) != 5 || len(rt.images) != 5 {
		t.Errorf("nodegc_image_gc_disk_unresponsive %v, runs at ticks %v, %d images left; want 0, a run at each of 5 checks, 5 left", got, ran, len(rt.images))
	}
}

// ownLayers is a LayerSource that gives each image one layer of its own,
// of the image's CRI size: exact accounting, as containerd's on images
// that share nothing.
type ownLayers struct{}

func (ownLayers) Layers(_ context.Context, img *Image) ([]Layer, error) {
	return []Layer{{Key: unique.Make("layer-" + img.ID), Size: img.Size}}, nil
}
func (ownLayers) Held(context.Context) (map[unique.Handle[string]]bool, error) { return nil, nil }
func (ownLayers) Forget(string)                                                {}
func (ownLayers) Retain(map[string]bool)                                       {}

// TestRemovalsOnCRISizesNeverHold: with CRI sizes (CRI-O always; containerd
// when its API cannot be read) a removal's estimate counts the layers the
// image shares with the images kept, so a healthy disk may show next to
// nothing freed: images built on a large base free only their thin top
// layers, here none of the 20 bytes CRI gives each. Space removals go on
// until the disk is under the low threshold; no hold. (Before, two such
// removals held every later space removal until something else freed 1%
// of the disk: the disk went on filling, to the kubelet's eviction
// threshold, and NodegcImageFSMisread paged with the wrong cause.)
func TestRemovalsOnCRISizesNeverHold(t *testing.T) {
	b, rt := newShrinkingBed(t, 10, nil)
	b.disk.set(90)
	ran := b.checks(30)
	if got := testutil.ToFloat64(b.m.metrics.diskUnresponsive); got != 0 || len(rt.images) != 0 || len(ran) < 10 {
		t.Errorf("nodegc_image_gc_disk_unresponsive %v, runs at ticks %v, %d images left; want 0, runs until every image went (the disk never answers here)",
			got, ran, len(rt.images))
	}
}

// TestOneRemovalThatFreesLittleDoesNotHold: exact accounting, 100 GiB.
// The first removal was estimated to free 10 GiB (a large base the plan saw
// held by that image alone) and freed 20 MiB: a pull of an image on the
// same base, after the plan, took the base. The second freed its 200 MiB
// estimate: the filesystem answers. Before, the sums since the last answer
// (10.2 GiB estimated, 220 MiB measured, 2 removals) began a hold, so no
// space removal ran while the disk went on filling, and
// NodegcImageFSMisread paged with the wrong cause. Each removal is judged
// on its own estimate now; two in a row that free little still hold.
func TestOneRemovalThatFreesLittleDoesNotHold(t *testing.T) {
	var f diskFeedback
	d := func(avail uint64) DiskStats { return DiskStats{Capacity: 100 << 30, Available: avail} }
	avail := uint64(10 << 30)
	remove := func(estimated, freed uint64) bool {
		began, _, _, _ := f.removed(estimated, true, d(avail), d(avail+freed))
		avail += freed
		return began
	}
	if remove(10<<30, 20*mib) || remove(200*mib, 200*mib) {
		t.Error("a removal that freed little, then one that freed its estimate: held")
	}
	if remove(10<<30, 20*mib) || remove(200*mib, 200*mib) || remove(10<<30, 20*mib) {
		t.Error("the same again, then one that freed little: held")
	}
	if !remove(1<<30, 0) {
		t.Error("two removals in a row, estimated over 1% of the disk together, that freed under a tenth of it: not held")
	}
}

// heldUnreadLayers are ownLayers whose Held cannot be read: the estimates
// count storage held elsewhere as freed.
type heldUnreadLayers struct{ ownLayers }

func (heldUnreadLayers) Held(context.Context) (map[unique.Handle[string]]bool, error) {
	return nil, errors.New("listing leases: deadline exceeded")
}

// TestRemovalsNotJudgedWithoutHeld: when what else holds image storage
// cannot be read (a pull's lease, other namespaces' blobs), the plan's
// exact estimates may count it as freed: its removals are not judged, and
// a disk that shows little freed holds nothing. Before, they were judged
// as exact, and two such removals held every later space removal.
func TestRemovalsNotJudgedWithoutHeld(t *testing.T) {
	b, rt := newShrinkingBed(t, 10, func(o *Options) { o.Layers = heldUnreadLayers{} })
	b.disk.set(90)
	ran := b.checks(30)
	if got := testutil.ToFloat64(b.m.metrics.diskUnresponsive); got != 0 || len(rt.images) != 0 || len(ran) < 10 {
		t.Errorf("nodegc_image_gc_disk_unresponsive %v, runs at ticks %v, %d images left; want 0, runs until every image went",
			got, ran, len(rt.images))
	}
}

// unreadableLayers is ownLayers but for the image id, whose own storage
// containerd cannot read (ErrImageUnreadable: its config blob gone).
type unreadableLayers struct {
	ownLayers
	id string
}

func (l unreadableLayers) Layers(ctx context.Context, img *Image) ([]Layer, error) {
	if img.ID == l.id {
		return nil, fmt.Errorf("%w: reading rootfs of config %s: not found", ErrImageUnreadable, img.ID)
	}
	return l.ownLayers.Layers(ctx, img)
}

// TestRemovalsBesideAnUnreadableImageNeverHold: exact accounting, and one
// image (pinned here, so that every plan holds it) whose own storage
// containerd cannot read. It counts by its CRI size, the others by their
// layers; what it shares with them is unknown (a removal of an image on the
// same base frees only its top layers), so no removal is judged while it
// is in the plan: the disk here never answers, and the space removals go
// on, where with every image read two of them hold
// (TestRemovalsThatFreeNothingHold). The plans stay exact.
func TestRemovalsBesideAnUnreadableImageNeverHold(t *testing.T) {
	var reports []*Report
	b, rt := newShrinkingBed(t, 10, func(o *Options) { reportsOf(&reports)(o); o.Layers = unreadableLayers{id: "sha256:j"} })
	rt.images[9].Pinned = true
	b.disk.set(90)
	ran := b.checks(30)
	if got := testutil.ToFloat64(b.m.metrics.diskUnresponsive); got != 0 || len(rt.images) != 1 || len(ran) < 9 {
		t.Errorf("nodegc_image_gc_disk_unresponsive %v, runs at ticks %v, %d images left; want 0, runs until only the pinned one is left (the disk never answers here)",
			got, ran, len(rt.images))
	}
	for i, r := range reports {
		if r.Plan != nil && !r.Plan.ExactAccounting {
			t.Errorf("run %d planned with CRI sizes; want exact accounting for the images that can be read", i)
		}
	}
}
