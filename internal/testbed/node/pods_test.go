package node

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// failingRuntime fails the first failures calls to stop or remove a pod
// sandbox with err, as containerd 1.6 does when a container's process exits
// while it kills it, then succeeds.
type failingRuntime struct {
	runtimeapi.RuntimeServiceClient // nil: any other call panics
	failures                        int
	err                             error
	stops, removes                  int
}

func (f *failingRuntime) fail(calls *int) error {
	*calls++
	if *calls <= f.failures {
		return f.err
	}
	return nil
}

func (f *failingRuntime) StopPodSandbox(context.Context, *runtimeapi.StopPodSandboxRequest, ...grpc.CallOption) (*runtimeapi.StopPodSandboxResponse, error) {
	return &runtimeapi.StopPodSandboxResponse{}, f.fail(&f.stops)
}

func (f *failingRuntime) RemovePodSandbox(context.Context, *runtimeapi.RemovePodSandboxRequest, ...grpc.CallOption) (*runtimeapi.RemovePodSandboxResponse, error) {
	return &runtimeapi.RemovePodSandboxResponse{}, f.fail(&f.removes)
}

// errTTRPCClosed is the error containerd 1.6 returned in CI when a pod was
// stopped 20 ms after its container, running "exit 1", had started.
var errTTRPCClosed = errors.New(`rpc error: code = Unknown desc = failed to stop container "c1cc": failed to kill container "c1cc": ttrpc: closed: unknown`)

// TestStopRemovePodRetry: StopPod and RemovePod try a failed call again, as
// kubelet does at the pod's next sync (both calls are idempotent), and give
// up with the last error once the tries are spent.
func TestStopRemovePodRetry(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		name     string
		failures int
		wantErr  bool
	}{
		{"succeeds at once", 0, false},
		{"fails once, then succeeds", 1, false},
		{"fails on every try", podCallBackoff.Steps, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &failingRuntime{failures: tc.failures, err: errTTRPCClosed}
			n := &Node{Runtime: rt, pods: map[string]*runtimeapi.PodSandboxConfig{}}
			for _, c := range []struct {
				what  string
				call  func(context.Context, string) error
				calls *int
			}{{"StopPod", n.StopPod, &rt.stops}, {"RemovePod", n.RemovePod, &rt.removes}} {
				err := c.call(ctx, "p1")
				if gotErr := err != nil; gotErr != tc.wantErr {
					t.Fatalf("%s: err = %v, want an error: %v", c.what, err, tc.wantErr)
				}
				if tc.wantErr && !strings.Contains(err.Error(), "ttrpc: closed") {
					t.Errorf("%s: err = %v, want the runtime's last error", c.what, err)
				}
				want := min(tc.failures+1, podCallBackoff.Steps)
				if *c.calls != want {
					t.Errorf("%s: %d calls to the runtime, want %d", c.what, *c.calls, want)
				}
			}
		})
	}
}

// TestStopPodGivesUpWithContext: a try is not made once the context ended.
func TestStopPodGivesUpWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	rt := &failingRuntime{failures: podCallBackoff.Steps, err: errTTRPCClosed}
	n := &Node{Runtime: rt}
	if err := n.StopPod(ctx, "p1"); err == nil {
		t.Fatal("StopPod with an ended context: no error")
	}
	if rt.stops > 1 {
		t.Errorf("%d calls to the runtime after the context ended, want at most 1", rt.stops)
	}
}
