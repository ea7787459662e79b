package images

import (
	"context"
	"sync"

	"k8s.io/klog/v2"
)

// unansweredShare and unansweredFloor decide when the image filesystem as
// nodegc reads it does not answer its removals: space removals estimated to
// free at least unansweredFloor of its capacity showed, measured right
// around each, less than 1/unansweredShare of that freed. containerd's CRI
// plugin and CRI-O free an image's last reference before RemoveImage
// returns (Manager.settle), so a removal shows at once. Only exact
// accounting (containerd's layers, shared ones counted once, storage held
// elsewhere left out) is judged: its estimate is what the removal frees,
// and a reading that shows less than a tenth of it reads another
// filesystem. CRI sizes count the layers an image shares with the images
// kept (an image built on a large base frees only its own top layers, a
// rebuild that changed only its config a few kilobytes), so with them a
// healthy disk may show next to nothing freed: they are never judged (CRI-O
// always, containerd when its API cannot be read), and there a misread
// disk goes unnoticed, as before. Each removal is measured alone (a statfs
// right before and right after RemoveImage, milliseconds apart), which
// keeps most of what other writers on the disk do out of the measurement;
// one during which available bytes fell by a tenth of its estimate or more
// (a pull wrote beside it) tells nothing, and is left out. Each removal is
// judged on its own estimate, and it takes unansweredRemovals in a row
// that do not answer: one removal's reading alone is not enough, and a
// removal that shows its own estimate answers, whatever those before it
// showed (a pull of an image on the same base, between the plan and a
// removal, makes that removal free only its top layers: one such removal
// must not hold). A plan whose estimates counted storage held elsewhere
// (containerd's leases and other namespaces could not be read) is not
// judged either.
const (
	unansweredShare        = 10
	unansweredFloorPercent = 1
	unansweredRemovals     = 2
)

// unansweredFloor is the least estimate of space removals, on a filesystem
// of that capacity, that may show that it does not answer: 1% of it, at
// least a byte.
func unansweredFloor(capacity uint64) uint64 {
	return max(mulDiv(capacity, unansweredFloorPercent, 100), 1)
}

// diskFeedback compares what the space removals were estimated to free with
// what the image filesystem, as nodegc reads it, showed each free. When
// unansweredRemovals removals or more in a row, estimated to free at least
// unansweredFloor together, each show less than 1/unansweredShare of its
// own estimate (exact accounting only), what nodegc reads is likely not the filesystem
// the images are on (a filesystem mounted at or under the runtime's root on
// the host after nodegc's container started, which its mount of the root
// does not show): every removal would go for nothing, or the real image
// filesystem fill without nodegc seeing it. Space removals are then held
// (no threshold or projected run starts, a periodic run's space removals
// are left) until a reading of the filesystem grows by unansweredFloor
// since the hold began (it answers: something was freed there), or the
// manager is built again.
type diskFeedback struct {
	mu sync.Mutex
	// estimated and measured sum the space removals in a row that did not
	// answer, since the last that did: what they were estimated to free,
	// and what the filesystem showed freed right around each (negative
	// changes count as 0).
	estimated, measured uint64
	removals            int
	held                bool
	heldAt              uint64 // available bytes at the reading that began the hold
}

// removed records one space removal, estimated to free estimated bytes
// (exactly: with exact accounting), with the readings right before and
// after it, and says whether it began a hold (then with the sums that
// did).
func (f *diskFeedback) removed(estimated uint64, exact bool, before, after DiskStats) (began bool, est, meas uint64, n int) {
	if estimated == 0 || !exact {
		return false, 0, 0, 0 // CRI sizes: see unansweredShare
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held {
		return false, 0, 0, 0
	}
	if after.Available < before.Available && before.Available-after.Available >= estimated/unansweredShare {
		return false, 0, 0, 0 // others wrote beside it
	}
	var freed uint64
	if after.Available > before.Available {
		freed = after.Available - before.Available
	}
	if freed*unansweredShare >= estimated {
		f.estimated, f.measured, f.removals = 0, 0, 0 // it answers
		return false, 0, 0, 0
	}
	f.estimated += estimated
	f.measured += freed
	f.removals++
	if f.estimated < unansweredFloor(after.Capacity) || f.removals < unansweredRemovals {
		return false, 0, 0, 0
	}
	est, meas, n = f.estimated, f.measured, f.removals
	f.held, f.heldAt = true, after.Available
	f.estimated, f.measured, f.removals = 0, 0, 0
	return true, est, meas, n
}

// observe records a reading of the filesystem, and says whether it ended
// the hold: it grew by unansweredFloor since the hold began.
func (f *diskFeedback) observe(disk DiskStats) (ended bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.held || disk.Available < f.heldAt+unansweredFloor(disk.Capacity) {
		return false
	}
	f.held = false
	return true
}

// holding says whether space removals are held.
func (f *diskFeedback) holding() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held
}

// spaceWatch is a run's spaceGauge: it reads the image filesystem
// (Manager.diskStats: statfs, microseconds) before each space removal,
// and stops them once available bytes reached goal. Without exact
// accounting the estimates may be several times off either way (on
// containerd, CRI sizes count the compressed content only, not the
// unpacked layers); containerd and CRI-O free an image's last reference
// before RemoveImage returns (Manager.settle), so the reading shows where
// the disk stands. It also reads the filesystem right around each space
// removal, for the manager's feedback: removals that free nothing there
// hold the rest (stopDiskUnresponsive). The reading right before a removal
// follows the check before it, and asks the runtime nothing: when the
// mountpoint is not known, that removal is left out of the feedback.
type spaceWatch struct {
	m     *Manager
	goal  uint64
	exact bool // the plan's estimates are exact (Plan.ExactAccounting, and storage held elsewhere was read)
}

func (w *spaceWatch) stop(ctx context.Context) string {
	if w.m.feedback.holding() {
		return stopDiskUnresponsive
	}
	disk, err := w.m.diskStats(ctx)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Cannot read the image filesystem before a space removal; the estimates decide", "err", err)
		return ""
	}
	if disk.Available >= w.goal {
		return stopAtGoal
	}
	return ""
}

func (w *spaceWatch) remove(ctx context.Context, rt imageRemover, d Decision) error {
	// Between the check and the removal: statfs only, never the runtime
	// (knownDiskStats).
	before, beforeErr := w.m.knownDiskStats()
	if err := rt.RemoveImage(ctx, d.Image.ID); err != nil {
		return err
	}
	if beforeErr != nil {
		return nil
	}
	after, err := w.m.diskStats(ctx)
	if err != nil {
		return nil
	}
	if began, est, meas, n := w.m.feedback.removed(d.Bytes, w.exact, before, after); began {
		w.m.diskUnresponsive(ctx, est, meas, n)
	}
	return nil
}

// diskUnresponsive tells that space removals are held: n removals,
// estimated to free est bytes, showed meas freed on the image filesystem
// as nodegc reads it.
func (m *Manager) diskUnresponsive(ctx context.Context, est, meas uint64, n int) {
	m.metrics.diskUnresponsive.Set(1)
	mountpoint := ""
	if mp := m.mountpoint.Load(); mp != nil {
		mountpoint = *mp
	}
	klog.FromContext(ctx).Error(nil, "Image removals free nothing on the image filesystem as nodegc reads it: nodegc's view of it is likely not the runtime's, most likely because a filesystem was mounted at or under its mountpoint on the host after nodegc's container started; no image is removed for space until a reading of it grows; restart nodegc's pod to mount it anew",
		"mountpoint", mountpoint, "removals", n, "estimatedFreedBytes", est, "measuredFreedBytes", meas)
}
