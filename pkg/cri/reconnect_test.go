package cri

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// restartableRuntime serves a fakeRuntime on a fixed socket path and can be
// stopped and started again there, as a restarted runtime removes its
// socket file and makes a new one.
type restartableRuntime struct {
	f    *fakeRuntime
	sock string
	srv  *grpc.Server
}

func newRestartableRuntime(t *testing.T, f *fakeRuntime) *restartableRuntime {
	t.Helper()
	dir, err := os.MkdirTemp("", "cri")
	if err != nil {
		t.Fatal(err)
	}
	r := &restartableRuntime{f: f, sock: filepath.Join(dir, "cri.sock")}
	r.start(t)
	t.Cleanup(func() {
		r.stop()
		os.RemoveAll(dir)
	})
	return r
}

func (r *restartableRuntime) endpoint() string { return "unix://" + r.sock }

func (r *restartableRuntime) start(t *testing.T) {
	t.Helper()
	os.Remove(r.sock)
	lis, err := net.Listen("unix", r.sock)
	if err != nil {
		t.Fatal(err)
	}
	r.srv = grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(r.srv, r.f)
	runtimeapi.RegisterImageServiceServer(r.srv, r.f)
	srv := r.srv
	go func() { _ = srv.Serve(lis) }()
}

func (r *restartableRuntime) stop() {
	if r.srv != nil {
		r.srv.Stop()
		r.srv = nil
	}
}

// connectionLog records OnConnectionChange calls.
type connectionLog struct {
	mu      sync.Mutex
	changes []bool
}

func (l *connectionLog) record(connected bool) {
	l.mu.Lock()
	l.changes = append(l.changes, connected)
	l.mu.Unlock()
}

func (l *connectionLog) get() []bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]bool(nil), l.changes...)
}

// TestReconnectAfterRuntimeRestart: the runtime goes away and comes back
// on the same socket path (a new socket file). The same Client answers
// again without being recreated, nodegc_cri_connected follows the
// connection, nodegc_cri_reconnects_total counts one reconnect per
// restart, and OnConnectionChange reports the loss and the return, not
// the first connection.
func TestReconnectAfterRuntimeRestart(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	rt := newRestartableRuntime(t, newFakeRuntime())
	var changes connectionLog
	c, err := Dial(t.Context(), Options{RuntimeEndpoint: rt.endpoint(), Timeout: 5 * time.Second, Metrics: m, OnConnectionChange: changes.record})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	connected := func() float64 { return testutil.ToFloat64(m.connected) }
	reconnects := func() float64 { return testutil.ToFloat64(m.reconnects) }
	testbed.WaitFor(t, 10*time.Second, "connected after Dial", func() bool { return connected() == 1 })

	for restart := 1; restart <= 2; restart++ {
		rt.stop()
		testbed.WaitFor(t, 10*time.Second, "the loss of the connection seen", func() bool { return connected() == 0 })
		if _, err := c.Version(t.Context()); !IsUnavailable(err) {
			t.Errorf("restart %d: Version while the runtime is down = %v, want Unavailable", restart, err)
		}
		rt.start(t)
		// No call is needed to redial: the client reconnects by itself.
		testbed.WaitFor(t, 10*time.Second, "reconnected without a call", func() bool { return connected() == 1 })
		if _, err := c.Version(t.Context()); err != nil {
			t.Fatalf("restart %d: Version after the runtime came back: %v", restart, err)
		}
		if got := reconnects(); got != float64(restart) {
			t.Errorf("after restart %d: nodegc_cri_reconnects_total = %v, want %d", restart, got, restart)
		}
	}
	if got, want := changes.get(), []bool{false, true, false, true}; !slices.Equal(got, want) {
		t.Errorf("OnConnectionChange calls %v, want %v", got, want)
	}
	if n, err := testutil.GatherAndCount(reg, "nodegc_cri_reconnects_total", "nodegc_cri_connected"); err != nil || n != 2 {
		t.Errorf("GatherAndCount = %d, %v; want 2 series", n, err)
	}
}

// TestReconnectBothEndpoints: with a separate image service, the client is
// connected only while both answer, and each restart counts.
func TestReconnectBothEndpoints(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	rt := newRestartableRuntime(t, newFakeRuntime())
	img := newRestartableRuntime(t, newFakeRuntime())
	c, err := Dial(t.Context(), Options{RuntimeEndpoint: rt.endpoint(), ImageEndpoint: img.endpoint(), Timeout: 5 * time.Second, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	connected := func() float64 { return testutil.ToFloat64(m.connected) }
	testbed.WaitFor(t, 10*time.Second, "connected after Dial", func() bool { return connected() == 1 })
	img.stop()
	testbed.WaitFor(t, 10*time.Second, "the image service's loss seen", func() bool { return connected() == 0 })
	img.start(t)
	testbed.WaitFor(t, 10*time.Second, "reconnected", func() bool { return connected() == 1 })
	if _, err := c.ListImages(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.reconnects); got != 1 {
		t.Errorf("nodegc_cri_reconnects_total = %v, want 1", got)
	}
}

// TestCloseStopsWatching: Close ends the connection watchers, and a closed
// client's shutdown does not mark the runtime disconnected.
func TestCloseStopsWatching(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	rt := newRestartableRuntime(t, newFakeRuntime())
	var changes connectionLog
	c, err := Dial(t.Context(), Options{RuntimeEndpoint: rt.endpoint(), Timeout: 5 * time.Second, Metrics: m, OnConnectionChange: changes.record})
	if err != nil {
		t.Fatal(err)
	}
	testbed.WaitFor(t, 10*time.Second, "connected after Dial", func() bool { return testutil.ToFloat64(m.connected) == 1 })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := changes.get(); len(got) != 0 {
		t.Errorf("OnConnectionChange after Close: %v, want no call", got)
	}
}

// TestActivity: every call made under a context from WithActivity reports
// as it starts and as it returns, also when it fails; streamed lists report
// each message; calls without it report nothing.
func TestActivity(t *testing.T) {
	for name, streaming := range map[string]bool{"unary lists": false, "streamed lists": true} {
		t.Run(name, func(t *testing.T) {
			f := newFakeRuntime()
			f.streaming = streaming
			f.images["sha256:a"] = &runtimeapi.Image{Id: "sha256:a"}
			c := dialFake(t, f, Options{})
			var mu sync.Mutex
			n := 0
			ctx := WithActivity(t.Context(), func() { mu.Lock(); n++; mu.Unlock() })
			count := func() int { mu.Lock(); defer mu.Unlock(); return n }

			if _, err := c.Version(ctx); err != nil {
				t.Fatal(err)
			}
			if got := count(); got != 2 {
				t.Errorf("Version: %d reports, want 2 (start, return)", got)
			}
			if _, err := c.ListImages(ctx); err != nil {
				t.Fatal(err)
			}
			if got := count(); got < 4 {
				t.Errorf("after ListImages: %d reports, want at least 4", got)
			}
			before := count()
			canceled, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := c.Version(canceled); err == nil {
				t.Fatal("Version with a canceled context succeeded")
			}
			if got := count() - before; got != 2 {
				t.Errorf("failed Version: %d reports, want 2", got)
			}
			before = count()
			if _, err := c.Version(t.Context()); err != nil {
				t.Fatal(err)
			}
			if got := count() - before; got != 0 {
				t.Errorf("a call without WithActivity reported %d times", got)
			}
		})
	}
}
