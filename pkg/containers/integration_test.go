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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/cluster"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/containers"
)

// TestRestartedContainerKeepsNewest, on a real containerd of each version:
// a container that restarted 5 times (5 exited instances, attempts 0..4,
// and the running attempt 5) ends with exactly maxPerPodContainer dead
// instances, the newest; the running one is not touched; the removed
// instances' log files and links go with them, as the kubelet's GC does,
// and so does a dangling link. A dry run first removes nothing and reports
// the same plan.
func TestRestartedContainerKeepsNewest(t *testing.T) {
	onEachContainerd(t, func(t *testing.T, v testbed.ContainerdVersion, n *testNode) {
		began := time.Now()
		ctx := t.Context()
		podID, err := n.RunPod(ctx, node.PodSpec{Name: "crashy", Namespace: "team"})
		if err != nil {
			t.Fatal(err)
		}
		dead := n.runDead(t, podID, "crashy", "team", "app", 5)
		running, err := n.RunContainer(ctx, podID, node.ContainerSpec{Name: "app", Image: n.image, Attempt: 5})
		if err != nil {
			t.Fatal(err)
		}
		st, err := n.WaitContainerState(ctx, running, runtimeapi.ContainerState_CONTAINER_RUNNING, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		runningLink := n.link(t, "crashy", "team", "app", running, st.GetLogPath())
		stray := n.link(t, "gone", "team", "app", strings.Repeat("0", 64), filepath.Join(n.PodLogs, "team_gone_u", "app", "0.log"))
		logDir := filepath.Join(n.PodLogs, "team_crashy_"+podUID(t, n, podID), "app")
		logFile := func(attempt int) string { return filepath.Join(logDir, fmt.Sprintf("%d.log", attempt)) }
		for a := range 6 {
			if !exists(logFile(a)) {
				t.Fatalf("containerd did not write %s", logFile(a))
			}
		}
		before := n.containerStates(t)

		const keep = 2
		cfg := n.gcConfig(func(c *config.ContainerGCConfiguration) { c.MaxPerPodContainer = ptr.To[int32](keep) })
		wantPlan := []string{dead[0] + ":per_container_limit", dead[1] + ":per_container_limit", dead[2] + ":per_container_limit",
			filepath.Base(stray) + ":dangling"}

		dryCfg := cfg
		dryCfg.DryRun = true
		dr, err := n.manager(t, dryCfg, nil).GarbageCollect(ctx, containers.TriggerManual)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantPlan, removals(dr.Plan)); diff != "" {
			t.Errorf("dry-run plan (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(before, n.containerStates(t)); diff != "" {
			t.Fatalf("the dry run changed the containers (-before +after):\n%s", diff)
		}
		if !exists(stray) || !exists(logFile(0)) {
			t.Fatal("the dry run removed files")
		}

		r, err := n.manager(t, cfg, nil).GarbageCollect(ctx, containers.TriggerManual)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(dr.Plan.RemoveContainers, r.Plan.RemoveContainers); diff != "" {
			t.Errorf("the real run's plan differs from the dry run's (-dry +real):\n%s", diff)
		}
		if diff := cmp.Diff(wantPlan, removals(r.Plan)); diff != "" {
			t.Errorf("plan (-want +got):\n%s", diff)
		}
		want := map[string]runtimeapi.ContainerState{
			dead[3]: runtimeapi.ContainerState_CONTAINER_EXITED,
			dead[4]: runtimeapi.ContainerState_CONTAINER_EXITED,
			running: runtimeapi.ContainerState_CONTAINER_RUNNING,
		}
		if diff := cmp.Diff(want, n.containerStates(t)); diff != "" {
			t.Errorf("containers after GC (-want +got):\n%s", diff)
		}
		for a := range 6 {
			if got, want := exists(logFile(a)), a >= 5-keep; got != want {
				t.Errorf("log file of attempt %d exists: %v, want %v", a, got, want)
			}
		}
		links, _ := filepath.Glob(filepath.Join(n.linkDir, "*.log"))
		wantLinks := []string{runningLink}
		for _, id := range dead[5-keep:] {
			wantLinks = append(wantLinks, filepath.Join(n.linkDir, "crashy_team_app-"+id+".log"))
		}
		slices.Sort(wantLinks)
		if diff := cmp.Diff(wantLinks, links); diff != "" {
			t.Errorf("log links after GC (-want +got):\n%s", diff)
		}

		again, err := n.manager(t, cfg, nil).GarbageCollect(ctx, containers.TriggerManual)
		if err != nil || !again.Plan.Empty() {
			t.Errorf("a second run: %v, plan %v; want nothing to do", err, removals(again.Plan))
		}
		t.Logf("containerd %s: restarted-container scenario took %v", v, time.Since(began).Round(time.Millisecond))
	})
}

// TestPodGoneWithAPIServer, on a real containerd of each version and a real
// kube-apiserver shared by both: deleting the Pod object makes the GC remove
// that pod's dead containers, sandbox and log directory; before the pod
// informer has synced, and while the API server is stopped, none of them is
// removed. Pods that still exist, a static pod with its mirror pod and a
// static pod without one are never touched.
func TestPodGoneWithAPIServer(t *testing.T) {
	// An open watch keeps kube-apiserver from finishing a graceful stop
	// for 10s or more; a short StopTimeout kills it sooner, as a crash would.
	c := cluster.Start(t, cluster.Options{StopTimeout: 2 * time.Second})
	onEachContainerd(t, func(t *testing.T, v testbed.ContainerdVersion, n *testNode) {
		began := time.Now()
		podGoneScenario(t, c, n, "node-"+strings.ReplaceAll(string(v), ".", "-"))
		t.Logf("containerd %s: pod-gone scenario took %v", v, time.Since(began).Round(time.Millisecond))
	})
}

func podGoneScenario(t *testing.T, c *cluster.Cluster, n *testNode, nodeName string) {
	ctx := t.Context()
	registerNode(t, c, nodeName)
	c.KubeletRenews(t, nodeName)
	api := c.Client().CoreV1().Pods(metav1.NamespaceDefault)
	createPod := func(name string, annotations map[string]string) *corev1.Pod {
		p, err := api.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-" + nodeName, Annotations: annotations},
			Spec:       corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "app", Image: n.image}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// runPod runs the pod's sandbox with two dead instances of "app"; a
	// stopped pod's sandbox is no longer ready.
	runPod := func(name, uid string, source string, stop bool) {
		sb, err := n.RunPod(ctx, node.PodSpec{Name: name, Namespace: metav1.NamespaceDefault, UID: uid,
			Annotations: map[string]string{containers.AnnotationConfigSource: source}})
		if err != nil {
			t.Fatal(err)
		}
		n.runDead(t, sb, name, metav1.NamespaceDefault, "app", 2)
		if stop {
			if err := n.StopPod(ctx, sb); err != nil {
				t.Fatal(err)
			}
		}
	}
	keep := createPod("keep", nil)
	gone := createPod("gone", nil)
	const staticUID, orphanUID = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	createPod("static", map[string]string{containers.AnnotationConfigMirror: staticUID})
	runPod(keep.Name, string(keep.UID), "api", false)
	runPod(gone.Name, string(gone.UID), "api", true)
	runPod("static-"+nodeName, staticUID, "file", true)
	runPod("orphan-"+nodeName, orphanUID, "file", true)
	// The log directory of a pod long gone, never seen by this GC.
	ghost := filepath.Join(n.PodLogs, "default_ghost_11111111-2222-3333-4444-555555555555")
	if err := os.MkdirAll(filepath.Join(ghost, "app"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(ghost, time.Now().Add(-time.Hour), time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	goneLogs := filepath.Join(n.PodLogs, fmt.Sprintf("default_%s_%s", gone.Name, gone.UID))
	everything := n.podsOnNode(t)
	wantAll := map[string]string{}
	for _, uid := range []string{string(keep.UID), string(gone.UID), staticUID, orphanUID} {
		wantAll[uid] = "2 containers, 1 sandboxes"
	}
	if diff := cmp.Diff(wantAll, everything); diff != "" {
		t.Fatalf("node before GC (-want +got):\n%s", diff)
	}
	// maxPerPodContainer 5: no limit applies, so anything removed is
	// removed because its pod is gone.
	cfg := n.gcConfig(func(c *config.ContainerGCConfiguration) { c.MaxPerPodContainer = ptr.To[int32](5) })
	collect := func(m *containers.Manager) *containers.Report {
		t.Helper()
		r, err := m.GarbageCollect(ctx, containers.TriggerManual)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	// Not synced: a source that never ran knows nothing.
	unsynced, err := containers.NewAPIPodSource(c.Client(), containers.PodSourceOptions{NodeName: nodeName})
	if err != nil {
		t.Fatal(err)
	}
	if r := collect(n.manager(t, cfg, unsynced)); !r.Plan.Empty() || r.Plan.PodsReason != containers.ViewNotSynced {
		t.Errorf("before the informer synced: plan %v (pod view %q), want nothing removed", removals(r.Plan), r.Plan.PodsReason)
	}

	src := startSource(t, c, nodeName)
	testbed.WaitFor(t, 30*time.Second, "the pod informer to sync", func() bool { return authoritative(src) })
	m := n.manager(t, cfg, src)
	if r := collect(m); !cmp.Equal(removals(r.Plan), []string{filepath.Base(ghost) + ":pod_gone"}) {
		t.Errorf("synced, every pod present: plan %v, want only the ghost log directory", removals(r.Plan))
	}

	// Delete the Pod object, and make the API server unreachable before
	// the GC runs: nothing of the pod may go.
	if err := api.Delete(ctx, gone.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	testbed.WaitFor(t, 30*time.Second, "the informer to see the deletion", func() bool {
		v := src.View(time.Now())
		return v.Authoritative && !v.Live[string(gone.UID)] && v.Deleted[string(gone.UID)]
	})
	c.StopAPIServer(t)
	testbed.WaitFor(t, 30*time.Second, "the pod source to notice the API server is gone", func() bool { return !authoritative(src) })
	lateSource := startSource(t, c, nodeName) // starts while the API server is down: cannot sync
	for name, mgr := range map[string]*containers.Manager{"API server stopped": m, "informer not synced": n.manager(t, cfg, lateSource)} {
		r := collect(mgr)
		if !r.Plan.Empty() {
			t.Errorf("%s: plan %v (pod view %q), want nothing removed", name, removals(r.Plan), r.Plan.PodsReason)
		}
	}
	if diff := cmp.Diff(wantAll, n.podsOnNode(t)); diff != "" || !exists(goneLogs) {
		t.Fatalf("while the API server was stopped the node changed (-want +got):\n%s", diff)
	}

	c.StartAPIServer(t)
	testbed.WaitFor(t, 60*time.Second, "the pod source to reach the API server again", func() bool { return authoritative(src) })
	r := collect(m)
	var reasons []string
	for _, d := range r.Outcome.Containers {
		reasons = append(reasons, d.Container.PodUID+"/"+d.Reason)
	}
	for _, d := range r.Outcome.Sandboxes {
		reasons = append(reasons, d.Sandbox.PodUID+"/sandbox/"+d.Reason)
	}
	for _, d := range r.Outcome.LogDirs {
		reasons = append(reasons, d.Dir.PodUID+"/logs/"+d.Reason)
	}
	g := string(gone.UID)
	if diff := cmp.Diff([]string{g + "/pod_gone", g + "/pod_gone", g + "/sandbox/pod_gone", g + "/logs/pod_gone"}, reasons); diff != "" {
		t.Errorf("removed once the API server was back (-want +got):\n%s", diff)
	}
	delete(wantAll, g)
	if diff := cmp.Diff(wantAll, n.podsOnNode(t)); diff != "" {
		t.Errorf("node after GC (-want +got):\n%s", diff)
	}
	if exists(goneLogs) || exists(ghost) {
		t.Errorf("log directories left: %s %v, %s %v", goneLogs, exists(goneLogs), ghost, exists(ghost))
	}
	for _, uid := range []string{string(keep.UID), staticUID, orphanUID} {
		if dirs, _ := filepath.Glob(filepath.Join(n.PodLogs, "default_*_"+uid)); len(dirs) != 1 {
			t.Errorf("log directory of pod %s: %v, want it kept", uid, dirs)
		}
	}

	// The source started during the outage syncs once the API is back and
	// then agrees.
	testbed.WaitFor(t, 60*time.Second, "the late pod source to sync", func() bool { return authoritative(lateSource) })
	if v := lateSource.View(time.Now()); v.Live[g] || !v.Live[string(keep.UID)] || !v.Live[staticUID] {
		t.Errorf("late source: live %v; want keep and the static pod (by its mirror), not the deleted pod", v.Live)
	}
}
