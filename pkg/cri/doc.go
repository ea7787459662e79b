// Package cri is nodegc's client of the Container Runtime Interface (CRI v1)
// over the runtime's unix socket, with an optional separate image service
// socket. It exposes only what the image and container GCs need: list and
// remove images, image filesystem info, list containers and sandboxes,
// container status, stop and remove containers and sandboxes, and the
// container event stream.
//
// Invariants:
//   - Every call is bounded by the caller's context and by the configured
//     runtimeRequestTimeout (stopping a container adds its grace period;
//     the sum is at most the longest time.Duration, about 292 years).
//   - Removal and stop calls are idempotent: NotFound counts as success.
//   - Errors are wrapped with the object's identity and keep their gRPC
//     status: classify them with IsNotFound, IsUnavailable and
//     errors.Is(err, ErrUnsupported).
//   - Lists use CRI list streaming where the runtime offers it and fall back
//     to the unary calls for good after one Unimplemented answer.
//   - A Client outlives its runtime's restarts: gRPC dials the socket path
//     anew on each attempt, and one watcher goroutine per connection
//     redials as soon as the connection is lost (not at the next call),
//     counts every return in nodegc_cri_reconnects_total, keeps
//     nodegc_cri_connected current and reports losses and returns to
//     Options.OnConnectionChange. Close stops the watchers.
//   - Calls made under a context from WithActivity report as they start,
//     with their deadline, and as they return; that is how the agent tells
//     a slow GC loop, or one waiting on a long stop, from a stuck one.
//   - This package does not log; the loop that owns the work does, once.
//
// Why not k8s.io/cri-client: it logs every failed call at error level,
// including the NotFound that a garbage collector counts as success, and it
// installs OpenTelemetry handlers nodegc does not use. The gRPC stubs are
// cri-api's own; this package only adds deadlines, error classification and
// metrics on top.
//
// In the node collectors' flow (config → policy → plan → execute) this
// package is both ends: the managers' snapshots are its listings, and the
// executors' removals are its calls. Planning never calls it.
package cri
