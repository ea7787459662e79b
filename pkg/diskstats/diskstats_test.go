package diskstats

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodegc/nodegc/internal/testbed"
)

// TestStatAgreesWithStatfs: on the filesystem holding the test's temp dir,
// whichever way the Reader goes, it reports the filesystem statfs sees.
func TestStatAgreesWithStatfs(t *testing.T) {
	dir := t.TempDir()
	r := NewReader()
	got, err := r.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Statfs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Capacity == 0 || got.Capacity != want.Capacity {
		t.Errorf("Stat(%s).Capacity = %d (via %s), statfs says %d", dir, got.Capacity, got.Source, want.Capacity)
	}
	// Available moves as other processes write; allow 64 MiB of drift.
	const drift = 64 << 20
	if diff := int64(got.Available) - int64(want.Available); diff > drift || diff < -drift {
		t.Errorf("Stat(%s).Available = %d, statfs says %d", dir, got.Available, want.Available)
	}
	t.Logf("%s: capacity %d, available %d, via %s (device %q)", dir, got.Capacity, got.Available, got.Source, got.Device)
}

func TestStatRootUsesCadvisor(t *testing.T) {
	st, err := NewReader().Stat("/")
	if err != nil {
		t.Fatal(err)
	}
	// / is a block device filesystem on every machine nodegc is tested on.
	if st.Source != SourceCadvisor || st.Device == "" {
		t.Errorf("Stat(/) came from %s (device %q), want cadvisor to resolve the root block device", st.Source, st.Device)
	}
	if st.Capacity == 0 {
		t.Error("capacity 0 for /")
	}
}

func TestStatMissingPath(t *testing.T) {
	if _, err := NewReader().Stat("/nonexistent/path/for/nodegc"); err == nil {
		t.Error("Stat(missing path) succeeded")
	}
}

// TestSmallFilesystemMountedLater: a filesystem mounted after the Reader
// read the mount table is still measured right (cadvisor refresh or statfs).
func TestSmallFilesystemMountedLater(t *testing.T) {
	testbed.RequireRoot(t)
	r := NewReader()
	if _, err := r.Stat("/"); err != nil { // the Reader has read the mount table
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=16m"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	st, err := r.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Capacity != 16<<20 {
		t.Errorf("Stat(tmpfs of 16 MiB).Capacity = %d via %s", st.Capacity, st.Source)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), make([]byte, 4<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	after, err := r.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if used := st.Available - after.Available; used < 4<<20 || used > 5<<20 {
		t.Errorf("writing 4 MiB lowered available by %d bytes", used)
	}
}

// TestImplausibleStatfs: a statfs answer that cannot describe a filesystem
// (a FUSE daemon or network filesystem reporting a block count whose size
// passes 2^64 bytes, more blocks available than there are, a negative
// block size) is refused with ErrImplausible, not wrapped around 2^64; a
// filesystem of 200 PiB reads as one.
func TestImplausibleStatfs(t *testing.T) {
	const pib = uint64(1) << 50
	for _, tc := range []struct {
		name string
		s    unix.Statfs_t
		want Stats // zero: ErrImplausible
	}{
		{"200 PiB", unix.Statfs_t{Bsize: 4096, Blocks: 200 * pib / 4096, Bavail: 199 * pib / 4096, Files: 7, Ffree: 5},
			Stats{Capacity: 200 * pib, Available: 199 * pib, Inodes: 7, InodesFree: 5, Source: SourceStatfs}},
		{"size past 2^64 bytes", unix.Statfs_t{Bsize: 4096, Blocks: 1 << 60, Bavail: 1 << 40}, Stats{}},
		{"available past 2^64 bytes", unix.Statfs_t{Bsize: 4096, Blocks: 1 << 60, Bavail: 1 << 60}, Stats{}},
		{"more available than capacity", unix.Statfs_t{Bsize: 4096, Blocks: 100, Bavail: 200}, Stats{}},
		{"negative block size", unix.Statfs_t{Bsize: -4096, Blocks: 1, Bavail: 1}, Stats{}},
		// Counts are of fragments (f_frsize), as statvfs(3) and
		// cadvisor read them; f_bsize is the preferred I/O size, which
		// differs on some filesystems (FUSE, network ones). Before,
		// this one was read as 128 times its size.
		{"fragments smaller than the I/O size", unix.Statfs_t{Bsize: 131072, Frsize: 1024, Blocks: 1 << 20, Bavail: 1 << 19},
			Stats{Capacity: 1 << 30, Available: 1 << 29, Source: SourceStatfs}},
		{"no fragment size: the block size", unix.Statfs_t{Bsize: 4096, Blocks: 1 << 20, Bavail: 1 << 19},
			Stats{Capacity: 1 << 32, Available: 1 << 31, Source: SourceStatfs}},
		{"negative fragment size", unix.Statfs_t{Bsize: 4096, Frsize: -1024, Blocks: 1, Bavail: 1}, Stats{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := fromStatfs("/images", &tc.s)
			if tc.want == (Stats{}) {
				if !errors.Is(err, ErrImplausible) {
					t.Errorf("read as %+v, error %v; want ErrImplausible", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("read as %+v, error %v; want %+v", got, err, tc.want)
			}
		})
	}
}
