package agent_test

import (
	"cmp"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/internal/testbed/nodegcproc"
	procfs "github.com/nodegc/nodegc/internal/testbed/proc"
	"github.com/nodegc/nodegc/internal/testbed/registry"
)

// idleWindow is how long BenchmarkIdleAgent watches the agent.
const idleWindow = 60 * time.Second

// BenchmarkIdleAgent measures what the agent costs a node with nothing to
// collect: `nodegc run` with the default configuration (a disk check every
// second), node-only, on a real containerd with a few images and a running
// pod, for 60 s after a 10 s warm-up. It reports the agent's CPU in percent
// of one core (user + system, from /proc/PID/stat) and its resident memory
// at the end (VmRSS) and at its peak (VmHWM), and containerd's CPU over the
// same window (runtime-%cpu: what nodegc's calls cost it, beside its own
// idle work). "polling": containerd 2.x, containers listed every second for
// last-used times (the default); "events": containerd 2.x with
// imageGC.containerEvents, last-used times from the container event
// stream; "polling-1.6": containerd 1.6, which has no stream; "-100": 100
// more containers (created) in the pod, for what a listing of a busy
// node's containers costs; "-300images": 300 images rather than 5, for
// what polling costs on a node with many images (they are listed every 5
// minutes, not at every poll). Goal: under 0.5% of a core.
func BenchmarkIdleAgent(b *testing.B) {
	for _, tc := range []struct {
		name    string
		version testbed.ContainerdVersion
		imageGC string
		more    int // containers created besides the running one
		images  int // pulled (5 when 0)
	}{
		{"polling", testbed.Containerd2, "", 0, 0},
		{"events", testbed.Containerd2, "imageGC:\n  containerEvents: true\n", 0, 0},
		{"polling-1.6", testbed.Containerd16, "", 0, 0},
		{"polling-100", testbed.Containerd2, "", 100, 0},
		{"events-100", testbed.Containerd2, "imageGC:\n  containerEvents: true\n", 100, 0},
		{"polling-300images", testbed.Containerd2, "", 0, 300},
	} {
		b.Run(tc.name, func(b *testing.B) {
			testbed.RequireRoot(b)
			n := node.Start(b, node.Options{Version: tc.version, SmallFS: 256 << 20})
			ctx := b.Context()
			for i := range cmp.Or(tc.images, 5) {
				img, err := n.Registry.Push(ctx, registry.ImageSpec{Repo: fmt.Sprintf("idle/img%d", i)})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := n.PullImage(ctx, img.Ref); err != nil {
					b.Fatal(err)
				}
				if i == 0 {
					pod, err := n.RunPod(ctx, node.PodSpec{Name: "idle", Namespace: "default"})
					if err != nil {
						b.Fatal(err)
					}
					if _, err := n.RunContainer(ctx, pod, node.ContainerSpec{Name: "c", Image: img.Ref}); err != nil {
						b.Fatal(err)
					}
					for j := range tc.more {
						if _, err := n.CreateContainer(ctx, pod, node.ContainerSpec{Name: fmt.Sprintf("c%d", j), Image: img.Ref}); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			bin, err := nodegcproc.Build()
			if err != nil {
				b.Fatal(err)
			}
			dir := b.TempDir()
			cfgText := fmt.Sprintf("apiVersion: nodegc.io/v1alpha1\nkind: NodeGCConfiguration\ncontainerRuntimeEndpoint: %s\nstateDirectory: %s\n"+
				"%scontainerGC:\n  podLogsDirectory: %s\n  containerLogsDirectory: %s\n", n.Endpoint, filepath.Join(dir, "state"), tc.imageGC, b.TempDir(), b.TempDir())
			cfg, err := nodegcproc.WriteConfig(filepath.Join(dir, "config.yaml"), cfgText)
			if err != nil {
				b.Fatal(err)
			}
			a, err := nodegcproc.Start(bin, cfg, filepath.Join(dir, "nodegc.log"), []string{"NODE_NAME=idle-node", "GOMAXPROCS=" + nodegcproc.DeployedGOMAXPROCS}, "--owner-gc=off")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				if _, err := a.Stop(0); err != nil {
					b.Error(err)
				}
			})
			var cpu, runtimeCPU float64
			for b.Loop() {
				time.Sleep(10 * time.Second) // start-up: dial, first listings, state file
				t0, err := procfs.ReadCPUTime(a.PID())
				if err != nil {
					b.Fatal(err)
				}
				r0, err := procfs.ReadCPUTime(n.PID())
				if err != nil {
					b.Fatal(err)
				}
				time.Sleep(idleWindow)
				t1, err := procfs.ReadCPUTime(a.PID())
				if err != nil {
					b.Fatal(err)
				}
				r1, err := procfs.ReadCPUTime(n.PID())
				if err != nil {
					b.Fatal(err)
				}
				cpu = (t1 - t0).Seconds() / idleWindow.Seconds() * 100
				runtimeCPU = (r1 - r0).Seconds() / idleWindow.Seconds() * 100
			}
			mem, err := procfs.ReadMemory(a.PID())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(cpu, "%cpu")
			b.ReportMetric(runtimeCPU, "runtime-%cpu")
			b.ReportMetric(float64(mem.RSS)/(1<<20), "RSS-MiB")
			b.ReportMetric(float64(mem.HWM)/(1<<20), "peakRSS-MiB")
			b.ReportMetric(0, "ns/op") // one 70 s observation: ns/op says nothing
			if a.Exited() {
				b.Fatalf("the agent exited during the window; log %s", a.LogPath)
			}
		})
	}
}
