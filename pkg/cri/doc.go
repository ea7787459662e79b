// Package cri will hold nodegc's CRI client: gRPC over the runtime's unix
// socket (with an optional separate image service socket), a check that the
// runtime speaks CRI v1, per-call deadlines from runtimeRequestTimeout, and
// the calls the image and container GCs need (list and remove images, image
// filesystem info, list containers and sandboxes, container status, stop and
// remove, the container event stream), with gRPC errors classified so that
// NotFound on removal counts as success.
//
// Nothing is implemented yet.
package cri
