package node

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
	kind, err := MountSmallFS(t, filepath.Join(dir, "fs.img"), mnt, 16<<20, "")
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

// fatalTB records Fatalf and Skipf (and ends the goroutine, as testing
// does); the rest is the test's.
type fatalTB struct {
	*testing.T
	stopped string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.stopped = "fatal: " + fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (f *fatalTB) Skipf(format string, args ...any) {
	f.stopped = "skip: " + fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestSmallFSFallbackOnlyOutsideCI: without mkfs.ext4 (PATH holds none),
// a small filesystem asked for as loop-mounted ext4 is tmpfs only outside
// CI; under CI=true the test stops with a failure that says what is
// missing. tmpfs asked for is tmpfs in CI too.
func TestSmallFSFallbackOnlyOutsideCI(t *testing.T) {
	testbed.RequireRoot(t)
	t.Setenv("PATH", t.TempDir())
	for _, tc := range []struct {
		ci, kind, want string // want: the kind, or "fatal"
	}{
		{"true", "", "fatal"},
		{"", "", "tmpfs"},
		{"true", "tmpfs", "tmpfs"},
	} {
		t.Run(fmt.Sprintf("CI=%s,kind=%q", tc.ci, tc.kind), func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			dir := t.TempDir()
			mnt := filepath.Join(dir, "mnt")
			if err := os.Mkdir(mnt, 0o755); err != nil {
				t.Fatal(err)
			}
			ftb := &fatalTB{T: t}
			var kind string
			var err error
			done := make(chan struct{})
			go func() {
				defer close(done)
				kind, err = MountSmallFS(ftb, filepath.Join(dir, "fs.img"), mnt, 16<<20, tc.kind)
			}()
			<-done
			if kind == "tmpfs" {
				defer func() {
					if err := unix.Unmount(mnt, 0); err != nil {
						t.Error(err)
					}
				}()
			}
			got := kind
			if ftb.stopped != "" {
				got = strings.SplitN(ftb.stopped, ":", 2)[0]
			}
			if got != tc.want || err != nil {
				t.Fatalf("MountSmallFS: kind %q, stopped: %q, err %v; want %s", kind, ftb.stopped, err, tc.want)
			}
			if got == "fatal" && !strings.Contains(ftb.stopped, "mkfs.ext4") {
				t.Errorf("the failure does not say what is missing: %s", ftb.stopped)
			}
		})
	}
}
