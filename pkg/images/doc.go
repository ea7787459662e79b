// Package images will hold nodegc's image garbage collector: usage tracking
// (first-detected and last-used times, kept durably in the state directory),
// disk statistics of the image filesystem, the eviction policy as a pure
// function that returns a plan (what to remove and what to keep, and why),
// layer-aware byte accounting for containerd, and the executor that applies a
// plan through CRI.
//
// Nothing is implemented yet.
package images
