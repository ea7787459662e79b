package containers_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/cluster"
	"github.com/nodegc/nodegc/pkg/containers"
)

// TestOtherRuntimeCollectsNothing, on a real containerd of each version and
// a real kube-apiserver: nodegc asks a runtime that is not the kubelet's (a
// distro containerd next to k3s's own). The API server says two pods run on
// the node, started two hours ago; the test's containerd runs none of them.
// The shared pod logs directory holds the log directories of a pod
// force-deleted while, in the kubelet's runtime, its container still runs
// (the watch saw the deletion), and of one the list lacks, with a link of
// that container whose log rotates (dangling). nodegc makes several runs
// and removes nothing: its plans say the runtime lacks the view's pods and
// name them, and the pod view metric is 0. Once the API server says no pod
// runs there (nothing to check), the same runtime agrees with the view and
// the log directories and the link go: the check is what kept them.
func TestOtherRuntimeCollectsNothing(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	onEachContainerd(t, func(t *testing.T, v testbed.ContainerdVersion, n *testNode) {
		otherRuntimeScenario(t, c, n, strings.ReplaceAll(string(v), ".", "-"))
	})
}

func otherRuntimeScenario(t *testing.T, c *cluster.Cluster, n *testNode, suffix string) {
	ctx := t.Context()
	nodeName := "kubelets-" + suffix
	registerNode(t, c, nodeName)
	c.KubeletRenews(t, nodeName)
	api := c.Client().CoreV1().Pods(metav1.NamespaceDefault)
	startedAt := metav1.NewTime(time.Now().Add(-2 * time.Hour).Truncate(time.Second))
	createPod := func(name string, running bool) *corev1.Pod {
		p, err := api.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-" + suffix},
			Spec:       corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "app", Image: n.image}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !running {
			return p
		}
		// As the kubelet reports a pod whose container runs.
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &startedAt, ContainerStatuses: []corev1.ContainerStatus{{
			Name: "app", Image: n.image, Ready: true, ContainerID: "containerd://" + strings.Repeat("ab", 32),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: startedAt}},
		}}}
		if p, err = api.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	web, db := createPod("web", true), createPod("db", true)
	forced := createPod("forced", true)

	// The kubelet's pod logs of a pod the list lacks, and of the pod
	// force-deleted below, two hours old.
	logDir := func(name, uid string) string {
		d := filepath.Join(n.PodLogs, fmt.Sprintf("%s_%s_%s", metav1.NamespaceDefault, name, uid))
		if err := os.MkdirAll(filepath.Join(d, "app"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "app", "0.log"), []byte("log\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{filepath.Join(d, "app", "0.log"), filepath.Join(d, "app"), d} {
			if err := os.Chtimes(p, startedAt.Time, startedAt.Time); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	unlistedLogs := logDir("unlisted-"+suffix, string(uuid.NewUUID()))
	forcedLogs := logDir(forced.Name, string(forced.UID))
	// The link of forced's running container, caught while its log
	// rotates: its target is missing for a moment.
	link := n.link(t, forced.Name, forced.Namespace, "app", strings.Repeat("ab", 32), filepath.Join(forcedLogs, "app", "1.log"))

	cfg := n.gcConfig(nil)
	src := startSourceWith(t, c, containers.PodSourceOptions{NodeName: nodeName, Clock: laterClock{3 * time.Minute}})
	testbed.WaitFor(t, 30*time.Second, "the pod source to sync", src.HasSynced)
	reg := prometheus.NewRegistry()
	m, err := containers.NewManager(containers.Options{Config: cfg, Runtime: n.client, Pods: src, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	// Force-deleted while its container runs in the kubelet's runtime.
	if err := api.Delete(ctx, forced.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	testbed.WaitFor(t, 30*time.Second, "the view to see the forced deletion", func() bool {
		v := src.View(time.Now())
		return v.Deleted[string(forced.UID)] && len(v.Running) == 2
	})

	plan, removed := collectLogsThrice(t, m)
	if len(removed) > 0 {
		t.Errorf("another runtime than the kubelet's: removed %v, want nothing", removed)
	}
	ref := func(p *corev1.Pod) containers.PodRef {
		return containers.PodRef{UID: string(p.UID), Namespace: p.Namespace, Name: p.Name}
	}
	if plan.PodsAuthoritative || plan.PodsReason != containers.ViewRuntimeLacksPods {
		t.Errorf("plan pod view authoritative %v, reason %q; want false, %q", plan.PodsAuthoritative, plan.PodsReason, containers.ViewRuntimeLacksPods)
	}
	if diff := cmp.Diff([]containers.PodRef{ref(db), ref(web)}, plan.PodsNotInRuntime); diff != "" {
		t.Errorf("pods the plan names as not in the runtime (-want +got):\n%s", diff)
	}
	if got := gaugeValue(t, reg, "nodegc_container_gc_pod_view_authoritative"); got != 0 {
		t.Errorf("pod view authoritative = %v, want 0", got)
	}
	for _, p := range []string{unlistedLogs, forcedLogs, link} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if t.Failed() {
		return
	}

	// The API server no longer says any pod runs on the node: nothing
	// to check the runtime against, and the view is authoritative.
	for _, p := range []*corev1.Pod{web, db} {
		if err := api.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}
	testbed.WaitFor(t, 30*time.Second, "the view to see the deletions", func() bool { return len(src.View(time.Now()).Running) == 0 })
	plan, removed = collectLogsThrice(t, m)
	want := []string{filepath.Base(link) + ":dangling", filepath.Base(forcedLogs) + ":pod_gone", filepath.Base(unlistedLogs) + ":pod_gone"}
	slices.Sort(want)
	if diff := cmp.Diff(want, removed); diff != "" {
		t.Errorf("no pod runs: removed (-want +got):\n%s", diff)
	}
	if !plan.PodsAuthoritative {
		t.Errorf("no pod runs: plan pod view not authoritative (%q)", plan.PodsReason)
	}
}

// TestNodeOfAnotherRuntimeCollectsNothing, on a real containerd of each
// version and a real kube-apiserver: nodegc asks a runtime that is not the
// kubelet's, on an idle node (no pod runs, so nothing to compare the
// runtime's listing with). The Node's kubelet reports its runtime, k3s's
// containerd; the test's containerd answers another version. The pod logs
// directory holds the log directory of a pod the list lacks, and a dangling
// link. nodegc makes several runs and removes nothing: its plans say the
// Node reports another runtime and name both, and the pod view metric is 0.
// Once the kubelet reports the runtime nodegc asks (as it writes it:
// "containerd://2.4.2" for a "v2.4.2"), the log directory and the link go:
// the check is what kept them.
func TestNodeOfAnotherRuntimeCollectsNothing(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	onEachContainerd(t, func(t *testing.T, v testbed.ContainerdVersion, n *testNode) {
		ctx := t.Context()
		suffix := strings.ReplaceAll(string(v), ".", "-")
		node := registerNodeBooted(t, c, "idle-"+suffix, "boot-"+suffix)
		c.KubeletRenews(t, node.Name)
		reports := func(runtime string) {
			t.Helper()
			node.Status.NodeInfo.ContainerRuntimeVersion = runtime
			var err error
			if node, err = c.Client().CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		reports("containerd://1.7.23-k3s2")
		old := time.Now().Add(-2 * time.Hour)
		logs := filepath.Join(n.PodLogs, fmt.Sprintf("%s_unlisted-%s_%s", metav1.NamespaceDefault, suffix, uuid.NewUUID()))
		if err := os.MkdirAll(filepath.Join(logs, "app"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{filepath.Join(logs, "app"), logs} {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
		link := n.link(t, "unlisted-"+suffix, metav1.NamespaceDefault, "app", strings.Repeat("cd", 32), filepath.Join(logs, "app", "0.log"))

		src := startSourceWith(t, c, containers.PodSourceOptions{NodeName: node.Name, BootID: "boot-" + suffix})
		testbed.WaitFor(t, 30*time.Second, "the pod source to sync", src.HasSynced)
		testbed.WaitFor(t, 30*time.Second, "the view to say the Node's runtime", func() bool {
			return src.View(time.Now()).NodeRuntime == "containerd://1.7.23-k3s2"
		})
		reg := prometheus.NewRegistry()
		m, err := containers.NewManager(containers.Options{Config: n.gcConfig(nil), Runtime: n.client, Pods: src, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		plan, removed := collectLogsThrice(t, m)
		if len(removed) > 0 {
			t.Errorf("the Node reports another runtime: removed %v, want nothing", removed)
		}
		// As the kubelet writes it: its runtime's version read as a
		// semantic version, or else a generic one ("v2.4.2" is 2.4.2,
		// Debian's "1.6.20~ds1" is 1.6.20).
		rv := n.client.RuntimeVersion()
		read, err := version.ParseSemantic(rv.GetRuntimeVersion())
		if err != nil {
			if read, err = version.ParseGeneric(rv.GetRuntimeVersion()); err != nil {
				t.Fatal(err)
			}
		}
		asks := rv.GetRuntimeName() + "://" + read.String()
		if plan.PodsAuthoritative || plan.PodsReason != containers.ViewNodeOtherRuntime ||
			plan.NodeRuntime != "containerd://1.7.23-k3s2" || plan.Runtime != asks {
			t.Errorf("plan pod view authoritative %v, reason %q, Node's runtime %q, asked %q; want false, %q, containerd://1.7.23-k3s2, %q",
				plan.PodsAuthoritative, plan.PodsReason, plan.NodeRuntime, plan.Runtime, containers.ViewNodeOtherRuntime, asks)
		}
		if got := gaugeValue(t, reg, "nodegc_container_gc_pod_view_authoritative"); got != 0 {
			t.Errorf("pod view authoritative = %v, want 0", got)
		}
		for _, p := range []string{logs, link} {
			if _, err := os.Lstat(p); err != nil {
				t.Errorf("%s: %v", p, err)
			}
		}
		if t.Failed() {
			return
		}

		// The kubelet reports the runtime nodegc asks, as it writes it.
		reports(asks)
		testbed.WaitFor(t, 30*time.Second, "the view to say the Node's runtime", func() bool {
			return src.View(time.Now()).NodeRuntime == asks
		})
		plan, removed = collectLogsThrice(t, m)
		want := []string{filepath.Base(link) + ":dangling", filepath.Base(logs) + ":pod_gone"}
		slices.Sort(want)
		if diff := cmp.Diff(want, removed); diff != "" {
			t.Errorf("the Node reports the runtime nodegc asks: removed (-want +got):\n%s", diff)
		}
		if !plan.PodsAuthoritative {
			t.Errorf("the Node reports the runtime nodegc asks: plan pod view not authoritative (%q)", plan.PodsReason)
		}
	})
}

// collectLogsThrice runs m three times, and returns the last run's plan and
// the log directories and links the runs removed ("name:reason", the links
// by base name), sorted.
func collectLogsThrice(t *testing.T, m *containers.Manager) (*containers.Plan, []string) {
	t.Helper()
	var plan *containers.Plan
	var removed []string
	for range 3 {
		r, err := m.GarbageCollect(t.Context(), containers.TriggerManual)
		if err != nil {
			t.Fatal(err)
		}
		plan = r.Plan
		for _, d := range r.Outcome.LogDirs {
			removed = append(removed, d.Dir.Name+":"+d.Reason)
		}
		for _, d := range r.Outcome.LogLinks {
			removed = append(removed, filepath.Base(d.Link.Name)+":"+d.Reason)
		}
	}
	slices.Sort(removed)
	return plan, removed
}
