package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodegc/nodegc/internal/testbed"
)

// MountSmallFS mounts a filesystem of size bytes on mountPoint: an ext4
// image file img on a loop device, or, when kind is "tmpfs", a size-limited
// tmpfs. It returns "loop-ext4" or "tmpfs". With img under a node's Dir,
// the node's teardown unmounts it and detaches the loop device. mkfs.ext4
// and losetup run with t's context.
//
// When the ext4 was asked for (kind "") and cannot be had (mkfs.ext4 or
// losetup missing, no loop devices, e.g. in an unprivileged container),
// the tests that asked for it would run on another filesystem, whose
// accounting differs: under CI=true that stops the test
// (testbed.Require), else MountSmallFS falls back to tmpfs and logs it.
func MountSmallFS(t testbed.TB, img, mountPoint string, size int64, kind string) (string, error) {
	t.Helper()
	ctx := t.Context()
	var loopErr error
	switch kind {
	case "":
		loopErr = mountLoopExt4(ctx, img, mountPoint, size)
		if loopErr == nil {
			return "loop-ext4", nil
		}
		testbed.Require(t, !testbed.InCI(), fmt.Sprintf("a loop-mounted ext4 for %s: %v; install e2fsprogs (mkfs.ext4) and util-linux (losetup) (`make tools` does), and give the test loop devices (root, or a privileged container; modprobe loop); or ask for tmpfs (node.Options.SmallFSKind)", mountPoint, loopErr))
		t.Logf("NOTE: loop-mounted ext4 unavailable (%v); falling back to tmpfs for %s: tests of ext4 accounting run on tmpfs here (under CI=true this fails)", loopErr, mountPoint)
	case "tmpfs":
		loopErr = fmt.Errorf("not tried (tmpfs asked for)")
	default:
		return "", fmt.Errorf("small filesystem kind %q: want \"\" or \"tmpfs\"", kind)
	}
	opts := fmt.Sprintf("size=%d,mode=0711", size)
	if err := unix.Mount("tmpfs", mountPoint, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return "", fmt.Errorf("small filesystem on %s: loop ext4: %v; tmpfs: %w", mountPoint, loopErr, err)
	}
	return "tmpfs", nil
}

func mountLoopExt4(ctx context.Context, img, mountPoint string, size int64) error {
	f, err := os.OpenFile(img, os.O_CREATE|os.O_RDWR|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size) // sparse: takes no space until written
	f.Close()
	if err != nil {
		return fmt.Errorf("size %s: %w", img, err)
	}
	if out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4 %s: %w: %s", img, err, out)
	}
	out, err := exec.CommandContext(ctx, "losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		return fmt.Errorf("losetup %s: %w: %s", img, err, out)
	}
	dev := strings.TrimSpace(string(out))
	if err := unix.Mount(dev, mountPoint, "ext4", 0, ""); err != nil {
		detachLoop(ctx, dev)
		return fmt.Errorf("mount %s (%s) on %s: %w", dev, img, mountPoint, err)
	}
	return nil
}

// detachLoop detaches a loop device. A device still in use is detached by
// the kernel when its last user goes (autoclear).
func detachLoop(ctx context.Context, dev string) error {
	if out, err := exec.CommandContext(ctx, "losetup", "--detach", dev).CombinedOutput(); err != nil {
		return fmt.Errorf("losetup --detach %s: %w: %s", dev, err, strings.TrimSpace(string(out)))
	}
	return nil
}
