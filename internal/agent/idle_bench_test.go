package agent_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/internal/testbed/nodegcproc"
	"github.com/nodegc/nodegc/internal/testbed/registry"
)

// idleWindow is how long BenchmarkIdleAgent watches the agent.
const idleWindow = 60 * time.Second

// BenchmarkIdleAgent measures what the agent costs a node with nothing to
// collect: `nodegc run` with the default configuration (a disk check every
// second), node-only, on a real containerd with a few images and a running
// pod, for 60 s after a 10 s warm-up. It reports the agent's CPU in percent
// of one core (user + system, from /proc/PID/stat) and its resident memory
// at the end (VmRSS) and at its peak (VmHWM). "events": containerd 2.x, last-used
// times from the container event stream; "polling": containerd 1.6, which
// has none, so containers are also listed every second. Goal: under 0.5%
// of a core.
func BenchmarkIdleAgent(b *testing.B) {
	for _, tc := range []struct {
		name    string
		version testbed.ContainerdVersion
	}{{"events", testbed.Containerd2}, {"polling", testbed.Containerd16}} {
		b.Run(tc.name, func(b *testing.B) {
			testbed.RequireRoot(b)
			n := node.Start(b, node.Options{Version: tc.version, SmallFS: 256 << 20})
			ctx := b.Context()
			for i := range 5 {
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
				}
			}
			bin, err := nodegcproc.Build()
			if err != nil {
				b.Fatal(err)
			}
			dir := b.TempDir()
			cfgText := fmt.Sprintf("apiVersion: nodegc.io/v1alpha1\nkind: NodeGCConfiguration\ncontainerRuntimeEndpoint: %s\nstateDirectory: %s\n"+
				"containerGC:\n  podLogsDirectory: %s\n  containerLogsDirectory: %s\n", n.Endpoint, filepath.Join(dir, "state"), b.TempDir(), b.TempDir())
			cfg, err := nodegcproc.WriteConfig(filepath.Join(dir, "config.yaml"), cfgText)
			if err != nil {
				b.Fatal(err)
			}
			a, err := nodegcproc.Start(bin, cfg, filepath.Join(dir, "nodegc.log"), []string{"NODE_NAME=idle-node"}, "--owner-gc=off")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { a.Stop(0) })
			var cpu float64
			for b.Loop() {
				time.Sleep(10 * time.Second) // start-up: dial, first listings, state file
				t0, err := cpuTicks(a.PID())
				if err != nil {
					b.Fatal(err)
				}
				time.Sleep(idleWindow)
				t1, err := cpuTicks(a.PID())
				if err != nil {
					b.Fatal(err)
				}
				cpu = float64(t1-t0) / 100 / idleWindow.Seconds() * 100 // USER_HZ is 100 on Linux
			}
			rss, hwm := memKiB(b, a.PID(), "VmRSS:"), memKiB(b, a.PID(), "VmHWM:")
			b.ReportMetric(cpu, "%cpu")
			b.ReportMetric(float64(rss)/1024, "RSS-MiB")
			b.ReportMetric(float64(hwm)/1024, "peakRSS-MiB")
			b.ReportMetric(0, "ns/op") // one 70 s observation: ns/op says nothing
			if a.Exited() {
				b.Fatalf("the agent exited during the window; log %s", a.LogPath)
			}
		})
	}
}

// cpuTicks returns a process's user + system time in clock ticks.
func cpuTicks(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count from its ")".
	fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+2:]))
	utime, err := strconv.ParseUint(fields[11], 10, 64) // field 14
	if err != nil {
		return 0, err
	}
	stime, err := strconv.ParseUint(fields[12], 10, 64) // field 15
	return utime + stime, err
}

// memKiB reads one "Vm...:  N kB" line of /proc/PID/status.
func memKiB(b *testing.B, pid int, key string) uint64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			v, err := strconv.ParseUint(strings.Fields(rest)[0], 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return v
		}
	}
	b.Fatalf("/proc/%d/status has no %s", pid, key)
	return 0
}
