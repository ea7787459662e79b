// Package containers is nodegc's dead-container garbage collector: exited
// containers, dead pod sandboxes, the log directories of pods that no longer
// exist and dangling container log links, with the kubelet's semantics
// (kuberuntime's containerGC) and a few additions.
//
// Decide, then act, in the flow config -> policy -> plan -> execute, file
// by file:
//   - pkg/config: the containerGC section, defaulted and validated
//     (config.ValidateContainerGC); NewManager refuses an invalid one.
//   - policy.go: NewPolicy makes a Policy of it and checks nothing again.
//   - state.go: what the policy reads of the node (NodeState): containers
//     and sandboxes converted from CRI, and the pod log directories and
//     container log links logs.go scans.
//   - podview.go, podsource.go: which pods exist (PodView), from the API
//     server (APIPodSource) or not known at all (NodeOnlyView).
//   - plan.go: Policy.Plan, a pure function of (NodeState, PodView, now)
//     that returns a Plan: what to remove and why (pod_gone,
//     per_container_limit, node_limit, max_age, superseded, dangling),
//     what is kept and why, and whether the pod view could be trusted (and
//     if not, why). Containers go through containerPasses, one per rule in
//     kuberuntime's order (evictable, pod gone, per-container limit, max
//     age, node limit); then sandboxes, log directories and log links. A
//     new rule is a new pass, its Reason* or Keep* constant and its value
//     in the lists of metrics.go.
//   - executor.go: applies a plan through CRI and the filesystem (logs.go
//     removes a container's logs as the kubelet does); in dry-run it
//     touches nothing and returns the plan's removals as its outcome.
//   - bytes.go: right after planning, the Manager counts what each removal
//     frees (see Bytes below); containerd.go reads writable layers through
//     containerd's API.
//   - manager.go: Manager lists the node, plans and executes, every
//     period (and, with a pod source, as soon as the view is authoritative
//     while no plan has checked one: Manager.Run), one run at a time on
//     internal/gcrun's lifecycle, and reports
//     each run (Report); measure.go measures the filesystems it freed space
//     on, and metrics.go records it.
//
// Bytes. Every removal carries the bytes it frees, counted when the plan is
// made, while everything counted still exists (Policy.Plan stays pure: the
// Manager fills them in):
//   - a container's writable layer: the usage of its rootfs snapshot
//     (ContainerdWritableLayers: the snapshot its containerd record names,
//     keyed by the container ID in the CRI plugin's snapshotter); a
//     sandbox's likewise (its pause container's). With another runtime, or
//     containerd's API unreachable, 0: said once in the log and in every
//     plan (Plan.WritableLayersUnknown).
//   - a container's logs: the allocated blocks (st_blocks*512) of the files
//     removeContainerLogs removes (LOGPATH* under podLogsDirectory, rotated
//     and compressed ones included); none when a container that stays has
//     the same pod, name and attempt (its log files are that one's too).
//   - a pod log directory: the allocated blocks of everything in it except
//     the log files already counted with the plan's containers, so that no
//     byte counts twice. The executor counts it again right before its
//     removal, which is what the run reports: the containers removed
//     before took their log files with them, while a planned container
//     removed meanwhile by another (crictl rm, which leaves its logs) is
//     skipped as gone and its log files count with the directory, the
//     removal that frees them.
//
// What cannot be read counts 0 (errors_total{operation="read_bytes"}). A
// run reports what the removals that succeeded free, as counted
// (Report.Freed, nodegc_container_gc_bytes_freed_total{kind}); a container,
// sandbox or pod log directory that is gone by the time of its removal (the
// kubelet's GC removed it since planning) frees nothing of nodegc's doing
// and counts 0: the executor reads the container's or sandbox's status, or
// the directory's, right before (the runtime's removals succeed for what is
// gone, and so does removing a missing directory). What the kubelet removes
// in the instant between that check and the removal still counts as
// nodegc's, and log files removed before a failed removal of their link
// count nowhere. With Options.Disk the Manager also measures the free space
// of the filesystem holding writable layers (the runtime's container, else
// image, filesystem) and of the one holding podLogsDirectory (once if they
// are one) before planning and, after a run that removed something, once
// it settled (Report.Filesystems,
// nodegc_container_gc_measured_bytes_freed_total{filesystem}): that
// includes whatever else changed on those filesystems meanwhile.
// containerd frees a removed container's snapshot only at its next garbage
// collection, which it schedules itself (by default up to 49 times its
// average collection time after the last one; a loaded containerd's may be
// minutes away). So with Options.Reclaimer (ContainerdWritableLayers) a
// run that removed containers or sandboxes has containerd collect at once,
// waits for it, and only then settles: the space is free when the run
// ends, and the measurement sees it. That is one collection per run that
// removed something, as containerd's CRI plugin asks for one per image it
// removes; a collection holds containerd's metadata lock, so it is never
// asked for per container. A collection removes nothing containerd would
// not remove at its own: only content and snapshots that no image,
// container or lease references. A failure of it is counted
// (errors_total{operation="reclaim"}) and logged; the run still succeeds.
//
// Container states, as this package uses the words:
//   - running: CONTAINER_RUNNING. Never removed.
//   - exited: CONTAINER_EXITED, the runtime recorded an exit: the
//     container's process ran and stopped, or its start failed (containerd
//     marks a failed start exited, with exit code 128, reason StartError
//     and no start time). The kubelet counts either as an instance that
//     ran, and so does nodegc: an instance whose start failed can be the
//     newest dead one, and the one before it, which ran, can go to the
//     limits. CRI lists carry no start time to tell them apart.
//   - unknown: CONTAINER_UNKNOWN, the runtime lost track of it. It counts as
//     an instance that ran, as for the kubelet, and it is stopped before it
//     is removed, as the kubelet does. A container that was only created is
//     mostly reported as created, but not always: containerd reports one
//     whose record it could not load after a restart, or with no creation
//     time, as unknown.
//   - created, never started: CONTAINER_CREATED. The kubelet creates a
//     container and then starts it; in between, or forever if the kubelet
//     crashed in between, the runtime lists it as created.
//   - dead: not running, i.e. exited, unknown or created. The instances of
//     a container are grouped by (pod UID, container name); the newest dead
//     instance of a group is the newest that ran (exited or unknown), or, if
//     none ran, the newest created one, by creation time. It is what
//     `kubectl logs --previous` and restart counts read.
//
// Kubelet parity:
//   - Only containers with the kubelet's pod UID and container name labels,
//     and sandboxes with its pod UID label, are considered.
//   - Evictable containers are dead and were created at least minAge ago.
//     They are grouped by (pod UID, container name). Every evictable
//     container of a gone pod is removed; every other group keeps its
//     maxPerPodContainer newest, by creation time. When more than
//     maxContainers remain on the node, each group is cut to max(1,
//     maxContainers/groups), then the oldest across the node go until
//     maxContainers remain. Containers in an unknown state are stopped
//     before removal. Like the kubelet, nodegc removes an exited
//     container's log file (and its rotated siblings) and its
//     /var/log/containers link right before the container.
//   - A sandbox is active while ready or while a container that stays
//     belongs to it. A gone pod loses every inactive sandbox; a live pod
//     keeps its newest sandbox (whatever its state, as the kubelet), by
//     creation time and, too, the one of the highest attempt (a step of
//     the wall clock back between two creations dates the latest earlier;
//     the kubelet goes by creation time alone), and loses its other
//     inactive ones. Sandboxes are stopped, then removed.
//   - The log directories (podLogsDirectory/NAMESPACE_NAME_UID) of gone pods
//     are removed, and dangling *.log links under containerLogsDirectory
//     unless their container exists and has not exited (a running
//     container's link dangles for a moment while its log rotates), or the
//     runtime is not the kubelet's (ViewRuntimeLacksPods,
//     ViewNodeOtherRuntime: NotTheKubeletsRuntime). A link
//     name cut to 255 bytes ends in a prefix of the container's ID: at
//     least 6 characters of it name every container whose ID they begin,
//     as the kubelet's status lookup of the prefix does; cut further, it
//     names none, and its target, when laid out as the kubelet's logs
//     (NAMESPACE_NAME_UID/CONTAINER/ATTEMPT.log, LogTarget), says whose
//     log it is: the link stays while that container has not exited. A
//     container's link goes with its logs only if it is its own (linkIsOwn):
//     one dangling at another instance's log is not. A link that
//     points at a log again when its removal comes is kept, and so is one
//     whose container, in a listing made right before the links go, has
//     not exited (created since the plan's listing; the kubelet reads the
//     link's container's status right before removing it). A link
//     dangles only if its target lies under podLogsDirectory and is
//     missing: a target elsewhere cannot be checked from nodegc's
//     container, which mounts the log directories alone (readLink), so
//     its link stays, logged once. So does a link whose target is reached
//     through a symbolic link at or below a pod's log directory (a pod's
//     directory moved to another disk and linked in its place, which
//     nodegc's container may not mount): each component of the target
//     below podLogsDirectory, which may itself be a link, is looked up
//     without following a link (presenceBelow), and such a target cannot
//     be told; nor does a running container's log there count as missing
//     below. Nor can a target under podLogsDirectory be checked when
//     nodegc's view of it is not the kubelet's (a disk mounted on it on
//     the host after nodegc's container started, which a hostPath mount
//     without propagation does not show, perhaps over a copy of the logs
//     made before, which the directory nodegc sees still holds, frozen):
//     when the runtime runs a container whose log lies there and nodegc
//     does not see that log, or lies outside podLogsDirectory (a kubelet
//     podLogsDir nodegc was not told: nodegc could remove none of its
//     files), or the runtime cannot say where it lies
//     (podLogsUnseen: every running container's log is looked for where
//     the kubelet lays it out, and the runtime is asked the log path of
//     up to 10 missing there; a log seen proves nothing, as it may be a
//     copy), no link, pod log directory or log file is removed, and a
//     live pod's containers that a limit or maxAge would remove are kept
//     (KeepLogsUnseen: their logs would stay behind until the pod is
//     deleted; a gone pod's go, the kubelet removes its log directory),
//     logged once when it begins and once when it ends. Beside logs seen
//     under podLogsDirectory (a kubelet podLogsDir moved: pods started
//     before the move log in the old directory until they restart), the
//     check before each removal of a live pod's container skips one whose
//     log the runtime reports outside podLogsDirectory
//     (SkipLogsElsewhere), and leaves it to the kubelet's GC, which
//     removes it with its log files.
//
// Where nodegc deviates from the kubelet, for safety:
//   - The newest dead instance of each group of a live pod is never
//     removed, whatever maxPerPodContainer, maxContainers and maxAge say
//     (maxPerPodContainer must be at least 1, or negative for no limit). It
//     counts as one of the maxPerPodContainer (or node-limit share) kept:
//     when newer instances were created but never started, the kubelet
//     keeps those and removes the exited one; nodegc keeps the exited one
//     and the newest others. In the node-wide pass it stays even when that
//     leaves more than maxContainers dead containers, where the kubelet
//     removes the oldest across the node whatever their group.
//   - A created, never started instance younger than max(minAge,
//     StartGrace) is not evictable (kept as "starting"): the kubelet may be
//     about to start it, or its start may be in flight, which the kubelet
//     gives runtimeRequestTimeout (StartGrace is that, at least the
//     kubelet's default, plus StartMargin), and until the manager has seen
//     it created for as long, on the monotonic clock
//     (Container.SeenCreatedSince): a step of the wall clock before
//     nodegc started, or a runtime that gives no creation time, does not
//     make it older (so after nodegc starts, every created instance waits
//     StartGrace again; nodegc plan, a process of its own, shows them all
//     starting). An older one is a leftover and is evictable, but never
//     displaces the newest dead instance. The kubelet keeps no such
//     instance: it evicts created containers like exited ones, by age
//     alone.
//   - Each step of the wall clock found between two runs (more than 2s off
//     the monotonic clock; a suspend counts as a step forward) moves the
//     runtime's creation and exit times and the log directories' times
//     read before it by the step, and a time that may be from either side
//     of it is read as the later one: a step of an hour forward does not
//     put every dead container past minAge. The pod list's date moves back
//     by the furthest step back since the list began (APIPodSource, which
//     reads the clocks every second, so a step undone before the next view
//     counts too), so a pod bound after such a step does not seem to
//     predate the list that could not return it; a step forward does not
//     move it. What the last plan did not list is dated no earlier than
//     it, and what it listed not exited exits no earlier, on the
//     monotonic clock (timeline.floor): a step back undone between two
//     plans is found by neither, but the times the runtime read meanwhile
//     are early by it. A step while nodegc is down is not known; the steps found,
//     and when each container was first seen, carry over to a manager
//     built again in the same process (Options.Timeline: the agent's, for
//     a runtime upgraded in place).
//   - A pod that the API server still holds is live, whatever its phase:
//     an evicted or completed pod keeps its newest dead instances, its
//     newest sandbox and its log directory until its object is deleted
//     (by its owner, or the pod GC's terminated-pod-gc-threshold). The
//     kubelet removes the content of pods it evicted, and under disk
//     pressure that of terminated ones, sooner.
//   - A container's /var/log/containers link goes with its logs only if
//     it is its own: its name keeps at least 6 characters of the
//     container's ID, or it points at the container's log path, or it
//     dangles (where the log path is unknown, a container removed by
//     another since planning: only then). With a long pod name, namespace
//     and container name the 255-byte cut leaves no ID in the name, and
//     every instance of the container, in the pod and in a later pod of
//     its name, shares one link, which the kubelet made for one of them:
//     the kubelet removes it with any instance, a newer or running one's
//     too; nodegc leaves it to the instance it points at.
//   - The logs of a container that has not exited (created, or unknown)
//     are removed only once the runtime removed it: containerd refuses to
//     remove a container whose start is in flight, and its log must
//     outlive such a refusal. The kubelet removes every container's logs
//     first.
//
// Beyond the kubelet (options, off by default): minAgeFrom=Exited counts ages
// (minimum and maximum) from the container's exit (from when the manager
// first saw it exited, if the runtime gives no exit time); maxAge removes dead
// containers older than that, except the newest dead instance of each
// group.
//
// Safety invariants, each with a test:
//   - A running container is never removed: the policy keeps running
//     containers, and the executor reads each container's status right
//     before removing it and skips it if it runs by then (a created
//     container may have been started since planning), or if its state is
//     no longer the planned one but for unknown to exited (a created
//     leftover that ran and exited since is now the newest that ran).
//   - A container the runtime lists without an ID of its own (none, or
//     one another listed container that differs has too) is never
//     removed (KeepIDFault), nor its sandbox, nor its pod's log directory:
//     removing it by ID could remove another, the newest dead one. The
//     listing is counted (nodegc_container_gc_container_id_faults_total,
//     listing="containers") and logged, the first and one a minute after,
//     naming up to ten. An entry listed twice alike is one container. No
//     plan both keeps and removes one ID. Sandboxes likewise
//     (distinctSandboxIDs, listing="sandboxes"): one listed twice alike is
//     one, and every sandbox under an ID another has too, or none, is kept
//     (KeepIDFault), with its pod's log directory.
//   - The newest dead instance of a live pod's container is never removed
//     (kubectl logs --previous and restart counts need it), nor an instance
//     created less than max(minAge, StartGrace) ago and never started
//     (Options.RuntimeRequestTimeout sets StartGrace), nor the logs of an
//     instance that has not exited before the runtime removed it.
//   - Nothing is removed because its pod is gone unless the PodView is
//     authoritative: the pod and node informers have synced, their last list
//     or watch requests succeeded (and the watches they opened are still
//     open), and the Node object of the watched name exists. Lists are
//     never stale: never resourceVersion "0", which a watch cache lagging
//     etcd may answer, but not older than etcd's current version (read
//     first with a consistent list of one object), which the watch cache
//     answers once it has caught up: a pod that exists is never missing
//     from one, and no list scans etcd. Until then,
//     while the API server is unreachable, and in node-only mode (no API
//     access; said once in the logs), every pod is assumed to exist. Count
//     and age limits still apply.
//   - The PodView must agree with the runtime (Policy.Plan checks it): if
//     it lacks a pod the runtime runs (a ready sandbox or a running
//     container; not static; not seen deleted) although something of that
//     pod on the node predates the view's last complete list, the view is
//     not this node's (a node name other than the one the kubelet
//     registered, that names another Node) and the plan treats it as not
//     authoritative (ViewDisagrees), naming the missing pods. The
//     nodegc_container_gc_pod_view_authoritative metric is 0 and the change
//     is logged while it lasts. Unless a pod the view lists runs here too
//     (not static), and the kubelet of the Node, Ready and renewing the
//     Node's lease, reports it running (not being deleted): the kubelet
//     runs only pods bound to its Node, so the view is this node's (a pod
//     of a name the machine had before, hung here, is Terminating, or its
//     Node's kubelet is gone: the Ready condition outlives it by the node
//     lifecycle controller's grace period, and for good while
//     kube-controller-manager is down, but its lease, which the kubelet
//     renews every 10s, goes stale), and the pods it lacks were deleted from the API
//     while they run (force-deleted; a process the kubelet cannot stop,
//     hung on a lost NFS server, runs on for hours, and a restarted agent
//     never saw the deletion): they are named, logged and kept as running
//     pods, and the view stays authoritative. The lease
//     (kube-node-lease/<node>, APIPodSource.NodeLease) is read with a GET
//     only then, at most every 10s, and not watched: a watch in every
//     node's agent would cost the API server the filtering of every
//     node's renewals. A lease missing, unreadable (a role without get on
//     leases), renewed more than NodeLeaseAheadTolerance ahead of this
//     clock, or expired (renewTime + leaseDurationSeconds, less any step
//     back of the clock seen since the last list) lets no pod vouch, and
//     the plan says why (Plan.PodsLease). The check needs evidence: on a node where no
//     pod has run since before the view's last list, a name that names
//     another existing Node is not detected by it. The boot ID is what
//     detects it there: given this machine's (PodSourceOptions.BootID, the
//     agent reads /proc/sys/kernel/random/boot_id), the view is
//     authoritative only while the Node reports it (ViewNodeOtherBoot
//     otherwise: another machine's Node, or this one's before a reboot
//     until the kubelet reports again).
//   - Nothing goes as pod gone unless the Node's lease is fresh too
//     (Policy.Plan reads it, as above, only when the plan would remove
//     something because its pod is gone): on a machine renamed without a
//     reboot, the old Node exists and reports this boot ID, none of its
//     pods runs here any more, so its view agrees with the runtime, and it
//     lacks the pods of the new name (a finished Job's); only its lease,
//     which no kubelet renews, tells. The plan is then made again with
//     the view not authoritative (ViewNodeLeaseStale, Plan.PodsLease says
//     why). A kubelet that is down leaves the lease stale too: nothing
//     goes as pod gone until it renews it. The Manager also reads it at
//     its first check of a view, and after a stale read until a fresh
//     one, and tells the image GC (RuntimeChecked) whatever it found.
//   - The runtime must agree with the PodView the other way round
//     (Policy.Plan checks it too): the view's pods that the kubelet
//     reports running (PodView.Running: phase Running, not being
//     deleted, a container running, since its earliest start) since more
//     than RunningMargin before the runtime was listed had their sandbox
//     then, which the runtime lists in any state until it is removed. If
//     the view has such pods and the runtime lists a sandbox or container
//     of none of them, the runtime nodegc asks is not the kubelet's (a
//     containerRuntimeEndpoint that names another runtime answering CRI:
//     a distro containerd next to k3s's or RKE2's own, another install's)
//     or the view is not this node's: the plan treats the view as not
//     authoritative (ViewRuntimeLacksPods), names those pods
//     (Plan.PodsNotInRuntime), and keeps every dangling log link, since
//     whether its container has exited cannot be asked of that runtime.
//     One such pod in the runtime is enough: a view lags behind the
//     kubelet, and may still show running a pod whose sandbox was just
//     removed. A view that lacks pods the runtime runs says so first
//     (ViewDisagrees). The check needs evidence: a view with no such pod
//     is not checked.
//   - The runtime listed must be the one the Node's kubelet reports
//     (PodView.NodeRuntime, status.nodeInfo.containerRuntimeVersion:
//     "name://version" of its runtime's answer to CRI Version; Policy.Plan
//     checks it against NodeState.RuntimeName and RuntimeVersion, which the
//     Manager asks at each listing, written as the kubelet writes them:
//     kubeletVersion). Another one is not the
//     kubelet's, or was upgraded in place and not reported yet (seconds):
//     the plan treats the view as not authoritative (ViewNodeOtherRuntime,
//     Plan.NodeRuntime and Plan.Runtime), with the effects of
//     ViewRuntimeLacksPods. This needs no running pod: it tells an idle
//     node too. A side that does not say (no runtime reported, the
//     kubelet's "Unknown", a runtime that gave no Version) is not checked;
//     two installs of the very same version cannot be told apart.
//   - The image GC reads the view through PodImages, which is not
//     authoritative until the container GC's plan has checked it against
//     the runtime (ExpectRuntimeChecks, RuntimeChecked: ViewRuntimeUnchecked
//     before the first check, which Manager.Run makes within a second of
//     the view becoming authoritative), nor while the last check found
//     them at odds (the plan's reason): those checks are the container
//     GC's, and the image GC trusts no view they refuse.
//   - A pod with a ready sandbox or a running container is never gone, even
//     when the watch saw it deleted: the kubelet is still terminating it.
//   - "Gone" needs more than absence from the cache: the watch saw the pod
//     deleted, or everything the pod has on the node (sandboxes, containers,
//     log directory) predates the informer's last complete list, less a
//     minute (listSkew). A pod created after that list that a lagging or stalled
//     watch has not delivered is therefore never taken for gone. Nor is a
//     pod that list returned, from the moment the list returns: the
//     informer fills its cache from the list only later, so the view counts
//     the list's pods live itself until the watch sees them deleted after
//     the list began (and PodImages, which reads images from the cache, is
//     not authoritative until the cache holds them). A deletion seen before
//     the list began does not count against it: the list says the pod
//     exists again (an etcd restore resurrected it). A deletion the watch saw is remembered
//     as long as the pod has anything on the node or the last list names
//     it, and only a snapshot of the node that read its containers,
//     sandboxes and pod log directories makes the source forget one (a
//     failed scan of the log links does not stop it: links tell no pod on
//     the node).
//   - A gone pod's log directory is removed only once the plan leaves none
//     of its containers or sandboxes on the node, and only if every removal
//     of that pod succeeded; a sandbox is removed only if every container
//     of it planned for removal was removed.
//   - Files are removed only under podLogsDirectory and
//     containerLogsDirectory: a container's log path elsewhere is left alone,
//     and so are its log files when their directory is reached through a
//     symbolic link below podLogsDirectory (a pod's directory linked to
//     another's would have the other's logs removed): the removal fails,
//     the container stays, and the run reports it. Log files are matched
//     by name as text (LOGPATH*), never as a pattern, and never those a
//     container that stays writes too: the kubelet names a log file by
//     the pod, the container's name and its attempt, and after a step of
//     the wall clock back numbers several instances alike (the executor's
//     sharesLog), nor, for a container not exited, whose logs go after it,
//     those of an instance the runtime lists right then with its attempt
//     (attemptTaken: made since, numbered from the one before). A container's
//     link is named from its pod's labels, which whatever created the
//     container through the runtime wrote: only labels that are names the
//     API server gives (a pod name with path elements, cut to 255 bytes,
//     would name any file, as the kubelet joins them), and only a symbolic
//     link, are removed.
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
// Nor is a pod whose UID has the form the kubelet gives a static pod whose
// manifest sets none (32 hex digits, a hash; the API server makes UUIDs):
// the kubelet may have removed its sandboxes, and its mirror pod may be
// missing. A static pod whose manifest sets another UID is known by its
// sandbox (and mirror pod) only: while it has neither (after a reboot, before
// the kubelet runs it again), it can be taken for gone, and if that UID is
// a UUID its log directory is named as a pod's and goes with it. Its dead
// containers still obey the count and age limits.
//
// Concurrency: Manager runs one GC or plan at a time (GarbageCollect and
// Plan return ErrRunInProgress otherwise); the run owns its plan, outcome
// and the last pod view reason it logged. An APIPodSource's fields are
// written by its two informers' goroutines (pods of the node, and the Node
// itself) and read by View and Retain under one mutex; the caches are the
// informers' own.
package containers
