package cri

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/testbed"
)

func dialFake(t *testing.T, f *fakeRuntime, opts Options) *Client {
	t.Helper()
	if opts.RuntimeEndpoint == "" {
		opts.RuntimeEndpoint = f.serve(t)
	}
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	c, err := Dial(t.Context(), opts)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestDialChecksCRIVersion(t *testing.T) {
	f := newFakeRuntime()
	c := dialFake(t, f, Options{})
	if got := c.RuntimeVersion().GetRuntimeName(); got != "fake" {
		t.Errorf("RuntimeVersion().RuntimeName = %q, want fake", got)
	}

	old := newFakeRuntime()
	old.apiVersion = "v1alpha2"
	_, err := Dial(t.Context(), Options{RuntimeEndpoint: old.serve(t), Timeout: 5 * time.Second})
	if err == nil || !strings.Contains(err.Error(), `speaks CRI "v1alpha2"; nodegc needs CRI v1`) {
		t.Errorf("Dial(v1alpha2 runtime) error = %v", err)
	}
}

func TestDialErrors(t *testing.T) {
	cases := map[string]struct {
		endpoint string
		want     string
	}{
		"not unix":          {endpoint: "tcp://127.0.0.1:1", want: "must be a unix:// URL"},
		"relative path":     {endpoint: "unix://run/x.sock", want: "absolute socket path"},
		"no runtime behind": {endpoint: "unix:///nonexistent/cri.sock", want: "does not answer CRI v1 Version"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Dial(t.Context(), Options{RuntimeEndpoint: tc.endpoint, Timeout: 300 * time.Millisecond})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Dial(%s) error = %v, want it to contain %q", tc.endpoint, err, tc.want)
			}
		})
	}
}

// TestDialEscapedPath: an endpoint is read as the kubelet reads it, escapes
// decoded (unix:///run/my%20runtime.sock is the socket "my runtime.sock"),
// and the socket so named is the one dialed, whatever characters its path
// holds.
func TestDialEscapedPath(t *testing.T) {
	dir, err := os.MkdirTemp("", "cri 100%")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "a?b#c.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, newFakeRuntime())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	ep := "unix://" + (&url.URL{Path: sock}).EscapedPath()
	c, err := Dial(t.Context(), Options{RuntimeEndpoint: ep, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("Dial(%s), the socket %q: %v", ep, sock, err)
	}
	c.Close()
}

func TestDialNeedsTimeout(t *testing.T) {
	if _, err := Dial(t.Context(), Options{RuntimeEndpoint: "unix:///x.sock"}); err == nil {
		t.Error("Dial without a timeout succeeded")
	}
}

// TestRemovalsAreIdempotent: removing or stopping what is gone is success;
// other failures keep their identity and gRPC code.
func TestRemovalsAreIdempotent(t *testing.T) {
	f := newFakeRuntime()
	c := dialFake(t, f, Options{})
	ctx := t.Context()
	for name, call := range map[string]func() error{
		"RemoveImage":      func() error { return c.RemoveImage(ctx, "sha256:gone") },
		"StopContainer":    func() error { return c.StopContainer(ctx, "gone", 0) },
		"RemoveContainer":  func() error { return c.RemoveContainer(ctx, "gone") },
		"StopPodSandbox":   func() error { return c.StopPodSandbox(ctx, "gone") },
		"RemovePodSandbox": func() error { return c.RemovePodSandbox(ctx, "gone") },
	} {
		if err := call(); err != nil {
			t.Errorf("%s(missing) = %v, want nil", name, err)
		}
	}

	f.mu.Lock()
	f.removeErr = status.Error(codes.FailedPrecondition, "image is in use")
	f.mu.Unlock()
	err := c.RemoveImage(ctx, "sha256:busy")
	if err == nil || !strings.Contains(err.Error(), "removing image sha256:busy") {
		t.Fatalf("RemoveImage(busy) = %v, want an error naming the image", err)
	}
	if IsNotFound(err) || status.Code(err) != codes.FailedPrecondition {
		t.Errorf("RemoveImage(busy): IsNotFound=%v code=%v, want false and FailedPrecondition", IsNotFound(err), status.Code(err))
	}
}

func TestContainerStatusNotFound(t *testing.T) {
	f := newFakeRuntime()
	f.containers["c1"] = &runtimeapi.Container{Id: "c1", State: runtimeapi.ContainerState_CONTAINER_RUNNING, ImageRef: "sha256:a"}
	c := dialFake(t, f, Options{})
	st, err := c.ContainerStatus(t.Context(), "c1")
	if err != nil || st.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING || st.GetImageRef() != "sha256:a" {
		t.Fatalf("ContainerStatus(c1) = %v, %v", st, err)
	}
	_, err = c.ContainerStatus(t.Context(), "c2")
	if !IsNotFound(err) || !strings.Contains(err.Error(), "container c2") {
		t.Errorf("ContainerStatus(missing) = %v, want a NotFound error naming it", err)
	}
}

func TestPodSandboxStatusNotFound(t *testing.T) {
	f := newFakeRuntime()
	f.sandboxes["s1"] = &runtimeapi.PodSandbox{Id: "s1", State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}
	c := dialFake(t, f, Options{})
	st, err := c.PodSandboxStatus(t.Context(), "s1")
	if err != nil || st.GetState() != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Fatalf("PodSandboxStatus(s1) = %v, %v", st, err)
	}
	_, err = c.PodSandboxStatus(t.Context(), "s2")
	if !IsNotFound(err) || !strings.Contains(err.Error(), "pod sandbox s2") {
		t.Errorf("PodSandboxStatus(missing) = %v, want a NotFound error naming it", err)
	}
}

// TestCallDeadline: a runtime that does not answer makes the call fail with
// DeadlineExceeded once the client's timeout has passed, and a cancelled
// caller context ends the call too.
func TestCallDeadline(t *testing.T) {
	f := newFakeRuntime()
	f.block = make(chan struct{})
	defer close(f.block)
	c := dialFake(t, f, Options{Timeout: 200 * time.Millisecond})

	_, err := c.ListImages(t.Context())
	if status.Code(err) != codes.DeadlineExceeded || !IsUnavailable(err) {
		t.Errorf("ListImages(blocked) = %v, want DeadlineExceeded", err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = c.ListImages(ctx)
	if status.Code(err) != codes.Canceled {
		t.Errorf("ListImages(cancelled ctx) = %v, want Canceled", err)
	}
}

// TestCancelledCallInFlight: what the agent's stop (SIGTERM) does to a
// runtime call in flight. The caller's context ends it: the call returns
// Canceled at once, without waiting for the runtime, and the runtime's
// handler sees its own context end (gRPC cancels the call there too); what
// the runtime then does with the work is its own.
func TestCancelledCallInFlight(t *testing.T) {
	f := newFakeRuntime()
	f.block = make(chan struct{})
	defer close(f.block)
	c := dialFake(t, f, Options{Timeout: time.Minute}) // the fake lists unary, and ListImages blocks
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { _, err := c.ListImages(ctx); done <- err }()
	testbed.WaitFor(t, 10*time.Second, "the call to reach the runtime", func() bool { return f.callCount("ListImages") == 1 })
	cancelled := time.Now()
	cancel()
	select {
	case err := <-done:
		if status.Code(err) != codes.Canceled {
			t.Errorf("ListImages = %v, want Canceled", err)
		}
		t.Logf("returned %v after the cancel", time.Since(cancelled))
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled call did not return: it waits for the runtime")
	}
	testbed.WaitFor(t, 10*time.Second, "the runtime's handler to see the cancel", func() bool { return f.callCount("ListImages cancelled") == 1 })
}

// TestListsStreamOrFallBack: lists gather every streamed message, and a
// runtime without streaming is asked with the unary call, once it said so.
func TestListsStreamOrFallBack(t *testing.T) {
	for _, streaming := range []bool{true, false} {
		t.Run(fmt.Sprintf("streaming=%v", streaming), func(t *testing.T) {
			f := newFakeRuntime()
			f.streaming = streaming
			for _, id := range []string{"sha256:a", "sha256:b", "sha256:c"} {
				f.images[id] = &runtimeapi.Image{Id: id}
			}
			c := dialFake(t, f, Options{})
			for range 3 {
				imgs, err := c.ListImages(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				var ids []string
				for _, img := range imgs {
					ids = append(ids, img.Id)
				}
				slices.Sort(ids)
				if diff := cmp.Diff([]string{"sha256:a", "sha256:b", "sha256:c"}, ids); diff != "" {
					t.Errorf("ListImages (-want +got):\n%s", diff)
				}
			}
			f.mu.Lock()
			streamCalls := f.streamCalls
			f.mu.Unlock()
			wantStream, wantUnary := 3, 0
			if !streaming {
				wantStream, wantUnary = 1, 3
			}
			if streamCalls != wantStream || f.callCount("ListImages") != wantUnary {
				t.Errorf("stream calls %d, unary calls %d; want %d and %d", streamCalls, f.callCount("ListImages"), wantStream, wantUnary)
			}
		})
	}
}

func TestListContainersAndSandboxes(t *testing.T) {
	f := newFakeRuntime()
	f.containers["run"] = &runtimeapi.Container{Id: "run", State: runtimeapi.ContainerState_CONTAINER_RUNNING}
	f.containers["dead"] = &runtimeapi.Container{Id: "dead", State: runtimeapi.ContainerState_CONTAINER_EXITED}
	f.sandboxes["s1"] = &runtimeapi.PodSandbox{Id: "s1", State: runtimeapi.PodSandboxState_SANDBOX_READY}
	c := dialFake(t, f, Options{})
	ctx := t.Context()

	all, err := c.ListContainers(ctx, nil)
	if err != nil || len(all) != 2 {
		t.Fatalf("ListContainers(nil) = %d containers, %v; want 2", len(all), err)
	}
	exited, err := c.ListContainers(ctx, &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_EXITED}})
	if err != nil || len(exited) != 1 || exited[0].Id != "dead" {
		t.Fatalf("ListContainers(exited) = %v, %v", exited, err)
	}
	sbs, err := c.ListPodSandboxes(ctx, nil)
	if err != nil || len(sbs) != 1 || sbs[0].Id != "s1" {
		t.Fatalf("ListPodSandboxes = %v, %v", sbs, err)
	}
	if err := c.StopContainer(ctx, "run", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveContainer(ctx, "run"); err != nil {
		t.Fatal(err)
	}
	if err := c.StopPodSandbox(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if err := c.RemovePodSandbox(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.containers["run"]; ok {
		t.Error("container run still exists after RemoveContainer")
	}
	if len(f.sandboxes) != 0 {
		t.Error("sandbox s1 still exists after RemovePodSandbox")
	}
}

func TestImageFsInfo(t *testing.T) {
	c := dialFake(t, newFakeRuntime(), Options{})
	info, err := c.ImageFsInfo(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	fs := info.GetImageFilesystems()
	if len(fs) != 1 || fs[0].GetFsId().GetMountpoint() != "/var/lib/fake" || fs[0].GetUsedBytes().GetValue() != 42 {
		t.Errorf("ImageFsInfo = %v", info)
	}
}

func TestSeparateImageEndpoint(t *testing.T) {
	runtimeSide, imageSide := newFakeRuntime(), newFakeRuntime()
	runtimeSide.images["sha256:wrong"] = &runtimeapi.Image{Id: "sha256:wrong"}
	imageSide.images["sha256:right"] = &runtimeapi.Image{Id: "sha256:right"}
	c := dialFake(t, runtimeSide, Options{RuntimeEndpoint: runtimeSide.serve(t), ImageEndpoint: imageSide.serve(t)})
	imgs, err := c.ListImages(t.Context())
	if err != nil || len(imgs) != 1 || imgs[0].Id != "sha256:right" {
		t.Errorf("ListImages via the image endpoint = %v, %v", imgs, err)
	}
}

func TestWatchContainerEvents(t *testing.T) {
	f := newFakeRuntime()
	c := dialFake(t, f, Options{})
	f.events <- &runtimeapi.ContainerEventResponse{ContainerId: "a", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT}
	f.events <- &runtimeapi.ContainerEventResponse{ContainerId: "b", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT}

	ctx, cancel := context.WithCancel(t.Context())
	got := make(chan string, 2)
	connected := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- c.WatchContainerEvents(ctx, func() { close(connected) }, func(ev *runtimeapi.ContainerEventResponse) {
			got <- ev.ContainerId + "/" + ev.ContainerEventType.String()
			if ev.ContainerId == "b" {
				cancel()
			}
		})
	}()
	var seen []string
	for range 2 {
		seen = append(seen, <-got)
	}
	if diff := cmp.Diff([]string{"a/CONTAINER_STARTED_EVENT", "b/CONTAINER_STOPPED_EVENT"}, seen); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	<-connected
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("WatchContainerEvents after cancel = %v, want context.Canceled", err)
	}
}

func TestWatchContainerEventsUnsupported(t *testing.T) {
	f := newFakeRuntime()
	f.noEvents = true
	c := dialFake(t, f, Options{})
	err := c.WatchContainerEvents(t.Context(), func() {
		t.Error("a runtime without events taken as subscribed")
	}, func(*runtimeapi.ContainerEventResponse) {
		t.Error("handler called by a runtime without events")
	})
	if !errors.Is(err, ErrUnsupported) {
		t.Errorf("WatchContainerEvents = %v, want ErrUnsupported", err)
	}
}

// TestWatchContainerEventsSwitchedOff: a runtime that ends the event stream
// cleanly at once, before any event (CRI-O with enable_pod_events = false
// returns nil: the client reads io.EOF), has no event stream: that is
// ErrUnsupported, so that the caller polls instead of reopening it forever.
func TestWatchContainerEventsSwitchedOff(t *testing.T) {
	f := newFakeRuntime()
	f.eventsOff = true
	c := dialFake(t, f, Options{})
	err := c.WatchContainerEvents(t.Context(), func() {
		t.Error("a stream that ended at once taken as subscribed")
	}, func(*runtimeapi.ContainerEventResponse) {
		t.Error("handler called by a runtime that sent no event")
	})
	if !errors.Is(err, ErrUnsupported) {
		t.Errorf("WatchContainerEvents = %v, want ErrUnsupported", err)
	}
}

// TestWatchContainerEventsClosedLater: a stream that ends cleanly once it
// was subscribed, with or without events first (a runtime shutting down),
// broke: it is not ErrUnsupported, and the caller reopens it.
func TestWatchContainerEventsClosedLater(t *testing.T) {
	for _, withEvent := range []bool{false, true} {
		t.Run(fmt.Sprintf("event first: %v", withEvent), func(t *testing.T) {
			f := newFakeRuntime()
			f.endEvents = make(chan struct{})
			if withEvent {
				f.events <- &runtimeapi.ContainerEventResponse{ContainerId: "a", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT}
			}
			c := dialFake(t, f, Options{})
			err := c.WatchContainerEvents(t.Context(), func() { close(f.endEvents) }, func(*runtimeapi.ContainerEventResponse) {})
			if err == nil || errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "closed the stream") {
				t.Errorf("WatchContainerEvents = %v, want the runtime's close of the stream, not ErrUnsupported", err)
			}
		})
	}
}

// TestWatchContainerEventsSubscribedWithoutEvents: a runtime sends nothing
// back before its first event; a stream that stays open counts as
// subscribed after a moment, so that the caller lists what exists.
func TestWatchContainerEventsSubscribedWithoutEvents(t *testing.T) {
	c := dialFake(t, newFakeRuntime(), Options{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	connected := make(chan time.Time, 1)
	began := time.Now()
	done := make(chan error, 1)
	go func() {
		done <- c.WatchContainerEvents(ctx, func() { connected <- time.Now() }, func(*runtimeapi.ContainerEventResponse) {
			t.Error("event from a runtime that sent none")
		})
	}()
	select {
	case at := <-connected:
		if d := at.Sub(began); d < subscribeSettle {
			t.Errorf("connected after %v, before the stream could have been subscribed (%v)", d, subscribeSettle)
		}
	case err := <-done:
		t.Fatalf("WatchContainerEvents ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("connected not called on an open, quiet stream")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("WatchContainerEvents after cancel = %v, want context.Canceled", err)
	}
}

func TestMetricsCountCalls(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	f := newFakeRuntime()
	f.images["sha256:a"] = &runtimeapi.Image{Id: "sha256:a"}
	c := dialFake(t, f, Options{Metrics: m})
	ctx := t.Context()
	if err := c.RemoveImage(ctx, "sha256:a"); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveImage(ctx, "sha256:a"); err != nil { // NotFound: success for us, counted as NotFound
		t.Fatal(err)
	}
	for code, want := range map[string]float64{"OK": 1, "NotFound": 1} {
		if got := testutil.ToFloat64(m.requests.WithLabelValues("RemoveImage", code)); got != want {
			t.Errorf("nodegc_cri_requests_total{method=RemoveImage,code=%s} = %v, want %v", code, got, want)
		}
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("Version", "OK")); got != 1 {
		t.Errorf("Version calls counted = %v, want 1 (from Dial)", got)
	}
	if n, err := testutil.GatherAndCount(reg, "nodegc_cri_requests_total", "nodegc_cri_request_duration_seconds"); err != nil || n == 0 {
		t.Errorf("GatherAndCount = %d, %v", n, err)
	}
}

// TestStopContainerLongGrace: a container stopped with its pod's grace
// period gets that grace on top of the client's timeout, however long:
// a grace beyond what a time.Duration holds (about 292 years) is not
// wrapped into a deadline in the past, which would fail the call at once.
func TestStopContainerLongGrace(t *testing.T) {
	f := newFakeRuntime()
	f.containers["c1"] = &runtimeapi.Container{Id: "c1", State: runtimeapi.ContainerState_CONTAINER_RUNNING}
	c := dialFake(t, f, Options{})
	for _, grace := range []int64{0, 600, 1 << 33, 1 << 40, math.MaxInt64} {
		if err := c.StopContainer(t.Context(), "c1", grace); err != nil {
			t.Errorf("StopContainer with a grace of %ds: %v", grace, err)
		}
	}
	for _, tc := range []struct {
		seconds int64
		want    time.Duration
	}{
		{-1, 0}, {0, 0}, {600, 10 * time.Minute},
		{math.MaxInt64 / int64(time.Second), time.Duration(math.MaxInt64/int64(time.Second)) * time.Second},
		{math.MaxInt64/int64(time.Second) + 1, math.MaxInt64}, {1 << 40, math.MaxInt64}, {math.MaxInt64, math.MaxInt64},
	} {
		if got := secondsDuration(tc.seconds); got != tc.want {
			t.Errorf("secondsDuration(%d) = %v, want %v", tc.seconds, got, tc.want)
		}
	}
}

// TestMetricsCountStreamsWhenTheyEnd: a streamed call's status arrives
// with its messages, not when it opens. A runtime without list streaming
// answers Unimplemented: that is what is counted, once, and never OK; a
// stream read to its end counts OK once; an event stream ended by its
// caller counts Canceled; a stream its caller stops reading counts the
// end of its context.
func TestMetricsCountStreamsWhenTheyEnd(t *testing.T) {
	count := func(m *Metrics, method, code string) float64 {
		return testutil.ToFloat64(m.requests.WithLabelValues(method, code))
	}

	t.Run("unimplemented", func(t *testing.T) {
		m := NewMetrics(prometheus.NewPedanticRegistry())
		f := newFakeRuntime()
		f.images["sha256:a"] = &runtimeapi.Image{Id: "sha256:a"}
		c := dialFake(t, f, Options{Metrics: m})
		if _, err := c.ListImages(t.Context()); err != nil {
			t.Fatal(err)
		}
		for code, want := range map[string]float64{"Unimplemented": 1, "OK": 0} {
			if got := count(m, "StreamImages", code); got != want {
				t.Errorf("nodegc_cri_requests_total{method=StreamImages,code=%s} = %v, want %v", code, got, want)
			}
		}
		if got := count(m, "ListImages", "OK"); got != 1 {
			t.Errorf("nodegc_cri_requests_total{method=ListImages,code=OK} = %v, want 1 (the fallback)", got)
		}
	})

	t.Run("read to its end", func(t *testing.T) {
		m := NewMetrics(prometheus.NewPedanticRegistry())
		f := newFakeRuntime()
		f.streaming = true
		f.images["sha256:a"] = &runtimeapi.Image{Id: "sha256:a"}
		f.images["sha256:b"] = &runtimeapi.Image{Id: "sha256:b"}
		c := dialFake(t, f, Options{Metrics: m})
		if _, err := c.ListImages(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := count(m, "StreamImages", "OK"); got != 1 {
			t.Errorf("nodegc_cri_requests_total{method=StreamImages,code=OK} = %v, want 1", got)
		}
		if got := count(m, "StreamImages", "Canceled"); got != 0 {
			t.Errorf("a stream read to its end also counted Canceled (%v) when its context ended", got)
		}
	})

	t.Run("event stream ended by its caller", func(t *testing.T) {
		m := NewMetrics(prometheus.NewPedanticRegistry())
		c := dialFake(t, newFakeRuntime(), Options{Metrics: m})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- c.WatchContainerEvents(ctx, cancel, func(*runtimeapi.ContainerEventResponse) {}) }()
		<-done
		testbed.WaitFor(t, 10*time.Second, "the event stream to be counted", func() bool { return count(m, "GetContainerEvents", "Canceled") == 1 })
		if got := count(m, "GetContainerEvents", "OK"); got != 0 {
			t.Errorf("nodegc_cri_requests_total{method=GetContainerEvents,code=OK} = %v, want 0", got)
		}
	})

	t.Run("abandoned", func(t *testing.T) {
		m := NewMetrics(prometheus.NewPedanticRegistry())
		f := newFakeRuntime()
		f.streaming = true
		f.images["sha256:a"] = &runtimeapi.Image{Id: "sha256:a"}
		c := dialFake(t, f, Options{Metrics: m})
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if _, err := c.images.StreamImages(ctx, &runtimeapi.StreamImagesRequest{}); err != nil {
			t.Fatal(err)
		}
		// Never read: the call ends with its context.
		testbed.WaitFor(t, 10*time.Second, "the abandoned stream to be counted", func() bool { return count(m, "StreamImages", "DeadlineExceeded") == 1 })
		if got := count(m, "StreamImages", "OK"); got != 0 {
			t.Errorf("nodegc_cri_requests_total{method=StreamImages,code=OK} = %v, want 0", got)
		}
	})
}

// TestNoEventStreamFromASharedQueue: containerd before 2.0 hands each
// container event to one of its subscribers only (they all read one queue),
// so subscribing would take events from the kubelet's evented PLEG, and
// miss those the kubelet takes. nodegc does not subscribe there: the error
// wraps ErrUnsupported (callers poll) and names why. containerd 2.x, and
// other runtimes, are subscribed.
func TestNoEventStreamFromASharedQueue(t *testing.T) {
	for _, tc := range []struct {
		name, version string
		subscribe     bool
	}{
		{"containerd", "v1.7.29", false},
		{"containerd", "1.7.20~ds1", false},
		{"containerd", "v2.0.0", true},
		{"containerd", "v2.4.2", true},
		{"containerd", "not-a-version", true},
		{"cri-o", "1.29.0", true},
		{"cri-o", "1.28.0", true},
		{"cri-o", "1.27.4", false},
		{"cri-o", "1.26.0-rc.1", false},
	} {
		t.Run(tc.name+" "+tc.version, func(t *testing.T) {
			f := newFakeRuntime()
			f.name, f.version = tc.name, tc.version
			f.eventsOff = true // a stream, when opened, ends at once
			c := dialFake(t, f, Options{})
			err := c.WatchContainerEvents(t.Context(), nil, func(*runtimeapi.ContainerEventResponse) {})
			if !errors.Is(err, ErrUnsupported) {
				t.Fatalf("WatchContainerEvents = %v, want ErrUnsupported", err)
			}
			if opened := f.callCount("GetContainerEvents") > 0; opened != tc.subscribe {
				t.Errorf("stream opened %v, want %v (err %v)", opened, tc.subscribe, err)
			}
			if !tc.subscribe && !strings.Contains(err.Error(), "one of its subscribers") {
				t.Errorf("the error does not say why: %v", err)
			}
		})
	}
}

// TestRefreshVersion: after a runtime is upgraded in place, RefreshVersion
// says that another version answers and keeps it; what the client decides
// from the version (whether the event stream may be read) follows it.
func TestRefreshVersion(t *testing.T) {
	f := newFakeRuntime()
	f.name, f.version = "containerd", "v1.7.29"
	f.eventsOff = true
	c := dialFake(t, f, Options{})
	if _, changed, err := c.RefreshVersion(t.Context()); err != nil || changed {
		t.Fatalf("RefreshVersion with the same runtime: changed %v, err %v; want unchanged", changed, err)
	}
	c.WatchContainerEvents(t.Context(), nil, func(*runtimeapi.ContainerEventResponse) {})
	if n := f.callCount("GetContainerEvents"); n != 0 {
		t.Fatalf("containerd 1.7's event stream opened %d times", n)
	}

	f.mu.Lock()
	f.version = "v2.1.0"
	f.mu.Unlock()
	v, changed, err := c.RefreshVersion(t.Context())
	if err != nil || !changed || v.GetRuntimeVersion() != "v2.1.0" {
		t.Fatalf("RefreshVersion after the upgrade: %v, changed %v, err %v; want v2.1.0, changed", v, changed, err)
	}
	if got := c.RuntimeVersion().GetRuntimeVersion(); got != "v2.1.0" {
		t.Errorf("RuntimeVersion after the refresh = %q, want v2.1.0", got)
	}
	c.WatchContainerEvents(t.Context(), nil, func(*runtimeapi.ContainerEventResponse) {})
	if n := f.callCount("GetContainerEvents"); n != 1 {
		t.Errorf("containerd 2.1's event stream opened %d times, want 1", n)
	}
	if _, changed, _ := c.RefreshVersion(t.Context()); changed {
		t.Error("RefreshVersion says changed twice for one upgrade")
	}
}

// TestEventStreamAsksTheVersion: a stream reopened after the runtime was
// downgraded in place (containerd 2.x to 1.7, whose event queue the kubelet
// shares) is not subscribed, though the client was dialed to 2.x and no
// one has refreshed its version yet.
func TestEventStreamAsksTheVersion(t *testing.T) {
	f := newFakeRuntime()
	f.name, f.version = "containerd", "v2.1.0"
	f.eventsOff = true
	c := dialFake(t, f, Options{})
	f.mu.Lock()
	f.version = "v1.7.29"
	f.mu.Unlock()
	err := c.WatchContainerEvents(t.Context(), nil, func(*runtimeapi.ContainerEventResponse) {})
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "v1.7.29") {
		t.Errorf("WatchContainerEvents after the downgrade = %v, want ErrUnsupported naming v1.7.29", err)
	}
	if n := f.callCount("GetContainerEvents"); n != 0 {
		t.Errorf("containerd 1.7's event stream opened %d times", n)
	}
	if got := c.RuntimeVersion().GetRuntimeVersion(); got != "v2.1.0" {
		t.Errorf("RuntimeVersion = %q, want v2.1.0 until RefreshVersion (which says the runtime changed)", got)
	}
}

// TestDialBackoffIsCapped: however long the runtime was down (however
// many attempts failed), the next attempt is at most 3s, jittered by 20%,
// after the last: what the agent's restart test relies on for a runtime
// redialed soon after its return, and what gRPC's default (a 2 minute
// cap) would break. The delays are gRPC's exponential backoff (its
// internal/backoff.Exponential) computed from dialBackoff, without a clock.
func TestDialBackoffIsCapped(t *testing.T) {
	bo := dialBackoff()
	if bo.BaseDelay != 100*time.Millisecond || bo.MaxDelay != 3*time.Second || bo.Multiplier <= 1 || bo.Jitter < 0 || bo.Jitter > 0.2 {
		t.Fatalf("dialBackoff() = %+v, want base 100ms, cap 3s, a factor above 1, jitter at most 20%%", bo)
	}
	worst := func(retries int) time.Duration {
		if retries == 0 {
			return bo.BaseDelay
		}
		d, limit := float64(bo.BaseDelay), float64(bo.MaxDelay)
		for d < limit && retries > 0 {
			d *= bo.Multiplier
			retries--
		}
		d = min(d, limit)
		return time.Duration(d * (1 + bo.Jitter))
	}
	var waited time.Duration
	reached := -1
	for retries := range 1000 {
		d := worst(retries)
		if d > 3600*time.Millisecond {
			t.Fatalf("after %d failed attempts (%v down), the next is up to %v later, want at most 3.6s", retries, waited, d)
		}
		if reached < 0 && d == time.Duration(float64(bo.MaxDelay)*(1+bo.Jitter)) {
			reached = retries
		}
		waited += d
	}
	if reached < 0 || reached > 10 {
		t.Errorf("the cap is reached after %d attempts, want within 10 (a few seconds down)", reached)
	}
}

// TestRuntimeStartingIsUnavailable: containerd 1.x answers every CRI call
// with "server is not initialized yet" while its CRI plugin recovers after
// a start, as a plain error, which gRPC sends as Unknown; containerd 2.x
// sends Unavailable. The client makes it Unavailable, message kept, for a
// unary call and a streamed list alike, so that the callers treat it as a
// runtime not reachable yet (IsUnavailable: the image GC retries within
// 10s) and the request metrics count it so. Another Unknown stays one.
func TestRuntimeStartingIsUnavailable(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	f := newFakeRuntime()
	f.streaming = true
	f.images["sha256:a"] = &runtimeapi.Image{Id: "sha256:a"}
	c := dialFake(t, f, Options{Metrics: m})
	ctx := t.Context()
	f.mu.Lock()
	f.listErr = errors.New("server is not initialized yet")
	f.removeErr = errors.New("server is not initialised, or something else")
	f.mu.Unlock()
	// Images first: a runtime without StreamContainers (this fake) has
	// the client list unary from then on.
	_, listImages := c.ListImages(ctx)
	_, listContainers := c.ListContainers(ctx, nil)
	for call, err := range map[string]error{"ListContainers": listContainers, "ListImages (streamed)": listImages} {
		if !IsUnavailable(err) || status.Code(err) != codes.Unavailable || !strings.HasSuffix(err.Error(), "desc = server is not initialized yet") {
			t.Errorf("%s while the runtime starts: %v (IsUnavailable %v); want Unavailable, the message kept", call, err, IsUnavailable(err))
		}
	}
	if err := c.RemoveImage(ctx, "sha256:a"); status.Code(err) != codes.Unknown {
		t.Errorf("RemoveImage failing otherwise: %v; want it Unknown still", err)
	}
	for method, code := range map[string]string{"ListContainers": "Unavailable", "StreamImages": "Unavailable", "RemoveImage": "Unknown"} {
		if got := testutil.ToFloat64(m.requests.WithLabelValues(method, code)); got != 1 {
			t.Errorf("nodegc_cri_requests_total{method=%s,code=%s} = %v, want 1", method, code, got)
		}
	}
}

// TestImageEndpointSameSocketSpelledOtherwise: an image endpoint that names
// the runtime's socket in another spelling (a path, or unix:// with a
// path not cleaned) shares the runtime's connection: one connection, so a
// restart is counted once in nodegc_cri_reconnects_total.
func TestImageEndpointSameSocketSpelledOtherwise(t *testing.T) {
	f := newFakeRuntime()
	ep := f.serve(t)
	path := strings.TrimPrefix(ep, "unix://")
	for _, image := range []string{path, "unix://" + filepath.Dir(path) + "/./" + filepath.Base(path)} {
		c := dialFake(t, f, Options{RuntimeEndpoint: ep, ImageEndpoint: image})
		if len(c.conns) != 1 {
			t.Errorf("image endpoint %q beside %q: %d connections; want 1", image, ep, len(c.conns))
		}
	}
	other := newFakeRuntime()
	if c := dialFake(t, f, Options{RuntimeEndpoint: ep, ImageEndpoint: other.serve(t)}); len(c.conns) != 2 {
		t.Errorf("another socket: %d connections; want 2", len(c.conns))
	}
}
