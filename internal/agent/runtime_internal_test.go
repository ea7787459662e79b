package agent

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	"k8s.io/utils/clock"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/config"
)

// TestExplainSocketSymlink: a runtime socket path that is a symbolic link
// whose target is not reachable in nodegc's container (containerd's socket
// linked to k3s's, with only /run/containerd mounted) is named as such,
// with its target and what to do, not as "no such file or directory",
// which an operator who sees the socket on the host cannot act on. A
// relative link is resolved from its directory; a missing path, a file
// that is no socket and a link to a live socket keep their messages.
func TestExplainSocketSymlink(t *testing.T) {
	dir := t.TempDir()
	explain := func(path string) string {
		return newRuntimeLink(klog.Background(), "unix://"+path, clock.RealClock{}).explain()
	}

	dangling := filepath.Join(dir, "containerd.sock")
	if err := os.Symlink("/run/k3s/containerd/containerd.sock", dangling); err != nil {
		t.Fatal(err)
	}
	got := explain(dangling)
	for _, want := range []string{
		dangling + " is a symbolic link to /run/k3s/containerd/containerd.sock, which is not reachable in nodegc's container",
		"set containerRuntimeEndpoint to unix:///run/k3s/containerd/containerd.sock and mount its directory, /run/k3s/containerd",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("dangling link: explain() = %q, want it to contain %q", got, want)
		}
	}
	if strings.Contains(got, "no such file or directory") {
		t.Errorf("dangling link: explain() = %q says the socket does not exist", got)
	}

	relative := filepath.Join(dir, "relative.sock")
	if err := os.Symlink("../elsewhere/runtime.sock", relative); err != nil {
		t.Fatal(err)
	}
	if got, want := explain(relative), "is a symbolic link to "+filepath.Join(filepath.Dir(dir), "elsewhere", "runtime.sock"); !strings.Contains(got, want) {
		t.Errorf("relative link: explain() = %q, want it to contain %q", got, want)
	}

	if got := explain(filepath.Join(dir, "absent.sock")); !strings.Contains(got, "no such file or directory") {
		t.Errorf("missing path: explain() = %q, want the stat error", got)
	}
	file := filepath.Join(dir, "file.sock")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := explain(file); !strings.Contains(got, "is not a socket") {
		t.Errorf("regular file: explain() = %q, want it named no socket", got)
	}

	live := filepath.Join(dir, "live.sock")
	l, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	linked := filepath.Join(dir, "linked.sock")
	if err := os.Symlink(live, linked); err != nil {
		t.Fatal(err)
	}
	if got := explain(linked); got != "" {
		t.Errorf("link to a live socket: explain() = %q, want nothing", got)
	}
}

// TestReadyzSaysWhyTheRuntimeIsNotConnected: while the first dial to the
// runtime fails, /readyz says why (the last dial's error), which attempt
// failed and when the next one is, beside what the socket path holds. A
// socket that serves no CRI v1 RuntimeService (containerd with its cri
// plugin disabled, as Docker's containerd is, while the kubelet uses
// cri-dockerd) is named as such, with the field to change.
func TestReadyzSaysWhyTheRuntimeIsNotConnected(t *testing.T) {
	for name, c := range map[string]struct {
		endpoint string
		want     []string
	}{
		"no CRI service": {testbed.ServeCRI(t, nil), []string{
			"container runtime not connected yet: ", "Unimplemented",
			"this socket serves no CRI v1 RuntimeService", "set containerRuntimeEndpoint to the kubelet's --container-runtime-endpoint",
			"attempt 1", "next in ",
		}},
		"no socket": {"unix://" + filepath.Join(t.TempDir(), "absent.sock"), []string{
			"container runtime not connected yet: ", "does not answer CRI v1 Version", "attempt 1", "next in ", "no such file or directory",
		}},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := config.Defaulted()
			cfg.ContainerRuntimeEndpoint = c.endpoint
			cfg.StateDirectory = t.TempDir()
			st, ctx := runNodeGC(t, cfg, prometheus.NewRegistry()), t.Context()
			var got string
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				if err := st.ready(ctx); err != nil {
					got = err.Error()
				}
				if strings.Contains(got, "attempt") {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Logf("/readyz: %s", got)
			for _, want := range c.want {
				if !strings.Contains(got, want) {
					t.Errorf("/readyz says %q; want it to contain %q", got, want)
				}
			}
		})
	}
}

// criConnected reads nodegc_cri_connected from reg (-1 when it is not
// there).
func criConnected(t *testing.T, reg prometheus.Gatherer) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := testbed.MetricSum(mfs, "nodegc_cri_connected"); ok {
		return v
	}
	return -1
}

// runNodeGC runs a node GC on cfg until the test ends, its metrics in reg
// and its /readyz in the status returned.
func runNodeGC(t *testing.T, cfg *config.NodeGCConfiguration, reg *prometheus.Registry) *status {
	t.Helper()
	st := newStatus(reg)
	n, err := newNodeGC(Options{Config: cfg, NodeName: "n"}, nil, reg, nil, st)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return st
}

// secondDialFailed matches /readyz once a second dial, or a later one, has
// failed ("attempt 1 failed, attempt 2 under way" does not).
var secondDialFailed = regexp.MustCompile(`attempt ([2-9]|\d\d+)(, next in| failed)`)

// TestConnectedGaugeZeroWhileDialsFail: a socket that accepts gRPC
// connections but serves no CRI v1 (Docker Engine's containerd, whose cri
// plugin is off, on a cri-dockerd node; a containerd too old for CRI v1)
// fails every dial at Version, and node GC never starts. nodegc_cri_connected,
// which NodegcRuntimeUnreachable fires on, must say 0 then, as it does for a
// missing socket. Before, each failed dial's connection went READY before
// its Version failed, the gauge kept the 1 the connection's watcher set, and
// the critical alert never fired (review node r9 #1).
func TestConnectedGaugeZeroWhileDialsFail(t *testing.T) {
	cfg := config.Defaulted()
	cfg.ContainerRuntimeEndpoint = testbed.ServeCRI(t, nil) // gRPC, no CRI service
	cfg.StateDirectory = t.TempDir()
	reg := prometheus.NewRegistry()
	st := runNodeGC(t, cfg, reg)
	var why string
	testbed.WaitFor(t, 20*time.Second, "two dials failed", func() bool {
		err := st.ready(t.Context())
		if err != nil {
			why = err.Error()
		}
		return err != nil && secondDialFailed.MatchString(why)
	})
	if !strings.Contains(why, "this socket serves no CRI v1 RuntimeService") {
		t.Errorf("/readyz says %q; want the dial's failure", why)
	}
	if v := criConnected(t, reg); v != 0 {
		t.Errorf("nodegc_cri_connected = %v while every dial fails (no CRI v1 on the socket), want 0: NodegcRuntimeUnreachable cannot fire", v)
	}
}

// imagesOnly is a CRI image service that holds no image, and nothing else.
type imagesOnly struct {
	runtimeapi.UnimplementedImageServiceServer
}

func (imagesOnly) ListImages(context.Context, *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	return &runtimeapi.ListImagesResponse{}, nil
}

func (imagesOnly) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{}, nil
}

// TestReadyzAsksASeparateImageService: with an imageServiceEndpoint apart
// from the runtime's (a stargz or Nydus CRI image-service proxy), /readyz
// asks the image service too, and names its endpoint when it does not
// answer. Before, it asked the runtime's Version only and stayed ready while
// the image service was gone and every image GC call failed (review node r9
// #2).
func TestReadyzAsksASeparateImageService(t *testing.T) {
	dir, err := os.MkdirTemp("", "img") // short: a socket path has at most 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "img.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterImageServiceServer(srv, imagesOnly{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	cfg := config.Defaulted()
	cfg.ContainerRuntimeEndpoint = testbed.ServeCRI(t, testbed.VersionOnly{Runtime: "fake", RuntimeVersion: "1"})
	cfg.ImageServiceEndpoint = "unix://" + sock
	cfg.StateDirectory = t.TempDir()
	reg := prometheus.NewRegistry()
	st := runNodeGC(t, cfg, reg)
	testbed.WaitFor(t, 20*time.Second, "connected to both services, and ready", func() bool {
		return criConnected(t, reg) == 1 && st.ready(t.Context()) == nil
	})

	srv.Stop() // the image service goes away, its socket with it
	os.Remove(sock)
	testbed.WaitFor(t, 20*time.Second, "the image service's loss seen", func() bool { return criConnected(t, reg) == 0 })
	err = st.ready(t.Context())
	if err == nil {
		t.Fatal("/readyz is ready while the image service is gone (nodegc_cri_connected 0): every image GC call fails")
	}
	t.Logf("/readyz: %v", err)
	if want := "image service at " + cfg.ImageServiceEndpoint + " does not answer"; !strings.Contains(err.Error(), want) {
		t.Errorf("/readyz says %q; want it to contain %q", err, want)
	}
}

// TestConnectionLossNamesTheImageService: with an image service of its
// own (imageServiceEndpoint), a lost connection may be that service's: the
// loss and the return name both endpoints, not the runtime's alone (review
// runtime r7 F6).
func TestConnectionLossNamesTheImageService(t *testing.T) {
	for name, tc := range map[string]struct {
		imageEndpoint string
		want          []string
	}{
		"one service": {want: []string{
			`"Lost the connection to the container runtime; redialing, node GC fails until it is back" endpoint="unix:///run/rt.sock"`,
			`"Reconnected to the container runtime" endpoint="unix:///run/rt.sock"`}},
		"a separate image service": {imageEndpoint: "unix:///run/img.sock", want: []string{
			`"Lost the connection to the container runtime or to its image service; redialing, node GC fails until it is back" endpoint="unix:///run/rt.sock" imageEndpoint="unix:///run/img.sock"`,
			`reconnects=1 imageEndpoint="unix:///run/img.sock"`}},
	} {
		t.Run(name, func(t *testing.T) {
			var logs strings.Builder
			r := newRuntimeLink(textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&logs))), "unix:///run/rt.sock", clock.RealClock{})
			r.imageEndpoint = tc.imageEndpoint
			r.changed(false)
			r.changed(true)
			for _, want := range tc.want {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("the log does not contain %s:\n%s", want, logs.String())
				}
			}
		})
	}
}
