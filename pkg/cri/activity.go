package cri

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
)

// Activity hears of the CRI calls a Client makes under a context from
// WithActivity. The agent's watchdog uses it to tell a GC loop that makes
// progress, however slowly, or waits on a call that may still return, from
// one that is stuck. Its methods must be quick and safe for concurrent use.
type Activity interface {
	// Start is called as a call is sent, with the time left until the
	// call's deadline (its context's; 0 when it has none, or it has
	// passed). The call is in flight until end is called, once, as it
	// returns (with or without an error); a streamed list returns when its
	// stream ends or its context does.
	Start(timeout time.Duration) (end func())
	// Progress is called as each message of a streamed list arrives.
	Progress()
}

type activityKey struct{}

// WithActivity returns a context under which every CRI call of a Client
// reports to a: as it is sent, with its deadline, and as it returns, and a
// streamed list also as each of its messages arrives.
func WithActivity(ctx context.Context, a Activity) context.Context {
	return context.WithValue(ctx, activityKey{}, a)
}

// ActivityDialOptions make another gRPC client on the runtime's socket
// (containerd's own API) report its calls under a context from
// WithActivity, as a Client's calls do: a GC loop waiting on it is then
// seen to wait on the runtime, not to be stuck.
func ActivityDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(activityUnaryInterceptor),
		grpc.WithChainStreamInterceptor(activityStreamInterceptor),
	}
}

func activityFrom(ctx context.Context) Activity {
	a, _ := ctx.Value(activityKey{}).(Activity)
	return a
}

// start reports a call about to be sent under ctx, whose deadline is the
// call's.
func start(ctx context.Context, a Activity) func() {
	var timeout time.Duration
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), 0)
	}
	return a.Start(timeout)
}

func activityUnaryInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	a := activityFrom(ctx)
	if a == nil {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	defer start(ctx, a)()
	return invoker(ctx, method, req, reply, cc, opts...)
}

func activityStreamInterceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	a := activityFrom(ctx)
	if a == nil {
		return streamer(ctx, desc, cc, method, opts...)
	}
	end := sync.OnceFunc(start(ctx, a))
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		end()
		return nil, err
	}
	// The stream ends at its first failed receive (io.EOF included), or
	// with its context if the caller stops reading before that.
	context.AfterFunc(ctx, end)
	return &activityStream{ClientStream: s, a: a, end: end}, nil
}

// activityStream reports each message received, and the end of the stream.
type activityStream struct {
	grpc.ClientStream
	a   Activity
	end func()
}

func (s *activityStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.end()
		return err
	}
	s.a.Progress()
	return nil
}
