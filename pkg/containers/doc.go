// Package containers is nodegc's dead-container garbage collector: exited
// containers, dead pod sandboxes, the log directories of pods that no longer
// exist and dangling container log links, with the kubelet's semantics
// (kuberuntime's containerGC) and a few additions.
//
// Decide, then act. Manager.GarbageCollect lists the runtime's containers
// and sandboxes and the log directories (NodeState), takes a PodView from
// its pod source, and hands both to Policy.Plan, a pure function of
// (NodeState, PodView, now) that returns a Plan: what to remove and why
// (pod_gone, per_container_limit, node_limit, max_age, superseded,
// dangling), what is kept and why. Execute applies a plan; in dry-run it
// touches nothing and returns the plan's removals as its outcome.
//
// Kubelet parity:
//   - Only containers with the kubelet's pod UID and container name labels,
//     and sandboxes with its pod UID label, are considered.
//   - Evictable containers are not running (exited, created or unknown) and
//     were created at least minAge ago. They are grouped by (pod UID,
//     container name). Every evictable container of a gone pod is removed;
//     every other group keeps its maxPerPodContainer newest, by creation
//     time. When more than maxContainers remain on the node, each group is
//     cut to max(1, maxContainers/groups), then the oldest across the node go
//     until maxContainers remain. Containers in an unknown state are stopped
//     before removal. Like the kubelet, nodegc removes a container's log
//     file (and its rotated siblings) and its /var/log/containers link
//     right before the container.
//   - A sandbox is active while ready or while a container that stays
//     belongs to it. A gone pod loses every inactive sandbox; a live pod
//     keeps its newest sandbox (whatever its state, as the kubelet) and
//     loses its other inactive ones. Sandboxes are stopped, then removed.
//   - The log directories (podLogsDirectory/NAMESPACE_NAME_UID) of gone pods
//     are removed, and dangling *.log links under containerLogsDirectory
//     unless their container exists and has not exited (a running
//     container's link dangles for a moment while its log rotates).
//
// Beyond the kubelet (options, off by default): minAgeFrom=Exited counts ages
// (minimum and maximum) from the container's exit; maxAge removes dead
// containers older than that, except the newest dead container of each
// (pod, container name) (the newest that ran and stopped), which
// `kubectl logs --previous` and restart counts need.
//
// Safety invariants (SPEC §8), each with a test:
//   - A running container is never removed: the policy keeps running
//     containers, and the executor reads each container's status right
//     before removing it and skips it if it runs by then (a created
//     container may have been started since planning).
//   - The newest dead container of a live pod's container is never removed
//     (SPEC §8: kubectl logs --previous and restart counts need it):
//     maxPerPodContainer must be at least 1 (or negative), age rules skip it,
//     and the node-wide pass keeps it even when that leaves more than
//     maxContainers dead containers, which the kubelet would not (it removes
//     the oldest across the node whatever their group).
//   - Nothing is removed because its pod is gone unless the PodView is
//     authoritative: the informer has synced and its last list or watch
//     request succeeded (and the watch it opened is still open). Until then,
//     while the API server is unreachable, and in node-only mode (no API
//     access; said once in the logs), every pod is assumed to exist. Count
//     and age limits still apply.
//   - "Gone" needs more than absence from the cache: the watch saw the pod
//     deleted, or everything the pod has on the node (sandboxes, containers,
//     log directory) predates the informer's last complete list, less
//     ListSkew. A pod created after that list that a lagging or stalled
//     watch has not delivered is therefore never taken for gone.
//   - A gone pod's log directory is removed only once the plan leaves none
//     of its containers or sandboxes on the node, and only if every removal
//     of that pod succeeded; a sandbox is removed only if every container
//     of it planned for removal was removed.
//   - Files are removed only under podLogsDirectory and
//     containerLogsDirectory: a container's log path elsewhere is left alone.
//
// Static pods. The kubelet runs static pods from files (or a URL) and
// publishes each as a mirror pod in the API whose kubernetes.io/config.mirror
// annotation holds the static pod's UID, the UID on its containers. The
// mirror UIDs join the live set. But the API server does not decide whether
// a static pod exists: the mirror pod appears only after the kubelet has
// created it, may be missing while the API is slow or the kubelet is not
// allowed to create it, and is recreated by the kubelet if someone deletes
// it. So a pod whose sandbox says kubernetes.io/config.source is "file" or
// "http" is never taken for gone, mirror pod or not; only its kubelet knows
// when its manifest went away, and the kubelet's own GC collects it then.
// Its dead containers still obey the count and age limits.
//
// Concurrency: Manager runs one GC at a time (GarbageCollect returns
// ErrRunInProgress otherwise) and owns its plan and outcome. An
// APIPodSource's fields are written by its informer's goroutines and read by
// View and Retain under one mutex; its cache is the informer's own.
package containers
