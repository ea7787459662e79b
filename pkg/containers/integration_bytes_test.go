package containers_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/cluster"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/internal/testbed/registry"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/containers"
	"github.com/nodegc/nodegc/pkg/diskstats"
)

// What the pod of TestBytesFreed writes: its container app writes
// layerBytes to its writable layer and logBytes to its log, and exits; its
// container old logs oldLogBytes and exits, and is then removed through CRI
// only, which leaves its log file in the pod's log directory (as a
// container removed by anyone but the kubelet does). Its container late
// logs lateLogBytes and exits, and is removed so after the plan counted its
// logs, right before nodegc's removal.
const (
	layerBytes   = 8 << 20
	logBytes     = 1 << 20
	oldLogBytes  = 2 << 20
	lateLogBytes = 3 << 20
	// tolerance is how far a count may be from what was written: the
	// runtime's log prefix per 4 KiB line (about 1%), directories' own
	// blocks, the files runc creates in a writable layer.
	tolerance = 0.05
)

// TestBytesFreed, on a real containerd of each version and a real
// kube-apiserver: a deleted pod whose container wrote 8 MiB to its
// writable layer and 1 MiB to its log, and whose pod log directory holds
// 2 MiB more of a container the runtime no longer has, and 3 MiB of one
// removed through CRI between the plan and its removal: that container is
// skipped as gone, and its logs count with the directory, whose removal
// frees them. The container GC's report and its metric count each kind
// within 5% of what was written,
// measure the free space of the filesystems it freed space on, and without
// a snapshot source count 0 for writable layers and say why.
func TestBytesFreed(t *testing.T) {
	testbed.RequireRoot(t)
	c := cluster.Start(t, cluster.Options{})
	reg := registry.Start(t)
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			// containerd's root on a filesystem of its own: the measured
			// change of its free space is the GC's doing. containerd
			// collects its garbage rarely, as a loaded one does: the
			// removed snapshots are freed before the measurement only if
			// the GC has containerd collect at once.
			n := startNodeWith(t, node.Options{Version: v, Registry: reg, SmallFS: 256 << 20, RareGC: true})
			bytesScenario(t, c, n, "bytes-"+strings.ReplaceAll(string(v), ".", "-"))
		})
	}
}

func bytesScenario(t *testing.T, c *cluster.Cluster, n *testNode, nodeName string) {
	ctx := t.Context()
	registerNode(t, c, nodeName)
	c.KubeletRenews(t, nodeName)
	api := c.Client().CoreV1().Pods(metav1.NamespaceDefault)
	pod, err := api.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "filler"},
		Spec:       corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "app", Image: n.image}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := n.RunPod(ctx, node.PodSpec{Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID)})
	if err != nil {
		t.Fatal(err)
	}
	exited := func(name string, args ...string) string {
		t.Helper()
		id, err := n.RunContainer(ctx, sb, node.ContainerSpec{Name: name, Image: n.image, Args: args})
		if err != nil {
			t.Fatal(err)
		}
		st, err := n.WaitContainerState(ctx, id, runtimeapi.ContainerState_CONTAINER_EXITED, 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if st.GetExitCode() != 0 {
			t.Fatalf("container %s exited with %d: %s", name, st.GetExitCode(), st.GetMessage())
		}
		return id
	}
	app := exited("app", "write", "/data", strconv.Itoa(layerBytes), "log", strconv.Itoa(logBytes), "exit", "0")
	old := exited("old", "log", strconv.Itoa(oldLogBytes), "exit", "0")
	late := exited("late", "log", strconv.Itoa(lateLogBytes), "exit", "0")
	if err := n.RemoveContainer(ctx, old); err != nil {
		t.Fatal(err)
	}
	podLogs := filepath.Join(n.PodLogs, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID))
	if !exists(filepath.Join(podLogs, "old", "0.log")) {
		t.Fatalf("the removed container's log %s is gone: the runtime removed it", filepath.Join(podLogs, "old", "0.log"))
	}
	if err := n.StopPod(ctx, sb); err != nil {
		t.Fatal(err)
	}

	src := startSource(t, c, nodeName)
	testbed.WaitFor(t, 30*time.Second, "the pod informer to sync", func() bool { return authoritative(src) })
	if err := api.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	testbed.WaitFor(t, 30*time.Second, "the informer to see the deletion", func() bool {
		return src.View(time.Now()).Deleted[string(pod.UID)]
	})
	// maxPerPodContainer 5: nothing is removed but for the pod being gone.
	cfg := n.gcConfig(func(c *config.ContainerGCConfiguration) { c.MaxPerPodContainer = ptr.To[int32](5) })
	want := []string{app + ":pod_gone", late + ":pod_gone", sb + ":pod_gone", filepath.Base(podLogs) + ":pod_gone"}

	// Without a snapshot source: writable layers count 0, and the plan
	// says why.
	blind, err := containers.NewManager(containers.Options{Config: cfg, Runtime: n.client, Pods: src, NoWritableLayers: "runtime under test"})
	if err != nil {
		t.Fatal(err)
	}
	bp, err := blind.Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(removals(bp), " "); got != strings.Join(want, " ") {
		t.Fatalf("plan without a snapshot source: %s, want %s", got, strings.Join(want, " "))
	}
	if b := bp.Bytes(); b.WritableLayer != 0 || bp.WritableLayersUnknown != "runtime under test" {
		t.Errorf("without a snapshot source: writable layers %d bytes (%q), want 0 and the reason", b.WritableLayer, bp.WritableLayersUnknown)
	}
	near(t, "container logs without a snapshot source", bp.Bytes().ContainerLogs, logBytes+lateLogBytes)

	layers, err := containers.NewContainerdWritableLayers(ctx, n.Socket, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { layers.Close() })
	metrics := prometheus.NewPedanticRegistry()
	// crictl rm late after the plan counted its logs, right before
	// nodegc's removal: its logs stay in the pod's log directory.
	rt := &removedBeforeRemoval{RuntimeService: n.client, id: late, remove: func() {
		if err := n.RemoveContainer(ctx, late); err != nil {
			t.Errorf("removing container %s through CRI: %v", late, err)
		}
	}}
	m, err := containers.NewManager(containers.Options{Config: cfg, Runtime: rt, Pods: src, Registerer: metrics,
		WritableLayers: layers, Reclaimer: layers, Disk: diskstats.NewReader()})
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.GarbageCollect(ctx, containers.TriggerManual)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(removals(r.Plan), " "); got != strings.Join(want, " ") {
		t.Fatalf("plan: %s, want %s", got, strings.Join(want, " "))
	}
	if r.Plan.WritableLayersUnknown != "" {
		t.Errorf("with containerd's snapshots: writable layers unknown (%s)", r.Plan.WritableLayersUnknown)
	}
	for _, d := range r.Plan.RemoveContainers {
		t.Logf("container %s: writable layer %d bytes, logs %d bytes", d.Container.Name, d.WritableLayerBytes, d.LogBytes)
	}
	for _, d := range r.Plan.RemoveSandboxes {
		t.Logf("sandbox %s: writable layer %d bytes", d.Sandbox.ID[:12], d.WritableLayerBytes)
	}
	t.Logf("freed (estimated): %+v", r.Freed)
	if !rt.removed {
		t.Fatalf("container %s was not removed before nodegc's removal: the test shows nothing", late)
	}
	if !slices.Contains(r.Outcome.Skipped, containers.Skip{Kind: "container", ID: late, Why: containers.SkipGone}) {
		t.Errorf("skipped %+v, want container %s as gone", r.Outcome.Skipped, late)
	}
	planned := r.Plan.Bytes()
	near(t, "container logs planned", planned.ContainerLogs, logBytes+lateLogBytes)
	near(t, "pod log directory planned", planned.PodLogDirectory, oldLogBytes)
	near(t, "writable layers", r.Freed.WritableLayer, layerBytes)
	near(t, "container logs", r.Freed.ContainerLogs, logBytes)
	// late's logs went with the directory, and count there.
	near(t, "pod log directory", r.Freed.PodLogDirectory, oldLogBytes+lateLogBytes)
	if got, want := r.Freed.ContainerLogs+r.Freed.PodLogDirectory, planned.ContainerLogs+planned.PodLogDirectory; got != want {
		t.Errorf("logs freed: %d bytes, the plan counted %d: every byte of the pod's log directory went, and counts once", got, want)
	}
	families, err := metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for kind, n := range r.Freed.ByKind() {
		got, _ := testbed.MetricSum(families, "nodegc_container_gc_bytes_freed_total", "kind="+kind)
		if got != float64(n) {
			t.Errorf("nodegc_container_gc_bytes_freed_total{kind=%q} = %v, the report says %d", kind, got, n)
		}
	}

	// Measured: containerd's root has a filesystem of its own, so its
	// free space grew by what the writable layers held.
	measured := map[string]containers.FilesystemChange{}
	for _, f := range r.Filesystems {
		t.Logf("filesystem %s (%s): available %d -> %d bytes, measured %v, freed %d", f.Filesystem, f.Path, f.Before.Available, f.After.Available, f.Measured, f.MeasuredFreed)
		measured[f.Filesystem] = f
		got, _ := testbed.MetricSum(families, "nodegc_container_gc_measured_bytes_freed_total", "filesystem="+f.Filesystem)
		if want := float64(max(f.MeasuredFreed, 0)); got != want {
			t.Errorf("nodegc_container_gc_measured_bytes_freed_total{filesystem=%q} = %v, want %v", f.Filesystem, got, want)
		}
	}
	layersFS, ok := measured[containers.FSWritableLayers]
	if !ok || !layersFS.Measured || !strings.HasPrefix(layersFS.Path, n.Root) {
		t.Fatalf("filesystems measured: %+v, want the writable layers' under %s", r.Filesystems, n.Root)
	}
	near(t, "measured writable layers' filesystem", uint64(max(layersFS.MeasuredFreed, 0)), int(r.Freed.WritableLayer))
	if f, ok := measured[containers.FSPodLogs]; !ok || !f.Measured {
		t.Errorf("the pod logs' filesystem was not measured: %+v", r.Filesystems)
	}
	if exists(podLogs) {
		t.Errorf("%s is still there", podLogs)
	}
	if got, _ := testbed.MetricSum(families, "nodegc_container_gc_errors_total", "operation="+containers.OpReclaim); got != 0 {
		t.Errorf("nodegc_container_gc_errors_total{operation=%q} = %v, want 0", containers.OpReclaim, got)
	}
	// The lease whose deletion made containerd collect is gone.
	left, err := n.Leases(ctx, `labels."nodegc.io/purpose"`)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("leases left in containerd: %+v", left)
	}
}

// near fails t unless got is within tolerance of want.
func near(t *testing.T, what string, got uint64, want int) {
	t.Helper()
	if d := float64(got)/float64(want) - 1; d > tolerance || d < -tolerance {
		t.Errorf("%s: %d bytes, want %d within %.0f%% (off by %+.1f%%)", what, got, want, tolerance*100, d*100)
	} else {
		t.Logf("%s: %d bytes for %d written (%+.2f%%)", what, got, want, d*100)
	}
}

// removedBeforeRemoval is the runtime as nodegc's executor meets it when
// another client removes container id through CRI (crictl rm) after the
// plan counted it, right before nodegc's removal: at the executor's status
// read of id, once nodegc has removed a container (the plan's older app).
type removedBeforeRemoval struct {
	containers.RuntimeService
	id       string
	remove   func()
	removing bool // nodegc removed a container: the executor runs
	removed  bool
}

func (r *removedBeforeRemoval) RemoveContainer(ctx context.Context, id string) error {
	r.removing = true
	return r.RuntimeService.RemoveContainer(ctx, id)
}

func (r *removedBeforeRemoval) ContainerStatus(ctx context.Context, id string) (*runtimeapi.ContainerStatus, error) {
	if id == r.id && r.removing && !r.removed {
		r.remove()
		r.removed = true
	}
	return r.RuntimeService.ContainerStatus(ctx, id)
}
