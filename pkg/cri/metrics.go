package cri

import (
	"context"
	"errors"
	"io"
	"path"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nodegc/nodegc/internal/metricvec"
)

// Metrics counts CRI calls and the connection's losses and returns. Create
// it once with NewMetrics and pass it in Options.Metrics.
type Metrics struct {
	requests   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	reconnects prometheus.Counter
	connected  prometheus.Gauge
}

// NewMetrics creates the CRI call metrics and registers them into reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: metricvec.CounterOver("nodegc_cri_requests_total",
			"CRI calls made by nodegc, by method and gRPC result code. A streamed call (a list, the container event stream) counts once, when it ends: OK at its clean end, Canceled or DeadlineExceeded when its caller's context ended first.", "method", "code"),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodegc_cri_request_duration_seconds",
			Help:    "Latency of unary CRI calls made by nodegc, by method.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8), // 1ms .. ~16s
		}, []string{"method"}),
		reconnects: metricvec.Single("nodegc_cri_reconnects_total",
			"Connections to the container runtime (or image service) re-established after being lost, e.g. by a runtime restart."),
		connected: metricvec.SingleGauge("nodegc_cri_connected",
			"1 while nodegc talks CRI to the container runtime (and image service): connected, and the runtime answered CRI v1 at the dial and, after a return of the connection, when asked again; else 0."),
	}
	reg.MustRegister(m.requests, m.duration, m.reconnects, m.connected)
	return m
}

// setConnected sets nodegc_cri_connected.
func (m *Metrics) setConnected(talking bool) {
	if talking {
		m.connected.Set(1)
	} else {
		m.connected.Set(0)
	}
}

func (m *Metrics) unaryInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	start := time.Now()
	err := invoker(ctx, method, req, reply, cc, opts...)
	name := path.Base(method)
	m.duration.WithLabelValues(name).Observe(time.Since(start).Seconds())
	m.requests.WithLabelValues(name, status.Code(err).String()).Inc()
	return err
}

// streamInterceptor counts a streamed call (a list, the container event
// stream) once, when it ends: a server-streaming call's status arrives at
// its first failed receive, not when it opens (a runtime without the call
// answers Unimplemented there). A receive's io.EOF is the clean end, OK;
// a stream whose caller stops reading before its end counts the end of its
// context (Canceled, DeadlineExceeded), as a unary call cut short does.
func (m *Metrics) streamInterceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	name := path.Base(method)
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		m.requests.WithLabelValues(name, status.Code(err).String()).Inc()
		return nil, err
	}
	cs := &countedStream{ClientStream: s, count: func(code codes.Code) { m.requests.WithLabelValues(name, code.String()).Inc() }}
	cs.stop = context.AfterFunc(ctx, func() { cs.end(status.FromContextError(ctx.Err()).Code()) })
	return cs, nil
}

// countedStream counts its call's result once, at the first of: a failed
// receive, a failed send, the end of its context.
type countedStream struct {
	grpc.ClientStream
	once  sync.Once
	count func(codes.Code)
	stop  func() bool // cancels the count at the end of the context
}

func (s *countedStream) end(code codes.Code) {
	s.once.Do(func() { s.count(code) })
}

func (s *countedStream) RecvMsg(msg any) error {
	err := s.ClientStream.RecvMsg(msg)
	if err != nil {
		s.stop()
		if errors.Is(err, io.EOF) {
			s.end(codes.OK)
		} else {
			s.end(status.Code(err))
		}
	}
	return err
}

// SendMsg counts a failed send, which ends the call for its caller; io.EOF
// from a send only says the stream ended, and its receive says how.
func (s *countedStream) SendMsg(msg any) error {
	err := s.ClientStream.SendMsg(msg)
	if err != nil && !errors.Is(err, io.EOF) {
		s.stop()
		s.end(status.Code(err))
	}
	return err
}
