package node

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/registry"
)

// runWorkload runs two pods on n: one with two sleeping containers, one
// with a sleeping and an exited container. It returns the processes of the
// running containers.
func runWorkload(t *testing.T, n *Node) []proc {
	t.Helper()
	ctx := t.Context()
	img, err := n.Registry.Push(ctx, registry.ImageSpec{Repo: "leak/app", Layers: []registry.LayerSpec{{Seed: "leak", Size: 1 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.PullImage(ctx, img.Ref); err != nil {
		t.Fatal(err)
	}
	var running []proc
	for _, pod := range []struct {
		name       string
		containers []ContainerSpec
	}{
		{"two-sleepers", []ContainerSpec{{Name: "s1", Image: img.Ref}, {Name: "s2", Image: img.Ref}}},
		{"mixed", []ContainerSpec{{Name: "s", Image: img.Ref}, {Name: "x", Image: img.Ref, Args: []string{"exit", "0"}}}},
	} {
		podID, err := n.RunPod(ctx, PodSpec{Name: pod.name})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range pod.containers {
			id, err := n.RunContainer(ctx, podID, c)
			if err != nil {
				t.Fatal(err)
			}
			if c.Args != nil {
				if _, err := n.WaitContainerState(ctx, id, runtimeapi.ContainerState_CONTAINER_EXITED, 30*time.Second); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if _, err := n.WaitContainerState(ctx, id, runtimeapi.ContainerState_CONTAINER_RUNNING, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			pid, err := n.ContainerPID(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			running = append(running, waitTestbin(t, pid))
		}
	}
	return running
}

// waitTestbin returns the process pid once it runs testbin: right after
// StartContainer it may still be in runc's exec, when its command line
// reads empty.
func waitTestbin(t *testing.T, pid int) proc {
	t.Helper()
	var found []proc
	testbed.WaitFor(t, 10*time.Second, fmt.Sprintf("container process %d to run testbin", pid), func() bool {
		found = processes(func(p int, args []string) bool { return p == pid && strings.HasSuffix(args[0], "testbin") })
		return len(found) == 1
	})
	return found[0]
}

// TestTeardownLeavesNothing checks, for each containerd, that teardown
// leaves no directory, mount, loop device, cgroup, process or shim socket:
// with pods still running, and after containerd was SIGKILLed under
// running containers (so that only the hard sweep can clean up).
func TestTeardownLeavesNothing(t *testing.T) {
	for _, v := range testbed.ContainerdVersions {
		for _, kill9 := range []bool{false, true} {
			name := "containerd" + string(v) + "/running-pods"
			if kill9 {
				name = "containerd" + string(v) + "/after-kill9"
			}
			t.Run(name, func(t *testing.T) {
				n := Start(t, Options{Version: v, SmallFS: 64 << 20})
				if n.FSKind != "loop-ext4" {
					t.Errorf("small fs is %q, want loop-ext4 on this machine", n.FSKind)
				}
				running := runWorkload(t, n)
				shims := processes(func(_ int, args []string) bool { return isShimOf(args, n.Socket) })
				if len(shims) == 0 {
					t.Fatal("no shim process found for this node")
				}
				for _, s := range shims {
					// The sweep finds sockets of dead shims by this path.
					p := shimSocket(n.Socket, flagValue(s.args, "-namespace"), flagValue(s.args, "-id"), false)
					if _, err := os.Stat(p); err != nil {
						t.Errorf("shim %d: computed socket: %v", s.pid, err)
					}
				}
				watched := append(append([]proc{}, running...), shims...)
				containerd := processes(func(p int, _ []string) bool { return p == n.PID() })
				if len(containerd) != 1 {
					t.Fatalf("containerd process %d not found", n.PID())
				}
				watched = append(watched, containerd[0])

				if kill9 {
					if err := n.Kill9(); err != nil {
						t.Fatal(err)
					}
					for _, p := range append(running, shims...) {
						if !p.alive() {
							t.Errorf("process %d (%s) died with containerd; want shims and containers to outlive it", p.pid, strings.Join(p.args, " "))
						}
					}
				}

				began := time.Now()
				if err := n.Teardown(); err != nil {
					t.Fatalf("teardown: %v", err)
				}
				t.Logf("teardown took %v", time.Since(began).Round(time.Millisecond))
				if left := n.Leftovers(); len(left) > 0 {
					t.Errorf("left after teardown:\n%s", strings.Join(left, "\n"))
				}
				for _, p := range watched {
					if p.alive() {
						t.Errorf("process %d (%s) alive after teardown", p.pid, strings.Join(p.args, " "))
					}
				}
			})
		}
	}
}

// crashChildEnv makes TestCrashChild run: it is the test process that
// dies without teardown in TestSweepStaleAfterCrash.
const crashChildEnv = "NODEGC_TESTBED_CRASH_CHILD"

// TestCrashChild is not a test of its own: run by TestSweepStaleAfterCrash
// in a child process, it starts a node with a running container, prints
// the node's directory and kills itself, leaving everything behind.
func TestCrashChild(t *testing.T) {
	v := os.Getenv(crashChildEnv)
	if v == "" {
		return // only a helper process of TestSweepStaleAfterCrash
	}
	n := Start(t, Options{Version: testbed.ContainerdVersion(v), SmallFS: 64 << 20})
	runWorkload(t, n)
	os.Stdout.WriteString("NODE_DIR=" + n.Dir + "\n")
	os.Stdout.Sync()
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // wait for the signal
}

// TestSweepStaleAfterCrash checks that SweepStale, run by every Start,
// removes everything of a node whose test process was SIGKILLed with
// containers running.
func TestSweepStaleAfterCrash(t *testing.T) {
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			testbed.RequireRoot(t)
			testbed.Containerd(t, v)
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestCrashChild$", "-test.v")
			cmd.Env = append(os.Environ(), crashChildEnv+"="+string(v))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			var exitErr *exec.ExitError
			if !errors.As(err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("crash child: want death by SIGKILL, got %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
			}
			var dir string
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				if d, ok := strings.CutPrefix(sc.Text(), "NODE_DIR="); ok {
					dir = d
				}
			}
			if dir == "" {
				t.Fatalf("crash child printed no node directory:\n%s", out)
			}
			inst := instance{dir: dir}
			if left := leftovers(inst, nil); len(left) == 0 {
				t.Fatalf("crash child left nothing behind in %s; the test tests nothing", dir)
			} else {
				t.Logf("left by the crashed test: %d items, e.g. %s", len(left), left[0])
			}
			shims := processes(func(_ int, args []string) bool { return isShimOf(args, inst.socket()) })

			// Every Start sweeps: the test process of another package may be
			// sweeping this node right now, holding its lock, and this
			// SweepStale then leaves it to that one. Sweep until nothing is
			// left (or 30s).
			began := time.Now()
			var left []string
			for sweeps := 1; ; sweeps++ {
				if err := SweepStale(t.Context()); err != nil {
					t.Errorf("SweepStale: %v", err)
				}
				left = leftovers(inst, inst.knownShimSockets())
				if len(left) == 0 || time.Since(began) > 30*time.Second {
					t.Logf("SweepStale: %d call(s) in %v", sweeps, time.Since(began).Round(time.Millisecond))
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			if len(left) > 0 {
				t.Errorf("left after SweepStale:\n%s", strings.Join(left, "\n"))
			}
			for _, s := range shims {
				if s.alive() {
					t.Errorf("shim %d alive after SweepStale", s.pid)
				}
			}
		})
	}
}
