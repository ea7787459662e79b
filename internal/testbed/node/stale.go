package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// lockGrace is how old an instance directory without a lock file must be
// before it counts as abandoned (its creator takes the lock right after
// creating it).
const lockGrace = time.Minute

// SweepStale cleans up after test processes that died without tearing
// their nodes down (a crash, a kill, `go test -timeout`). A node is stale
// when its directory /tmp/ngc-* exists and nobody holds its lock, or when
// its directory is gone but something of it survived: a shim naming its
// socket, its cgroup parent, a loop device backed by a file in it, a mount
// below it. A stale node's containerd, if still running, is killed (by its
// PID file, checked against its command line), then it gets the same hard
// sweep as Teardown. Nodes of live test processes are left alone, so tests
// of several packages may run at once.
func SweepStale(ctx context.Context) error {
	var errs []error
	for _, dir := range staleCandidates() {
		lock, owned, err := tryLock(dir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if owned {
			continue
		}
		began := time.Now()
		inst := instance{dir: dir}
		errs = append(errs, killStaleContainerd(ctx, inst))
		rep, err := inst.sweep(ctx)
		if lock != nil {
			lock.Close()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("sweep stale %s: %w", dir, err))
			continue
		}
		klog.InfoS("Swept stale test-bed node", "dir", dir, "duration", time.Since(began), "swept", rep.String())
	}
	return errors.Join(errs...)
}

// staleCandidates lists instance directories, existing or not, that have
// something left: the directories themselves, and the directories named by
// shims, cgroup parents, loop devices and mounts.
func staleCandidates() []string {
	var out []string
	add := func(dir string) {
		if isInstanceDir(dir) {
			out = append(out, dir)
		}
	}
	entries, _ := os.ReadDir(instanceBase)
	for _, e := range entries {
		add(filepath.Join(instanceBase, e.Name()))
	}
	for _, p := range processes(func(_ int, args []string) bool {
		return len(args) > 0 && strings.Contains(filepath.Base(args[0]), "containerd-shim")
	}) {
		add(filepath.Dir(flagValue(p.args, "-address")))
	}
	if mounts, err := readMounts(); err == nil {
		for _, h := range cgroupHierarchies(mounts) {
			groups, _ := os.ReadDir(h)
			for _, g := range groups {
				add(filepath.Join(instanceBase, g.Name()))
			}
		}
		for _, m := range mounts {
			add(instanceDirOf(m.mountPoint))
		}
	}
	loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, l := range loops {
		if data, err := os.ReadFile(l); err == nil {
			add(instanceDirOf(strings.TrimSuffix(strings.TrimSpace(string(data)), " (deleted)")))
		}
	}
	return dedupe(out)
}

// isInstanceDir reports whether dir is named like an instance directory:
// /tmp/ngc-<digits>, as os.MkdirTemp makes them. Nothing else is swept.
func isInstanceDir(dir string) bool {
	if filepath.Dir(dir) != instanceBase {
		return false
	}
	digits, ok := strings.CutPrefix(filepath.Base(dir), instancePrefix)
	if !ok || digits == "" {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// instanceDirOf returns the instance directory path lies in, or "".
func instanceDirOf(path string) string {
	rest, ok := strings.CutPrefix(path, instanceBase+"/")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, "/")
	return filepath.Join(instanceBase, name)
}

// tryLock reports whether dir belongs to a live test process. When it does
// not and dir exists, the returned lock is held; close it after the sweep.
func tryLock(dir string) (lock *os.File, owned bool, err error) {
	st, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil // gone, but something of it is left
	}
	if err != nil {
		return nil, false, err
	}
	if !st.IsDir() {
		return nil, true, nil // not ours
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		// Being created right now, or abandoned before its lock existed.
		return nil, time.Since(st.ModTime()) < lockGrace, nil
	}
	if err != nil {
		return nil, false, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, true, nil
		}
		return nil, false, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return f, false, nil
}

// killStaleContainerd kills the containerd of a stale instance, if its
// PID file names a process whose command line is this instance's config.
func killStaleContainerd(ctx context.Context, i instance) error {
	data, err := os.ReadFile(filepath.Join(i.dir, "containerd.pid"))
	if err != nil {
		return nil
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return nil
	}
	ps := processes(func(p int, args []string) bool { return p == pid && flagValue(args, "--config") == i.configPath() })
	if len(ps) == 0 {
		return nil
	}
	klog.InfoS("Killing containerd of stale test-bed node", "dir", i.dir, "pid", pid)
	return killAndWait(ctx, "containerd", ps)
}
