package agent_test

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/internal/testbed/registry"
)

// TestRuntimeReplacedUnderAgent: the runtime behind the endpoint is
// replaced by another version while the agent runs, as an in-place upgrade
// does (containerd 1.6 stops; containerd 2.x answers at the same path). What
// the agent set up for the old runtime must not outlive it: the agent builds
// its image and container GC again for the new one, which here has a
// container event stream that containerd 1.6 did not have (the agent is
// configured to follow it: imageGC.containerEvents). Before, the
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
	// The event stream on, where the runtime has it (imageGC.containerEvents).
	cfg := nodeConfig(t, "unix://"+link, stateDir, nil, []string{"highThresholdPercent: 100", "containerEvents: true"}, []string{"period: 1s"})
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
	// Seen by a poll (every diskCheckInterval, 1s) and saved by the old
	// loops, before the old runtime goes.
	testbed.WaitFor(t, 30*time.Second, "the use on the old runtime in the state file", func() bool {
		lu, ok := savedLastUsed(stateDir, img.ID())
		return ok && !lu.Before(used.Add(-2*time.Second))
	})

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

// TestRuntimeReconfiguredUnderAgent: the operator pulls a new sandbox
// image, names it in containerd's config with its digest (as operators pin
// it) and restarts containerd (same version, same socket), as air-gapped
// nodes must do it. From then on the new image is the runtime's sandbox
// image, which nodegc never removes, though no sandbox runs it yet and
// containerd 1.x does not pin it (it pins an image pulled under the name
// configured at the time): only nodegc reading the runtime's config again
// keeps it. Before, the agent held on to the sandbox image it read at its
// start, and removed the new one once minimumGCAge had passed.
//
// containerd 1.6 only: containerd 2.x names its sandbox image nowhere CRI
// shows (its image service's config is not in its status). It pins, at its
// start, an image listed under exactly the name configured; nodegc keeps
// the image its sandboxes last ran.
func TestRuntimeReconfiguredUnderAgent(t *testing.T) {
	ctx := t.Context()
	n := node.Start(t, node.Options{Version: testbed.Containerd16})
	old := n.SandboxImage
	next, err := n.Registry.Push(ctx, registry.ImageSpec{Repo: "reconfigured/pause", Tag: "3.10"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.PullImage(ctx, next.Ref); err != nil {
		t.Fatal(err)
	}
	const minAge = 15 * time.Second
	cfg := nodeConfig(t, n.Endpoint, t.TempDir(), nil, []string{"highThresholdPercent: 1", "lowThresholdPercent: 0",
		"minimumGCAge: " + minAge.String(), "diskCheckInterval: 1s"}, nil)
	began := time.Now()
	p := startNodegc(t, "reconfigured", cfg, "--owner-gc=off")
	testbed.WaitFor(t, time.Minute, "the first image GC run", func() bool {
		return p.metric("nodegc_image_gc_runs_total") > 0
	})
	restart := time.Now()
	if err := n.RestartWithSandboxImage(ctx, next.Ref+"@"+next.ManifestDigest); err != nil {
		t.Fatal(err)
	}
	t.Logf("containerd restarted in %v with sandbox image %s (was %s)", time.Since(restart).Round(time.Millisecond), n.SandboxImage, old)
	// Both images are old enough from began+minAge on; two runs after
	// that have had their chance to remove them.
	time.Sleep(time.Until(began.Add(minAge + time.Second)))
	runs := p.metric("nodegc_image_gc_runs_total")
	testbed.WaitFor(t, time.Minute, "two image GC runs with both images old enough", func() bool {
		return p.metric("nodegc_image_gc_runs_total") >= runs+2
	})
	t.Logf("%v after the start: %v image GC runs since the last build", time.Since(began).Round(time.Millisecond), p.metric("nodegc_image_gc_runs_total"))
	status := func(ref string) *runtimeapi.Image {
		t.Helper()
		r, err := n.Images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetImage()
	}
	switch img := status(next.Ref); {
	case img == nil:
		t.Errorf("the runtime's new sandbox image %s was removed", n.SandboxImage)
	case img.GetPinned():
		t.Errorf("containerd pinned %s: this test needs a sandbox image only nodegc keeps", n.SandboxImage)
	}
	// The old one is an image like any other now, unless the runtime
	// pinned it (it was pulled under its configured name).
	if img := status(old); img != nil && !img.GetPinned() {
		t.Errorf("the runtime's former sandbox image %s, not pinned and no longer named in its config, was kept", old)
	}
	line, err := p.logLine("configuration changed")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("agent: %s", line)
}
