package cri

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// restartableRuntime serves a fakeRuntime on a fixed socket path and can be
// stopped and started again there, as a restarted runtime removes its
// socket file and makes a new one.
type restartableRuntime struct {
	f    *fakeRuntime
	sock string
	srv  *grpc.Server
	// noCRI makes the next start serve no CRI service: a gRPC server that
	// answers Unimplemented to every CRI call.
	noCRI bool
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
	if !r.noCRI {
		runtimeapi.RegisterRuntimeServiceServer(r.srv, r.f)
		runtimeapi.RegisterImageServiceServer(r.srv, r.f)
	}
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
// restart, OnConnectionChange reports the loss and the return, not the
// first connection, and Generation counts the losses.
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
	if g := c.Generation(); g != 0 {
		t.Errorf("Generation after Dial = %d, want 0", g)
	}

	for restart := 1; restart <= 2; restart++ {
		rt.stop()
		testbed.WaitFor(t, 10*time.Second, "the loss of the connection seen", func() bool { return connected() == 0 })
		if g := c.Generation(); g != uint64(restart) {
			t.Errorf("restart %d: Generation once the loss is seen = %d, want %d", restart, g, restart)
		}
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
		if g := c.Generation(); g != uint64(restart) {
			t.Errorf("after restart %d: Generation = %d, want %d (one per loss)", restart, g, restart)
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

// TestFailedDialLeavesDisconnected: a Dial that fails after its
// connections went READY (a socket that accepts gRPC but serves no CRI v1,
// a runtime that speaks an older CRI, an image service that does not
// answer) leaves nodegc_cri_connected 0: the client cannot talk CRI to the
// runtime, and NodegcRuntimeUnreachable fires on 0. So does the Close of a
// client that was connected. Before, the connection's watcher set 1 when
// the connection went READY, before the checks failed, and Close left it
// (review node r9 #1).
func TestFailedDialLeavesDisconnected(t *testing.T) {
	old := newFakeRuntime()
	old.apiVersion = "v1alpha2"
	noImages := newFakeRuntime()
	noImages.listErr = status.Error(codes.Internal, "image store broken")
	for name, opts := range map[string]Options{
		"no CRI on the socket":             {RuntimeEndpoint: testbed.ServeCRI(t, nil)},
		"CRI v1alpha2":                     {RuntimeEndpoint: old.serve(t)},
		"no CRI on the image socket":       {RuntimeEndpoint: newFakeRuntime().serve(t), ImageEndpoint: testbed.ServeCRI(t, nil)},
		"the image service fails its list": {RuntimeEndpoint: newFakeRuntime().serve(t), ImageEndpoint: noImages.serve(t)},
	} {
		t.Run(name, func(t *testing.T) {
			m := NewMetrics(prometheus.NewPedanticRegistry())
			opts.Timeout, opts.Metrics = 5*time.Second, m
			// Each dial's connections go READY before its checks fail:
			// a few, so that a watcher that saw READY is not missed.
			for range 3 {
				if c, err := Dial(t.Context(), opts); err == nil {
					c.Close()
					t.Fatal("Dial succeeded")
				}
				if got := testutil.ToFloat64(m.connected); got != 0 {
					t.Fatalf("nodegc_cri_connected = %v after a failed Dial, want 0", got)
				}
			}
		})
	}

	m := NewMetrics(prometheus.NewPedanticRegistry())
	c, err := Dial(t.Context(), Options{RuntimeEndpoint: newFakeRuntime().serve(t), Timeout: 5 * time.Second, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	testbed.WaitFor(t, 10*time.Second, "connected after Dial", func() bool { return testutil.ToFloat64(m.connected) == 1 })
	c.Close()
	if got := testutil.ToFloat64(m.connected); got != 0 {
		t.Errorf("nodegc_cri_connected = %v after Close, want 0", got)
	}
}

// TestRefreshVersionFailureDisconnects: a runtime that comes back on the
// socket but answers no CRI Version (a containerd with its cri plugin off in
// place of the one that was there, or one still starting) leaves the client
// not connected: nodegc_cri_connected 0 from RefreshVersion's failure,
// through the returns of the connection, until a RefreshVersion answers.
// Before, the READY connection said 1 however the runtime answered.
func TestRefreshVersionFailureDisconnects(t *testing.T) {
	m := NewMetrics(prometheus.NewPedanticRegistry())
	rt := newRestartableRuntime(t, newFakeRuntime())
	c, err := Dial(t.Context(), Options{RuntimeEndpoint: rt.endpoint(), Timeout: 5 * time.Second, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	connected := func() float64 { return testutil.ToFloat64(m.connected) }
	reconnects := func() float64 { return testutil.ToFloat64(m.reconnects) }
	testbed.WaitFor(t, 10*time.Second, "connected after Dial", func() bool { return connected() == 1 })

	rt.stop()
	rt.noCRI = true
	rt.start(t)
	testbed.WaitFor(t, 10*time.Second, "the connection back, to a socket without CRI", func() bool { return reconnects() == 1 })
	if _, _, err := c.RefreshVersion(t.Context()); err == nil {
		t.Fatal("RefreshVersion answered on a socket without CRI")
	}
	if got := connected(); got != 0 {
		t.Errorf("nodegc_cri_connected = %v after RefreshVersion failed on a READY connection, want 0", got)
	}

	rt.stop()
	rt.noCRI = false
	rt.start(t)
	testbed.WaitFor(t, 10*time.Second, "the connection back, to the runtime", func() bool { return reconnects() == 2 })
	if got := connected(); got != 0 {
		t.Errorf("nodegc_cri_connected = %v once the connection is back, before a RefreshVersion answered, want 0", got)
	}
	if _, _, err := c.RefreshVersion(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := connected(); got != 1 {
		t.Errorf("nodegc_cri_connected = %v after RefreshVersion answered, want 1", got)
	}
}

// TestCheckImageService: CheckImageService asks a separate image service
// (ImageFsInfo) and names its endpoint when it does not answer; with the
// runtime's own image service, which Version asks, it asks nothing.
func TestCheckImageService(t *testing.T) {
	rt := newRestartableRuntime(t, newFakeRuntime())
	img := newRestartableRuntime(t, newFakeRuntime())
	c, err := Dial(t.Context(), Options{RuntimeEndpoint: rt.endpoint(), ImageEndpoint: img.endpoint(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.CheckImageService(t.Context()); err != nil {
		t.Errorf("CheckImageService with the image service up: %v", err)
	}
	img.stop()
	err = c.CheckImageService(t.Context())
	if want := "image service at " + img.endpoint() + " does not answer"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("CheckImageService with the image service gone = %v, want an error containing %q", err, want)
	}

	f := newFakeRuntime()
	shared := dialFake(t, f, Options{})
	if err := shared.CheckImageService(t.Context()); err != nil {
		t.Errorf("CheckImageService on the runtime's image service: %v", err)
	}
	if n := f.callCount("ImageFsInfo"); n != 0 {
		t.Errorf("CheckImageService on the runtime's image service made %d ImageFsInfo calls, want none", n)
	}
}

// activityLog is an Activity that records what it hears.
type activityLog struct {
	mu                     sync.Mutex
	starts, ends, progress int
	timeouts               []time.Duration
}

func (l *activityLog) Start(timeout time.Duration) func() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.starts++
	l.timeouts = append(l.timeouts, timeout)
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.ends++
	}
}

func (l *activityLog) Progress() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.progress++
}

// counts returns the starts, ends and progress reports so far.
func (l *activityLog) counts() [3]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return [3]int{l.starts, l.ends, l.progress}
}

func (l *activityLog) lastTimeout() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.timeouts[len(l.timeouts)-1]
}

// TestActivity: every call made under a context from WithActivity reports
// as it starts, with the time left until its deadline, and as it returns,
// also when it fails; streamed lists report each message; calls without it
// report nothing. Stopping a container has its grace period on top of the
// client's timeout, and says so.
func TestActivity(t *testing.T) {
	for name, streaming := range map[string]bool{"unary lists": false, "streamed lists": true} {
		t.Run(name, func(t *testing.T) {
			f := newFakeRuntime()
			f.streaming = streaming
			f.images["sha256:a"] = &runtimeapi.Image{Id: "sha256:a"}
			f.containers["c1"] = &runtimeapi.Container{Id: "c1", State: runtimeapi.ContainerState_CONTAINER_RUNNING}
			const timeout = 10 * time.Second
			c := dialFake(t, f, Options{Timeout: timeout})
			log := &activityLog{}
			ctx := WithActivity(t.Context(), log)
			within := func(what string, got, want time.Duration) {
				t.Helper()
				if got > want || got < want-time.Second {
					t.Errorf("%s: %v until the deadline, want %v (less the time to send it)", what, got, want)
				}
			}

			if _, err := c.Version(ctx); err != nil {
				t.Fatal(err)
			}
			if got := log.counts(); got != [3]int{1, 1, 0} {
				t.Errorf("Version: %v starts, ends, progress reports; want [1 1 0]", got)
			}
			within("Version", log.lastTimeout(), timeout)
			if _, err := c.ListImages(ctx); err != nil {
				t.Fatal(err)
			}
			// The first list tries the stream; a runtime without it answers
			// Unimplemented and the list is asked again, unary.
			wantStarts := map[bool]int{true: 2, false: 3}[streaming]
			if got := log.counts(); got[0] != wantStarts || got[1] != wantStarts || streaming != (got[2] > 0) {
				t.Errorf("after ListImages: %v starts, ends, progress reports; want %d, %[2]d, progress only when streamed", got, wantStarts)
			}
			if err := c.StopContainer(ctx, "c1", 600); err != nil {
				t.Fatal(err)
			}
			within("StopContainer with a grace of 600s", log.lastTimeout(), timeout+600*time.Second)
			before := log.counts()
			canceled, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := c.Version(canceled); err == nil {
				t.Fatal("Version with a canceled context succeeded")
			}
			if got := log.counts(); got[0]-before[0] != 1 || got[1]-before[1] != 1 {
				t.Errorf("failed Version: %v starts, ends, progress reports after %v; want one more start and end", got, before)
			}
			before = log.counts()
			if _, err := c.Version(t.Context()); err != nil {
				t.Fatal(err)
			}
			if got := log.counts(); got != before {
				t.Errorf("a call without WithActivity reported: %v after %v", got, before)
			}
		})
	}
}

// scriptedConn is a connection whose states a test scripts: each
// WaitForStateChange returns, the next GetState reads the next state; at the
// end of the script it waits for ctx.
type scriptedConn struct {
	states []connectivity.State
	next   int
}

func (s *scriptedConn) GetState() connectivity.State { return s.states[min(s.next, len(s.states)-1)] }
func (s *scriptedConn) Connect()                     {}
func (s *scriptedConn) WaitForStateChange(ctx context.Context, _ connectivity.State) bool {
	if s.next++; s.next < len(s.states) {
		return true
	}
	<-ctx.Done()
	return false
}

// TestWatchSeesALossItDidNotRead: the connection left READY and was READY
// again by the time the watcher read its state (a runtime that restarted
// and answered the redial at once). That is a loss all the same: the
// generation moves, and the reconnect is counted. Before, the watcher saw
// READY twice and the restart went unnoticed: what was read of the old
// runtime (its configuration, the image GC's profile) was kept.
func TestWatchSeesALossItDidNotRead(t *testing.T) {
	c := &Client{conn: connState{ready: make([]bool, 1), everReady: make([]bool, 1)}}
	m := NewMetrics(prometheus.NewRegistry())
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	var changes []bool
	c.watchConn(ctx, 0, &scriptedConn{states: []connectivity.State{connectivity.Ready, connectivity.Ready}}, m, func(up bool) { changes = append(changes, up) })
	if g := c.Generation(); g != 1 {
		t.Errorf("generation after READY, a change, READY = %d, want 1", g)
	}
	if got := testutil.ToFloat64(m.reconnects); got != 1 {
		t.Errorf("reconnects = %v, want 1", got)
	}
	if !slices.Equal(changes, []bool{false, true}) {
		t.Errorf("connected changes reported %v, want [false true]", changes)
	}
}
