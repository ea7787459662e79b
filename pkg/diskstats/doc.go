// Package diskstats reads capacity and free space of the filesystem that
// holds a path, such as the image filesystem's mountpoint that CRI
// ImageFsInfo names (CRI gives used bytes, never capacity).
//
// It asks cadvisor's fs package first, the library kubelet uses for the same
// numbers: it resolves the path to its block device and partition, whose
// mount point statfs(2) then reads, as cadvisor's vfs plugin does (not
// through cadvisor's GetFsInfoForPath, whose statfs goroutine races with its
// own timeout). Where cadvisor cannot resolve the
// device (tmpfs or overlay filesystems, which have no block device, or a
// filesystem mounted after its mount table was read and not yet seen on
// refresh) it falls back to statfs(2) on the path itself, and says so in
// Stats.Source. cadvisor's answer is only taken when the device it names is
// the one stat(2) reports for the path: with a stale mount table it would
// otherwise name a parent filesystem. Both give the same capacity and available bytes for a given
// filesystem: available is what an unprivileged writer may still use
// (f_bavail), as kubelet reports.
//
// A Reader is safe for concurrent use; one lock guards its cadvisor view.
package diskstats
