package node

import (
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/registry"
)

// TestRestartAfterKill9 checks that a containerd restarted after SIGKILL
// re-attaches to its running containers, and works on tmpfs as the small
// filesystem.
func TestRestartAfterKill9(t *testing.T) {
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			ctx := t.Context()
			n := Start(t, Options{Version: v, SmallFS: 128 << 20, SmallFSKind: "tmpfs"})
			if n.FSKind != "tmpfs" {
				t.Fatalf("FSKind = %q, want tmpfs", n.FSKind)
			}
			img, err := n.Registry.Push(ctx, registry.ImageSpec{Repo: "restart/app"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := n.PullImage(ctx, img.Ref); err != nil {
				t.Fatal(err)
			}
			pod, err := n.RunPod(ctx, PodSpec{Name: "restart"})
			if err != nil {
				t.Fatal(err)
			}
			sleeper, err := n.RunContainer(ctx, pod, ContainerSpec{Name: "sleeper", Image: img.Ref})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := n.WaitContainerState(ctx, sleeper, runtimeapi.ContainerState_CONTAINER_RUNNING, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			oldPID := n.PID()
			if err := n.Kill9(); err != nil {
				t.Fatal(err)
			}
			if n.Alive() {
				t.Fatal("containerd alive after Kill9")
			}
			began := time.Now()
			if err := n.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			t.Logf("restart took %v", time.Since(began).Round(time.Millisecond))
			if n.PID() == oldPID {
				t.Errorf("PID unchanged (%d) after restart", oldPID)
			}
			if _, err := n.WaitContainerState(ctx, sleeper, runtimeapi.ContainerState_CONTAINER_RUNNING, 30*time.Second); err != nil {
				t.Fatalf("after restart: %v", err)
			}
			// The re-attached shim still controls the container.
			if err := n.StopContainer(ctx, sleeper, 10); err != nil {
				t.Fatal(err)
			}
			st, err := n.WaitContainerState(ctx, sleeper, runtimeapi.ContainerState_CONTAINER_EXITED, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if st.GetExitCode() != 0 {
				t.Errorf("sleeper stopped with exit code %d, want 0 (testbin exits 0 on SIGTERM)", st.GetExitCode())
			}
			if err := n.Teardown(); err != nil {
				t.Fatalf("teardown: %v", err)
			}
			if left := n.Leftovers(); len(left) > 0 {
				t.Errorf("left after teardown:\n%s", strings.Join(left, "\n"))
			}
		})
	}
}
