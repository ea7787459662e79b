package cri

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrUnsupported is returned (wrapped) when the runtime does not implement a
// call, such as the container event stream of containerd 1.6.
var ErrUnsupported = errors.New("not supported by the container runtime")

// IsNotFound reports whether err is a CRI NotFound answer (the first gRPC
// status err wraps or joins, as status.Code finds it). Removal calls of this
// package already count NotFound as success.
func IsNotFound(err error) bool {
	return status.Code(err) == codes.NotFound
}

// IsUnavailable reports whether err means the runtime could not be reached
// (socket gone, runtime restarting, deadline exceeded): a reason to do
// nothing now and retry later, never to act on partial knowledge.
func IsUnavailable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return false
}

// HasCode says whether err, or any error it wraps or joins, is a gRPC
// status of code: not only the first (status.Code), as a run's joined errors
// may hold several.
func HasCode(err error, code codes.Code) bool {
	if s, ok := err.(interface{ GRPCStatus() *status.Status }); ok && s.GRPCStatus().Code() == code {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return HasCode(u.Unwrap(), code)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if HasCode(e, code) {
				return true
			}
		}
	}
	return false
}

// ignoreNotFound turns NotFound into success: deleting what is gone is done.
func ignoreNotFound(err error) error {
	if err == nil || IsNotFound(err) {
		return nil
	}
	return err
}
