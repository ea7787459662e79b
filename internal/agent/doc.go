// Package agent wires nodegc's parts into the running agent: the image and
// container GC loops of this node, the ownerReference garbage collector
// under Lease leader election, Node events, and the HTTP endpoints
// (/metrics, /healthz, /readyz, the owner GC debug graph).
//
// Lifecycle: Run blocks until its context ends (SIGTERM), then stops taking
// new work (a removal in flight is cancelled; CRI removals are idempotent),
// waits at most ShutdownTimeout for the loops to save their state, releases
// the lease and returns. The owner GC writes only while this instance holds the
// lease: on losing it, its context is cancelled and Run waits for its
// workers to stop before the lease can expire for another instance; if they
// do not stop in that window, the process exits rather than risk two
// writers.
package agent
