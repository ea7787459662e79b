package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/registry"
)

// Options configure a node.
type Options struct {
	// Version selects the containerd build (required).
	Version testbed.ContainerdVersion
	// SmallFS, when positive, puts containerd's root directory on a
	// filesystem of its own of that many bytes (loop-mounted ext4; tmpfs as
	// a fallback, logged, outside CI only: see MountSmallFS), so that disk
	// pressure is reachable in a test.
	SmallFS int64
	// SmallFSKind forces the kind of small filesystem: "tmpfs", or ""
	// for loop-mounted ext4 (with tmpfs as the fallback outside CI).
	SmallFSKind string
	// Registry serves the node's images; Start starts one when nil. Share
	// one between nodes to pull the same images into each.
	Registry *registry.Registry
	// SnapshotsFS, when positive, puts the snapshotter's directory
	// (ROOT/io.containerd.snapshotter.v1.NAME, the image filesystem CRI
	// reports) on a filesystem of its own of that many bytes, as SmallFS
	// does for the whole root: the content store's blobs stay on the root's
	// filesystem, as on a node with a disk mounted for snapshots only.
	SnapshotsFS int64
	// Snapshotter defaults to "overlayfs".
	Snapshotter string
	// StartTimeout bounds the wait for CRI to answer; default 60s.
	StartTimeout time.Duration
	// RareGC makes containerd collect garbage rarely, as a containerd
	// whose collections take long does: its GC scheduler may spend only
	// 0.00001% of the time collecting (pause_threshold 1e-7; default 2%),
	// so after its first collection a deletion waits for the next one
	// 10^7 times the average collection time, unless a client asks for a
	// collection. containerd 2.x counts a collection as at least 5 ms (so
	// about 14 hours at least); 1.6 takes the time measured, about 0.1
	// ms on an empty node: with 1e-4 its next collection came about a
	// second later. A removed container's snapshot stays on disk until
	// then.
	RareGC bool
	// SandboxImageByDigest writes the sandbox image in containerd's config
	// with its tag and manifest digest (REF@DIGEST), as operators pin it;
	// CRI lists the image by its tag and by NAME@DIGEST, never as written.
	SandboxImageByDigest bool
	// ProxySnapshotters are snapshotters containerd reaches through a
	// socket of their own (proxy_plugins, as nydus, stargz or soci are
	// installed): name -> socket path. Nothing need listen there.
	ProxySnapshotters map[string]string
}

// Node is a running throw-away containerd. Its exported fields are set by
// Start and never change.
type Node struct {
	Version testbed.ContainerdVersion
	// Dir is the instance directory (/tmp/ngc-*); everything of the node
	// lives below it.
	Dir string
	// Socket is containerd's gRPC socket and Endpoint the CRI endpoint
	// ("unix://" + Socket), as the kubelet and nodegc take it.
	Socket, Endpoint string
	// Root and State are containerd's root and state directories.
	Root, State string
	// RuncRoot is runc's state root (per namespace: RuncRoot/k8s.io).
	RuncRoot string
	// CgroupParent is the cgroup parent of every pod ("/ngc-*").
	CgroupParent string
	// FSKind says where Root lives: "loop-ext4", "tmpfs", or "" for the
	// filesystem of /tmp (no Options.SmallFS).
	FSKind string
	// PodLogs is the node's pod logs directory (the kubelet's
	// /var/log/pods): RunPod gives every sandbox the log directory
	// PodLogs/NAMESPACE_NAME_UID, and containers log to NAME/ATTEMPT.log
	// below it.
	PodLogs string

	// Runtime and Images are raw CRI clients of this containerd. They keep
	// working across Restart.
	Runtime runtimeapi.RuntimeServiceClient
	Images  runtimeapi.ImageServiceClient

	Registry *registry.Registry
	// Pause is the sandbox image, pinned in containerd's config.
	Pause *registry.Image
	// SandboxImage is the sandbox image as containerd's config names it:
	// Pause.Ref, or Pause.Ref@DIGEST (Options.SandboxImageByDigest). The
	// one field that changes after Start: RestartWithSandboxImage sets it.
	SandboxImage string

	t            testbed.TB
	bin, shimDir string
	runc         string
	configPath   string
	config       configParams // what configPath was written from
	startTimeout time.Duration
	conn         *grpc.ClientConn
	lock         *os.File

	mu     sync.Mutex
	daemon *daemon                                 // the running containerd; nil before start
	pods   map[string]*runtimeapi.PodSandboxConfig // sandbox ID -> config, for CreateContainer
	shims  []string                                // shim sockets seen by the sweep, for Leftovers

	teardownOnce sync.Once
	teardownErr  error
}

// instanceBase is where instance directories go: short, so that socket
// paths stay far below the 108-byte limit of unix sockets.
const (
	instanceBase   = "/tmp"
	instancePrefix = "ngc-"
)

// Start starts a node for t and registers its Teardown with t.Cleanup. It
// stops the test (testbed.Require) when not root or when the containerd of
// opts.Version is missing, and fails it when the node does not come up.
func Start(t testbed.TB, opts Options) *Node {
	t.Helper()
	testbed.RequireRoot(t)
	bin, shimDir := testbed.Containerd(t, opts.Version)
	runc := testbed.Runc(t)
	ctx := t.Context()
	began := time.Now()

	if err := SweepStale(ctx); err != nil {
		t.Logf("sweeping leftovers of earlier test-bed runs: %v", err)
	}
	swept := time.Now()
	reg := opts.Registry
	if reg == nil {
		reg = registry.Start(t)
	}
	pause, err := reg.PushPause(ctx)
	if err != nil {
		t.Fatalf("push pause image: %v", err)
	}
	pushed := time.Now()

	n, err := create(t, opts, bin, shimDir, runc)
	if err != nil {
		t.Fatalf("create node: %v", err)
	}
	n.Registry, n.Pause, n.SandboxImage = reg, pause, pause.Ref
	if opts.SandboxImageByDigest {
		n.SandboxImage = pause.Ref + "@" + pause.ManifestDigest
	}
	t.Cleanup(func() {
		if err := n.Teardown(); err != nil {
			t.Errorf("teardown of containerd %s node %s: %v", n.Version, n.Dir, err)
		}
	})
	if err := n.setup(ctx, opts); err != nil {
		t.Fatalf("start containerd %s node in %s: %v", n.Version, n.Dir, err)
	}
	t.Logf("containerd %s node ready in %v (sweep %v, registry %v, containerd %v): %s (root fs: %s)",
		n.Version, time.Since(began).Round(time.Millisecond), swept.Sub(began).Round(time.Millisecond),
		pushed.Sub(swept).Round(time.Millisecond), time.Since(pushed).Round(time.Millisecond), n.Endpoint, n.fsDesc())
	return n
}

// create makes the instance directory and takes its lock; from here on
// Teardown has something to clean.
func create(t testbed.TB, opts Options, bin, shimDir, runc string) (*Node, error) {
	dir, err := os.MkdirTemp(instanceBase, instancePrefix)
	if err != nil {
		return nil, err
	}
	lock, err := lockInstance(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	inst := instance{dir: dir}
	n := &Node{
		Version:      opts.Version,
		Dir:          dir,
		Socket:       inst.socket(),
		Endpoint:     "unix://" + inst.socket(),
		Root:         filepath.Join(dir, "root"),
		State:        filepath.Join(dir, "state"),
		RuncRoot:     inst.runcRoot(),
		CgroupParent: inst.cgroupParent(),
		PodLogs:      filepath.Join(dir, "pods"),
		t:            t,
		bin:          bin,
		shimDir:      shimDir,
		runc:         runc,
		startTimeout: timeout,
		lock:         lock,
		pods:         map[string]*runtimeapi.PodSandboxConfig{},
	}
	return n, nil
}

// lockInstance creates DIR/lock and holds an exclusive flock on it until
// the returned file is closed (or the process dies).
func lockInstance(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return f, nil
}

func (n *Node) setup(ctx context.Context, opts Options) error {
	for _, d := range []string{n.Root, n.State, n.RuncRoot} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return err
		}
	}
	if opts.SmallFS > 0 {
		kind, err := MountSmallFS(n.t, filepath.Join(n.Dir, "fs.img"), n.Root, opts.SmallFS, opts.SmallFSKind)
		if err != nil {
			return err
		}
		n.FSKind = kind
	}
	snapshotter := opts.Snapshotter
	if snapshotter == "" {
		snapshotter = "overlayfs"
	}
	if opts.SnapshotsFS > 0 {
		dir := filepath.Join(n.Root, "io.containerd.snapshotter.v1."+snapshotter)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		kind, err := MountSmallFS(n.t, filepath.Join(n.Dir, "snapshots.img"), dir, opts.SnapshotsFS, opts.SmallFSKind)
		if err != nil {
			return err
		}
		n.t.Logf("snapshots on a filesystem of their own (%s, %d MiB) at %s", kind, opts.SnapshotsFS>>20, dir)
	}
	n.config = configParams{
		Dir: n.Dir, Root: n.Root, State: n.State, Socket: n.Socket, RuncRoot: n.RuncRoot, Runc: n.runc,
		CNIConf: filepath.Join(n.Dir, "cni"), Opt: filepath.Join(n.Dir, "opt"),
		SandboxImage: n.SandboxImage, Snapshotter: snapshotter, GCPauseThreshold: gcPauseThreshold(opts.RareGC),
		ProxySnapshotters: opts.ProxySnapshotters,
	}
	cfg, err := writeConfig(n.Version, n.config)
	if err != nil {
		return err
	}
	n.configPath = cfg
	conn, err := grpc.NewClient(n.Endpoint,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		return fmt.Errorf("CRI client for %s: %w", n.Endpoint, err)
	}
	n.conn = conn
	n.Runtime = runtimeapi.NewRuntimeServiceClient(conn)
	n.Images = runtimeapi.NewImageServiceClient(conn)
	return n.startDaemon(ctx)
}

func (n *Node) fsDesc() string {
	if n.FSKind == "" {
		return "shared with " + instanceBase
	}
	st, err := n.FSStats()
	if err != nil {
		return n.FSKind
	}
	return fmt.Sprintf("%s, %d MiB capacity, %d MiB available", n.FSKind, st.Capacity>>20, st.Available>>20)
}

// FSStats is statfs of the filesystem holding containerd's root.
type FSStats struct {
	Capacity, Available, Used uint64 // bytes
}

// FSStats returns the capacity and free space of the filesystem of Root
// (the small filesystem with Options.SmallFS). Available is what an
// unprivileged writer may still use, as the kubelet computes it.
func (n *Node) FSStats() (FSStats, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(n.Root, &st); err != nil {
		return FSStats{}, fmt.Errorf("statfs %s: %w", n.Root, err)
	}
	bs := uint64(st.Frsize) // the unit of the counts, as for the agent (diskstats)
	return FSStats{Capacity: st.Blocks * bs, Available: st.Bavail * bs, Used: (st.Blocks - st.Bfree) * bs}, nil
}
