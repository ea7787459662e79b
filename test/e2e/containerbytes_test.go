//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// What the container of testContainerGCBytes writes.
const (
	bytesLayer = 24 << 20 // to a file in its writable layer
	bytesLog   = 2 << 20  // to standard output: its log file
)

// testContainerGCBytes: a pod's container writes bytesLayer bytes to a file
// in its writable layer and bytesLog bytes to its log (testbin write ...
// log ... exit 0), and the pod, finished, is deleted. When nodegc's
// container GC removes its container, sandbox and log directory (reason
// pod_gone), the bytes it reports (nodegc_container_gc_bytes_freed_total by
// kind, and its run's log line) match what was written within 5%: the
// writable layer's to bytesLayer, the container's logs (with what the pod
// log directory held beyond them) to bytesLog.
//
// As in ContainerGCDeletedPod, the kubelet's own minute-long GC tick may
// remove the deleted pod's log directory in the seconds before nodegc's
// run; the case then runs again with a new pod.
func (s *suite) testContainerGCBytes(t *testing.T) {
	ns := s.namespace(t, "container-bytes")
	for try := 1; try <= 3; try++ {
		if s.containerBytesOnce(t, ns, fmt.Sprintf("writer-%d", try)) {
			return
		}
		t.Logf("the kubelet's own GC tick removed the log directory before nodegc's run; trying again with a new pod")
	}
	t.Errorf("3 tries in a row lost the log directory to the kubelet's GC tick")
}

func within5(got, want float64) bool { return math.Abs(got-want) <= 0.05*want }

func pctOff(got, want float64) string { return fmt.Sprintf("%+.2f%%", (got-want)*100/want) }

func (s *suite) containerBytesOnce(t *testing.T, ns, name string) (attributed bool) {
	ctx := t.Context()
	spec := podSpec(s.sleepImage.Ref, "write", "/blob", strconv.Itoa(bytesLayer), "log", strconv.Itoa(bytesLog), "exit", "0")
	spec.RestartPolicy = corev1.RestartPolicyNever
	created, err := s.client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := s.waitPod(t, ns, name, time.Minute, "Succeeded", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	})
	if p.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("pod %s: %s", name, describePod(p))
	}
	uid := string(created.UID)
	logDir := filepath.Join(s.kc.PodLogsDir, ns+"_"+name+"_"+uid)
	var cs []*runtimeapi.Container
	if err := poll(ctx, 30*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		cs, err = podContainers(ctx, s.kc.Node.Runtime, uid)
		return err == nil && len(cs) == 1, err
	}); err != nil {
		t.Fatalf("pod %s: want 1 exited container: %v (%d)", name, err, len(cs))
	}
	sbs, err := podSandboxes(ctx, s.kc.Node.Runtime, uid)
	if err != nil || len(sbs) != 1 {
		t.Fatalf("pod %s: want 1 sandbox: %v %d", name, err, len(sbs))
	}
	// The container's log file, as the test sees it: its size and its
	// allocated blocks (what a removal frees on the filesystem).
	logFile := filepath.Join(logDir, "app", "0.log")
	data, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatalf("pod %s: log: %v", name, err)
	}
	if !strings.Contains(string(data), fmt.Sprintf("testbin: wrote %d bytes to /blob", bytesLayer)) {
		t.Fatalf("pod %s: the container did not write its layer; log ends with %q", name, data[max(0, len(data)-300):])
	}
	var st syscall.Stat_t
	if err := syscall.Stat(logFile, &st); err != nil {
		t.Fatal(err)
	}
	logSize, logBlocks := st.Size, st.Blocks*512
	ids := []string{sbs[0].GetId(), cs[0].GetId()}
	s.waitPLEGDied(t, uid, ids)
	before := s.nodeMetrics(t)
	runsBefore := len(s.agentLog(t, s.nodePod, "Container GC run done"))

	began := time.Now()
	if err := s.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitPodGone(t, ns, name, time.Minute)
	var left []string
	if err := poll(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		left = left[:0]
		if cs, _ := podContainers(ctx, s.kc.Node.Runtime, uid); len(cs) > 0 {
			left = append(left, "container")
		}
		if sbs, _ := podSandboxes(ctx, s.kc.Node.Runtime, uid); len(sbs) > 0 {
			left = append(left, "sandbox")
		}
		if _, err := os.Stat(logDir); !errors.Is(err, fs.ErrNotExist) {
			left = append(left, "log directory")
		}
		return len(left) == 0, nil
	}); err != nil {
		t.Fatalf("deleted pod %s: still on the node: %v", name, left)
	}
	gone := time.Since(began)
	// The counters grow when the run ends.
	var after metrics
	delta := func(metric string, kv ...string) float64 { return after.sum(metric, kv...) - before.sum(metric, kv...) }
	if err := poll(ctx, 30*time.Second, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
		after = s.nodeMetrics(t)
		return delta("nodegc_container_gc_log_directories_removed_total") >= 1, nil
	}); err != nil {
		return false
	}
	// The bytes counters grow right after it, and a scrape may fall
	// between: wait a moment for them (if they never grow, the checks
	// below say by how much they are off).
	_ = poll(ctx, 5*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		after = s.nodeMetrics(t)
		return delta("nodegc_container_gc_bytes_freed_total", "kind", "writable_layer") > 0 &&
			delta("nodegc_container_gc_bytes_freed_total", "kind", "container_logs")+
				delta("nodegc_container_gc_bytes_freed_total", "kind", "pod_log_directory") > 0, nil
	})
	reasons := map[string]string{}
	for _, msg := range []string{"Removing container", "Removing sandbox"} {
		for _, r := range s.agentLog(t, s.nodePod, msg) {
			reasons[r.kv["containerID"]+r.kv["sandboxID"]] = r.kv["reason"]
		}
	}
	if reasons[cs[0].GetId()] != "pod_gone" || reasons[sbs[0].GetId()] != "pod_gone" {
		t.Errorf("nodegc's log: container %q, sandbox %q, want pod_gone for both", reasons[cs[0].GetId()], reasons[sbs[0].GetId()])
	}
	layer := delta("nodegc_container_gc_bytes_freed_total", "kind", "writable_layer")
	logs := delta("nodegc_container_gc_bytes_freed_total", "kind", "container_logs")
	dir := delta("nodegc_container_gc_bytes_freed_total", "kind", "pod_log_directory")
	var runLines []string
	for _, r := range s.agentLog(t, s.nodePod, "Container GC run done")[runsBefore:] {
		runLines = append(runLines, fmt.Sprintf("containers=%s sandboxes=%s logDirectories=%s writableLayerBytes=%s containerLogBytes=%s podLogDirectoryBytes=%s measuredFreedBytes=%s",
			r.kv["containers"], r.kv["sandboxes"], r.kv["logDirectories"], r.kv["writableLayerBytes"], r.kv["containerLogBytes"], r.kv["podLogDirectoryBytes"], r.kv["measuredFreedBytes"]))
	}
	measured := []string{}
	for _, fsName := range []string{"writable_layers", "pod_logs", "writable_layers_and_pod_logs"} {
		if d := delta("nodegc_container_gc_measured_bytes_freed_total", "filesystem", fsName); d > 0 {
			measured = append(measured, fmt.Sprintf("%s +%s", fsName, mib(d)))
		}
	}
	rows := [][]string{
		{"writable layer (/blob)", strconv.Itoa(bytesLayer), fmt.Sprintf("%.0f", layer), pctOff(layer, bytesLayer), "writable_layer"},
		{"log (stdout)", fmt.Sprintf("%d (file %d, %d allocated)", bytesLog, logSize, logBlocks), fmt.Sprintf("%.0f + %.0f", logs, dir), pctOff(logs+dir, bytesLog), "container_logs + pod_log_directory"},
		{"total", strconv.Itoa(bytesLayer + bytesLog), fmt.Sprintf("%.0f", layer+logs+dir), pctOff(layer+logs+dir, bytesLayer+bytesLog), "all kinds"},
	}
	table(t, fmt.Sprintf("container GC bytes of deleted pod %s/%s (its container, sandbox and log directory removed by nodegc, reason pod_gone, %v after the delete): nodegc_container_gc_bytes_freed_total deltas; measured free space growth: %s; nodegc's run log: %s",
		ns, name, gone.Round(time.Millisecond), strings.Join(measured, ", "), strings.Join(runLines, " | ")),
		[]string{"WRITTEN TO", "BYTES WRITTEN", "BYTES NODEGC REPORTS", "OFF BY", "KIND"}, rows)
	if !within5(layer, bytesLayer) {
		t.Errorf("writable_layer: nodegc reports %.0f bytes, the container wrote %d (%s)", layer, bytesLayer, pctOff(layer, bytesLayer))
	}
	if !within5(logs+dir, bytesLog) {
		t.Errorf("container_logs + pod_log_directory: nodegc reports %.0f bytes, the container wrote %d to its log (%s)", logs+dir, bytesLog, pctOff(logs+dir, bytesLog))
	}
	return true
}
