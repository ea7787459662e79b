package containers

import (
	"context"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodegc/nodegc/internal/gcrun"
	"github.com/nodegc/nodegc/pkg/diskstats"
)

// The filesystems whose free space the container GC measures (the
// filesystem label of nodegc_container_gc_measured_bytes_freed_total).
const (
	// FSWritableLayers holds containers' writable layers: the runtime's
	// container filesystem (CRI ImageFsInfo), or its image filesystem when
	// it reports none apart (containerd: its snapshotter's directory).
	FSWritableLayers = "writable_layers"
	// FSPodLogs holds the pod logs directory.
	FSPodLogs = "pod_logs"
	// FSWritableLayersAndPodLogs is one filesystem holding both, measured
	// once.
	FSWritableLayersAndPodLogs = "writable_layers_and_pod_logs"
)

// DiskReader reads a filesystem's statistics: a *diskstats.Reader.
type DiskReader interface {
	Stat(path string) (diskstats.Stats, error)
}

var _ DiskReader = (*diskstats.Reader)(nil)

// FilesystemChange is the free space of one filesystem the container GC
// frees space on, before planning and after the run's removals settled.
type FilesystemChange struct {
	// Filesystem is an FS* value; Path the directory it was measured at.
	Filesystem, Path string
	Before, After    diskstats.Stats
	// Measured says After was read after the removals; MeasuredFreed is
	// then After.Available - Before.Available, which includes whatever
	// else changed on the filesystem meanwhile.
	Measured      bool
	MeasuredFreed int64
}

// filesystems returns the filesystems to measure, with their free space
// now: the one holding writable layers (where the runtime reports it) and
// the one holding the pod logs directory, once if they are the same. A
// filesystem that cannot be read is left out.
func (m *Manager) filesystems(ctx context.Context) []FilesystemChange {
	var out []FilesystemChange
	var devs []uint64
	add := func(name, path string) {
		var st unix.Stat_t
		if path == "" || unix.Stat(path, &st) != nil {
			return
		}
		for i, d := range devs {
			if d == st.Dev {
				out[i].Filesystem = FSWritableLayersAndPodLogs
				return
			}
		}
		stats, err := m.opts.Disk.Stat(path)
		if err != nil {
			return
		}
		devs = append(devs, st.Dev)
		out = append(out, FilesystemChange{Filesystem: name, Path: path, Before: stats})
	}
	add(FSWritableLayers, m.writableLayersPath(ctx))
	add(FSPodLogs, m.paths.PodLogs)
	return out
}

// writableLayersPath is where the runtime says containers' writable layers
// are: its container filesystem, else its image filesystem; "" when it says
// neither.
func (m *Manager) writableLayersPath(ctx context.Context) string {
	info, err := m.opts.Runtime.ImageFsInfo(ctx)
	if err != nil {
		return ""
	}
	for _, fss := range [][]*runtimeapi.FilesystemUsage{info.GetContainerFilesystems(), info.GetImageFilesystems()} {
		for _, fs := range fss {
			if mp := fs.GetFsId().GetMountpoint(); mp != "" {
				return mp
			}
		}
	}
	return ""
}

// reclaim has the runtime free the writable layers of the containers and
// sandboxes out removed (Options.Reclaimer), so that they are free when
// settle measures. A failure is counted (Failures[OpReclaim]) and logged,
// and does not fail the run: the removals are done, and the runtime frees
// the layers in its own time. Once ctx ended (the agent stops) it does not
// ask.
func (m *Manager) reclaim(ctx context.Context, out *Outcome) {
	if ctx.Err() != nil {
		return
	}
	err := m.opts.Reclaimer.Reclaim(ctx)
	m.ops.done(OpReclaim, err != nil)
	if err != nil {
		out.Failures[OpReclaim]++
		klog.FromContext(ctx).Error(err, "Container GC: the runtime did not free the removed writable layers at once; it frees them in its own time, and this run's measured freed bytes may miss them",
			"containers", len(out.Containers), "sandboxes", len(out.Sandboxes))
	}
}

// settle reads the filesystems again until their free space stopped
// growing, within Options.SettleTimeout (gcrun.Settle: the runtime may free
// a removed container's layer after RemoveContainer returns, a snapshotter
// that removes asynchronously), and sets After and MeasuredFreed.
func (m *Manager) settle(ctx context.Context, fss []FilesystemChange) {
	best := make([]uint64, len(fss))
	for i := range fss {
		best[i] = fss[i].Before.Available
	}
	gcrun.Settle(ctx, m.waitClock, m.opts.SettleTimeout, func() (grew, more bool) {
		for i := range fss {
			st, err := m.opts.Disk.Stat(fss[i].Path)
			if err != nil {
				continue // keep the last reading
			}
			if st.Available > best[i]+gcrun.SettleNoise {
				grew = true
			}
			best[i] = max(best[i], st.Available)
			fss[i].After, fss[i].Measured = st, true
			fss[i].MeasuredFreed = int64(st.Available) - int64(fss[i].Before.Available)
		}
		return grew, true
	})
}
