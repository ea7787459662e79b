package cri

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrUnsupported is returned (wrapped) when the runtime does not implement a
// call, such as the container event stream of containerd 1.6.
var ErrUnsupported = errors.New("not supported by the container runtime")

// IsNotFound reports whether err is a CRI NotFound answer. Removal calls of
// this package already count NotFound as success.
func IsNotFound(err error) bool {
	return status.Code(unwrapStatus(err)) == codes.NotFound
}

// IsUnavailable reports whether err means the runtime could not be reached
// (socket gone, runtime restarting, deadline exceeded): a reason to do
// nothing now and retry later, never to act on partial knowledge.
func IsUnavailable(err error) bool {
	switch status.Code(unwrapStatus(err)) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return false
}

// unwrapStatus finds a gRPC status error inside wrapped errors.
func unwrapStatus(err error) error {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if _, ok := status.FromError(e); ok {
			return e
		}
	}
	return err
}

// ignoreNotFound turns NotFound into success: deleting what is gone is done.
func ignoreNotFound(err error) error {
	if err == nil || IsNotFound(err) {
		return nil
	}
	return err
}
