package cri

import (
	"context"

	"google.golang.org/grpc"
)

type activityKey struct{}

// WithActivity returns a context under which every CRI call of a Client
// calls f as it is sent and as it returns (with or without an error), and
// a streamed list also as each of its messages arrives. The agent's
// watchdog uses it to tell a GC loop that makes progress, however slowly,
// from one that is stuck. f must be quick and safe for concurrent use.
func WithActivity(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, activityKey{}, f)
}

func activityFrom(ctx context.Context) func() {
	f, _ := ctx.Value(activityKey{}).(func())
	return f
}

func activityUnaryInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	f := activityFrom(ctx)
	if f == nil {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	f()
	defer f()
	return invoker(ctx, method, req, reply, cc, opts...)
}

func activityStreamInterceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	f := activityFrom(ctx)
	if f == nil {
		return streamer(ctx, desc, cc, method, opts...)
	}
	f()
	s, err := streamer(ctx, desc, cc, method, opts...)
	f()
	if err != nil {
		return nil, err
	}
	return &activityStream{ClientStream: s, f: f}, nil
}

// activityStream reports each message received (and the end of the stream).
type activityStream struct {
	grpc.ClientStream
	f func()
}

func (s *activityStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	s.f()
	return err
}
