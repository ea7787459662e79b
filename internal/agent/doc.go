// Package agent wires nodegc's parts into the running agent: the image and
// container GC loops of this node, the ownerReference garbage collector
// under Lease leader election, Node events, and the HTTP endpoints
// (/metrics, /healthz, /readyz, the owner GC debug graph).
//
// Wiring: newAgent builds every part before anything starts (a part that
// cannot be built fails the start, and nothing runs); Run then starts each
// as a runnable (runnable.go: the node GC, which runs the image and
// container GC loops as runnables of its own, and the owner GC), serves
// HTTP, and stops them all with one call.
//
// One node GC per node: before it reads any state, the node GC takes an
// exclusive flock on its stateDirectory (nodelock.go; nodegc.lock there
// names the holder, or no one when the holder could not write it: the
// last holder's is removed then) and holds it until it ends. An agent that finds it
// held collects nothing, logs the holder, sets nodegc_node_gc_standby and
// stays ready, trying again every second; it takes over once the holder
// exits (the kernel drops the lock of a dead process) and reads the state
// the holder wrote last.
//
// Lifecycle: Run blocks until its context ends (SIGTERM), then stops taking
// new work (a runtime call in flight is cancelled, not awaited: the runtime
// may still complete it, and CRI removals are idempotent),
// waits at most ShutdownTimeout for the loops to save their state, releases
// the lease and returns. The owner GC writes only while its lease fence is
// open (lease.go): renewDeadline from the send of the last successful
// renewal, asked by every write request in the collector's transport. When
// the fence closes, the collector's context is cancelled; if it has not
// stopped leaseDuration - renewDeadline later (before another instance can
// take the lease), the process exits rather than risk two writers.
//
// Health. /healthz fails (500) when a node GC loop is wedged, or the owner
// GC of the instance that leads is stalled (ownergc.Collector.Stalled: its
// graph builder takes no queued event, or all the workers of a queue with
// ready items make no progress, for 5 minutes; its requests end by their
// timeout of 30s, so only a fault of the process stalls it), so that the
// kubelet's liveness probe restarts the agent; it answers from memory.
// /readyz (503) says why the agent cannot work now: the runtime does not
// answer (since when, and what the socket path holds), a separate image
// service does not answer (which endpoint), a GC loop is wedged
// or could not start (which one, since when), the owner GC has not synced.
// A loop (the image GC: its disk checks and sweeps; the container GC: its
// runs) is wedged when
//   - one iteration has neither started nor ended a runtime call for longer
//     than the stall bound runtimeRequestTimeout + 1m, and has no call in
//     flight whose own deadline + 1m is still ahead. Every runtime call
//     ends by its deadline: runtimeRequestTimeout, plus the pod's grace
//     period for stopping a container in an unknown state (a pod's
//     terminationGracePeriodSeconds of 600 makes that 12m). The minute
//     covers the work between calls (planning, the 20s wait for the
//     runtime's cleanup after image removals, statfs, removing log
//     directories; a call to containerd's own API is a runtime call, as a
//     CRI call is), so the iteration
//     is blocked on something without a deadline, or deadlocked. An
//     iteration that keeps making calls is never wedged, however long it
//     runs, nor one that waits on a call within its deadline;
//   - or no iteration began for longer than the loop's wait (containerGC.
//     period; imageGC.diskCheckInterval, or period if shorter) plus the
//     stall bound;
//   - or its Run returned while the agent runs.
//
// With the defaults (runtimeRequestTimeout 2m) that is 3m without a runtime
// call in an iteration, 4m without a container GC run, 3m10s without an
// image GC disk check; the liveness probe adds up to a minute. The
// iterations' calls, with their deadlines, are seen through
// cri.WithActivity on the context the managers' Supervise hook gives each
// iteration; the image GC's usage watcher and event stream run outside
// iterations and count for nothing. The node GC's setup for a runtime
// (reading its profile, building the managers: Status and ImageFsInfo may
// each take runtimeRequestTimeout) runs as an iteration of both loops,
// its calls seen by both (setupIteration), so a runtime slow to answer
// them does not get the agent restarted into the same slow setup.
// A runtime that is down is no wedge: calls fail at once, the loops go on,
// /readyz says so, and the CRI client redials the socket path until the
// runtime is back (the DaemonSet mounts the socket's directory, so a
// restarted runtime's new socket file is found); restarting the agent
// would not help. When the connection returns with another runtime behind
// it (another name or version in CRI Version: an in-place upgrade) or the
// same one restarted with another configuration (another sandbox image in
// its verbose status, another image filesystem: a runtime reads its config
// at start only), the node GC stops its image and container GC loops and
// builds them again for it (nodegc.go, collect; profile.go): what was set
// up for the old one (its event stream or its absence, its snapshotter,
// its sandbox image) would otherwise outlive it. A fact the runtime did not
// give when the loops were built (its status timed out, or containerd's own
// API did not answer: without it the image GC has no list of the pod
// sandboxes' images, and keeps the one remembered in its state file) is
// asked for again every 30 seconds, and the loops are built again once it
// answers.
package agent
