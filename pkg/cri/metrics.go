package cri

import (
	"context"
	"path"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
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
			"CRI calls made by nodegc, by method and gRPC result code.", "method", "code"),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodegc_cri_request_duration_seconds",
			Help:    "Latency of unary CRI calls made by nodegc, by method.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8), // 1ms .. ~16s
		}, []string{"method"}),
		reconnects: metricvec.Single("nodegc_cri_reconnects_total",
			"Connections to the container runtime (or image service) re-established after being lost, e.g. by a runtime restart."),
		connected: metricvec.SingleGauge("nodegc_cri_connected",
			"1 while nodegc is connected to the container runtime (and image service), else 0."),
	}
	reg.MustRegister(m.requests, m.duration, m.reconnects, m.connected)
	return m
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

func (m *Metrics) streamInterceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	m.requests.WithLabelValues(path.Base(method), status.Code(err).String()).Inc()
	return s, err
}
