package containers_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/cluster"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/internal/testbed/registry"
	"github.com/nodegc/nodegc/pkg/containers"
)

// TestAPIPodSourceFollowsTheNode, on a real kube-apiserver: a pod view is
// authoritative only while the Node of its name exists. A source whose node
// was never registered syncs and is reachable, yet says node_not_found; it
// turns authoritative when the Node is created and stops being so when the
// Node is deleted.
func TestAPIPodSourceFollowsTheNode(t *testing.T) {
	testbed.RequireRoot(t)
	c := cluster.Start(t, cluster.Options{})
	const name = "late-node"
	src := startSource(t, c, name)
	reason := func() string {
		v := src.View(time.Now())
		if v.Authoritative {
			return "authoritative"
		}
		return v.Reason
	}
	testbed.WaitFor(t, 30*time.Second, "the pod source to sync", src.HasSynced)
	if got := reason(); got != "node_not_found" {
		t.Errorf("synced, no Node %q: view %q, want node_not_found", name, got)
	}
	registerNode(t, c, name)
	created := time.Now()
	testbed.WaitFor(t, 30*time.Second, "the view to turn authoritative once the Node exists", func() bool { return reason() == "authoritative" })
	t.Logf("Node created: the view is authoritative %v later", time.Since(created).Round(time.Millisecond))
	if err := c.Client().CoreV1().Nodes().Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	testbed.WaitFor(t, 30*time.Second, "the view to say node_not_found once the Node is deleted", func() bool { return reason() == "node_not_found" })
	t.Logf("Node deleted: the view says node_not_found %v later", time.Since(deleted).Round(time.Millisecond))
}

// TestWrongNodeNameCollectsNothing, on a real containerd of each version
// and a real kube-apiserver: a node runs a finished pod (deleted from the
// API, sandbox stopped, containers exited), a crash-looping pod (ready
// sandbox, exited instances and a running one) and a running pod. A
// container GC given the name of a Node that does not exist, then the name
// of another registered Node, makes several runs and removes nothing as
// pod_gone, and its plans say why; given the right name, it collects the
// finished pod (containers, sandbox, log directory) and leaves the others
// to their per-container limit. Then a pod force-deleted from the API while
// it runs, seen by a fresh source (nodegc restarted), leaves the view
// authoritative: the crash-looping pod it lists runs here.
func TestWrongNodeNameCollectsNothing(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	onEachContainerd(t, func(t *testing.T, v testbed.ContainerdVersion, n *testNode) {
		began := time.Now()
		wrongNodeScenario(t, c, n, strings.ReplaceAll(string(v), ".", "-"))
		t.Logf("containerd %s: wrong-node scenario took %v", v, time.Since(began).Round(time.Millisecond))
	})
}

func wrongNodeScenario(t *testing.T, c *cluster.Cluster, n *testNode, suffix string) {
	ctx := t.Context()
	right, other, missing := "node-"+suffix, "other-"+suffix, "missing-"+suffix
	registerNode(t, c, right)
	c.KubeletRenews(t, right)
	registerNode(t, c, other)
	api := c.Client().CoreV1().Pods(metav1.NamespaceDefault)
	createPod := func(name, nodeName string) *corev1.Pod {
		p, err := api.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-" + suffix},
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
	runApp := func(sb string, attempt uint32) string {
		id, err := n.RunContainer(ctx, sb, node.ContainerSpec{Name: "app", Image: n.image, Attempt: attempt})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.WaitContainerState(ctx, id, runtimeapi.ContainerState_CONTAINER_RUNNING, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		return id
	}

	finished, crashy, running := createPod("finished", right), createPod("crashy", right), createPod("running", right)
	createPod("elsewhere", other) // the other node has a pod of its own
	finishedSB := runPod(finished)
	// An init container and the main one, each ran once.
	finishedIDs := append(n.runDead(t, finishedSB, finished.Name, finished.Namespace, "init", 1),
		n.runDead(t, finishedSB, finished.Name, finished.Namespace, "app", 1)...)
	if err := n.StopPod(ctx, finishedSB); err != nil {
		t.Fatal(err)
	}
	if err := api.Delete(ctx, finished.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	crashySB := runPod(crashy)
	crashyDead := n.runDead(t, crashySB, crashy.Name, crashy.Namespace, "app", 3)
	crashyRunning := runApp(crashySB, 3)
	runningID := runApp(runPod(running), 0)
	finishedLogs := filepath.Join(n.PodLogs, fmt.Sprintf("%s_%s_%s", finished.Namespace, finished.Name, finished.UID))
	if !exists(finishedLogs) {
		t.Fatalf("no log directory %s", finishedLogs)
	}

	// The node's pods have been running for minutes when nodegc lists them
	// (ListSkew is a minute): the sources' clocks run that much ahead.
	const ahead = 3 * time.Minute
	cfg := n.gcConfig(nil) // maxPerPodContainer 1: the crash-looping pod keeps one dead instance
	type run struct {
		authoritative float64
		plan          *containers.Plan
		removed       []string // POD/what:reason
	}
	collect := func(nodeName string) run {
		t.Helper()
		src := startSourceWith(t, c, containers.PodSourceOptions{NodeName: nodeName, Clock: laterClock{ahead}})
		testbed.WaitFor(t, 30*time.Second, "the pod source of "+nodeName+" to sync", src.HasSynced)
		reg := prometheus.NewRegistry()
		m, err := containers.NewManager(containers.Options{Config: cfg, Runtime: n.client, Pods: src, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		var last run
		for range 3 {
			r, err := m.GarbageCollect(ctx, containers.TriggerManual)
			if err != nil {
				t.Fatal(err)
			}
			last.plan = r.Plan
			for _, d := range r.Outcome.Containers {
				last.removed = append(last.removed, d.Container.PodName+"/"+d.Container.ID+":"+d.Reason)
			}
			for _, d := range r.Outcome.Sandboxes {
				last.removed = append(last.removed, d.Sandbox.PodName+"/sandbox:"+d.Reason)
			}
			for _, d := range r.Outcome.LogDirs {
				last.removed = append(last.removed, d.Dir.Name+":"+d.Reason)
			}
		}
		last.authoritative = gaugeValue(t, reg, "nodegc_container_gc_pod_view_authoritative")
		return last
	}
	states := func() map[string]runtimeapi.ContainerState { return n.containerStates(t) }
	exited, runningState := runtimeapi.ContainerState_CONTAINER_EXITED, runtimeapi.ContainerState_CONTAINER_RUNNING
	wantLeft := map[string]runtimeapi.ContainerState{
		finishedIDs[0]: exited, finishedIDs[1]: exited,
		crashyDead[2]: exited, crashyRunning: runningState, runningID: runningState,
	}
	limitRemovals := []string{
		crashy.Name + "/" + crashyDead[0] + ":per_container_limit", crashy.Name + "/" + crashyDead[1] + ":per_container_limit",
	}
	slices.Sort(limitRemovals)

	ref := func(p *corev1.Pod) containers.PodRef {
		return containers.PodRef{UID: string(p.UID), Namespace: p.Namespace, Name: p.Name}
	}
	for _, tc := range []struct {
		name, nodeName, reason string
		missingPods            []containers.PodRef // the pods the plan names as missing from the view
	}{
		{"a Node that does not exist", missing, containers.ViewNodeNotFound, nil},
		{"another registered Node", other, containers.ViewDisagrees, []containers.PodRef{ref(crashy), ref(running)}},
	} {
		r := collect(tc.nodeName)
		slices.Sort(r.removed)
		var want []string
		if tc.nodeName == missing {
			want = limitRemovals // the first wrong name's first run applies the per-container limit
		}
		if diff := cmp.Diff(want, r.removed); diff != "" {
			t.Errorf("%s (%s): removed (-want +got):\n%s", tc.name, tc.nodeName, diff)
		}
		if r.plan.PodsAuthoritative || r.plan.PodsReason != tc.reason || r.authoritative != 0 {
			t.Errorf("%s (%s): plan pod view authoritative %v, reason %q, metric %v; want false, %q, 0",
				tc.name, tc.nodeName, r.plan.PodsAuthoritative, r.plan.PodsReason, r.authoritative, tc.reason)
		}
		if diff := cmp.Diff(tc.missingPods, r.plan.PodsMissing); diff != "" {
			t.Errorf("%s (%s): pods missing from the view (-want +got):\n%s", tc.name, tc.nodeName, diff)
		}
		if diff := cmp.Diff(wantLeft, states()); diff != "" {
			t.Errorf("%s (%s): containers left (-want +got):\n%s", tc.name, tc.nodeName, diff)
		}
		if !exists(finishedLogs) {
			t.Errorf("%s (%s): the finished pod's log directory was removed", tc.name, tc.nodeName)
		}
	}
	if t.Failed() {
		return
	}

	r := collect(right)
	slices.Sort(r.removed)
	wantRemoved := []string{
		filepath.Base(finishedLogs) + ":pod_gone",
		finished.Name + "/" + finishedIDs[0] + ":pod_gone", finished.Name + "/" + finishedIDs[1] + ":pod_gone",
		finished.Name + "/sandbox:pod_gone",
	}
	slices.Sort(wantRemoved)
	if diff := cmp.Diff(wantRemoved, r.removed); diff != "" {
		t.Errorf("the right node name: removed (-want +got):\n%s", diff)
	}
	if !r.plan.PodsAuthoritative || r.authoritative != 1 {
		t.Errorf("the right node name: plan pod view authoritative %v (%q), metric %v; want authoritative", r.plan.PodsAuthoritative, r.plan.PodsReason, r.authoritative)
	}
	delete(wantLeft, finishedIDs[0])
	delete(wantLeft, finishedIDs[1])
	if diff := cmp.Diff(wantLeft, states()); diff != "" {
		t.Errorf("the right node name: containers left (-want +got):\n%s", diff)
	}
	if exists(finishedLogs) {
		t.Error("the right node name: the finished pod's log directory is still there")
	}

	// The running pod is force-deleted from the API while its container
	// runs on (a process the kubelet cannot stop), and nodegc restarts: a
	// fresh source never saw the deletion. The crash-looping pod, which
	// the view lists and the kubelet of the Ready Node reports running,
	// runs here: the view is this node's, and stays authoritative; the
	// deleted pod is named and kept as running.
	// The kubelet of the Ready Node, which renews its lease, reports the
	// crash-looping pod running.
	readyNode(t, c, right)
	c.RenewNodeLease(t, right, time.Now())
	crashy.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "app", RestartCount: 3,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}
	if _, err := api.UpdateStatus(ctx, crashy, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := api.Delete(ctx, running.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	r = collect(right)
	if len(r.removed) > 0 || !r.plan.PodsAuthoritative || r.authoritative != 1 {
		t.Errorf("a pod force-deleted while it runs, after a restart: removed %v, plan pod view authoritative %v (%q), metric %v; want nothing removed, authoritative",
			r.removed, r.plan.PodsAuthoritative, r.plan.PodsReason, r.authoritative)
	}
	if diff := cmp.Diff([]containers.PodRef{ref(running)}, r.plan.PodsMissing); diff != "" {
		t.Errorf("a pod force-deleted while it runs: pods missing from the view (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantLeft, states()); diff != "" {
		t.Errorf("a pod force-deleted while it runs: containers left (-want +got):\n%s", diff)
	}
}

// gaugeValue reads the value of the gauge name from reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

// TestWrongNodeNameOnAnIdleNode, on a real containerd and a real
// kube-apiserver: nothing runs on the node (as after a reboot, before the
// kubelet started its pods again; or a node of finished Jobs): one pod,
// still in the API, whose container ran and exited and whose sandbox is
// stopped. The runtime then shows no pod that a view of the wrong node
// would lack, so only the boot ID tells the name is wrong. Given the name
// of another registered Node, whose kubelet reports another boot ID, the
// container GC removes nothing (view node_other_boot); given the right
// name, the pod is live, and its newest dead container, its sandbox and its
// log directory stay. (Without the boot ID, the wrong name removed the
// container, the sandbox and the log directory as pod_gone.)
func TestWrongNodeNameOnAnIdleNode(t *testing.T) {
	testbed.RequireRoot(t)
	c := cluster.Start(t, cluster.Options{})
	n := startNode(t, testbed.Containerd2, registry.Start(t))
	ctx := t.Context()
	bootID := testbed.BootID(t)
	right, other := "idle-node", "idle-other"
	registerNodeBooted(t, c, right, bootID)
	c.KubeletRenews(t, right)
	registerNodeBooted(t, c, other, "5e0c8f9a-2b1d-4c3e-9f7a-another-boot")
	p, err := c.Client().CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "idle"},
		Spec:       corev1.PodSpec{NodeName: right, Containers: []corev1.Container{{Name: "app", Image: n.image}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := n.RunPod(ctx, node.PodSpec{Name: p.Name, Namespace: p.Namespace, UID: string(p.UID)})
	if err != nil {
		t.Fatal(err)
	}
	dead := n.runDead(t, sb, p.Name, p.Namespace, "app", 1)
	if err := n.StopPod(ctx, sb); err != nil {
		t.Fatal(err)
	}
	logs := filepath.Join(n.PodLogs, fmt.Sprintf("%s_%s_%s", p.Namespace, p.Name, p.UID))
	if !exists(logs) {
		t.Fatalf("no log directory %s", logs)
	}

	for _, tc := range []struct{ nodeName, reason string }{
		{other, containers.ViewNodeOtherBoot},
		{right, ""},
	} {
		// The pod has been on the node for minutes when the source lists
		// (the source's clock runs ahead): were the view to lack it, the
		// pod would be gone.
		src := startSourceWith(t, c, containers.PodSourceOptions{NodeName: tc.nodeName, BootID: bootID, Clock: laterClock{3 * time.Minute}})
		testbed.WaitFor(t, 30*time.Second, "the pod source of "+tc.nodeName+" to sync", src.HasSynced)
		m, err := containers.NewManager(containers.Options{Config: n.gcConfig(nil), Runtime: n.client, Pods: src, Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		var removed []string
		var plan *containers.Plan
		for range 3 {
			r, err := m.GarbageCollect(ctx, containers.TriggerManual)
			if err != nil {
				t.Fatal(err)
			}
			plan = r.Plan
			for _, d := range r.Outcome.Containers {
				removed = append(removed, "container "+d.Container.ID+":"+d.Reason)
			}
			for _, d := range r.Outcome.Sandboxes {
				removed = append(removed, "sandbox:"+d.Reason)
			}
			for _, d := range r.Outcome.LogDirs {
				removed = append(removed, d.Dir.Name+":"+d.Reason)
			}
		}
		if len(removed) > 0 {
			t.Errorf("node name %s: removed %v, want nothing", tc.nodeName, removed)
		}
		if authoritative := tc.reason == ""; plan.PodsAuthoritative != authoritative || plan.PodsReason != tc.reason {
			t.Errorf("node name %s: pod view authoritative %v, reason %q; want %v, %q", tc.nodeName, plan.PodsAuthoritative, plan.PodsReason, authoritative, tc.reason)
		}
		if _, ok := n.containerStates(t)[dead[0]]; !ok {
			t.Errorf("node name %s: the live pod's only dead container is gone", tc.nodeName)
		}
		if !exists(logs) {
			t.Errorf("node name %s: the live pod's log directory is gone", tc.nodeName)
		}
	}
}
