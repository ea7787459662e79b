// Package containers will hold nodegc's dead-container garbage collector:
// exited containers, dead pod sandboxes and the log directories of pods that
// no longer exist, with kubelet's semantics (per pod container and node-wide
// limits, minimum age, "pod gone" only from a synced view of the API server).
//
// Nothing is implemented yet.
package containers
