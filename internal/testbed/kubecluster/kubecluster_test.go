//go:build e2e

package kubecluster_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/kubecluster"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/internal/testbed/registry"
)

// TestNodeReadyPodRunning: the Node turns Ready and a host-network pod
// created through the API runs, with a ServiceAccount token mounted.
func TestNodeReadyPodRunning(t *testing.T) {
	c := kubecluster.Start(t, kubecluster.Options{})
	ctx := t.Context()
	img, err := c.Node.Registry.Push(ctx, registry.ImageSpec{Repo: "smoke/sleep"})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke", Namespace: "default"},
		Spec: corev1.PodSpec{
			HostNetwork:                   true,
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			Containers:                    []corev1.Container{{Name: "sleep", Image: img.Ref}},
		},
	}
	began := time.Now()
	if _, err := c.Client().CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err = c.Client().CoreV1().Pods("default").Get(ctx, "smoke", metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		n, _ := c.Client().CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		ev, _ := c.Client().CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		for _, e := range ev.Items {
			t.Logf("event %s %s: %s", e.InvolvedObject.Name, e.Reason, e.Message)
		}
		t.Logf("node taints %v addresses %v", n.Spec.Taints, n.Status.Addresses)
		t.Fatalf("pod not Running: %v; status %+v\n%s", err, got.Status, c.KubeletLogTail(40))
	}
	// The ServiceAccount admission plugin gave it API credentials.
	var token string
	for _, v := range got.Spec.Volumes {
		if strings.HasPrefix(v.Name, "kube-api-access-") && v.Projected != nil {
			token = v.Name
		}
	}
	if got.Spec.ServiceAccountName != "default" || token == "" {
		t.Errorf("pod has ServiceAccount %q and volumes %v; want default with a projected kube-api-access-* volume", got.Spec.ServiceAccountName, got.Spec.Volumes)
	}
	t.Logf("pod Running on %s in %v (pod IP %q, host IP %q, ServiceAccount token volume %s)", got.Spec.NodeName, time.Since(began).Round(time.Millisecond),
		got.Status.PodIP, got.Status.HostIP, token)
}

// crashChildEnv makes TestCrashChild run: it is the test process that
// dies without teardown in TestStartAfterCrash.
const crashChildEnv = "NODEGC_KUBECLUSTER_CRASH_CHILD"

// TestCrashChild is not a test of its own: run by TestStartAfterCrash in a
// child process, it brings up a cluster with a running pod, prints the
// node's directory and the PIDs of the cluster's processes, and kills
// itself, leaving everything behind.
func TestCrashChild(t *testing.T) {
	if os.Getenv(crashChildEnv) == "" {
		return // only a helper process of TestStartAfterCrash
	}
	c := kubecluster.Start(t, kubecluster.Options{ImageFSSize: 64 << 20})
	runSleepPod(t, c, "crash")
	fmt.Printf("NODE_DIR=%s\nAPI_DIR=%s\nPID kubelet=%d\n", c.Node.Dir, c.API.Dir, c.KubeletPID())
	for name, pid := range c.API.PIDs() {
		fmt.Printf("PID %s=%d\n", name, pid)
	}
	fmt.Printf("PID containerd=%d\n", c.Node.PID())
	os.Stdout.Sync()
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // wait for the signal
}

// TestStartAfterCrash: a test process that dies (SIGKILL) with a cluster
// up and a pod running takes the kubelet, kube-scheduler, the control plane
// and containerd with it (Pdeathsig), and the next Start removes the rest:
// the pod's shim and container, the node directory, its mounts, loop device
// and cgroups, the kubelet's files and log links in the fixed host paths.
func TestStartAfterCrash(t *testing.T) {
	testbed.RequireRoot(t)
	// The child's artifact directory (Start asks for one) goes under this
	// test's temp dir: the child dies before its own cleanup would remove it.
	outDir := t.TempDir()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestCrashChild$", "-test.v",
		"-test.artifacts", "-test.outputdir="+outDir)
	cmd.Env = append(os.Environ(), crashChildEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("crash child: want death by SIGKILL, got %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}
	var nodeDir, apiDir, artifacts string
	pids := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if d, ok := strings.CutPrefix(line, "=== ARTIFACTS TestCrashChild "); ok {
			artifacts = d
		}
		if d, ok := strings.CutPrefix(line, "NODE_DIR="); ok {
			nodeDir = d
		}
		if d, ok := strings.CutPrefix(line, "API_DIR="); ok {
			apiDir = d
		}
		if kv, ok := strings.CutPrefix(line, "PID "); ok {
			name, pid, _ := strings.Cut(kv, "=")
			if n, err := strconv.Atoi(pid); err == nil {
				pids[name] = n
			}
		}
	}
	if nodeDir == "" || apiDir == "" || pids["kubelet"] == 0 || pids["kube-apiserver"] == 0 {
		t.Fatalf("crash child printed no node directory or PIDs:\n%s", out)
	}
	if !strings.HasPrefix(artifacts, outDir+"/") {
		t.Errorf("crash child's artifact directory %q is not under %s, so nothing removes it", artifacts, outDir)
	}
	// What died with the test process: every process the harnesses started.
	err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for _, pid := range pids {
			if syscall.Kill(pid, 0) == nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		for name, pid := range pids {
			if syscall.Kill(pid, 0) == nil {
				t.Errorf("%s (pid %d) outlived the crashed test process", name, pid)
			}
		}
	}
	// What outlived it: the pod's shim and container, mounts, cgroups.
	left := node.LeftoversOf(nodeDir)
	if len(left) == 0 {
		t.Fatalf("the crashed test left nothing of node %s behind; this test tests nothing", nodeDir)
	}
	links := logLinksInto(nodeDir)
	t.Logf("left by the crashed test: %d items of node %s (e.g. %s) and %d log links in /var/log/containers", len(left), nodeDir, left[0], len(links))

	c := kubecluster.Start(t, kubecluster.Options{})
	if left := node.LeftoversOf(nodeDir); len(left) > 0 {
		t.Errorf("left of the crashed cluster after the next Start:\n  %s", strings.Join(left, "\n  "))
	}
	if links := logLinksInto(nodeDir); len(links) > 0 {
		t.Errorf("log links of the crashed cluster after the next Start: %v", links)
	}
	if _, err := os.Stat(apiDir); err == nil {
		t.Errorf("control-plane directory %s of the crashed cluster after the next Start", apiDir)
	}
	// The new cluster works.
	runSleepPod(t, c, "after-crash")
}

// runSleepPod runs a host-network pod with a sleeping container and waits
// for it to be Running.
func runSleepPod(t *testing.T, c *kubecluster.Cluster, name string) {
	t.Helper()
	ctx := t.Context()
	img, err := c.Node.Registry.Push(ctx, registry.ImageSpec{Repo: "smoke/sleep"})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			HostNetwork:                   true,
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			Containers:                    []corev1.Container{{Name: "sleep", Image: img.Ref}},
		},
	}
	if _, err := c.Client().CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := c.Client().CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("pod %s not Running: %v\n%s", name, err, c.KubeletLogTail(40))
	}
}

// logLinksInto lists the /var/log/containers links pointing into dir.
func logLinksInto(dir string) []string {
	var out []string
	entries, _ := os.ReadDir("/var/log/containers")
	for _, e := range entries {
		p := filepath.Join("/var/log/containers", e.Name())
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, dir+"/") {
			out = append(out, p)
		}
	}
	return out
}

// TestRestartKubelet: the kubelet restarts with other image GC and
// eviction settings and back, on the same cluster; its /configz shows each
// configuration, the Node is Ready after each restart, and a running pod
// keeps its container (same ID, no restart) throughout.
func TestRestartKubelet(t *testing.T) {
	// nodefs.available<10% below: on a filesystem of its own, not the
	// host's disk, whose usage is the machine's.
	c := kubecluster.Start(t, kubecluster.Options{ImageFSSize: 64 << 20, NodeFSSize: 64 << 20})
	ctx := t.Context()
	runSleepPod(t, c, "survivor")
	before := podContainer(t, c, "survivor")

	check := func(want kubecluster.KubeletSettings, high, low int32, evictionHard map[string]string) {
		t.Helper()
		kc, err := c.KubeletConfigz(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := fmt.Sprintf("high %v low %v minAge %v evictionHard %v transition %v", ptr.Deref(kc.ImageGCHighThresholdPercent, -1), ptr.Deref(kc.ImageGCLowThresholdPercent, -1),
			kc.ImageMinimumGCAge.Duration, kc.EvictionHard, kc.EvictionPressureTransitionPeriod.Duration)
		minAge, transition := want.ImageMinimumGCAge, want.EvictionPressureTransitionPeriod
		if minAge == 0 {
			minAge = 2 * time.Minute // the kubelet's defaults
		}
		if transition == 0 {
			transition = 5 * time.Minute
		}
		wantStr := fmt.Sprintf("high %v low %v minAge %v evictionHard %v transition %v", high, low, minAge, evictionHard, transition)
		if got != wantStr {
			t.Errorf("kubelet /configz after starting with %v:\n got %s\nwant %s", want, got, wantStr)
		}
		if after := podContainer(t, c, "survivor"); after != before {
			t.Errorf("pod survivor: container %s after the restart, %s before", after, before)
		}
		t.Logf("kubelet (pid %d) with %v: /configz %s; pod survivor still runs container %s", c.KubeletPID(), c.KubeletSettings(), got, before)
	}
	check(kubecluster.KubeletSettings{}, 100, 99, map[string]string{})

	eviction := kubecluster.KubeletSettings{
		ImageGCHighThresholdPercent:      85,
		ImageGCLowThresholdPercent:       80,
		ImageMinimumGCAge:                30 * time.Second,
		EvictionHard:                     map[string]string{"imagefs.available": "15%", "nodefs.available": "10%"},
		EvictionPressureTransitionPeriod: 30 * time.Second,
	}
	pid := c.KubeletPID()
	began := time.Now()
	if err := c.RestartKubelet(ctx, eviction); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubelet restarted (pid %d -> %d) and the Node Ready again in %v", pid, c.KubeletPID(), time.Since(began).Round(time.Millisecond))
	if c.KubeletPID() == pid {
		t.Fatalf("the kubelet was not restarted (pid %d)", pid)
	}
	check(eviction, 85, 80, eviction.EvictionHard)

	if err := c.RestartKubelet(ctx, kubecluster.KubeletSettings{}); err != nil {
		t.Fatal(err)
	}
	check(kubecluster.KubeletSettings{}, 100, 99, map[string]string{})
}

// podContainer returns the ID of a default-namespace pod's only container
// with its restart count, as the API reports them.
func podContainer(t *testing.T, c *kubecluster.Cluster, name string) string {
	t.Helper()
	p, err := c.Client().CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ContainerStatuses) != 1 || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("pod %s: phase %s, %d container statuses", name, p.Status.Phase, len(p.Status.ContainerStatuses))
	}
	cs := p.Status.ContainerStatuses[0]
	return fmt.Sprintf("%s (restarts %d)", cs.ContainerID, cs.RestartCount)
}
