package containers_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

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
	doneSB := runPod(done)
	doneIDs := n.runDead(t, doneSB, done.Name, done.Namespace, "app", 1)
	if err := n.StopPod(ctx, doneSB); err != nil {
		t.Fatal(err)
	}
	done.Status.Phase = corev1.PodSucceeded
	if _, err := api.UpdateStatus(ctx, done, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The old Node's kubelet last reported its pod running.
	orphan.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "app",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}
	if _, err := api.UpdateStatus(ctx, orphan, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	doneLogs := filepath.Join(n.PodLogs, fmt.Sprintf("%s_%s_%s", done.Namespace, done.Name, done.UID))
	if !exists(doneLogs) {
		t.Fatalf("no log directory %s", doneLogs)
	}
	exited, running := runtimeapi.ContainerState_CONTAINER_EXITED, runtimeapi.ContainerState_CONTAINER_RUNNING
	wantLeft := map[string]runtimeapi.ContainerState{doneIDs[0]: exited, orphanID: running, webID: running}

	// The pods have been on the node for minutes when the source lists
	// (its clock runs that far ahead; the plans' clock, by which the
	// lease is judged, does not).
	const ahead = 3 * time.Minute
	for _, tc := range []struct {
		name  string
		lease func() // what becomes of the old Node's lease first
		why   string // how Plan.PodsLease begins
	}{
		{"no lease", func() {}, fmt.Sprintf(`node lease of %s unreadable: leases.coordination.k8s.io %q not found`, oldName, oldName)},
		{"a lease last renewed a minute ago", func() { renewNodeLease(t, c, oldName, time.Now().Add(-time.Minute)) },
			"node lease of " + oldName + " stale since "},
	} {
		tc.lease()
		src := startSourceWith(t, c, containers.PodSourceOptions{NodeName: oldName, Clock: laterClock{ahead}})
		testbed.WaitFor(t, 30*time.Second, "the pod source of "+oldName+" to sync", src.HasSynced)
		m, err := containers.NewManager(containers.Options{Config: n.gcConfig(nil), Runtime: n.client, Pods: src, Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		var removed []string
		var plan *containers.Plan
		for range 2 {
			r, err := m.GarbageCollect(ctx, containers.TriggerManual)
			if err != nil {
				t.Fatal(err)
			}
			plan = r.Plan
			removed = append(removed, removals(r.Plan)...)
		}
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

// renewNodeLease creates or renews the lease of Node name, renewed at
// renewed for 40s, as its kubelet would.
func renewNodeLease(t *testing.T, c *cluster.Cluster, name string, renewed time.Time) {
	t.Helper()
	leases := c.Client().CoordinationV1().Leases(corev1.NamespaceNodeLease)
	spec := coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &metav1.MicroTime{Time: renewed}}
	// kube-apiserver creates its namespace soon after it starts.
	testbed.WaitFor(t, 30*time.Second, "the lease of "+name+" to be written", func() bool {
		l, err := leases.Get(t.Context(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = leases.Create(t.Context(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{})
			return err == nil
		}
		if err != nil {
			return false
		}
		l.Spec = spec
		_, err = leases.Update(t.Context(), l, metav1.UpdateOptions{})
		return err == nil
	})
}
