package containers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// execFixture is a node with pod "gone" (two dead containers, one in an
// unknown state, an inactive sandbox, a log directory) and pod "p" (a dead
// container in a stopped sandbox), on a fake runtime and temp log dirs.
type execFixture struct {
	rt           *fakeRuntime
	paths        logPaths
	node         NodeState
	goneDir      string
	danglingLink string
}

func newExecFixture(t *testing.T) *execFixture {
	t.Helper()
	root := t.TempDir()
	f := &execFixture{rt: newFakeRuntime(), paths: logPaths{PodLogs: filepath.Join(root, "pods"), ContainerLogs: filepath.Join(root, "containers")}}
	mkdirs(t, f.paths.ContainerLogs)
	f.goneDir = filepath.Join(f.paths.PodLogs, "ns_gone_gone")
	add := func(c Container) {
		logPath := filepath.Join(f.paths.PodLogs, "ns_"+c.PodName+"_"+c.PodUID, c.Name, "0.log")
		touch(t, logPath)
		f.rt.addContainer(c, logPath)
		f.node.Containers = append(f.node.Containers, c)
	}
	add(dead("gone", "a", 0, 2*time.Hour))
	add(ctr("gone", "b", 0, StateUnknown, 2*time.Hour))
	add(dead("p", "a", 0, 3*time.Hour))
	add(dead("p", "a", 1, 2*time.Hour))
	for _, s := range []Sandbox{sbx("gone", 0, false, 3*time.Hour), sbx("p", 0, false, 3*time.Hour)} {
		f.rt.addSandbox(s)
		f.node.Sandboxes = append(f.node.Sandboxes, s)
	}
	f.node.LogDirs = []PodLogDir{{Name: "ns_gone_gone", PodUID: "gone", ModTime: t0.Add(-3 * time.Hour)}}
	f.danglingLink = filepath.Join(f.paths.ContainerLogs, "x_ns_a-deadbeef.log")
	if err := os.Symlink(filepath.Join(f.paths.PodLogs, "ns_x_gone", "a", "0.log"), f.danglingLink); err != nil {
		t.Fatal(err)
	}
	f.node.LogLinks = []LogLink{{Name: filepath.Base(f.danglingLink), ContainerID: "deadbeef", Dangling: true}}
	return f
}

func (f *execFixture) plan(t *testing.T) *Plan {
	t.Helper()
	return policyFor(t, nil).Plan(f.node, live("p"), t0)
}

func removedIDs(o *Outcome) []string {
	var ids []string
	for _, d := range o.Containers {
		ids = append(ids, d.Container.ID)
	}
	for _, d := range o.Sandboxes {
		ids = append(ids, d.Sandbox.ID)
	}
	for _, d := range o.LogDirs {
		ids = append(ids, d.Dir.Name)
	}
	for _, d := range o.LogLinks {
		ids = append(ids, d.Link.Name)
	}
	return ids
}

// TestExecuteKeepsALinkThatPointsAgain: a link dangling when planned points
// at a log again when its turn comes (the kubelet rotated the log: renamed
// it, then opened a new one); it is kept, and the outcome says so, as for
// every planned removal not done.
func TestExecuteKeepsALinkThatPointsAgain(t *testing.T) {
	f := newExecFixture(t)
	plan := f.plan(t)
	touch(t, filepath.Join(f.paths.PodLogs, "ns_x_gone", "a", "0.log")) // the link's target is back
	out, err := execute(t.Context(), f.rt, plan, f.paths, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(f.danglingLink); err != nil || len(out.LogLinks) != 0 {
		t.Errorf("a link that points at a log again: %v, removed %d links; want it kept", err, len(out.LogLinks))
	}
	if diff := cmp.Diff([]Skip{{Kind: "log_link", ID: filepath.Base(f.danglingLink), Why: SkipPointsAgain}}, out.Skipped); diff != "" {
		t.Errorf("skipped (-want +got):\n%s", diff)
	}
}

func TestExecuteAppliesThePlan(t *testing.T) {
	f := newExecFixture(t)
	out, err := execute(t.Context(), f.rt, f.plan(t), f.paths, false)
	if err != nil {
		t.Fatal(err)
	}
	wantCalls := []string{
		// Oldest first; each container's status is read right before.
		"ContainerStatus p/a/0", "RemoveContainer p/a/0",
		"ContainerStatus gone/a/0", "RemoveContainer gone/a/0",
		"ContainerStatus gone/b/0", "StopContainer gone/b/0", "RemoveContainer gone/b/0",
		// Not exited: its logs go after it, unless an instance made
		// meanwhile has its attempt.
		"ListContainers labels",
		// The sandbox's too: one removed meanwhile frees nothing.
		// It holds no container left (the plan's went first), nor one made
		// since: stopping it would kill that one.
		"PodSandboxStatus gone/sb0", "ListContainers gone/sb0", "StopPodSandbox gone/sb0", "RemovePodSandbox gone/sb0",
		// The containers again, before the dangling link goes: one made
		// since planning may own it.
		"ListContainers ",
	}
	if diff := cmp.Diff(wantCalls, f.rt.callLog()); diff != "" {
		t.Errorf("runtime calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"p/a/0", "gone/a/0", "gone/b/0", "gone/sb0", "ns_gone_gone", "x_ns_a-deadbeef.log"}, removedIDs(out)); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]bool{"p/a/1": true}, f.rt.containerIDs()); diff != "" {
		t.Errorf("containers left (-want +got):\n%s", diff)
	}
	for _, p := range []string{f.goneDir, f.danglingLink, filepath.Join(f.paths.PodLogs, "ns_p_p", "a", "0.log")} {
		if exists(p) {
			t.Errorf("%s still exists", p)
		}
	}
	if !exists(filepath.Join(f.paths.PodLogs, "ns_p_p")) {
		t.Errorf("the log directory of the live pod was removed")
	}
}

// TestExecuteNotFoundIsSuccess: what is already gone is no failure, and
// not nodegc's removal: it is skipped as gone. (Before, it counted as
// removed, in the removed metrics too, with what the kubelet's GC removed.)
func TestExecuteNotFoundIsSuccess(t *testing.T) {
	f := newExecFixture(t)
	plan := f.plan(t)
	f.rt = newFakeRuntime() // everything vanished after planning
	out, err := execute(t.Context(), f.rt, plan, f.paths, false)
	if err != nil {
		t.Fatalf("execute: %v, want success", err)
	}
	if got := len(out.Containers) + len(out.Sandboxes); got != 0 {
		t.Errorf("removed %d containers and sandboxes, want none: %v", got, removedIDs(out))
	}
	var gone []string
	for _, s := range out.Skipped {
		if s.Why == SkipGone {
			gone = append(gone, s.Kind+" "+s.ID)
		}
	}
	want := []string{"container p/a/0", "container gone/a/0", "container gone/b/0", "sandbox gone/sb0"}
	if diff := cmp.Diff(want, gone); diff != "" {
		t.Errorf("skipped as gone (-want +got):\n%s", diff)
	}
}

// TestExecuteGoneBeforeRemovalFreesNothing: a sandbox the kubelet removed
// between plan and removal (StopPodSandbox and RemovePodSandbox succeed for
// an unknown ID) and a pod log directory already gone (os.RemoveAll of a
// missing directory returns nil) are nothing of nodegc's doing: they are
// skipped as gone, as a container gone meanwhile is, and nothing more is
// asked of the runtime. A sandbox that still exists frees what the plan
// counted, a directory what it holds right before its removal.
func TestExecuteGoneBeforeRemovalFreesNothing(t *testing.T) {
	root := t.TempDir()
	paths := logPaths{PodLogs: filepath.Join(root, "pods"), ContainerLogs: filepath.Join(root, "containers")}
	rt := newFakeRuntime()
	gone, kept := sbx("gone", 0, false, time.Hour), sbx("here", 0, false, time.Hour)
	rt.addSandbox(gone)
	rt.addSandbox(kept)
	touch(t, filepath.Join(paths.PodLogs, "ns_gone_gone", "app", "0.log"), filepath.Join(paths.PodLogs, "ns_here_here", "app", "0.log"))
	plan := &Plan{
		RemoveSandboxes: []SandboxDecision{
			{Sandbox: gone, Reason: ReasonPodGone, WritableLayerBytes: 1 << 20},
			{Sandbox: kept, Reason: ReasonPodGone, WritableLayerBytes: 2 << 20},
		},
		RemoveLogDirs: []LogDirDecision{
			{Dir: PodLogDir{Name: "ns_gone_gone", PodUID: "gone"}, Reason: ReasonPodGone, Bytes: 4096},
			{Dir: PodLogDir{Name: "ns_here_here", PodUID: "here"}, Reason: ReasonPodGone, Bytes: 8192},
		},
	}
	// The kubelet's container GC, between plan and removal.
	rt.mu.Lock()
	delete(rt.sandboxes, gone.ID)
	rt.mu.Unlock()
	if err := os.RemoveAll(filepath.Join(paths.PodLogs, "ns_gone_gone")); err != nil {
		t.Fatal(err)
	}
	here := du(t, filepath.Join(paths.PodLogs, "ns_here_here"))

	out, err := execute(t.Context(), rt, plan, paths, false)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"here/sb0", "ns_here_here"}, removedIDs(out)); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Skip{{Kind: "sandbox", ID: "gone/sb0", Why: SkipGone}, {Kind: "log_dir", ID: "ns_gone_gone", Why: SkipGone}}, out.Skipped); diff != "" {
		t.Errorf("skipped (-want +got):\n%s", diff)
	}
	got := map[string]uint64{}
	for _, d := range out.Sandboxes {
		got[d.Sandbox.ID] = d.WritableLayerBytes
	}
	for _, d := range out.LogDirs {
		got[d.Dir.Name] = d.Bytes
	}
	want := map[string]uint64{"here/sb0": 2 << 20, "ns_here_here": here}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("bytes freed (-want +got):\n%s", diff)
	}
	if b := out.Bytes(); b.WritableLayer != 2<<20 || b.PodLogDirectory != here {
		t.Errorf("outcome bytes %+v, want writable layers %d and pod log directories %d", b, 2<<20, here)
	}
	wantCalls := []string{"PodSandboxStatus gone/sb0", "PodSandboxStatus here/sb0", "ListContainers here/sb0", "StopPodSandbox here/sb0", "RemovePodSandbox here/sb0"}
	if diff := cmp.Diff(wantCalls, rt.callLog()); diff != "" {
		t.Errorf("runtime calls (-want +got):\n%s", diff)
	}
}

// TestExecuteSandboxStatusFails: a sandbox whose status cannot be read is
// not removed (what it would free is unknown, and the runtime is likely
// not answering); the failure is counted and its pod's log directory waits.
func TestExecuteSandboxStatusFails(t *testing.T) {
	root := t.TempDir()
	paths := logPaths{PodLogs: filepath.Join(root, "pods"), ContainerLogs: filepath.Join(root, "containers")}
	rt := newFakeRuntime()
	sb := sbx("gone", 0, false, time.Hour)
	rt.addSandbox(sb)
	rt.fail["PodSandboxStatus "+sb.ID] = status.Error(codes.Unavailable, "runtime restarting")
	touch(t, filepath.Join(paths.PodLogs, "ns_gone_gone", "app", "0.log"))
	plan := &Plan{
		RemoveSandboxes: []SandboxDecision{{Sandbox: sb, Reason: ReasonPodGone, WritableLayerBytes: 1 << 20}},
		RemoveLogDirs:   []LogDirDecision{{Dir: PodLogDir{Name: "ns_gone_gone", PodUID: "gone"}, Reason: ReasonPodGone}},
	}
	out, err := execute(t.Context(), rt, plan, paths, false)
	if err == nil || !strings.Contains(err.Error(), "sandbox gone/sb0 of pod ns/gone") || !strings.Contains(err.Error(), "runtime restarting") {
		t.Fatalf("execute: %v, want the status failure naming the sandbox", err)
	}
	if len(out.Sandboxes) != 0 || !rt.sandboxIDSet()[sb.ID] {
		t.Errorf("a sandbox whose status failed was removed: %v", removedIDs(out))
	}
	if diff := cmp.Diff(map[string]int{OpSandboxStatus: 1}, out.Failures); diff != "" {
		t.Errorf("failures (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Skip{{Kind: "log_dir", ID: "ns_gone_gone", Why: SkipPodFailed}}, out.Skipped); diff != "" {
		t.Errorf("skipped (-want +got):\n%s", diff)
	}
}

// TestExecuteJoinsErrorsAndGoesOn: one failure does not stop the others;
// the failed pod keeps its sandbox and log directory until the next run.
func TestExecuteJoinsErrorsAndGoesOn(t *testing.T) {
	f := newExecFixture(t)
	f.rt.fail["RemoveContainer gone/a/0"] = status.Error(codes.Unavailable, "runtime restarting")
	f.rt.fail["RemoveContainer p/a/0"] = status.Error(codes.Internal, "disk on fire")
	out, err := execute(t.Context(), f.rt, f.plan(t), f.paths, false)
	if err == nil {
		t.Fatal("execute succeeded, want the joined failures")
	}
	for _, want := range []string{"container gone/a/0 (a of pod ns/gone)", "runtime restarting", "container p/a/0", "disk on fire"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if diff := cmp.Diff([]string{"gone/b/0", "x_ns_a-deadbeef.log"}, removedIDs(out)); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	wantSkipped := []Skip{{Kind: "sandbox", ID: "gone/sb0", Why: SkipSandboxInUse}, {Kind: "log_dir", ID: "ns_gone_gone", Why: SkipPodFailed}}
	if diff := cmp.Diff(wantSkipped, out.Skipped); diff != "" {
		t.Errorf("skipped (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{OpRemoveContainer: 2}, out.Failures); diff != "" {
		t.Errorf("failures (-want +got):\n%s", diff)
	}
	if !exists(f.goneDir) || !f.rt.sandboxIDSet()["gone/sb0"] {
		t.Error("the failed pod lost its log directory or sandbox")
	}
}

// TestExecuteNeverRemovesARunningContainer: a container that was started
// after planning is skipped, and so is its sandbox.
func TestExecuteNeverRemovesARunningContainer(t *testing.T) {
	f := newExecFixture(t)
	plan := f.plan(t)
	f.rt.setState("gone/a/0", runtimeapi.ContainerState_CONTAINER_RUNNING)
	out, err := execute(t.Context(), f.rt, plan, f.paths, false)
	if err != nil {
		t.Fatal(err)
	}
	if !f.rt.containerIDs()["gone/a/0"] || !f.rt.sandboxIDSet()["gone/sb0"] {
		t.Error("the running container or its sandbox was removed")
	}
	want := []Skip{
		{Kind: "container", ID: "gone/a/0", Why: SkipStarted},
		{Kind: "sandbox", ID: "gone/sb0", Why: SkipSandboxInUse},
		{Kind: "log_dir", ID: "ns_gone_gone", Why: SkipPodFailed},
	}
	if diff := cmp.Diff(want, out.Skipped); diff != "" {
		t.Errorf("skipped (-want +got):\n%s", diff)
	}
}

func TestExecuteStopFailureKeepsTheContainer(t *testing.T) {
	f := newExecFixture(t)
	f.rt.fail["StopContainer gone/b/0"] = status.Error(codes.DeadlineExceeded, "stuck")
	out, err := execute(t.Context(), f.rt, f.plan(t), f.paths, false)
	if err == nil || !strings.Contains(err.Error(), "unknown state") {
		t.Fatalf("execute: %v, want the stop failure", err)
	}
	if !f.rt.containerIDs()["gone/b/0"] {
		t.Error("a container that could not be stopped was removed")
	}
	if out.Failures[OpStopContainer] != 1 {
		t.Errorf("failures = %v", out.Failures)
	}
}

// TestExecuteDryRunTouchesNothing: dry-run reports the plan's removals and
// calls nothing.
func TestExecuteDryRunTouchesNothing(t *testing.T) {
	f := newExecFixture(t)
	plan := f.plan(t)
	out, err := execute(t.Context(), f.rt, plan, f.paths, true)
	if err != nil {
		t.Fatal(err)
	}
	if calls := f.rt.callLog(); len(calls) != 0 {
		t.Errorf("dry-run called the runtime: %v", calls)
	}
	if len(f.rt.containerIDs()) != 4 || !exists(f.goneDir) || !exists(f.danglingLink) {
		t.Error("dry-run removed something")
	}
	if diff := cmp.Diff(plan.RemoveContainers, out.Containers); diff != "" {
		t.Errorf("dry-run containers (-plan +outcome):\n%s", diff)
	}
	if !out.DryRun || len(out.Sandboxes) != len(plan.RemoveSandboxes) || len(out.LogDirs) != 1 || len(out.LogLinks) != 1 {
		t.Errorf("dry-run outcome %+v does not list the plan's removals", out)
	}
}

func TestExecuteStopsWhenCancelled(t *testing.T) {
	f := newExecFixture(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := execute(ctx, f.rt, f.plan(t), f.paths, false)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("execute = %v, want context.Canceled", err)
	}
	if len(f.rt.containerIDs()) != 4 {
		t.Error("a cancelled run removed containers")
	}
}

// TestExecuteStartInFlightKeepsLogs: a container the runtime lists as
// created may be starting (containerd refuses to remove it then: "container
// is in starting state"), and one in an unknown state may still write its
// log. Their logs go only once the runtime removed them: a removal refused
// leaves the log file, its rotated siblings and its link in place. An exited
// container's logs go first, as the kubelet removes them.
func TestExecuteStartInFlightKeepsLogs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		state    State
		refuse   bool
		wantLogs bool
		wantErr  string
	}{
		{name: "created, its start in flight: the removal is refused", state: StateCreated, refuse: true, wantLogs: true, wantErr: "starting state"},
		{name: "created, removed", state: StateCreated},
		{name: "unknown, stopped, its removal refused", state: StateUnknown, refuse: true, wantLogs: true, wantErr: "starting state"},
		{name: "unknown, stopped and removed", state: StateUnknown},
		{name: "exited, removed", state: StateExited},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			paths := logPaths{PodLogs: filepath.Join(root, "pods"), ContainerLogs: filepath.Join(root, "containers")}
			rt := newFakeRuntime()
			c := with(ctr("p", "app", 5, tc.state, 4*time.Minute), func(c *Container) { c.ID = "c5" })
			logPath := filepath.Join(paths.PodLogs, "ns_p_p", "app", "5.log")
			link := filepath.Join(paths.ContainerLogs, legacyLinkName("p", "ns", "app", c.ID))
			touch(t, logPath, logPath+".20261121-115900")
			mkdirs(t, paths.ContainerLogs)
			if err := os.Symlink(logPath, link); err != nil {
				t.Fatal(err)
			}
			rt.addContainer(c, logPath)
			if tc.refuse {
				rt.fail["RemoveContainer "+c.ID] = status.Error(codes.Unknown, `failed to set removing state for container: container is in starting state, can't be removed`)
			}
			plan := &Plan{RemoveContainers: []ContainerDecision{{Container: c, Reason: ReasonPerContainerLimit, StopFirst: tc.state == StateUnknown}}}
			out, err := execute(t.Context(), rt, plan, paths, false)
			if (err != nil) != (tc.wantErr != "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("execute: %v, want error %q", err, tc.wantErr)
			}
			for _, p := range []string{logPath, logPath + ".20261121-115900", link} {
				if exists(p) != tc.wantLogs {
					t.Errorf("%s exists: %t, want %t", p, exists(p), tc.wantLogs)
				}
			}
			if removed := len(out.Containers) == 1; removed == tc.refuse {
				t.Errorf("outcome lists %d removed containers, refused %t", len(out.Containers), tc.refuse)
			}
		})
	}
}

// TestExecuteLogsFailAfterRemoval: a created container removed whose logs
// then cannot be removed counts as removed, freeing no log bytes; the
// failure is counted and its pod's log directory waits for the next run,
// but its sandbox, which no container holds any more, goes.
func TestExecuteLogsFailAfterRemoval(t *testing.T) {
	root := t.TempDir()
	paths := logPaths{PodLogs: filepath.Join(root, "pods"), ContainerLogs: filepath.Join(root, "containers")}
	rt := newFakeRuntime()
	c := with(ctr("gone", "app", 0, StateCreated, time.Hour), func(c *Container) { c.ID = "c0" })
	logPath := filepath.Join(paths.PodLogs, "ns_gone_gone", "app", "0.log")
	touch(t, filepath.Join(logPath, "in-the-way")) // a non-empty directory where the log file should be: it cannot be removed
	rt.addContainer(c, logPath)
	sb := sbx("gone", 0, false, time.Hour)
	rt.addSandbox(sb)
	plan := &Plan{
		RemoveContainers: []ContainerDecision{{Container: c, Reason: ReasonPodGone, LogBytes: 4096}},
		RemoveSandboxes:  []SandboxDecision{{Sandbox: sb, Reason: ReasonPodGone}},
		RemoveLogDirs:    []LogDirDecision{{Dir: PodLogDir{Name: "ns_gone_gone", PodUID: "gone"}, Reason: ReasonPodGone}},
	}
	out, err := execute(t.Context(), rt, plan, paths, false)
	if err == nil || !strings.Contains(err.Error(), "log file of container c0") {
		t.Fatalf("execute: %v, want the log removal's failure", err)
	}
	if diff := cmp.Diff([]string{"c0", "gone/sb0"}, removedIDs(out)); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	if got := out.Containers[0].LogBytes; got != 0 {
		t.Errorf("log bytes freed = %d, want 0", got)
	}
	if diff := cmp.Diff(map[string]int{OpRemoveLogs: 1}, out.Failures); diff != "" {
		t.Errorf("failures (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Skip{{Kind: "log_dir", ID: "ns_gone_gone", Why: SkipPodFailed}}, out.Skipped); diff != "" {
		t.Errorf("skipped (-want +got):\n%s", diff)
	}
}

// TestExecuteSandboxThatChangedSincePlanning: StopPodSandbox stops, and
// RemovePodSandbox removes, every container a sandbox holds (containerd
// kills them), so a sandbox planned for removal is looked at again right
// before: one that holds a container the plan did not see (made between
// the container and the sandbox listings) or that is ready again stays,
// with its pod's log directory, and nothing is stopped. (Before, the
// container made since planning was killed and removed with the sandbox.)
func TestExecuteSandboxThatChangedSincePlanning(t *testing.T) {
	for name, change := range map[string]func(f *execFixture){
		"a container made since planning": func(f *execFixture) { f.rt.addContainer(ctr("gone", "late", 0, StateCreated, 0), "") },
		"ready again": func(f *execFixture) {
			f.rt.mu.Lock()
			f.rt.sandboxes["gone/sb0"].State = runtimeapi.PodSandboxState_SANDBOX_READY
			f.rt.mu.Unlock()
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newExecFixture(t)
			plan := f.plan(t)
			change(f)
			out, err := execute(t.Context(), f.rt, plan, f.paths, false)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range f.rt.callLog() {
				if c == "StopPodSandbox gone/sb0" || c == "RemovePodSandbox gone/sb0" {
					t.Errorf("runtime asked to %s", c)
				}
			}
			if !f.rt.sandboxIDSet()["gone/sb0"] {
				t.Error("the sandbox was removed")
			}
			if ids := f.rt.containerIDs(); name == "a container made since planning" && !ids["gone/late/0"] {
				t.Error("the container made since planning was removed with its sandbox")
			}
			if !exists(f.goneDir) {
				t.Error("the pod's log directory was removed while its sandbox stays")
			}
			if diff := cmp.Diff([]Skip{{Kind: "sandbox", ID: "gone/sb0", Why: SkipSandboxInUse}, {Kind: "log_dir", ID: "ns_gone_gone", Why: SkipPodFailed}}, out.Skipped); diff != "" {
				t.Errorf("skipped (-want +got):\n%s", diff)
			}
		})
	}
}

// logLines runs fn with a logger at the default verbosity in its context,
// and returns each line it logged as "message key=value ...", the keys
// sorted as logged.
func logLines(t *testing.T, fn func(ctx context.Context)) []string {
	t.Helper()
	var mu sync.Mutex
	var lines []string
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, args)
	}, funcr.Options{Verbosity: 0})
	fn(klog.NewContext(t.Context(), logger))
	mu.Lock()
	defer mu.Unlock()
	return lines
}

// linesWith returns the lines that contain each of parts.
func linesWith(lines []string, parts ...string) []string {
	var out []string
	for _, l := range lines {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			out = append(out, l)
		}
	}
	return out
}

// TestExecuteTellsEachRemoval: at the default verbosity the log names each
// container, sandbox and pod log directory removed, with the plan's
// reason, once it is removed; in dry run, each that would be; and each
// container the last look kept because it started since planning (the one
// time the plan was wrong). Before, all
// of it was at -v=2 or -v=4, and an operator whose pod's logs were gone
// could not tell whether nodegc removed them, or why.
func TestExecuteTellsEachRemoval(t *testing.T) {
	f := newExecFixture(t)
	plan := f.plan(t)
	lines := logLines(t, func(ctx context.Context) {
		if _, err := execute(ctx, f.rt, plan, f.paths, false); err != nil {
			t.Fatal(err)
		}
	})
	for _, want := range [][]string{
		{`"msg"="Removed container"`, `"containerID"="p/a/0"`, `"reason"="per_container_limit"`},
		{`"msg"="Removed container"`, `"containerID"="gone/a/0"`, `"reason"="pod_gone"`},
		{`"msg"="Removed container"`, `"containerID"="gone/b/0"`, `"reason"="pod_gone"`},
		{`"msg"="Removed sandbox"`, `"sandboxID"="gone/sb0"`, `"reason"="pod_gone"`},
		{`"msg"="Removed pod log directory"`, `"directory"="ns_gone_gone"`, `"reason"="pod_gone"`},
	} {
		if got := linesWith(lines, want...); len(got) != 1 {
			t.Errorf("lines with %q: %q; want one (all lines: %q)", want, got, lines)
		}
	}

	f = newExecFixture(t)
	plan = f.plan(t)
	f.rt.setState("gone/a/0", runtimeapi.ContainerState_CONTAINER_RUNNING)
	lines = logLines(t, func(ctx context.Context) { _, _ = execute(ctx, f.rt, plan, f.paths, false) })
	started := []string{`"msg"="Container started after planning, keeping it"`, `"containerID"="gone/a/0"`}
	if got := linesWith(lines, started...); len(got) != 1 {
		t.Errorf("lines with %q: %q; want one (all lines: %q)", started, got, lines)
	}

	f = newExecFixture(t)
	plan = f.plan(t)
	lines = logLines(t, func(ctx context.Context) { _, _ = execute(ctx, f.rt, plan, f.paths, true) })
	for _, want := range [][]string{
		{`"msg"="Container would be removed (dry run)"`, `"containerID"="gone/a/0"`, `"reason"="pod_gone"`},
		{`"msg"="Sandbox would be removed (dry run)"`, `"sandboxID"="gone/sb0"`},
		{`"msg"="Pod log directory would be removed (dry run)"`, `"directory"="ns_gone_gone"`},
	} {
		if got := linesWith(lines, want...); len(got) != 1 {
			t.Errorf("dry run: lines with %q: %q; want one (all lines: %q)", want, got, lines)
		}
	}
	if got := linesWith(lines, `"msg"="Removed`); len(got) != 0 {
		t.Errorf("dry run: %q; want no removal told", got)
	}
}

// TestExecuteKeepsTheLinkOfAContainerMadeSincePlanning: a link planned for
// removal as dangling names a container created and started after the
// plan's listing (its log rotating as the link's turn comes). The
// containers are listed again before the links go, as the kubelet reads the
// container's status right before: the link of a container that has not
// exited stays, by its whole ID or by a prefix of 6 characters or more,
// or, its name cut to no ID, by its target, the container's log. Before,
// the plan's listing alone decided, and log shippers tailing
// /var/log/containers lost the container.
func TestExecuteKeepsTheLinkOfAContainerMadeSincePlanning(t *testing.T) {
	const uid = "6f58246d-8219-4c2a-a0ed-86724aaec471"
	for _, tc := range []struct{ name, link, id, target string }{
		{"the whole ID", "x_ns_a-deadbeef.log", "deadbeef", ""},
		{"a prefix of the ID (the name cut)", "x_ns_a-deadbe.log", "deadbeef", ""},
		{"no ID (the name cut before it): its target", "x_ns_a.log", "deadbeef", "ns_new_" + uid + "/a/0.log"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newExecFixture(t)
			link := filepath.Join(f.paths.ContainerLogs, tc.link)
			if tc.link != filepath.Base(f.danglingLink) {
				if err := os.Rename(f.danglingLink, link); err != nil {
					t.Fatal(err)
				}
				f.node.LogLinks = []LogLink{{Name: tc.link, ContainerID: containerIDFromLink(tc.link), Dangling: true}}
			}
			if tc.target != "" {
				if err := os.Remove(link); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(filepath.Join(f.paths.PodLogs, tc.target), link); err != nil {
					t.Fatal(err)
				}
			}
			plan := f.plan(t)
			if len(plan.RemoveLogLinks) != 1 {
				t.Fatalf("planned link removals %v; want the dangling link", plan.RemoveLogLinks)
			}
			f.rt.addContainer(with(ctr("new", "a", 0, StateRunning, 0), func(c *Container) { c.ID, c.PodUID = tc.id, uid }), "")
			out, err := execute(t.Context(), f.rt, plan, f.paths, false)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(link); err != nil || len(out.LogLinks) != 0 {
				t.Errorf("the link of a container running since planning: %v, removed %d links; want it kept", err, len(out.LogLinks))
			}
		})
	}
	// Once that container has exited, its dangling link goes.
	f := newExecFixture(t)
	plan := f.plan(t)
	f.rt.addContainer(with(dead("new", "a", 0, 0), func(c *Container) { c.ID = "deadbeef" }), "")
	out, err := execute(t.Context(), f.rt, plan, f.paths, false)
	if err != nil {
		t.Fatal(err)
	}
	if exists(f.danglingLink) || len(out.LogLinks) != 1 {
		t.Errorf("the dangling link of an exited container: removed %d links; want it removed", len(out.LogLinks))
	}
}

// TestExecuteCreatedThatRanSincePlanning: pod p's container app exited as
// attempt 0, and attempt 1 was created and never started (a leftover past
// StartGrace): the plan keeps attempt 0 as the newest instance that ran
// and removes attempt 1 (per_container_limit). Attempt 1 is started and
// exits before the executor reaches it: it is now the newest instance that
// ran, which is never removed while its pod lives; the executor keeps it
// (its state is not the planned one), and the next run plans it again.
func TestExecuteCreatedThatRanSincePlanning(t *testing.T) {
	rt := newFakeRuntime()
	e0, c1 := dead("p", "app", 0, 2*time.Hour), ctr("p", "app", 1, StateCreated, time.Hour)
	node := NodeState{Containers: []Container{e0, c1}, Sandboxes: []Sandbox{sbx("p", 0, true, 3*time.Hour)}}
	for _, c := range node.Containers {
		rt.addContainer(c, "")
	}
	rt.addSandbox(node.Sandboxes[0])
	plan := policyFor(t, nil).Plan(node, live("p"), t0)
	if diff := cmp.Diff([]string{"p/app/1:per_container_limit"}, summarize(plan).Remove); diff != "" {
		t.Fatalf("plan (-want +got):\n%s", diff)
	}
	rt.setState(c1.ID, runtimeapi.ContainerState_CONTAINER_EXITED) // started and exited since planning
	out, err := execute(t.Context(), rt, plan, logPaths{}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !rt.containerIDs()[c1.ID] {
		t.Errorf("%s, planned as a created leftover, ran and exited since planning and was removed (left: %v); want it kept: it is the newest instance that ran",
			c1.ID, rt.containerIDs())
	}
	if diff := cmp.Diff([]Skip{{Kind: "container", ID: c1.ID, Why: SkipChanged}}, out.Skipped); diff != "" {
		t.Errorf("skipped (-want +got):\n%s", diff)
	}
	// The next run, from a new listing, keeps attempt 1 as the newest
	// that ran and removes attempt 0.
	node.Containers[1].State = StateExited
	if diff := cmp.Diff([]string{"p/app/0:per_container_limit"}, summarize(policyFor(t, nil).Plan(node, live("p"), t0)).Remove); diff != "" {
		t.Errorf("next plan (-want +got):\n%s", diff)
	}
}

// TestExecuteStateChangedSincePlanning: pod gone's container is planned
// for removal in one state and found in another right before: any change
// keeps it, and with it its sandbox and its pod's log directory, as for a
// container started since planning; but one the runtime had lost track of
// (unknown) and now reports exited goes as planned (the plan counted it as
// an instance that ran either way), and so does one still as planned.
func TestExecuteStateChangedSincePlanning(t *testing.T) {
	cri := map[State]runtimeapi.ContainerState{
		StateCreated: runtimeapi.ContainerState_CONTAINER_CREATED, StateExited: runtimeapi.ContainerState_CONTAINER_EXITED,
		StateUnknown: runtimeapi.ContainerState_CONTAINER_UNKNOWN,
	}
	removed := []string{"gone/a/0", "gone/sb0", "ns_gone_gone"}
	kept := []Skip{
		{Kind: "container", ID: "gone/a/0", Why: SkipChanged},
		{Kind: "sandbox", ID: "gone/sb0", Why: SkipSandboxInUse},
		{Kind: "log_dir", ID: "ns_gone_gone", Why: SkipPodFailed},
	}
	for _, tc := range []struct {
		planned, now State
		keep         bool
	}{
		{StateCreated, StateCreated, false},
		{StateExited, StateExited, false},
		{StateUnknown, StateExited, false},
		{StateCreated, StateExited, true},
		{StateCreated, StateUnknown, true},
		{StateExited, StateUnknown, true},
		{StateUnknown, StateCreated, true},
	} {
		t.Run(fmt.Sprintf("%s then %s", tc.planned, tc.now), func(t *testing.T) {
			root := t.TempDir()
			paths := logPaths{PodLogs: filepath.Join(root, "pods"), ContainerLogs: filepath.Join(root, "containers")}
			mkdirs(t, filepath.Join(paths.PodLogs, "ns_gone_gone"))
			rt := newFakeRuntime()
			c := ctr("gone", "a", 0, tc.planned, 2*time.Hour)
			rt.addContainer(c, "")
			rt.addSandbox(sbx("gone", 0, false, 3*time.Hour))
			node := NodeState{Containers: []Container{c}, Sandboxes: []Sandbox{sbx("gone", 0, false, 3*time.Hour)},
				LogDirs: []PodLogDir{{Name: "ns_gone_gone", PodUID: "gone", ModTime: t0.Add(-3 * time.Hour)}}}
			plan := policyFor(t, nil).Plan(node, live(), t0)
			rt.setState(c.ID, cri[tc.now])
			out, err := execute(t.Context(), rt, plan, paths, false)
			if err != nil {
				t.Fatal(err)
			}
			if tc.keep {
				if got := removedIDs(out); len(got) > 0 || !rt.containerIDs()[c.ID] {
					t.Errorf("planned %s, %s right before its removal: removed %v (container left: %v); want the container, its sandbox and log directory kept",
						tc.planned, tc.now, got, rt.containerIDs()[c.ID])
				}
				if diff := cmp.Diff(kept, out.Skipped); diff != "" {
					t.Errorf("skipped (-want +got):\n%s", diff)
				}
				return
			}
			if diff := cmp.Diff(removed, removedIDs(out)); diff != "" {
				t.Errorf("planned %s, %s right before its removal: removed (-want +got):\n%s", tc.planned, tc.now, diff)
			}
		})
	}
}

// TestExecuteLinkRemovedByAnotherIsGone: a dangling link planned for
// removal that the kubelet removed meanwhile is skipped as gone (not
// nodegc's removal), not kept as pointing at a log again: the first
// version of the dangling check (now readLink) read a missing link as one that does not dangle,
// and the executor recorded nothing and logged that it pointed at a log.
func TestExecuteLinkRemovedByAnotherIsGone(t *testing.T) {
	root := t.TempDir()
	paths := logPaths{PodLogs: filepath.Join(root, "pods"), ContainerLogs: filepath.Join(root, "containers")}
	if err := os.MkdirAll(paths.ContainerLogs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(paths.PodLogs, 0o755); err != nil {
		t.Fatal(err)
	}
	name := "web_ns_app-0123456789abcdef.log"
	link := filepath.Join(paths.ContainerLogs, name)
	if err := os.Symlink(filepath.Join(paths.PodLogs, "x", "app", "0.log"), link); err != nil {
		t.Fatal(err)
	}
	links, err := scanLogLinks(paths.ContainerLogs, paths.PodLogs)
	if err != nil || len(links) != 1 || !links[0].Dangling {
		t.Fatalf("scan: %+v %v", links, err)
	}
	plan := &Plan{RemoveLogLinks: []LogLinkDecision{{Link: links[0], Reason: ReasonDangling}}}
	if err := os.Remove(link); err != nil { // the kubelet, between plan and removal
		t.Fatal(err)
	}
	out, err := execute(t.Context(), newFakeRuntime(), plan, paths, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Skipped) != 1 || out.Skipped[0].Why != SkipGone {
		t.Errorf("link removed by another since the plan: skipped %+v, removed %+v; want one %s", out.Skipped, out.LogLinks, SkipGone)
	}
}
