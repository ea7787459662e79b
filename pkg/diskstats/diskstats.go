package diskstats

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"time"

	cadvisorfs "github.com/google/cadvisor/fs"
	_ "github.com/google/cadvisor/fs/vfs/install" // register the plugin for ordinary block filesystems
	"golang.org/x/sys/unix"
)

// Source says where Stats came from.
const (
	SourceCadvisor = "cadvisor"
	SourceStatfs   = "statfs"
)

// Stats describe one filesystem.
type Stats struct {
	Capacity   uint64
	Available  uint64
	Inodes     uint64
	InodesFree uint64
	// Device is the block device cadvisor resolved, empty for statfs.
	Device string
	// Source is SourceCadvisor or SourceStatfs.
	Source string
}

// refreshEvery bounds how often the cadvisor view of the mount table is
// rebuilt when a path's device is unknown to it.
const refreshEvery = 30 * time.Second

// Reader reads filesystem statistics.
type Reader struct {
	mu        sync.Mutex
	info      cadvisorfs.FsInfo
	refreshed time.Time
	now       func() time.Time
}

// NewReader returns a Reader. It does not fail: without cadvisor's view
// (e.g. /proc unreadable) every read uses statfs.
func NewReader() *Reader { return &Reader{now: time.Now} }

// Stat returns the statistics of the filesystem holding path.
func (r *Reader) Stat(path string) (Stats, error) {
	if st, ok := r.viaCadvisor(path); ok {
		return st, nil
	}
	return Statfs(path)
}

func (r *Reader) viaCadvisor(path string) (Stats, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for attempt := 0; attempt < 2; attempt++ {
		if r.info == nil || (attempt == 1 && r.now().Sub(r.refreshed) > refreshEvery) {
			info, err := cadvisorfs.NewFsInfo(cadvisorfs.Context{})
			if err != nil {
				return Stats{}, false
			}
			r.info, r.refreshed = info, r.now()
		} else if attempt == 1 {
			return Stats{}, false
		}
		if st, ok := r.lookupLocked(path); ok {
			return st, true
		}
	}
	return Stats{}, false
}

func (r *Reader) lookupLocked(path string) (Stats, bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return Stats{}, false
	}
	dev, err := r.info.GetDirFsDevice(path)
	if err != nil {
		return Stats{}, false
	}
	// With a stale mount table cadvisor walks up to a parent mount and
	// names the wrong filesystem: accept its answer only for the device the
	// path really is on.
	if dev.Major != uint(unix.Major(st.Dev)) || dev.Minor != uint(unix.Minor(st.Dev)) {
		return Stats{}, false
	}
	mnt, err := r.info.GetMountpointForDevice(dev.Device)
	if err != nil {
		return Stats{}, false
	}
	// The numbers come from statfs(2) of that mount point, as cadvisor's
	// vfs plugin reads them, but not through cadvisor's GetFsInfoForPath:
	// its vfs.GetVfsStats (v0.57.0) runs statfs in a goroutine that writes
	// the function's named results, and after its 2s timeout returns they
	// are written twice at once (a data race, seen on a loaded machine).
	stats, err := Statfs(mnt)
	if err != nil {
		return Stats{}, false
	}
	stats.Device, stats.Source = dev.Device, SourceCadvisor
	return stats, true
}

// Statfs reads the statistics of the filesystem holding path with statfs(2).
func Statfs(path string) (Stats, error) {
	var s unix.Statfs_t
	if err := unix.Statfs(path, &s); err != nil {
		return Stats{}, fmt.Errorf("statfs %s: %w", path, err)
	}
	return fromStatfs(path, &s)
}

// fromStatfs is what statfs(2) of path answered, s; ErrImplausible when no
// filesystem has those numbers (a FUSE daemon or a network filesystem may
// answer anything): a negative block size, a size or free space past 2^64
// bytes, more blocks available than there are. The blocks are counted in
// fragments (f_frsize), as statvfs(3) and cadvisor count them, or in
// f_bsize where the kernel gives no fragment size: f_bsize is the
// preferred I/O size, larger on some filesystems (FUSE, network ones).
func fromStatfs(path string, s *unix.Statfs_t) (Stats, error) {
	size := s.Frsize
	if size == 0 {
		size = s.Bsize
	}
	if size < 0 || s.Bsize < 0 {
		return Stats{}, fmt.Errorf("statfs %s: %w: block size %d, fragment size %d", path, ErrImplausible, s.Bsize, s.Frsize)
	}
	bs := uint64(size)
	hi, capacity := bits.Mul64(s.Blocks, bs)
	if hi != 0 {
		return Stats{}, fmt.Errorf("statfs %s: %w: %d blocks of %d bytes pass 2^64 bytes", path, ErrImplausible, s.Blocks, bs)
	}
	if s.Bavail > s.Blocks {
		return Stats{}, fmt.Errorf("statfs %s: %w: %d blocks available of %d", path, ErrImplausible, s.Bavail, s.Blocks)
	}
	return Stats{
		Capacity:   capacity,
		Available:  s.Bavail * bs, // at most capacity
		Inodes:     s.Files,
		InodesFree: s.Ffree,
		Source:     SourceStatfs,
	}, nil
}

// ErrImplausible says that statfs(2) answered numbers no filesystem has.
var ErrImplausible = errors.New("implausible filesystem statistics")
