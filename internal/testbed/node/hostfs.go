package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// CreateCgroupParent creates the node's cgroup parent in every cgroup
// hierarchy, for a kubelet that runs with it as its cgroupRoot (the kubelet
// wants to find it at start: it sets node allocatable limits on it and
// cadvisor watches it). In the cpuset hierarchy cpuset.cpus and cpuset.mems
// are copied from the root, as a new cpuset cgroup starts empty and no task
// could join it. Teardown removes them with everything below.
func (n *Node) CreateCgroupParent() error {
	mounts, err := readMounts()
	if err != nil {
		return err
	}
	for _, h := range cgroupHierarchies(mounts) {
		dir := filepath.Join(h, n.CgroupParent)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			data, err := os.ReadFile(filepath.Join(h, f))
			if err != nil {
				continue // not the cpuset hierarchy
			}
			if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
				return fmt.Errorf("cgroup %s: write %s: %w", dir, f, err)
			}
		}
	}
	return nil
}

// UnmountAll unmounts every mount at or below dir, deepest first, lazily
// when a plain unmount fails, and returns how many it removed: for a
// kubelet's root directory, which it bind-mounts onto itself and holds pod
// volume mounts below.
func UnmountAll(dir string) (int, error) { return unmountAllUnder(dir) }
