package containers_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/pkg/containers"
)

// TestRotatingLinkOfLongNamedContainerKept, on a real containerd: a running
// container whose pod name, namespace and container name are long has its
// /var/log/containers link cut to 255 bytes by the kubelet, so the name
// keeps only a prefix of the container ID (61 of 64 characters here). While
// the kubelet rotates that container's log (renames it, then reopens it),
// the link dangles for a moment. It belongs to a running container, and
// must stay: the kubelet never makes it again, and log shippers that read
// /var/log/containers would lose the container for the rest of its life.
// The kubelet asks the runtime for the status of the ID prefix, which
// containerd resolves. Before, nodegc looked the prefix up as a whole ID,
// found no container, and removed the link as dangling.
func TestRotatingLinkOfLongNamedContainerKept(t *testing.T) {
	n := startNode(t, testbed.Containerd2, nil)
	ctx := t.Context()
	podName, podNS := strings.Repeat("p", 180), "team"
	sb, err := n.RunPod(ctx, node.PodSpec{Name: podName, Namespace: podNS})
	if err != nil {
		t.Fatal(err)
	}
	id, err := n.RunContainer(ctx, sb, node.ContainerSpec{Name: "app", Image: n.image})
	if err != nil {
		t.Fatal(err)
	}
	st, err := n.WaitContainerState(ctx, id, runtimeapi.ContainerState_CONTAINER_RUNNING, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The kubelet's link name: POD_NAMESPACE_CONTAINER-ID, cut to leave
	// room for ".log" in 255 bytes.
	name := fmt.Sprintf("%s_%s_%s-%s", podName, podNS, "app", id)
	name = name[:255-len(".log")]
	prefix := name[strings.LastIndexByte(name, '-')+1:]
	link := filepath.Join(n.linkDir, name+".log")
	if err := os.Symlink(st.GetLogPath(), link); err != nil {
		t.Fatal(err)
	}
	// The first step of a rotation: the log is renamed, the link dangles.
	if err := os.Rename(st.GetLogPath(), st.GetLogPath()+".20261129-060000"); err != nil {
		t.Fatal(err)
	}
	t.Logf("the link keeps %d of the ID's %d characters", len(prefix), len(id))

	r, err := n.manager(t, n.gcConfig(nil), nil).GarbageCollect(ctx, containers.TriggerManual)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(link); err != nil {
		t.Errorf("the link of running container %s, dangling while its log rotates, was removed (%v); plan: %+v", id[:12], err, r.Plan.RemoveLogLinks)
	}
}

// TestLogRemovalStaysInItsDirectory, on a real containerd: pod A's log
// directory for container app is replaced by a symbolic link to pod B's
// (anything with write access to the pod logs directory can do it: a log
// agent given /var/log read-write). Removing A's older instance of app
// removes its log files, LOGPATH*; through the link, LOGPATH is B's running
// container's log. Before, nodegc removed it. Now no log file is removed
// whose directory is reached through a symbolic link below the pod logs
// directory: as for any log removal that fails, the instance stays, and
// the run reports the error, which names the link.
func TestLogRemovalStaysInItsDirectory(t *testing.T) {
	n := startNode(t, testbed.Containerd2, nil)
	ctx := t.Context()
	sbB, err := n.RunPod(ctx, node.PodSpec{Name: "b", Namespace: "ns", UID: "0b000000-0000-4000-8000-00000000000b"})
	if err != nil {
		t.Fatal(err)
	}
	idB, err := n.RunContainer(ctx, sbB, node.ContainerSpec{Name: "app", Image: n.image})
	if err != nil {
		t.Fatal(err)
	}
	stB, err := n.WaitContainerState(ctx, idB, runtimeapi.ContainerState_CONTAINER_RUNNING, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sbA, err := n.RunPod(ctx, node.PodSpec{Name: "a", Namespace: "ns", UID: "0a000000-0000-4000-8000-00000000000a"})
	if err != nil {
		t.Fatal(err)
	}
	ids := n.runDead(t, sbA, "a", "ns", "app", 2)
	dirA := filepath.Join(n.PodLogs, "ns_a_0a000000-0000-4000-8000-00000000000a", "app")
	if err := os.Rename(dirA, dirA+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(stB.GetLogPath()), dirA); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stB.GetLogPath()); err != nil {
		t.Fatalf("B's log before the GC: %v", err)
	}

	r, err := n.manager(t, n.gcConfig(nil), nil).GarbageCollect(ctx, containers.TriggerManual)
	if !slices.ContainsFunc(r.Plan.RemoveContainers, func(d containers.ContainerDecision) bool { return d.Container.ID == ids[0] }) {
		t.Fatalf("A's older instance %s is not planned for removal; the test needs it (plan: %+v)", ids[0][:12], r.Plan.RemoveContainers)
	}
	if _, err := os.Stat(stB.GetLogPath()); err != nil {
		t.Errorf("B's running container's log, reached through A's linked directory, was removed: %v", err)
	}
	if err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("GC error %v; want one naming the symbolic link", err)
	}
	if _, ok := n.containerStates(t)[ids[0]]; !ok {
		t.Errorf("A's older instance %s was removed although its logs could not be", ids[0][:12])
	}
}

// TestLinkOfAnotherInstanceKept, on a real containerd: with a namespace of
// 40 bytes, a pod name of 177 (the longest the pod's log directory,
// NAMESPACE_NAME_UID, leaves room for) and a container name of 40, the
// kubelet's 255-byte cut leaves no container ID in the
// /var/log/containers link name, so every instance of the pod's container
// has the same link name. The kubelet makes the link at an instance's
// start, where none is; here it points at the running instance's log
// (attempt 2). The GC removes the oldest exited instance (attempt 0,
// maxPerPodContainer 1) and its logs: the link, which is not its own (it
// points at another instance's log, which exists), stays. Before, nodegc
// removed it, and log shippers reading /var/log/containers lost the
// running container. Also while the running instance's log is being
// rotated (renamed, not yet opened again by the runtime), when the link
// dangles for a moment: it names no container, but points at a running
// one's log. Before, it went then, as the old instance's and as dangling.
func TestLinkOfAnotherInstanceKept(t *testing.T) {
	for _, rotating := range []bool{false, true} {
		t.Run(fmt.Sprintf("rotating=%v", rotating), func(t *testing.T) { linkOfAnotherInstanceKept(t, rotating) })
	}
}

func linkOfAnotherInstanceKept(t *testing.T, rotating bool) {
	n := startNode(t, testbed.Containerd2, nil)
	ctx := t.Context()
	podName, podNS, ctrName := strings.Repeat("p", 177), strings.Repeat("n", 40), strings.Repeat("c", 40)
	sb, err := n.RunPod(ctx, node.PodSpec{Name: podName, Namespace: podNS})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for attempt, args := range [][]string{{"exit", "1"}, {"exit", "1"}, nil} {
		id, err := n.RunContainer(ctx, sb, node.ContainerSpec{Name: ctrName, Image: n.image, Args: args, Attempt: uint32(attempt)})
		if err != nil {
			t.Fatal(err)
		}
		want := runtimeapi.ContainerState_CONTAINER_EXITED
		if args == nil {
			want = runtimeapi.ContainerState_CONTAINER_RUNNING
		}
		if _, err := n.WaitContainerState(ctx, id, want, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	st, err := n.client.ContainerStatus(ctx, ids[2])
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("%s_%s_%s-%s", podName, podNS, ctrName, ids[2])[:255-len(".log")]
	if strings.Contains(name, "-") {
		t.Fatalf("the link name %s keeps part of the ID; the test needs it cut before", name)
	}
	link := filepath.Join(n.linkDir, name+".log")
	if err := os.Symlink(st.GetLogPath(), link); err != nil {
		t.Fatal(err)
	}
	if rotating {
		if err := os.Rename(st.GetLogPath(), st.GetLogPath()+".20261130-021500"); err != nil {
			t.Fatal(err)
		}
	}

	r, err := n.manager(t, n.gcConfig(nil), nil).GarbageCollect(ctx, containers.TriggerManual)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(r.Outcome.Containers, func(d containers.ContainerDecision) bool { return d.Container.ID == ids[0] }) {
		t.Fatalf("the oldest instance %s was not removed; the test needs it (plan: %+v)", ids[0][:12], r.Plan.RemoveContainers)
	}
	if target, err := os.Readlink(link); err != nil || target != st.GetLogPath() {
		t.Errorf("the link of running instance %s (attempt 2), whose name the oldest instance's shares, is %q (%v) after that one's removal (its log rotating: %v); want it kept, pointing at %s",
			ids[2][:12], target, err, rotating, st.GetLogPath())
	}
}

// TestUnseenPodLogsKeepEverything, on a real containerd: a disk is mounted
// on the pod logs directory after the containers started (here a tmpfs
// over nodegc's podLogsDirectory: on a node, a disk the operator mounts on
// /var/log/pods on the host, which nodegc's hostPath mount, without
// propagation, does not show). nodegc then sees none of the logs the
// runtime reports there, not even the running container's. Before, every
// /var/log/containers link of an exited container counted as dangling and
// went, the newest dead instance's included, and the older instances went
// by the per-container limit with their log files left behind. Now the
// run keeps every link and every container whose logs would stay behind,
// and the plan says why.
func TestUnseenPodLogsKeepEverything(t *testing.T) {
	testbed.RequireRoot(t)
	n := startNode(t, testbed.Containerd2, nil)
	ctx := t.Context()
	sb, err := n.RunPod(ctx, node.PodSpec{Name: "p", Namespace: "ns", UID: "0c000000-0000-4000-8000-00000000000c"})
	if err != nil {
		t.Fatal(err)
	}
	ids := n.runDead(t, sb, "p", "ns", "app", 3)
	id, err := n.RunContainer(ctx, sb, node.ContainerSpec{Name: "app", Image: n.image, Attempt: 3})
	if err != nil {
		t.Fatal(err)
	}
	st, err := n.WaitContainerState(ctx, id, runtimeapi.ContainerState_CONTAINER_RUNNING, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	links := map[string]string{id: n.link(t, "p", "ns", "app", id, st.GetLogPath())}
	for _, dead := range ids {
		links[dead] = filepath.Join(n.linkDir, fmt.Sprintf("p_ns_app-%s.log", dead))
	}
	if err := unix.Mount("tmpfs", n.PodLogs, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(n.PodLogs, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting the tmpfs over %s: %v", n.PodLogs, err)
		}
	})

	r, err := n.manager(t, n.gcConfig(nil), nil).GarbageCollect(ctx, containers.TriggerManual)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range r.Plan.RemoveLogLinks {
		t.Logf("plan removes link %s (%s)", d.Link.Name, d.Reason)
	}
	for cid, link := range links {
		if _, err := os.Lstat(link); err != nil {
			t.Errorf("the link of %s went (%v), though nodegc sees none of the logs under %s", cid[:12], err, n.PodLogs)
		}
	}
	states := n.containerStates(t)
	for _, cid := range ids {
		if _, ok := states[cid]; !ok {
			t.Errorf("exited instance %s was removed, its log files, which nodegc cannot see, left behind", cid[:12])
		}
	}
	if !r.Plan.PodLogsUnseen {
		t.Error("the plan does not say that the pod logs are unseen")
	}
	var unseen []string
	for _, d := range r.Plan.KeepContainers {
		if d.Reason == containers.KeepLogsUnseen {
			unseen = append(unseen, d.Container.ID)
		}
	}
	if want := ids[:2]; !slices.Equal(slices.Sorted(slices.Values(unseen)), slices.Sorted(slices.Values(want))) {
		t.Errorf("containers kept as %s: %v; want the older instances %v, which the per-container limit removes", containers.KeepLogsUnseen, unseen, want)
	}
}
