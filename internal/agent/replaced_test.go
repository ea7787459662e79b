package agent_test

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/internal/testbed/registry"
)

// TestRuntimeReplacedUnderAgent: the runtime behind the endpoint is
// replaced by another version while the agent runs, as an in-place upgrade
// does (containerd 1.6 stops; containerd 2.x answers at the same path). What
// the agent set up for the old runtime must not outlive it: the agent builds
// its image and container GC again for the new one, which here has a
// container event stream that containerd 1.6 did not have. Before, the
// agent kept polling as set up for containerd 1.6, for as long as it ran
// (and, the other way round, it would have read the event queue that
// containerd 1.7 shares with the kubelet).
func TestRuntimeReplacedUnderAgent(t *testing.T) {
	testbed.RequireRoot(t)
	ctx := t.Context()
	old := node.Start(t, node.Options{Version: testbed.Containerd16})
	replacement := node.Start(t, node.Options{Version: testbed.Containerd2, Registry: old.Registry})
	// One image on both, with one ID: its use on the old runtime must
	// survive the rebuild (saved by the old loops, read by the new ones).
	img, err := old.Registry.Push(ctx, registry.ImageSpec{Repo: "replaced/used", Tag: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []*node.Node{old, replacement} {
		if _, err := n.PullImage(ctx, img.Ref); err != nil {
			t.Fatal(err)
		}
	}
	// The endpoint is a link, pointed at one runtime's socket, then at the
	// other's: one path, as the agent sees an upgraded runtime.
	link := filepath.Join(t.TempDir(), "cri.sock")
	if err := os.Symlink(old.Socket, link); err != nil {
		t.Fatal(err)
	}
	stateDir := t.TempDir()
	cfg := nodeConfig(t, "unix://"+link, stateDir, nil, []string{"highThresholdPercent: 100"}, []string{"period: 1s"})
	p := startNodegc(t, "replaced", cfg, "--owner-gc=off")
	testbed.WaitFor(t, time.Minute, "the agent to poll containerd 1.6 for image usage", func() bool {
		return p.metric("nodegc_image_usage_source", "source=polling") == 1 && p.metric("nodegc_container_gc_runs_total") > 0
	})
	pod, err := old.RunPod(ctx, node.PodSpec{Name: "replaced", Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	used := time.Now()
	if _, err := old.RunContainer(ctx, pod, node.ContainerSpec{Name: "c", Image: img.Ref}); err != nil {
		t.Fatal(err)
	}
	// Seen by a poll (every diskCheckInterval, 1s).
	time.Sleep(3 * time.Second)

	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(replacement.Socket, link); err != nil {
		t.Fatal(err)
	}
	if err := old.Kill9(); err != nil {
		t.Fatal(err)
	}
	replaced := time.Now()
	testbed.WaitFor(t, 30*time.Second, "the agent to follow containerd 2.x's event stream", func() bool {
		return p.metric("nodegc_image_usage_source", "source=events") == 1
	})
	t.Logf("following the new runtime's event stream %v after the old one died", time.Since(replaced).Round(time.Millisecond))
	line, err := p.logLine("Another container runtime answers")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("agent: %s", line)
	// Both loops work on the new runtime, and the agent is healthy and
	// ready.
	runs := p.metric("nodegc_container_gc_runs_total")
	testbed.WaitFor(t, 30*time.Second, "container GC runs on the new runtime", func() bool {
		return p.metric("nodegc_container_gc_runs_total") > runs
	})
	for _, path := range []string{"/healthz", "/readyz"} {
		if code := status(t, p.healthz+path); code != http.StatusOK {
			t.Errorf("%s answered %d after the replacement, want 200:\n%s", path, code, p.body(t, p.healthz+path))
		}
	}
	if p.metric("nodegc_image_fs_capacity_bytes") <= 0 {
		t.Error("no image filesystem capacity after the replacement: the image GC does not read the disk")
	}
	sigterm(t, p)
	if got := readState(t, stateDir)[img.ID()].LastUsed; got.Before(used.Add(-2 * time.Second)) {
		t.Errorf("after the rebuild the state has last-used %v for %s, want its use on the old runtime at %v", got, img.ID(), used)
	}
}
