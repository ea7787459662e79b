package agent_test

import (
	"os"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/internal/testbed/registry"
)

// TestImageGCGoesOnAfterRuntimeRestart, on each real containerd:
// containerd is killed and started again with the same config under a
// running agent. From the loss of the connection the image GC removes
// nothing until the agent read the runtime's config again (a restart may
// have changed its sandbox image); as nothing changed, the agent confirms
// it on the new connection rather than building the GC again, and the
// image GC goes on: an image pulled after the restart is removed, and
// nodegc_image_gc_removals_held is back at 0.
func TestImageGCGoesOnAfterRuntimeRestart(t *testing.T) {
	testbed.RequireRoot(t)
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			ctx := t.Context()
			n := node.Start(t, node.Options{Version: v})
			cfg := nodeConfig(t, n.Endpoint, t.TempDir(), nil, []string{"highThresholdPercent: 1", "lowThresholdPercent: 0",
				"minimumGCAge: 0s", "diskCheckInterval: 1s"}, nil)
			p := startNodegc(t, "reconnect-images", cfg, "--owner-gc=off")
			testbed.WaitFor(t, time.Minute, "the first image GC run", func() bool {
				return p.metric("nodegc_image_gc_runs_total") > 0
			})
			if err := n.Kill9(); err != nil {
				t.Fatal(err)
			}
			if err := n.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := p.logLine("Reconnected to the container runtime"); err != nil {
				t.Fatal(err)
			}
			img, err := n.Registry.Push(ctx, registry.ImageSpec{Repo: "reconnect/later", Tag: "v1"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := n.PullImage(ctx, img.Ref); err != nil {
				t.Fatal(err)
			}
			testbed.WaitFor(t, time.Minute, "the image pulled after the restart to be removed", func() bool {
				r, err := n.Images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: img.ID()}})
				return err == nil && r.GetImage() == nil
			})
			if held := p.metric("nodegc_image_gc_removals_held", "reason=runtime_reconnected"); held != 0 {
				t.Errorf("nodegc_image_gc_removals_held{reason=runtime_reconnected} = %v after a removal, want 0", held)
			}
			log, err := os.ReadFile(p.logPath)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(log), "building the image and container GC again") {
				t.Error("the agent built the GC again after a restart that changed nothing")
			}
		})
	}
}
