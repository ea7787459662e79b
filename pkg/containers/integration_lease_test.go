package containers_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/cluster"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/internal/testbed/registry"
	"github.com/nodegc/nodegc/pkg/containers"
)

// TestRenamedMachineReadyNodeStaleLease, on a real containerd and a real
// kube-apiserver: the machine ran as node old, and was renamed (its
// kubelet now registers as node new), but nodegc still runs with the old
// name. The old Node is still Ready (the node lifecycle controller has not
// turned it Unknown yet: within its grace period, or kube-controller-
// manager is down), and its kubelet last reported running a pod of it that
// still runs here. The new name's pods run here: one running, which the
// old Node's view lacks, and one finished (still in the API, containers
// exited, sandbox stopped). The old Node's lease, which its kubelet no
// longer renews, is missing, then stale: the pod of the old name does not
// vouch for the old Node's view, which disagrees with the runtime, and the
// container GC removes nothing; its plans say why. Before, the Ready Node
// was enough: the finished pod of the new name went as pod_gone.
func TestRenamedMachineReadyNodeStaleLease(t *testing.T) {
	testbed.RequireRoot(t)
	c := cluster.Start(t, cluster.Options{})
	n := startNode(t, testbed.Containerd2, registry.Start(t))
	ctx := t.Context()
	oldName, newName := "renamed-old", "renamed-new"
	registerNode(t, c, oldName)
	registerNode(t, c, newName)
	readyNode(t, c, oldName)
	api := c.Client().CoreV1().Pods(metav1.NamespaceDefault)
	createPod := func(name, nodeName string) *corev1.Pod {
		p, err := api.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "app", Image: n.image}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	runPod := func(p *corev1.Pod) string {
		sb, err := n.RunPod(ctx, node.PodSpec{Name: p.Name, Namespace: p.Namespace, UID: string(p.UID)})
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
	runApp := func(sb string) string {
		id, err := n.RunContainer(ctx, sb, node.ContainerSpec{Name: "app", Image: n.image})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.WaitContainerState(ctx, id, runtimeapi.ContainerState_CONTAINER_RUNNING, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		return id
	}

	orphan, web, done := createPod("orphan", oldName), createPod("web", newName), createPod("done", newName)
	orphanID, webID := runApp(runPod(orphan)), runApp(runPod(web))
	_, doneIDs, doneLogs := n.finishedPod(t, c, done)
	// The old Node's kubelet last reported its pod running.
	orphan.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "app",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}
	if _, err := api.UpdateStatus(ctx, orphan, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	exited, running := runtimeapi.ContainerState_CONTAINER_EXITED, runtimeapi.ContainerState_CONTAINER_RUNNING
	wantLeft := map[string]runtimeapi.ContainerState{doneIDs[0]: exited, orphanID: running, webID: running}

	// The pods have been on the node for minutes when the source lists
	// (its clock runs that far ahead; the plans' clock, by which the
	// lease is judged, does not).
	const ahead = 3 * time.Minute
	for _, tc := range staleLeases(t, c, oldName) {
		tc.lease()
		plan, removed := collectTwice(t, c, n, containers.PodSourceOptions{NodeName: oldName, Clock: laterClock{ahead}})
		if len(removed) > 0 {
			t.Errorf("%s: removed %v, want nothing", tc.name, removed)
		}
		if plan.PodsAuthoritative || plan.PodsReason != containers.ViewDisagrees || !strings.HasPrefix(plan.PodsLease, tc.why) {
			t.Errorf("%s: pod view authoritative %v, reason %q, node lease %q; want not authoritative, %q, %q...",
				tc.name, plan.PodsAuthoritative, plan.PodsReason, plan.PodsLease, containers.ViewDisagrees, tc.why)
		}
		if diff := cmp.Diff([]containers.PodRef{{UID: string(web.UID), Namespace: web.Namespace, Name: web.Name}}, plan.PodsMissing); diff != "" {
			t.Errorf("%s: pods missing from the view (-want +got):\n%s", tc.name, diff)
		}
		if diff := cmp.Diff(wantLeft, n.containerStates(t)); diff != "" {
			t.Errorf("%s: containers left (-want +got):\n%s", tc.name, diff)
		}
		if !exists(doneLogs) {
			t.Errorf("%s: the finished pod's log directory was removed", tc.name)
		}
		t.Logf("%s: %s", tc.name, plan.PodsLease)
	}
}

// readyNode reports the Node name Ready, as its kubelet would.
func readyNode(t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	n, err := c.Client().CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	if _, err := c.Client().CoreV1().Nodes().UpdateStatus(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestRenamedMachineSameBootOnlyFinishedPods, on a real containerd and a
// real kube-apiserver: the machine ran as node old and was renamed without
// a reboot (its kubelet restarted as node new), but nodegc still runs with
// the old name. The old Node still exists and reports this boot ID, and is
// Ready (the node lifecycle controller has not turned it Unknown yet); the
// new name's kubelet stopped the old name's pods, so nothing of the old
// name runs, and nothing of the new name does either: its only pod here is
// a finished Job's (still in the API, container exited, sandbox stopped).
// The old Node's view lacks nothing that runs, so it agrees with the
// runtime, and lacks the finished pod. Nobody renews the old Node's lease:
// the container GC removes nothing as pod_gone, and its plans say why
// (node_lease_stale). Before, the finished pod's container, sandbox and log
// directory went as pod_gone. Once the lease is fresh again (a kubelet of
// that name renews it), they go.
func TestRenamedMachineSameBootOnlyFinishedPods(t *testing.T) {
	testbed.RequireRoot(t)
	c := cluster.Start(t, cluster.Options{})
	n := startNode(t, testbed.Containerd2, registry.Start(t))
	ctx := t.Context()
	oldName, newName := "samboot-old", "samboot-new"
	bootID := testbed.BootID(t)
	registerNodeBooted(t, c, oldName, bootID)
	registerNodeBooted(t, c, newName, bootID)
	readyNode(t, c, oldName)
	api := c.Client().CoreV1().Pods(metav1.NamespaceDefault)
	done, err := api.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "done"},
		Spec:       corev1.PodSpec{NodeName: newName, RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "app", Image: n.image}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	doneSB, doneIDs, doneLogs := n.finishedPod(t, c, done)

	// The pod has been on the node for minutes when the source lists (its
	// clock runs that far ahead; the plans' clock, by which the lease is
	// judged, does not).
	const ahead = 3 * time.Minute
	gc := func(what string) (*containers.Plan, []string) {
		plan, removed := collectTwice(t, c, n, containers.PodSourceOptions{NodeName: oldName, BootID: bootID, Clock: laterClock{ahead}})
		t.Logf("%s: pod view authoritative %v, reason %q, node lease %q; removed %v", what, plan.PodsAuthoritative, plan.PodsReason, plan.PodsLease, removed)
		return plan, removed
	}
	for _, tc := range staleLeases(t, c, oldName) {
		tc.lease()
		plan, removed := gc(tc.name)
		if len(removed) > 0 {
			t.Errorf("%s: removed %v, want nothing", tc.name, removed)
		}
		if plan.PodsAuthoritative || plan.PodsReason != containers.ViewNodeLeaseStale || !strings.HasPrefix(plan.PodsLease, tc.why) {
			t.Errorf("%s: pod view authoritative %v, reason %q, node lease %q; want not authoritative, %q, %q...",
				tc.name, plan.PodsAuthoritative, plan.PodsReason, plan.PodsLease, containers.ViewNodeLeaseStale, tc.why)
		}
		if diff := cmp.Diff(map[string]runtimeapi.ContainerState{doneIDs[0]: runtimeapi.ContainerState_CONTAINER_EXITED}, n.containerStates(t)); diff != "" {
			t.Errorf("%s: containers left (-want +got):\n%s", tc.name, diff)
		}
		if sbs, err := n.client.ListPodSandboxes(ctx, &runtimeapi.PodSandboxFilter{Id: doneSB}); err != nil || len(sbs) != 1 {
			t.Errorf("%s: the finished pod's sandbox: %d listed (%v), want it kept", tc.name, len(sbs), err)
		}
		if !exists(doneLogs) {
			t.Errorf("%s: the finished pod's log directory was removed", tc.name)
		}
	}

	// The control: a lease some kubelet of the old name renews makes the
	// view this node's, and the pod it lacks goes.
	c.RenewNodeLease(t, oldName, time.Now())
	plan, removed := gc("a fresh lease")
	if !plan.PodsAuthoritative || len(removed) != 3 || exists(doneLogs) {
		t.Errorf("a fresh lease: pod view authoritative %v (%q), removed %v, log directory left %v; want authoritative, the finished pod's container, sandbox and log directory removed",
			plan.PodsAuthoritative, plan.PodsReason, removed, exists(doneLogs))
	}
}

// staleLease is what becomes of a Node's lease (no kubelet renews it) and
// how Plan.PodsLease then begins.
type staleLease struct {
	name  string
	lease func()
	why   string
}

// staleLeases are the leases of Node name that no kubelet renews: none,
// then one last renewed a minute ago (made by its lease func, in turn).
func staleLeases(t *testing.T, c *cluster.Cluster, name string) []staleLease {
	return []staleLease{
		{"no lease", func() {}, fmt.Sprintf(`node lease of %s unreadable: leases.coordination.k8s.io %q not found`, name, name)},
		{"a lease last renewed a minute ago", func() { c.RenewNodeLease(t, name, time.Now().Add(-time.Minute)) },
			"node lease of " + name + " stale since "},
	}
}

// collectTwice starts a pod source with opts and a Manager on n, runs two
// collections, and returns the last plan and what both removed.
func collectTwice(t *testing.T, c *cluster.Cluster, n *testNode, opts containers.PodSourceOptions) (*containers.Plan, []string) {
	t.Helper()
	src := startSourceWith(t, c, opts)
	testbed.WaitFor(t, 30*time.Second, "the pod source of "+opts.NodeName+" to sync", src.HasSynced)
	m, err := containers.NewManager(containers.Options{Config: n.gcConfig(nil), Runtime: n.client, Pods: src, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	var removed []string
	var plan *containers.Plan
	for range 2 {
		r, err := m.GarbageCollect(t.Context(), containers.TriggerManual)
		if err != nil {
			t.Fatal(err)
		}
		plan = r.Plan
		removed = append(removed, removals(r.Plan)...)
	}
	return plan, removed
}

// finishedPod gives the API's pod p, on n, what a finished pod leaves:
// one exited container, its sandbox stopped, its log directory, and the
// phase Succeeded in the API. It returns the sandbox's ID, the
// container's and the log directory.
func (n *testNode) finishedPod(t *testing.T, c *cluster.Cluster, p *corev1.Pod) (string, []string, string) {
	t.Helper()
	ctx := t.Context()
	sb, err := n.RunPod(ctx, node.PodSpec{Name: p.Name, Namespace: p.Namespace, UID: string(p.UID)})
	if err != nil {
		t.Fatal(err)
	}
	ids := n.runDead(t, sb, p.Name, p.Namespace, "app", 1)
	if err := n.StopPod(ctx, sb); err != nil {
		t.Fatal(err)
	}
	p = p.DeepCopy()
	p.Status.Phase = corev1.PodSucceeded
	if _, err := c.Client().CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	logs := filepath.Join(n.PodLogs, fmt.Sprintf("%s_%s_%s", p.Namespace, p.Name, p.UID))
	if !exists(logs) {
		t.Fatalf("no log directory %s", logs)
	}
	return sb, ids, logs
}
