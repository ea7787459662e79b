package containers

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodegc/nodegc/pkg/cri"
)

// What holds the bytes a removal frees (the kind label of
// nodegc_container_gc_bytes_freed_total).
const (
	// KindWritableLayer: the writable layer (rootfs snapshot) of a removed
	// container or sandbox.
	KindWritableLayer = "writable_layer"
	// KindContainerLogs: a removed container's log file and its rotated
	// siblings.
	KindContainerLogs = "container_logs"
	// KindPodLogDirectory: what a removed pod log directory held right
	// before its removal; the log files of its containers removed before it
	// went with them and count there.
	KindPodLogDirectory = "pod_log_directory"
)

// Bytes counts bytes by what holds them. Log files and directories count
// their allocated blocks (st_blocks*512, as du does), writable layers what
// the runtime's snapshotter reports (containerd: the same, for the layer's
// own files), so that they compare with a filesystem's free space.
type Bytes struct {
	WritableLayer   uint64
	ContainerLogs   uint64
	PodLogDirectory uint64
}

// Total is the sum over the kinds.
func (b Bytes) Total() uint64 { return b.WritableLayer + b.ContainerLogs + b.PodLogDirectory }

// ByKind returns the bytes of each Kind* value.
func (b Bytes) ByKind() map[string]uint64 {
	return map[string]uint64{KindWritableLayer: b.WritableLayer, KindContainerLogs: b.ContainerLogs, KindPodLogDirectory: b.PodLogDirectory}
}

// countBytes sums the bytes of removals.
func countBytes(cs []ContainerDecision, sbs []SandboxDecision, dirs []LogDirDecision) Bytes {
	var b Bytes
	for _, d := range cs {
		b.WritableLayer += d.WritableLayerBytes
		b.ContainerLogs += d.LogBytes
	}
	for _, d := range sbs {
		b.WritableLayer += d.WritableLayerBytes
	}
	for _, d := range dirs {
		b.PodLogDirectory += d.Bytes
	}
	return b
}

// Bytes is what the plan's removals free, as counted when it was made.
func (p *Plan) Bytes() Bytes {
	return countBytes(p.RemoveContainers, p.RemoveSandboxes, p.RemoveLogDirs)
}

// Bytes is what the removals done free: as the plan counted them, but for
// pod log directories, counted right before their removal (in dry-run:
// what the plan counted).
func (o *Outcome) Bytes() Bytes { return countBytes(o.Containers, o.Sandboxes, o.LogDirs) }

// WritableLayerSource reads how many bytes containers' writable layers hold:
// a *ContainerdWritableLayers.
type WritableLayerSource interface {
	// WritableLayer returns the bytes the writable layer of the container
	// or sandbox id holds; 0 and no error when the runtime has none for it
	// (removed meanwhile).
	WritableLayer(ctx context.Context, id string) (uint64, error)
}

var _ WritableLayerSource = (*ContainerdWritableLayers)(nil)

// Reclaimer has the runtime free now what removals released, and returns
// once it did. A runtime may free a removed container's writable layer
// later than RemoveContainer returns: containerd at its next garbage
// collection, which it may schedule minutes later.
type Reclaimer interface {
	Reclaim(ctx context.Context) error
}

var _ Reclaimer = (*ContainerdWritableLayers)(nil)

// statusReader is what sizing needs of the runtime: a container's log path.
type statusReader interface {
	ContainerStatus(ctx context.Context, id string) (*runtimeapi.ContainerStatus, error)
}

// sizer counts the bytes each removal of a plan frees, right after
// planning, while what it counts still exists. It reads the runtime and the
// filesystem; Policy.Plan stays pure and leaves the counts 0.
type sizer struct {
	rt     statusReader
	layers WritableLayerSource // nil: writable layers count 0
	paths  logPaths
	// failed counts what could not be read (counted 0), by Op* value.
	failed int
}

// size sets the bytes of every removal of p: each container's writable
// layer and log files (the files removeContainerLogs removes: LOGPATH* under
// the pod logs directory; none when a kept container has the same log
// key), each sandbox's writable layer, and each pod log
// directory's blocks less the log files already counted with a container,
// so that nothing is counted twice. What cannot be read counts 0.
func (s *sizer) size(ctx context.Context, p *Plan) {
	counted := map[string]bool{} // log files counted with their container
	staying := stayingLogKeys(p)
	for i := range p.RemoveContainers {
		d := &p.RemoveContainers[i]
		d.WritableLayerBytes = s.writableLayer(ctx, d.Container.ID)
		if k, ok := logKeyOf(&d.Container); ok && staying[k] {
			continue // its log files are a kept container's too, and stay (executor.sharesLog)
		}
		st, err := s.rt.ContainerStatus(ctx, d.Container.ID)
		switch {
		case cri.IsNotFound(err):
			continue // removed meanwhile: nothing of it to free
		case err != nil:
			s.failed++
			klog.FromContext(ctx).V(2).Info("Cannot read a container's log path; counting its logs as 0 bytes", "containerID", d.Container.ID, "err", err)
			continue
		}
		files, _ := containerLogFiles(st.GetLogPath(), s.paths.PodLogs) // unreadable, or linked: no file to count
		for _, f := range files {
			if n, ok := allocated(f); ok && !counted[f] {
				counted[f] = true
				d.LogBytes += n
			}
		}
	}
	for i := range p.RemoveSandboxes {
		d := &p.RemoveSandboxes[i]
		d.WritableLayerBytes = s.writableLayer(ctx, d.Sandbox.ID)
	}
	for i := range p.RemoveLogDirs {
		d := &p.RemoveLogDirs[i]
		if !plainName(d.Dir.Name) || s.paths.PodLogs == "" {
			continue // the executor refuses it
		}
		n, err := treeBytes(filepath.Join(s.paths.PodLogs, d.Dir.Name), counted)
		if err != nil {
			s.failed++
			klog.FromContext(ctx).V(2).Info("Cannot read all of a pod log directory; counting what could be read", "directory", d.Dir.Name, "err", err)
		}
		d.Bytes = n
	}
}

func (s *sizer) writableLayer(ctx context.Context, id string) uint64 {
	if s.layers == nil {
		return 0
	}
	n, err := s.layers.WritableLayer(ctx, id)
	if err != nil {
		s.failed++
		klog.FromContext(ctx).V(2).Info("Cannot read a writable layer's size; counting it as 0 bytes", "id", id, "err", err)
		return 0
	}
	return n
}

// containerLogFiles lists a container's log file and its rotated siblings
// (LOGPATH*: LOGPATH.TIMESTAMP, LOGPATH.TIMESTAMP.gz, and the kubelet's
// .tmp while it compresses), the files removeContainerLogs removes, for
// sizing; none when the log path lies outside podLogsDir or its directory
// is gone. See openLogDir for a directory reached through a link.
func containerLogFiles(logPath, podLogsDir string) ([]string, error) {
	d, base, err := openLogDir(logPath, podLogsDir)
	if d == nil {
		return nil, err
	}
	defer d.Close()
	names, err := logNames(d, base)
	files := make([]string, len(names))
	for i, n := range names {
		files[i] = filepath.Join(d.Name(), n)
	}
	return files, err
}

// openLogDir opens the directory of a container's log, and returns it with
// the log's file name; nil when the log path lies outside podLogsDir or
// the directory is gone. Each element below podLogsDir (which may itself be
// a symbolic link, as on nodes that keep logs on another disk) is opened
// with O_NOFOLLOW from the one before: a directory that is a symbolic link
// (another pod's, whose logs a removal would take) is an error, and since
// the files are then listed and removed relative to the open directory,
// swapping a directory for a link after the open changes nothing.
func openLogDir(logPath, podLogsDir string) (*os.File, string, error) {
	if logPath == "" || podLogsDir == "" || !within(logPath, podLogsDir) {
		return nil, "", nil
	}
	dir, base := filepath.Split(filepath.Clean(logPath))
	rel, err := filepath.Rel(filepath.Clean(podLogsDir), filepath.Clean(dir))
	if err != nil {
		return nil, "", err
	}
	fd, err := unix.Open(podLogsDir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, "", fmt.Errorf("opening %s: %w", podLogsDir, err)
	}
	if rel != "." {
		for _, elem := range strings.Split(rel, "/") {
			next, err := unix.Openat(fd, elem, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			unix.Close(fd)
			switch {
			case errors.Is(err, unix.ENOENT):
				return nil, "", nil // nothing left to remove
			case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
				return nil, "", fmt.Errorf("log directory %s is a symbolic link, or lies below one: its files are left alone", dir)
			case err != nil:
				return nil, "", fmt.Errorf("opening %s: %w", dir, err)
			}
			fd = next
		}
	}
	return os.NewFile(uintptr(fd), filepath.Clean(dir)), base, nil
}

// logNames returns the names in d that begin with base (matched as text),
// sorted.
func logNames(d *os.File, base string) ([]string, error) {
	all, err := d.Readdirnames(-1)
	var names []string
	for _, n := range all {
		if strings.HasPrefix(n, base) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names, err
}

// allocated returns the bytes a file's blocks take (st_blocks*512); false
// when it cannot be read (gone meanwhile).
func allocated(path string) (uint64, bool) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return 0, false
	}
	return uint64(st.Blocks) * 512, true
}

// treeBytes sums the blocks of dir and everything below it except the paths
// in skip. Entries removed meanwhile are not an error.
func treeBytes(dir string, skip map[string]bool) (uint64, error) {
	var total uint64
	var errs []error
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			return nil // WalkDir skips what it could not read
		}
		if n, ok := allocated(p); ok && !skip[p] {
			total += n
		}
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return total, fmt.Errorf("sizing %s: %w", dir, errors.Join(errs...))
	}
	return total, nil
}
