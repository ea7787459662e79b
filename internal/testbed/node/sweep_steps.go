package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nodegc/nodegc/internal/testbed"
)

// deleteRuncContainers runs `runc --root RUNCROOT/NS delete --force ID`
// for every container runc still knows, which kills its processes.
func (i instance) deleteRuncContainers(ctx context.Context) (int, error) {
	nsDirs, _ := os.ReadDir(i.runcRoot())
	var errs []error
	deleted := 0
	for _, ns := range nsDirs {
		if !ns.IsDir() {
			continue
		}
		root := filepath.Join(i.runcRoot(), ns.Name())
		ids, _ := os.ReadDir(root)
		for _, id := range ids {
			if !id.IsDir() {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, sweepTimeout)
			out, err := exec.CommandContext(cctx, runcBinary(), "--root", root, "delete", "--force", id.Name()).CombinedOutput()
			cancel()
			switch {
			case err == nil:
				deleted++
			case !strings.Contains(string(out), "does not exist"):
				errs = append(errs, fmt.Errorf("runc --root %s delete --force %s: %w: %s", root, id.Name(), err, strings.TrimSpace(string(out))))
			}
		}
	}
	return deleted, errors.Join(errs...)
}

// runcBinary is the runc both containerd configs name.
func runcBinary() string {
	if p, err := exec.LookPath("runc"); err == nil {
		return p
	}
	return "/usr/sbin/runc"
}

// killCgroupProcs SIGKILLs every process left in the cgroup parent (in any
// hierarchy) and waits until the cgroups are empty. Frozen cgroups are
// thawed first, or the kill would wait forever.
func (i instance) killCgroupProcs(ctx context.Context) (int, error) {
	mounts, err := readMounts()
	if err != nil {
		return 0, err
	}
	var dirs []string
	for _, h := range cgroupHierarchies(mounts) {
		d := filepath.Join(h, i.cgroupParent())
		if _, err := os.Stat(d); err == nil {
			dirs = append(dirs, d)
		}
		if strings.HasSuffix(h, "/freezer") {
			for _, sub := range cgroupDirsDeepestFirst(d) {
				os.WriteFile(filepath.Join(sub, "freezer.state"), []byte("THAWED"), 0o644)
			}
		}
	}
	if len(dirs) == 0 {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	var left []int
	killed := map[int]bool{}
	err = testbed.Poll(ctx, 20*time.Millisecond, func(context.Context) (bool, error) {
		left = left[:0]
		for _, d := range dirs {
			left = append(left, cgroupProcsUnder(d)...)
		}
		for _, pid := range left {
			syscall.Kill(pid, syscall.SIGKILL)
			killed[pid] = true
		}
		return len(left) == 0, nil
	})
	if err != nil {
		return len(killed), fmt.Errorf("processes still in cgroup %s: %v: %w", i.cgroupParent(), left, err)
	}
	return len(killed), nil
}

// removeCgroups removes the cgroup parent, children first, in every
// hierarchy. rmdir fails with EBUSY for a short while after the last
// process exits, so it retries until a deadline.
func (i instance) removeCgroups(ctx context.Context) (int, error) {
	mounts, err := readMounts()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	var lastErr error
	removed := 0
	err = testbed.Poll(ctx, 20*time.Millisecond, func(context.Context) (bool, error) {
		lastErr = nil
		for _, h := range cgroupHierarchies(mounts) {
			for _, d := range cgroupDirsDeepestFirst(filepath.Join(h, i.cgroupParent())) {
				err := unix.Rmdir(d)
				switch {
				case err == nil:
					removed++
				case !errors.Is(err, unix.ENOENT):
					lastErr = fmt.Errorf("rmdir %s: %w", d, err)
				}
			}
		}
		return lastErr == nil, nil
	})
	if err != nil {
		return removed, fmt.Errorf("remove cgroup %s: %w (%v)", i.cgroupParent(), lastErr, err)
	}
	return removed, nil
}

// unmountAllUnder unmounts every mount at or below dir, deepest first,
// lazily (MNT_DETACH) when a plain unmount fails, until none is left.
func unmountAllUnder(dir string) (int, error) {
	var lastErr error
	unmounted := 0
	for range 10 {
		mounts, err := readMounts()
		if err != nil {
			return unmounted, err
		}
		under := mountsUnder(mounts, dir)
		if len(under) == 0 {
			return unmounted, nil
		}
		lastErr = nil
		for _, mp := range under {
			err := unix.Unmount(mp, 0)
			if err == nil {
				unmounted++
				continue
			}
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
				continue // already gone (e.g. with its parent)
			}
			if err2 := unix.Unmount(mp, unix.MNT_DETACH); err2 != nil && !errors.Is(err2, unix.EINVAL) {
				lastErr = fmt.Errorf("unmount %s: %w (lazy: %v)", mp, err, err2)
				continue
			}
			unmounted++
			klog.InfoS("Unmounted lazily", "mountPoint", mp, "err", err)
		}
	}
	if lastErr == nil {
		lastErr = errors.New("mounts keep reappearing")
	}
	return unmounted, fmt.Errorf("unmount under %s: %w", dir, lastErr)
}

// killAndWait SIGKILLs ps and waits until they are gone.
func killAndWait(ctx context.Context, what string, ps []proc) error {
	if len(ps) == 0 {
		return nil
	}
	for _, p := range ps {
		if p.alive() {
			syscall.Kill(p.pid, syscall.SIGKILL)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	var left []int
	err := testbed.Poll(ctx, 10*time.Millisecond, func(context.Context) (bool, error) {
		left = left[:0]
		for _, p := range ps {
			if p.alive() {
				left = append(left, p.pid)
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("%s processes %v alive after SIGKILL: %w", what, left, err)
	}
	return nil
}
