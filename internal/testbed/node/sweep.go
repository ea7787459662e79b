package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nodegc/nodegc/internal/testbed"
)

// sweepTimeout bounds each waiting step of a sweep.
const sweepTimeout = 10 * time.Second

// sweepReport counts what a sweep found and removed.
type sweepReport struct {
	runcContainers, shims, cgroupProcs, sockets, mounts, loopDevices, cgroups int
	// shimSockets are the socket paths the sweep looked at (most never
	// existed); Leftovers checks them.
	shimSockets []string
}

func (r sweepReport) String() string {
	return fmt.Sprintf("%d runc containers deleted, %d shims and %d processes in the cgroup killed, %d shim sockets removed, %d mounts unmounted, %d loop devices detached, %d cgroup dirs removed",
		r.runcContainers, r.shims, r.cgroupProcs, r.sockets, r.mounts, r.loopDevices, r.cgroups)
}

// sweep removes everything of instance i by hand, with or without a
// running containerd: runc containers, shims and their sockets, processes
// left in the cgroup parent, mounts under the directory (deepest first),
// loop devices backed by files in it, the cgroup parent in every
// hierarchy, and the directory itself. It reports what it did and joins
// the errors of every step that failed.
func (i instance) sweep(ctx context.Context) (sweepReport, error) {
	var rep sweepReport
	var errs []error
	addErr := func(e error) {
		if e != nil {
			errs = append(errs, e)
		}
	}
	sockets := i.knownShimSockets()

	n, err := i.deleteRuncContainers(ctx)
	rep.runcContainers = n
	addErr(err)

	shims := processes(func(_ int, args []string) bool { return isShimOf(args, i.socket()) })
	for _, s := range shims {
		ns, id := flagValue(s.args, "-namespace"), flagValue(s.args, "-id")
		sockets = append(sockets, shimSocket(i.socket(), ns, id, false), shimSocket(i.socket(), ns, id, true))
	}
	rep.shims = len(shims)
	addErr(killAndWait(ctx, "shim", shims))

	rep.cgroupProcs, err = i.killCgroupProcs(ctx)
	addErr(err)

	sockets = dedupe(sockets)
	rep.shimSockets = sockets
	for _, s := range sockets {
		err := os.Remove(s)
		switch {
		case err == nil:
			rep.sockets++
		case !errors.Is(err, os.ErrNotExist):
			addErr(fmt.Errorf("remove shim socket: %w", err))
		}
	}

	rep.mounts, err = unmountAllUnder(i.dir)
	addErr(err)
	for _, dev := range loopDevicesBackedBy(i.dir) {
		rep.loopDevices++
		addErr(detachLoop(ctx, dev))
	}
	if rep.loopDevices > 0 {
		addErr(waitLoopsDetached(ctx, i.dir))
	}
	rep.cgroups, err = i.removeCgroups(ctx)
	addErr(err)

	mounts, err := readMounts()
	switch {
	case err != nil:
		addErr(fmt.Errorf("not removing %s: %w", i.dir, err))
	case len(mountsUnder(mounts, i.dir)) > 0:
		// RemoveAll would delete through a mount into whatever it shows.
		addErr(fmt.Errorf("not removing %s: still mounted below it: %v", i.dir, mountsUnder(mounts, i.dir)))
	default:
		addErr(os.RemoveAll(i.dir))
	}
	return rep, errors.Join(errs...)
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	out := s[:0]
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// waitLoopsDetached waits, for sweepTimeout at most, until no loop device
// is backed by a file under dir. losetup --detach of a device that another
// process holds open (udev probing it after the unmount, say) only marks
// it: the kernel detaches it when that process closes it (autoclear).
func waitLoopsDetached(ctx context.Context, dir string) error {
	ctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	err := testbed.Poll(ctx, 10*time.Millisecond, func(context.Context) (bool, error) {
		return len(loopDevicesBackedBy(dir)) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("loop devices %v still attached %s after losetup --detach: %w", loopDevicesBackedBy(dir), sweepTimeout, err)
	}
	return nil
}
