package cri

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/endpoint"
)

// maxMsgSize is the largest response accepted, as kubelet's CRI client
// does: a node with tens of thousands of containers lists several MiB.
const maxMsgSize = 16 << 20

// Options configure Dial.
type Options struct {
	// RuntimeEndpoint is the runtime service, unix:///path.
	RuntimeEndpoint string
	// ImageEndpoint is the image service; empty means RuntimeEndpoint.
	ImageEndpoint string
	// Timeout bounds every call (runtimeRequestTimeout). Stopping a
	// container gets its grace period on top, as in kubelet.
	Timeout time.Duration
	// Metrics, if set, counts every call by method and result, and the
	// connection's losses and returns, and says whether the client talks
	// CRI to the runtime (nodegc_cri_connected). It serves one client at a
	// time: a client sets it to 0 at its Close.
	Metrics *Metrics
	// OnConnectionChange, if set, is called when the connection to the
	// runtime (or to the image service) is lost (false) and when every
	// connection is back (true), never for the first connection. It is
	// called from the client's own goroutine and must not block.
	OnConnectionChange func(connected bool)
}

// Client talks CRI v1 to a container runtime. It is safe for concurrent use.
// Every call is bounded by the caller's context and by Options.Timeout.
type Client struct {
	runtime runtimeapi.RuntimeServiceClient
	images  runtimeapi.ImageServiceClient
	conns   []*grpc.ClientConn
	timeout time.Duration
	// version is the runtime's answer to Version at Dial, or at the last
	// RefreshVersion.
	version atomic.Pointer[runtimeapi.VersionResponse]

	// noStreaming is set once the runtime answered Unimplemented to a
	// streaming list call; lists are unary from then on.
	noStreaming atomic.Bool

	// One watcher goroutine per connection follows its state (watch.go);
	// stopWatching ends them.
	stopWatching context.CancelFunc
	watchers     sync.WaitGroup
	conn         connState
	metrics      *Metrics
	// imageEndpoint is the image service's endpoint when it is not the
	// runtime's (CheckImageService), else "".
	imageEndpoint string
}

// Dial connects to the runtime (and image service), and checks that the
// runtime speaks CRI v1 by calling Version (and that a separate image
// service answers, by listing its images). It fails if the runtime does not
// answer within the context's deadline or Options.Timeout. Options.Metrics'
// nodegc_cri_connected is 1 only once these checks passed: a failed Dial
// leaves it 0, though its connections may have gone READY.
func Dial(ctx context.Context, opts Options) (*Client, error) {
	if opts.Timeout <= 0 {
		return nil, errors.New("cri: Options.Timeout must be positive")
	}
	c := &Client{timeout: opts.Timeout, metrics: opts.Metrics}
	rconn, err := dial(opts.RuntimeEndpoint, opts.Metrics)
	if err != nil {
		return nil, err
	}
	c.conns = append(c.conns, rconn)
	iconn := rconn
	separate := separateImageService(opts)
	if separate {
		if iconn, err = dial(opts.ImageEndpoint, opts.Metrics); err != nil {
			c.Close()
			return nil, err
		}
		c.conns = append(c.conns, iconn)
		c.imageEndpoint = opts.ImageEndpoint
	}
	c.runtime = runtimeapi.NewRuntimeServiceClient(rconn)
	c.images = runtimeapi.NewImageServiceClient(iconn)
	c.watch(ctx, opts.Metrics, opts.OnConnectionChange)

	v, err := c.Version(ctx)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("runtime at %s does not answer CRI v1 Version: %w", opts.RuntimeEndpoint, err)
	}
	if v.RuntimeApiVersion != "v1" {
		c.Close()
		return nil, fmt.Errorf("runtime %s %s at %s speaks CRI %q; nodegc needs CRI v1",
			v.RuntimeName, v.RuntimeVersion, opts.RuntimeEndpoint, v.RuntimeApiVersion)
	}
	c.version.Store(v)
	if separate {
		// The image service has no Version call: list images to check it answers.
		if _, err := c.ListImages(ctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("image service at %s does not answer: %w", opts.ImageEndpoint, err)
		}
	}
	c.setTalking(true)
	return c, nil
}

// separateImageService says whether opts name an image service apart from
// the runtime: another socket, not the same one spelled otherwise
// ("/run/x.sock", "unix:///run/x.sock"), which would get a second
// connection, counted twice at each restart.
func separateImageService(opts Options) bool {
	if opts.ImageEndpoint == "" || opts.ImageEndpoint == opts.RuntimeEndpoint {
		return false
	}
	image, err1 := endpoint.SocketPath(opts.ImageEndpoint)
	runtime, err2 := endpoint.SocketPath(opts.RuntimeEndpoint)
	return err1 != nil || err2 != nil || filepath.Clean(image) != filepath.Clean(runtime)
}

// dialBackoff is the backoff between a connection's attempts: from 100ms,
// growing by gRPC's default factor (1.6) up to a cap of 3s, each delay
// jittered by gRPC's default 20%. A runtime that comes back is redialed
// within about 3.6s of its return, however long it was down.
func dialBackoff() backoff.Config {
	bo := backoff.DefaultConfig
	bo.BaseDelay = 100 * time.Millisecond
	bo.MaxDelay = 3 * time.Second
	return bo
}

func dial(ep string, m *Metrics) (*grpc.ClientConn, error) {
	path, err := endpoint.SocketPath(ep)
	if err != nil {
		return nil, fmt.Errorf("CRI endpoint %q: %w", ep, err)
	}
	bo := dialBackoff()
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize)),
		// The path is dialed anew on every connection attempt: a runtime
		// restarted with a new socket file there is found again (as long
		// as the socket's directory, not the old file, is what a container
		// mounts), within MaxDelay of its return.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: 5 * time.Second}),
		// No idle mode: IDLE then only ever means the connection was lost,
		// which the watcher redials at once and counts.
		grpc.WithIdleTimeout(0),
	}
	opts = append(opts, ActivityDialOptions()...)
	if m != nil {
		opts = append(opts, grpc.WithChainUnaryInterceptor(m.unaryInterceptor),
			grpc.WithChainStreamInterceptor(m.streamInterceptor))
	}
	// Innermost, so that the metrics count what the callers see.
	opts = append(opts, grpc.WithChainUnaryInterceptor(startingUnaryInterceptor),
		grpc.WithChainStreamInterceptor(startingStreamInterceptor))
	// gRPC reads its target as a URL: the path goes escaped, so that a
	// socket path holding %, ? or # is the one dialed.
	conn, err := grpc.NewClient("unix://"+(&url.URL{Path: path}).EscapedPath(), opts...)
	if err != nil {
		return nil, fmt.Errorf("CRI endpoint %q: %w", ep, err)
	}
	return conn, nil
}

// Close stops watching the connections and closes them; the client no
// longer talks to the runtime (nodegc_cri_connected 0).
func (c *Client) Close() error {
	if c.stopWatching != nil {
		c.stopWatching()
		c.watchers.Wait()
	}
	c.setTalking(false)
	var errs []error
	for _, conn := range c.conns {
		errs = append(errs, conn.Close())
	}
	return errors.Join(errs...)
}

// RuntimeVersion returns what the runtime answered to Version at Dial, or
// at the last RefreshVersion.
func (c *Client) RuntimeVersion() *runtimeapi.VersionResponse { return c.version.Load() }

// RefreshVersion asks the runtime for its Version again and keeps the
// answer for RuntimeVersion. changed says whether the runtime's name or
// version differ from the last answer kept: the runtime behind the endpoint
// was upgraded, downgraded or replaced while the connection was down. What
// the client learnt of the old one (streaming lists unimplemented) is then
// forgotten.
//
// Its answer also says whether the client talks CRI to the runtime: from a
// RefreshVersion that fails (a runtime that came back on the socket without
// CRI v1, or not serving it yet) until one answers, nodegc_cri_connected is
// 0 even while the connections are READY.
func (c *Client) RefreshVersion(ctx context.Context) (v *runtimeapi.VersionResponse, changed bool, err error) {
	v, err = c.Version(ctx)
	c.setTalking(err == nil)
	if err != nil {
		return nil, false, err
	}
	old := c.version.Swap(v)
	changed = old.GetRuntimeName() != v.GetRuntimeName() || old.GetRuntimeVersion() != v.GetRuntimeVersion()
	if changed {
		c.noStreaming.Store(false)
	}
	return v, changed, nil
}

// withTimeout bounds a call by the client's timeout plus extra (at most
// the longest time.Duration).
func (c *Client) withTimeout(ctx context.Context, extra time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, addDurations(c.timeout, extra))
}

// CheckImageService asks a separate image service whether it answers, by
// a call as cheap as it has (ImageFsInfo), and says which endpoint does not;
// nil without asking when the image service is the runtime's, which Version
// asks. Readiness probes use it.
func (c *Client) CheckImageService(ctx context.Context) error {
	if c.imageEndpoint == "" {
		return nil
	}
	if _, err := c.ImageFsInfo(ctx); err != nil {
		return fmt.Errorf("image service at %s does not answer: %w", c.imageEndpoint, err)
	}
	return nil
}

// Version calls CRI Version; readiness probes use it.
func (c *Client) Version(ctx context.Context) (*runtimeapi.VersionResponse, error) {
	ctx, cancel := c.withTimeout(ctx, 0)
	defer cancel()
	return c.runtime.Version(ctx, &runtimeapi.VersionRequest{})
}
