package images

import (
	"context"
	"errors"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	versionapi "github.com/containerd/containerd/api/services/version/v1"
	"github.com/containerd/errdefs"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/cri"
)

// hungContainerd serves containerd's API on a unix socket: it answers
// Version, and every other call hangs until its caller gives up, as a
// containerd stuck on its metadata store or a disk under pressure would.
func hungContainerd(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "containerd.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(stream)
		if method == "/containerd.services.version.v1.Version/Version" {
			return stream.SendMsg(&versionapi.VersionResponse{Version: "v2.4.2-hung"})
		}
		<-stream.Context().Done()
		return status.FromContextError(stream.Context().Err()).Err()
	}))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return sock
}

// TestContainerdCallsHaveDeadlines: every call the image GC makes to
// containerd's own API ends by the runtime request timeout, as its CRI
// calls do; they waited for ever, and a plan or a removal check stuck in
// one made no runtime call the watchdog could see, so the liveness probe
// restarted the agent.
func TestContainerdCallsHaveDeadlines(t *testing.T) {
	const timeout = 300 * time.Millisecond
	l, err := NewContainerdLayers(t.Context(), hungContainerd(t), "", timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	img := &Image{ID: "sha256:aa", RepoTags: []string{"example.com/a:1"}}
	calls := map[string]func(context.Context) error{
		"Layers": func(ctx context.Context) error { _, err := l.Layers(ctx, img); return err },
		"SandboxImages": func(ctx context.Context) error {
			_, err := l.SandboxImages(ctx)
			return err
		},
		"Arrivals": func(ctx context.Context) error {
			_, err := l.Arrivals(ctx, []*runtimeapi.Image{{Id: img.ID, RepoTags: img.RepoTags}})
			return err
		},
		"Arrivals (listing)": func(ctx context.Context) error {
			_, err := l.Arrivals(ctx, []*runtimeapi.Image{{Id: img.ID}, {Id: "sha256:other"}})
			return err
		},
		"ContainerRecords": func(ctx context.Context) error {
			_, err := l.ContainerRecords(ctx)
			return err
		},
		"TopLayer": func(ctx context.Context) error { _, err := l.TopLayer(ctx, img); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			done := make(chan error, 1)
			// The test's own context, which never ends before the test: the
			// deadline must come from the timeout.
			go func() { done <- call(context.WithoutCancel(t.Context())) }()
			select {
			case err := <-done:
				if !errdefs.IsDeadlineExceeded(err) && !errors.Is(err, context.DeadlineExceeded) && !cri.HasCode(err, codes.DeadlineExceeded) {
					t.Errorf("%s: %v, want a deadline exceeded", name, err)
				}
			case <-time.After(20 * timeout):
				t.Fatalf("%s still waiting on a hung containerd after %v (timeout %v)", name, 20*timeout, timeout)
			}
		})
	}
}

// TestLayerCacheRetainsListedImages: the cache of layers keeps only images
// the last listing named; those the kubelet or an operator removed were
// kept for the life of the process.
func TestLayerCacheRetainsListedImages(t *testing.T) {
	l := &ContainerdLayers{cache: map[string]imageStorage{"sha256:a": {}, "sha256:b": {}, "sha256:c": {}}}
	l.Retain(map[string]bool{"sha256:b": true, "sha256:d": true})
	if _, ok := l.cache["sha256:b"]; len(l.cache) != 1 || !ok {
		t.Errorf("cache after Retain(b, d) holds %v, want b only", slices.Collect(maps.Keys(l.cache)))
	}
}

// TestContentElsewhere: blobs count unless the content store beside the
// snapshotter's directory is known to be on another filesystem; a path
// that cannot be read says nothing either way. (The other filesystem is
// TestAccountingSnapshotsOnTheirOwnFilesystem's, on a real containerd.)
func TestContentElsewhere(t *testing.T) {
	root := t.TempDir()
	snapshots := filepath.Join(root, "io.containerd.snapshotter.v1.overlayfs")
	for _, tc := range []struct {
		name    string
		imageFs string
		mkdirs  []string
	}{
		{"no image filesystem reported", "", nil},
		{"no content store", snapshots, []string{snapshots}},
		{"one filesystem", snapshots, []string{filepath.Join(root, contentStoreDir)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, d := range tc.mkdirs {
				if err := os.MkdirAll(d, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			if why := contentElsewhere(tc.imageFs); why != "" {
				t.Errorf("contentElsewhere(%q) = %q, want blobs counted", tc.imageFs, why)
			}
		})
	}

	// Mounted on the snapshotter's directory: a bind mount of the same
	// filesystem keeps blobs counted; a filesystem of its own does not.
	testbed.RequireRoot(t)
	elsewhere := t.TempDir()
	for _, tc := range []struct {
		name          string
		mount         func() error
		wantElsewhere bool
	}{
		{"bind mount of the same filesystem", func() error { return unix.Mount(elsewhere, snapshots, "", unix.MS_BIND, "") }, false},
		{"a filesystem of its own", func() error { return unix.Mount("tmpfs", snapshots, "tmpfs", 0, "size=1m") }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.mount(); err != nil {
				t.Fatal(err)
			}
			defer unix.Unmount(snapshots, unix.MNT_DETACH)
			why := contentElsewhere(snapshots)
			if (why != "") != tc.wantElsewhere {
				t.Errorf("contentElsewhere = %q, want blobs elsewhere %v", why, tc.wantElsewhere)
			}
		})
	}

	// A mount whose path is a string prefix of the content store's path
	// (root/io.containerd.co) does not hold it: the content store is on
	// the root's filesystem, the snapshots on one of their own, bound
	// there too.
	t.Run("mount point a string prefix of the content store", func(t *testing.T) {
		root := t.TempDir()
		snapshots := filepath.Join(root, "io.containerd.snapshotter.v1.overlayfs")
		prefix := filepath.Join(root, "io.containerd.co")
		for _, d := range []string{snapshots, prefix, filepath.Join(root, contentStoreDir)} {
			if err := os.Mkdir(d, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		if err := unix.Mount("tmpfs", snapshots, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
		defer unix.Unmount(snapshots, unix.MNT_DETACH)
		if err := unix.Mount(snapshots, prefix, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		defer unix.Unmount(prefix, unix.MNT_DETACH)
		if why := contentElsewhere(snapshots); why == "" {
			t.Error("contentElsewhere = \"\": the content store was taken to be under the mount at " + prefix)
		}
	})

	// btrfs: the snapshotter's directory a subvolume (as the btrfs
	// snapshotter's root often is), the content store a directory of the
	// top volume. stat(2) gives them two devices; they are one filesystem,
	// and removing a blob frees its bytes there.
	t.Run("btrfs subvolume", func(t *testing.T) {
		ctx := t.Context()
		img := filepath.Join(t.TempDir(), "btrfs.img")
		if err := os.WriteFile(img, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(img, 128<<20); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.CommandContext(ctx, "mkfs.btrfs", "-q", img).CombinedOutput(); err != nil {
			t.Fatalf("mkfs.btrfs (apt package btrfs-progs, hack/install-tools.sh): %v: %s", err, out)
		}
		root := t.TempDir()
		if out, err := exec.CommandContext(ctx, "mount", "-o", "loop", img, root).CombinedOutput(); err != nil {
			t.Fatalf("mount %s: %v: %s", img, err, out)
		}
		t.Cleanup(func() {
			if out, err := exec.Command("umount", "-d", root).CombinedOutput(); err != nil {
				t.Errorf("umount %s: %v: %s", root, err, out)
			}
		})
		snapshots := filepath.Join(root, "io.containerd.snapshotter.v1.btrfs")
		if out, err := exec.CommandContext(ctx, "btrfs", "subvolume", "create", snapshots).CombinedOutput(); err != nil {
			t.Fatalf("btrfs subvolume create: %v: %s", err, out)
		}
		if err := os.Mkdir(filepath.Join(root, contentStoreDir), 0o700); err != nil {
			t.Fatal(err)
		}
		var a, b unix.Stat_t
		if unix.Stat(snapshots, &a) != nil || unix.Stat(filepath.Join(root, contentStoreDir), &b) != nil || a.Dev == b.Dev {
			t.Fatalf("the subvolume and the directory beside it stat with one device (%d, %d): this test shows nothing", a.Dev, b.Dev)
		}
		if why := contentElsewhere(snapshots); why != "" {
			t.Errorf("contentElsewhere = %q, want blobs counted (one btrfs filesystem)", why)
		}
	})
}

// TestFilesystemName: ZFS datasets of one pool share its free space, so
// they are one space, though each is a mount with a device of its own;
// other filesystems are their device.
func TestFilesystemName(t *testing.T) {
	snapshots := &mountinfo.Info{FSType: "zfs", Source: "rpool/containerd/snapshotter", Major: 0, Minor: 51}
	content := &mountinfo.Info{FSType: "zfs", Source: "rpool/ROOT/debian", Major: 0, Minor: 42}
	other := &mountinfo.Info{FSType: "zfs", Source: "tank/containerd", Major: 0, Minor: 60}
	if a, b := filesystemName(snapshots), filesystemName(content); a != b {
		t.Errorf("two datasets of pool rpool: %q and %q, want one", a, b)
	}
	if a, b := filesystemName(snapshots), filesystemName(other); a == b {
		t.Errorf("datasets of pools rpool and tank: both %q", a)
	}
	ext4 := &mountinfo.Info{FSType: "ext4", Source: "/dev/vdb", Major: 254, Minor: 16}
	if got := filesystemName(ext4); got != "device 254:16" {
		t.Errorf("ext4: %q, want device 254:16", got)
	}
}
