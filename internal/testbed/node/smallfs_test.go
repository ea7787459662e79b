package node

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodegc/nodegc/internal/testbed"
)

// TestSweepWaitsForBusyLoopDevice: a loop device that another process
// holds open when the sweep detaches it (udev probing it after the
// unmount, say) stays attached until that process closes it; the kernel
// then detaches it (autoclear). The sweep waits for that, so that nothing
// is left once it returns.
func TestSweepWaitsForBusyLoopDevice(t *testing.T) {
	testbed.RequireRoot(t)
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	kind, err := MountSmallFS(t.Context(), filepath.Join(dir, "fs.img"), mnt, 16<<20, "", t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if kind != "loop-ext4" {
		t.Fatalf("small fs is %q, want loop-ext4 on this machine", kind)
	}
	devs := loopDevicesBackedBy(dir)
	if len(devs) != 1 {
		t.Fatalf("loop devices backed by %s: %v, want one", dir, devs)
	}
	holder, err := os.Open(devs[0])
	if err != nil {
		t.Fatal(err)
	}
	const held = 300 * time.Millisecond
	released := time.AfterFunc(held, func() { _ = holder.Close() })
	defer func() {
		released.Stop()
		_ = holder.Close()
	}()

	began := time.Now()
	rep, err := instance{dir: dir}.sweep(t.Context())
	if err != nil {
		t.Errorf("sweep: %v", err)
	}
	t.Logf("sweep took %s: %s", time.Since(began).Round(time.Millisecond), rep)
	if left := leftovers(instance{dir: dir}, nil); len(left) > 0 {
		t.Errorf("left after the sweep, %s after it began (the device was held for %s):\n%v", time.Since(began).Round(time.Millisecond), held, left)
	}
}
