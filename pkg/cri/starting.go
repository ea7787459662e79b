package cri

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// notInitialized is what containerd 1.x's CRI plugin answers every call
// with while it recovers its state after a start (seconds to minutes on a
// node of many containers and images): a plain Go error, which gRPC sends
// as Unknown. containerd 2.x sends Unavailable for the same state.
const notInitialized = "server is not initialized yet"

// startingAsUnavailable turns containerd 1.x's "not initialized yet"
// (Unknown) into Unavailable, keeping its message, so that a runtime
// still starting counts as one not reachable yet everywhere
// (IsUnavailable, HasCode, the image GC's retries within 10s, the request
// metrics), as on containerd 2.x. Any other error is left as it is.
func startingAsUnavailable(err error) error {
	if s, ok := status.FromError(err); ok && s.Code() == codes.Unknown && s.Message() == notInitialized {
		return status.Error(codes.Unavailable, s.Message())
	}
	return err
}

func startingUnaryInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return startingAsUnavailable(invoker(ctx, method, req, reply, cc, opts...))
}

func startingStreamInterceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, startingAsUnavailable(err)
	}
	return startingStream{s}, nil
}

// startingStream is a server-streaming call whose status, which arrives at
// a receive, goes through startingAsUnavailable.
type startingStream struct{ grpc.ClientStream }

func (s startingStream) RecvMsg(msg any) error {
	return startingAsUnavailable(s.ClientStream.RecvMsg(msg))
}
