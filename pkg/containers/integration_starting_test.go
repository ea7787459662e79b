package containers_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/containers"
	"github.com/nodegc/nodegc/pkg/cri"
)

// TestCreatedNeverStartedKeepsNewestExited, on a real containerd of each
// version: a pod's container has an exited instance and a newer one created
// but never started (the window between CreateContainer and StartContainer,
// or what a kubelet crash leaves). With maxPerPodContainer 1, and with
// maxContainers 0, both stay; once the clock is past the grace the stale
// created instance goes and the exited one stays.
func TestCreatedNeverStartedKeepsNewestExited(t *testing.T) {
	onEachContainerd(t, func(t *testing.T, v testbed.ContainerdVersion, n *testNode) {
		for _, tc := range []struct {
			name      string
			mutate    func(*config.ContainerGCConfiguration)
			staleGoes string
		}{
			{"maxPerPodContainer 1", func(c *config.ContainerGCConfiguration) { c.MaxPerPodContainer = ptr.To[int32](1) }, "per_container_limit"},
			{"maxContainers 0", func(c *config.ContainerGCConfiguration) {
				c.MaxPerPodContainer, c.MaxContainers = ptr.To[int32](-1), ptr.To[int32](0) // only the node limit at work
			}, "node_limit"},
		} {
			t.Run(tc.name, func(t *testing.T) { createdNeverStartedScenario(t, n, tc.mutate, tc.staleGoes) })
		}
	})
}

func createdNeverStartedScenario(t *testing.T, n *testNode, mutate func(*config.ContainerGCConfiguration), staleGoes string) {
	ctx := t.Context()
	sb, err := n.RunPod(ctx, node.PodSpec{Name: "starting", Namespace: "team"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // t.Context() has ended by then
		if err := n.RemovePod(context.WithoutCancel(ctx), sb); err != nil {
			t.Error(err)
		}
	})
	exitedID := n.runDead(t, sb, "starting", "team", "app", 1)[0]
	createdID, err := n.CreateContainer(ctx, sb, node.ContainerSpec{Name: "app", Image: n.image, Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	exited, created := runtimeapi.ContainerState_CONTAINER_EXITED, runtimeapi.ContainerState_CONTAINER_CREATED
	if diff := cmp.Diff(map[string]runtimeapi.ContainerState{exitedID: exited, createdID: created}, n.containerStates(t)); diff != "" {
		t.Fatalf("containers before GC (-want +got):\n%s", diff)
	}
	clk := clocktesting.NewFakeClock(time.Now())
	m, err := containers.NewManager(containers.Options{Config: n.gcConfig(mutate), Runtime: n.client, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	gc := func() []string {
		t.Helper()
		r, err := m.GarbageCollect(ctx, containers.TriggerManual)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range r.Outcome.Containers {
			out = append(out, d.Container.ID+":"+d.Reason)
		}
		return out
	}
	if got := gc(); len(got) != 0 {
		t.Errorf("while the new instance may be starting: removed %v, want nothing", got)
	}
	if diff := cmp.Diff(map[string]runtimeapi.ContainerState{exitedID: exited, createdID: created}, n.containerStates(t)); diff != "" {
		t.Errorf("containers after a run within the grace (-want +got):\n%s", diff)
	}

	clk.Step(containers.StartGrace(0) + time.Second) // past the grace: the created instance is a leftover
	if diff := cmp.Diff([]string{createdID + ":" + staleGoes}, gc()); diff != "" {
		t.Errorf("past the grace: removed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]runtimeapi.ContainerState{exitedID: exited}, n.containerStates(t)); diff != "" {
		t.Errorf("containers past the grace (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(filepath.Join(n.PodLogs, "team_starting_"+podUID(t, n, sb), "app", "0.log")); err != nil {
		t.Errorf("the exited instance's log: %v", err)
	}
}

// TestStartInFlightKeepsLog, on a real containerd of each version: the
// kubelet's start of a pod's new container instance is in flight, and
// containerd lists the instance as created meanwhile. Here its start
// blocks on purpose: containerd opens the container's log file before it
// creates the task, and the log path is a FIFO nobody reads yet. A GC run
// that takes the instance for a leftover (its clock past the grace) tries
// to remove it; containerd refuses ("starting state"), and the log stays
// where the container will write it. Once the start goes on the container
// runs, its log in place.
func TestStartInFlightKeepsLog(t *testing.T) {
	onEachContainerd(t, func(t *testing.T, v testbed.ContainerdVersion, n *testNode) {
		ctx := t.Context()
		sb, err := n.RunPod(ctx, node.PodSpec{Name: "slow", Namespace: "team"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := n.RemovePod(context.WithoutCancel(ctx), sb); err != nil {
				t.Error(err)
			}
		})
		exitedID := n.runDead(t, sb, "slow", "team", "app", 1)[0]
		startingID, err := n.CreateContainer(ctx, sb, node.ContainerSpec{Name: "app", Image: n.image, Attempt: 1})
		if err != nil {
			t.Fatal(err)
		}
		logPath := filepath.Join(n.PodLogs, "team_slow_"+podUID(t, n, sb), "app", "1.log")
		if err := unix.Mkfifo(logPath, 0o640); err != nil {
			t.Fatal(err)
		}
		// A second name for the FIFO, outside the pod's log directory
		// and not one the GC reads: the start can be let go on even if
		// the log path was unlinked.
		handle := filepath.Join(n.PodLogs, "fifo-"+startingID[:12])
		if err := os.Link(logPath, handle); err != nil {
			t.Fatal(err)
		}
		var reader *os.File
		drained := make(chan struct{})
		release := func() {
			if reader != nil {
				return
			}
			f, err := os.OpenFile(handle, os.O_RDONLY|unix.O_NONBLOCK, 0)
			if err != nil {
				t.Errorf("opening the FIFO to let the start go on: %v", err)
				close(drained)
				return
			}
			reader = f
			go func() {
				defer close(drained)
				_, _ = io.Copy(io.Discard, f)
			}()
		}
		t.Cleanup(func() {
			release()
			if reader != nil {
				reader.Close()
			}
			<-drained
		})
		started := make(chan error, 1)
		go func() { started <- n.StartContainer(context.WithoutCancel(ctx), startingID) }()
		waitBlockedOpening(t, n.PID(), logPath)
		if diff := cmp.Diff(map[string]runtimeapi.ContainerState{
			exitedID: runtimeapi.ContainerState_CONTAINER_EXITED, startingID: runtimeapi.ContainerState_CONTAINER_CREATED,
		}, n.containerStates(t)); diff != "" {
			t.Fatalf("containers while the start is in flight (-want +got):\n%s", diff)
		}

		clk := clocktesting.NewFakeClock(time.Now())
		m, err := containers.NewManager(containers.Options{Config: n.gcConfig(nil), Runtime: n.client, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		// The GC has seen the instance created, and its clock is past
		// the grace since.
		if _, err := m.Plan(ctx); err != nil {
			t.Fatal(err)
		}
		clk.Step(containers.StartGrace(0) + time.Minute)
		r, err := m.GarbageCollect(ctx, containers.TriggerManual)
		if err == nil || !strings.Contains(err.Error(), "starting state") {
			t.Errorf("GC run: %v, want containerd's refusal to remove a container whose start is in flight", err)
		}
		if diff := cmp.Diff([]string{startingID + ":per_container_limit"}, removals(r.Plan)); diff != "" {
			t.Errorf("planned removals (-want +got):\n%s", diff)
		}
		if len(r.Outcome.Containers) != 0 || r.Outcome.Failures[containers.OpRemoveContainer] != 1 {
			t.Errorf("outcome: removed %d containers, failures %v; want none removed, 1 removal refused", len(r.Outcome.Containers), r.Outcome.Failures)
		}
		if fi, err := os.Lstat(logPath); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
			t.Errorf("the starting container's log path after the run: %v, %v; want the FIFO left in place", fi, err)
		}

		release()
		if err := <-started; err != nil {
			t.Fatalf("the start, let go on: %v", err)
		}
		if _, err := n.WaitContainerState(ctx, startingID, runtimeapi.ContainerState_CONTAINER_RUNNING, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		if !exists(logPath) {
			t.Errorf("the running container's log %s is gone", logPath)
		}
	})
}

// waitBlockedOpening waits until a thread of process pid is in the
// openat system call for path: for a FIFO without a reader, blocked there.
// It reads each thread's current system call and its path argument from
// the process's memory (root reads both).
func waitBlockedOpening(t *testing.T, pid int, path string) {
	t.Helper()
	want := append([]byte(path), 0)
	blocked := func() (bool, error) {
		mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
		if err != nil {
			return false, err
		}
		defer mem.Close()
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return false, err
		}
		for _, task := range tasks {
			raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/syscall", pid, task.Name()))
			if err != nil {
				continue // the thread ended
			}
			f := strings.Fields(string(raw)) // NR ARG0 ARG1 ...; "running" or "-1 ..." outside a system call
			if len(f) < 3 || f[0] != strconv.Itoa(unix.SYS_OPENAT) {
				continue
			}
			addr, err := strconv.ParseUint(strings.TrimPrefix(f[2], "0x"), 16, 64)
			if err != nil {
				continue
			}
			got := make([]byte, len(want))
			if _, err := mem.ReadAt(got, int64(addr)); err == nil && bytes.Equal(got, want) {
				return true, nil
			}
		}
		return false, nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := blocked()
		if err != nil {
			t.Fatalf("reading the system calls of process %d: %v", pid, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no thread of process %d blocked opening %s after 30s", pid, path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startsOnStatus is the node's runtime, where the first status read of one
// container (the executor's, right before its removal) comes after the
// container was started and exited: what a kubelet's start that outlasted
// the grace, or the executor's own delay, lets happen between the plan
// and the removal.
type startsOnStatus struct {
	*cri.Client
	n    *testNode
	id   string
	once sync.Once
	err  error
}

func (s *startsOnStatus) ContainerStatus(ctx context.Context, id string) (*runtimeapi.ContainerStatus, error) {
	if id == s.id {
		s.once.Do(func() {
			if s.err = s.n.StartContainer(ctx, id); s.err == nil {
				_, s.err = s.n.WaitContainerState(ctx, id, runtimeapi.ContainerState_CONTAINER_EXITED, 30*time.Second)
			}
		})
		if s.err != nil {
			return nil, s.err
		}
	}
	return s.Client.ContainerStatus(ctx, id)
}

// TestCreatedThatRanBeforeItsRemovalStays, on a real containerd of each
// version: a pod's container exited as attempt 0, and attempt 1 was
// created and not started past the grace (a leftover). With
// maxPerPodContainer 1 the plan keeps attempt 0, the newest that ran, and
// removes attempt 1; but attempt 1 is started and exits before its
// removal. It is now the newest instance that ran: the run keeps it (its
// state is not the planned one), and the next run removes attempt 0.
func TestCreatedThatRanBeforeItsRemovalStays(t *testing.T) {
	onEachContainerd(t, func(t *testing.T, v testbed.ContainerdVersion, n *testNode) {
		ctx := t.Context()
		sb, err := n.RunPod(ctx, node.PodSpec{Name: "ran", Namespace: "team"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := n.RemovePod(context.WithoutCancel(ctx), sb); err != nil {
				t.Error(err)
			}
		})
		exitedID := n.runDead(t, sb, "ran", "team", "app", 1)[0]
		createdID, err := n.CreateContainer(ctx, sb, node.ContainerSpec{Name: "app", Image: n.image, Args: []string{"exit", "0"}, Attempt: 1})
		if err != nil {
			t.Fatal(err)
		}
		clk := clocktesting.NewFakeClock(time.Now())
		rt := &startsOnStatus{Client: n.client, n: n, id: createdID}
		m, err := containers.NewManager(containers.Options{
			Config: n.gcConfig(func(c *config.ContainerGCConfiguration) { c.MaxPerPodContainer = ptr.To[int32](1) }), Runtime: rt, Clock: clk,
		})
		if err != nil {
			t.Fatal(err)
		}
		gc := func() *containers.Report {
			t.Helper()
			r, err := m.GarbageCollect(ctx, containers.TriggerManual)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		gc() // sees attempt 1 created: starting
		clk.Step(containers.StartGrace(0) + time.Second)
		r := gc()
		var planned []string
		for _, d := range r.Plan.RemoveContainers {
			planned = append(planned, d.Container.ID+":"+d.Reason)
		}
		if diff := cmp.Diff([]string{createdID + ":per_container_limit"}, planned); diff != "" {
			t.Fatalf("past the grace: planned (-want +got):\n%s", diff)
		}
		if rt.err != nil {
			t.Fatalf("starting %s before its removal: %v", createdID, rt.err)
		}
		exited := runtimeapi.ContainerState_CONTAINER_EXITED
		if diff := cmp.Diff(map[string]runtimeapi.ContainerState{exitedID: exited, createdID: exited}, n.containerStates(t)); diff != "" {
			t.Errorf("attempt 1, planned as a created leftover, ran and exited before its removal: containers left (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]containers.Skip{{Kind: "container", ID: createdID, Why: containers.SkipChanged}}, r.Outcome.Skipped); diff != "" {
			t.Errorf("skipped (-want +got):\n%s", diff)
		}
		var removed []string
		for _, d := range gc().Outcome.Containers {
			removed = append(removed, d.Container.ID+":"+d.Reason)
		}
		if diff := cmp.Diff([]string{exitedID + ":per_container_limit"}, removed); diff != "" {
			t.Errorf("the next run, attempt 1 now the newest that ran: removed (-want +got):\n%s", diff)
		}
	})
}
