// Package node runs throw-away Kubernetes nodes for integration tests: one
// real containerd (Debian's 1.6 or the 2.x build, see testbed.Containerd)
// with its own root, state, runc root, cgroup parent and socket under a
// short instance directory /tmp/ngc-*, plus an in-process registry holding
// the images its pods run. Tests talk to it over CRI, like the kubelet and
// nodegc do.
//
// Responsibilities and invariants:
//
//   - Start writes the containerd config (version 2 for 1.6, version 3 for
//     2.x), optionally puts containerd's root on a small filesystem of its
//     own (loop-mounted ext4; tmpfs when asked for, or, logged and outside
//     CI only, when loop devices are unavailable),
//     starts containerd in its own process group and returns once CRI
//     answers. It registers Teardown with t.Cleanup.
//   - Teardown always leaves the machine as it found it, also when the test
//     failed or containerd was killed: it removes sandboxes through CRI when
//     containerd is alive, stops containerd, and then sweeps by hand: runc
//     containers, shims, shim sockets, mounts under the instance directory,
//     the loop device, the cgroup parent in every hierarchy and the
//     directory itself. Leftovers reports anything that survived.
//   - Processes are only ever killed by PID: containerd (started here),
//     shims whose command line names this instance's socket, and processes
//     inside this instance's cgroup parent. Never by name.
//   - The test process holds an flock on DIR/lock for the node's lifetime,
//     and containerd gets SIGKILL when the test process dies (Pdeathsig).
//     SweepStale (run by every Start) sweeps instance directories whose lock
//     is free, and whatever is left of removed ones: their test process died
//     without tearing down (crash, SIGKILL, go test -timeout). Nodes of other
//     live test processes are never touched, so packages may run at once.
//   - The CRI helpers (RunPod, CreateContainer, ...) do what the kubelet
//     does: host-network pods under the node's cgroup parent, the kubelet's
//     labels and annotations, images pulled before containers use them.
//
// A Node's exported fields are set by Start and read-only afterwards; its
// methods are safe for concurrent use.
package node
