// Package kubecluster runs a real single-node Kubernetes cluster for
// end-to-end tests: etcd and
// kube-apiserver (internal/testbed/cluster), kube-controller-manager with
// the controllers a Node, Deployments, ReplicaSets and DaemonSets need and
// never the garbage collector, kube-scheduler, a throw-away containerd 2.x
// (internal/testbed/node, optionally with its image filesystem on a small
// filesystem of its own) and a kubelet (optionally with its root
// directory, its nodefs, on one too: Options.NodeFSSize, so that nodefs
// eviction thresholds do not depend on the host's disk), all on free
// loopback ports and under the node's short instance directory /tmp/ngc-*.
//
// Responsibilities and invariants:
//
//   - Start composes the harnesses and returns once the Node is Ready. By
//     default the kubelet runs with its own image GC off
//     (imageGCHighThresholdPercent 100, imageMaximumGCAge 0s), no eviction
//     (evictionHard {}), and its container GC held back (deprecated
//     --maximum-dead-containers-per-container and
//     --minimum-container-ttl-duration raised), so that what a test sees
//     removed is the doing of the collector under test; cgroupfs without
//     QoS cgroups, the node's cgroup parent as cgroupRoot (so containerd's
//     teardown sweeps every pod cgroup), no eviction, podLogsDir under the
//     node's directory, its API on 127.0.0.1 only, and CrashLoopBackOff
//     capped at 1s (KubeletCrashLoopBackOffMax). Options.Kubelet
//     (KubeletSettings) sets its image GC thresholds and minimum age and
//     its eviction thresholds and pressure transition period instead.
//   - RestartKubelet stops the kubelet and starts it again with other
//     KubeletSettings (and back), on the same ports, root directory and
//     certificates; it returns once the new kubelet has posted the Node's
//     status, Ready. Pods keep running across it: the kubelet does not stop
//     them when it exits and the new one adopts their containers.
//     KubeletConfigPath is the file it runs with, KubeletConfigz what it
//     says it runs with (/configz). Each start logs to its own
//     kubelet.N.log; KubeletLogPath is the running one's.
//   - Pods get API credentials as in a real cluster: kube-apiserver runs
//     with the ServiceAccount admission plugin, the controller manager's
//     serviceaccount and root-ca-certificate-publisher controllers make the
//     "default" ServiceAccounts and kube-root-ca.crt ConfigMaps, and the
//     kubelet mounts bound tokens. There is no kube-proxy and no pod
//     network: pods use the host network and reach kube-apiserver on
//     127.0.0.1.
//   - One kubelet per machine: it uses fixed host paths whatever its
//     --root-dir says (/var/lib/kubelet/device-plugins/kubelet.sock,
//     /var/log/containers links). An flock on /tmp/nodegc-kubecluster.lock,
//     held for the cluster's lifetime, serializes clusters across test
//     processes; the lock file lists the fixed directories this cluster
//     created, so they are removed at teardown or, after a crash, by the
//     next Start.
//   - Teardown (t.Cleanup), in order: stop kube-scheduler, delete the pods
//     through the API and let the kubelet stop them, stop the kubelet
//     (SIGTERM, SIGKILL after 10s), remove the sandboxes left through CRI
//     (the kubelet does not stop pods when it exits), unmount everything
//     under the kubelet's root directory (it bind-mounts it onto itself; pod
//     volumes are mounts too), remove its files and links in the fixed host
//     paths; then the controller manager, containerd (with its hard sweep:
//     runc, shims, mounts, the loop device, cgroups in every hierarchy) and
//     the control plane go through their own cleanups. A last cleanup checks
//     that no process, mount, cgroup, loop device, kubelet file or log link
//     of the cluster is left and fails the test otherwise.
//   - After a crash of the test process: the kubelet and kube-scheduler die
//     with it (Pdeathsig), as do containerd and the control plane; the next
//     Start sweeps the rest (node.SweepStale for the node directory, its
//     mounts, shims, containers and cgroups; the fixed host paths here).
//   - Processes are only ever signalled by the PIDs this package started.
//
// A Cluster's exported fields are set by Start and read-only afterwards;
// its methods are safe for concurrent use.
package kubecluster
