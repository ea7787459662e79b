//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// seenContainer is a container of a pod the test watched on the node.
type seenContainer struct {
	id, name string
	attempt  uint32
	image    string
	state    runtimeapi.ContainerState
	gone     bool
}

// watchContainers polls the runtime for a pod's containers until ctx ends,
// remembering every one it saw (the kubelet makes and nodegc removes them
// faster than a test could list them at the end).
func (s *suite) watchContainers(ctx context.Context, uid types.UID, seen map[string]*seenContainer, images map[string]string) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		cs, err := podContainers(ctx, s.kc.Node.Runtime, string(uid))
		if err == nil {
			present := map[string]bool{}
			for _, c := range cs {
				present[c.GetId()] = true
				sc := seen[c.GetId()]
				if sc == nil {
					sc = &seenContainer{id: c.GetId(), name: c.GetMetadata().GetName(), attempt: c.GetMetadata().GetAttempt(), image: images[c.GetImageRef()]}
					seen[c.GetId()] = sc
				}
				sc.state = c.GetState()
			}
			for id, sc := range seen {
				if !present[id] {
					sc.gone = true
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// testContainerGCRestarts: a container that exits, under restartPolicy
// Always, is restarted by the kubelet again and again (CrashLoopBackOff
// capped at 1s on this node); the kubelet's own container GC removes
// nothing here (--maximum-dead-containers-per-container=1000,
// --minimum-container-ttl-duration=1h). nodegc keeps maxPerPodContainer (1)
// dead instance: the newest. The pod's image is then switched to one that
// keeps running, and the node must settle on the running container plus
// exactly one dead one.
func (s *suite) testContainerGCRestarts(t *testing.T) {
	ctx := t.Context()
	ns := s.namespace(t, "container-gc")
	images := map[string]string{s.crashImage.ID(): "e2e/crash", s.sleepImage.ID(): "e2e/sleep"}
	before := s.nodeMetrics(t)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "restarts", Namespace: ns}, Spec: podSpec(s.crashImage.Ref)}
	pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	created, err := s.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]*seenContainer{}
	wctx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); s.watchContainers(wctx, created.UID, seen, images) }()
	stop := func() { stopWatch(); <-watchDone }
	defer stop()

	const wantRestarts = 4
	p := s.waitPod(t, ns, "restarts", 2*time.Minute, fmt.Sprintf("restarted %d times", wantRestarts), func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= wantRestarts
	})
	crashRestarts := p.Status.ContainerStatuses[0].RestartCount
	// Now let it run: the kubelet replaces the crashing container with one
	// of the new image, which keeps running.
	patch := fmt.Sprintf(`{"spec":{"containers":[{"name":"app","image":%q}]}}`, s.sleepImage.Ref)
	if _, err := s.client.CoreV1().Pods(ns).Patch(ctx, "restarts", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitPod(t, ns, "restarts", time.Minute, "Running with e2e/sleep", func(p *corev1.Pod) bool {
		return podReady(p) && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].ImageID != "" &&
			strings.Contains(p.Status.ContainerStatuses[0].ImageID, strings.TrimPrefix(s.sleepImage.ManifestDigest, "sha256:"))
	})
	// nodegc's next runs leave the running container and the newest dead one.
	var cs []*runtimeapi.Container
	err = poll(ctx, 30*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		cs, err = podContainers(ctx, s.kc.Node.Runtime, string(created.UID))
		if err != nil {
			return false, err
		}
		running, exited := 0, 0
		for _, c := range cs {
			switch c.GetState() {
			case runtimeapi.ContainerState_CONTAINER_RUNNING:
				running++
			case runtimeapi.ContainerState_CONTAINER_EXITED:
				exited++
			}
		}
		return running == 1 && exited == 1 && len(cs) == 2, nil
	})
	stop()
	if err != nil {
		t.Fatalf("containers of the pod did not settle on 1 running + 1 dead: %v (%d containers now)", err, len(cs))
	}
	var newestDead *runtimeapi.Container
	for _, c := range cs {
		if c.GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
			newestDead = c
		}
	}
	removedByNodegc := map[string]string{}
	for _, r := range s.agentLog(t, s.nodePod, "Removing container") {
		if r.kv["pod"] == ns+"/restarts" {
			removedByNodegc[r.kv["containerID"]] = r.kv["reason"]
		}
	}
	// The counters grow when the run ends, after its removals settled on
	// the filesystems (seconds after the last removal).
	var removedMetric float64
	poll(ctx, 30*time.Second, 250*time.Millisecond, func(context.Context) (bool, error) {
		after := s.nodeMetrics(t)
		removedMetric = after.sum("nodegc_container_gc_containers_removed_total", "reason", "per_container_limit") -
			before.sum("nodegc_container_gc_containers_removed_total", "reason", "per_container_limit")
		return removedMetric >= float64(len(removedByNodegc)), nil
	})
	var all []*seenContainer
	for _, sc := range seen {
		all = append(all, sc)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].attempt < all[j].attempt })
	var rows [][]string
	removed := 0
	for _, sc := range all {
		outcome, why := "kept", ""
		switch {
		case sc.gone:
			outcome = "REMOVED"
			why = "by nodegc: " + removedByNodegc[sc.id]
			if _, ok := removedByNodegc[sc.id]; !ok {
				why = "not in nodegc's log"
				t.Errorf("container %s (attempt %d) was removed, but not by nodegc", shortID(sc.id), sc.attempt)
			}
			removed++
		case sc.state == runtimeapi.ContainerState_CONTAINER_RUNNING:
			why = "running"
		case newestDead != nil && sc.id == newestDead.GetId():
			why = "newest dead instance (maxPerPodContainer 1)"
		default:
			why = "state " + sc.state.String()
		}
		rows = append(rows, []string{strconv.Itoa(int(sc.attempt)), shortID(sc.id), sc.image, strings.TrimPrefix(sc.state.String(), "CONTAINER_"), outcome, why})
	}
	table(t, fmt.Sprintf("container GC of pod %s/restarts (%d crash restarts, then a running image): %d containers seen on the node, %d removed by nodegc (nodegc_container_gc_containers_removed_total{reason=per_container_limit} +%v)",
		ns, crashRestarts, len(all), removed, removedMetric), []string{"ATTEMPT", "CONTAINER", "IMAGE", "LAST STATE", "OUTCOME", "WHY"}, rows)
	if removed < int(crashRestarts)-1 || removedMetric < float64(removed) {
		t.Errorf("removed %d dead containers (metric +%v), want at least %d", removed, removedMetric, crashRestarts-1)
	}
}

// testContainerGCDeletedPod: a pod that ran to completion (two init
// containers and one container, all exited) is deleted through the API. Its
// containers stay exited on the node (the kubelet's container GC is held
// back on this node), so nodegc, seeing the pod gone from its synced pod
// view, removes its containers, then its sandbox, then its log directory
// and /var/log/containers links.
//
// The kubelet's own minute-long GC tick also removes a deleted pod's log
// directory; when that tick happens to fall in the seconds between the
// deletion and nodegc's next run, the case is run again with a new pod.
func (s *suite) testContainerGCDeletedPod(t *testing.T) {
	ns := "deleted-pod"
	s.namespace(t, ns)
	for try := 1; try <= 3; try++ {
		if s.deletedPodOnce(t, ns, fmt.Sprintf("finished-%d", try)) {
			return
		}
		t.Logf("the kubelet's own GC tick removed the log directory before nodegc's run; trying again with a new pod")
	}
	t.Errorf("3 tries in a row lost the log directory to the kubelet's GC tick")
}

func (s *suite) deletedPodOnce(t *testing.T, ns, name string) (attributed bool) {
	ctx := t.Context()
	spec := podSpec(s.sleepImage.Ref, "exit", "0")
	spec.RestartPolicy = corev1.RestartPolicyNever
	spec.InitContainers = []corev1.Container{
		{Name: "init-a", Image: s.sleepImage.Ref, Args: []string{"exit", "0"}},
		{Name: "init-b", Image: s.sleepImage.Ref, Args: []string{"exit", "0"}},
	}
	created, err := s.client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.waitPod(t, ns, name, time.Minute, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	uid := string(created.UID)
	logDir := filepath.Join(s.kc.PodLogsDir, ns+"_"+name+"_"+uid)
	var cs []*runtimeapi.Container
	// The kubelet makes the log links as it starts each container.
	if err := poll(ctx, 30*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		cs, err = podContainers(ctx, s.kc.Node.Runtime, uid)
		return err == nil && len(cs) == 3 && len(s.logLinks(cs)) == 3, err
	}); err != nil {
		t.Fatalf("pod %s: want 3 exited containers with their log links: %v (%d containers, %d links)", name, err, len(cs), len(s.logLinks(cs)))
	}
	sbs, err := podSandboxes(ctx, s.kc.Node.Runtime, uid)
	if err != nil || len(sbs) != 1 {
		t.Fatalf("pod %s: want 1 sandbox: %v %d", name, err, len(sbs))
	}
	if _, err := os.Stat(logDir); err != nil {
		t.Fatalf("pod %s: log directory: %v", name, err)
	}
	links := s.logLinks(cs)
	// The kubelet removes every dead container of a deleted pod when it
	// handles a ContainerDied event after the deletion (its pod container
	// deletor), and the pod's sandbox dies just after the pod Succeeded.
	// Wait until the kubelet has handled the death of every container and
	// of the sandbox, so that what removes them after the deletion is the
	// garbage collection, as on a node where a pod finished a while ago.
	ids := []string{sbs[0].GetId()}
	for _, c := range cs {
		ids = append(ids, c.GetId())
	}
	s.waitPLEGDied(t, uid, ids)
	before := s.nodeMetrics(t)

	began := time.Now()
	if err := s.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitPodGone(t, ns, name, time.Minute)
	deleted := time.Since(began)
	var left []string
	if err := poll(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		left = left[:0]
		if cs, _ := podContainers(ctx, s.kc.Node.Runtime, uid); len(cs) > 0 {
			left = append(left, fmt.Sprintf("%d containers", len(cs)))
		}
		if sbs, _ := podSandboxes(ctx, s.kc.Node.Runtime, uid); len(sbs) > 0 {
			left = append(left, fmt.Sprintf("%d sandboxes", len(sbs)))
		}
		if _, err := os.Stat(logDir); !errors.Is(err, fs.ErrNotExist) {
			left = append(left, "log directory")
		}
		for _, l := range links {
			if _, err := os.Lstat(l); !errors.Is(err, fs.ErrNotExist) {
				left = append(left, "link "+l)
			}
		}
		return len(left) == 0, nil
	}); err != nil {
		t.Fatalf("deleted pod %s: still on the node: %v", name, left)
	}
	allGone := time.Since(began)
	// The counters grow when the run ends, after its removals settled on
	// the filesystems (seconds after the last removal); a log directory the
	// kubelet removed never counts.
	var after metrics
	delta := func(metric string, kv ...string) float64 { return after.sum(metric, kv...) - before.sum(metric, kv...) }
	if err := poll(ctx, 30*time.Second, 250*time.Millisecond, func(context.Context) (bool, error) {
		after = s.nodeMetrics(t)
		return delta("nodegc_container_gc_log_directories_removed_total") >= 1, nil
	}); err != nil {
		return false
	}
	dContainers := delta("nodegc_container_gc_containers_removed_total", "reason", "pod_gone")
	dSandboxes := delta("nodegc_container_gc_sandboxes_removed_total", "reason", "pod_gone")
	dLogDirs := delta("nodegc_container_gc_log_directories_removed_total")

	reasons := map[string]string{}
	for _, msg := range []string{"Removing container", "Removing sandbox", "Removing pod log directory"} {
		for _, r := range s.agentLog(t, s.nodePod, msg) {
			switch {
			case r.kv["containerID"] != "":
				reasons[r.kv["containerID"]] = r.kv["reason"]
			case r.kv["sandboxID"] != "":
				reasons[r.kv["sandboxID"]] = r.kv["reason"]
			case r.kv["podUID"] == uid:
				reasons[r.kv["directory"]] = r.kv["reason"]
			}
		}
	}
	var rows [][]string
	for _, c := range cs {
		rows = append(rows, []string{"container " + c.GetMetadata().GetName(), shortID(c.GetId()), "exited", "REMOVED", "nodegc: " + reasons[c.GetId()]})
	}
	rows = append(rows, []string{"sandbox", shortID(sbs[0].GetId()), strings.TrimPrefix(sbs[0].GetState().String(), "SANDBOX_"), "REMOVED", "nodegc: " + reasons[sbs[0].GetId()]})
	rows = append(rows, []string{"log directory", filepath.Base(logDir), "-", "REMOVED", "nodegc: " + reasons[filepath.Base(logDir)]})
	for _, l := range links {
		rows = append(rows, []string{"log link", filepath.Base(l), "-", "REMOVED", "nodegc, with its container"})
	}
	table(t, fmt.Sprintf("container GC of deleted pod %s/%s (gone from the API %v after the delete, from the node %v after): metrics containers{pod_gone} +%v, sandboxes{pod_gone} +%v, log directories +%v",
		ns, name, deleted.Round(time.Millisecond), allGone.Round(time.Millisecond), dContainers, dSandboxes, dLogDirs),
		[]string{"WHAT", "ID", "STATE BEFORE", "OUTCOME", "WHY"}, rows)
	if dContainers < 3 || dSandboxes < 1 {
		t.Errorf("nodegc's counters: containers{pod_gone} +%v (want 3), sandboxes{pod_gone} +%v (want 1)", dContainers, dSandboxes)
	}
	for _, c := range cs {
		if reasons[c.GetId()] != "pod_gone" {
			t.Errorf("container %s: nodegc's log has reason %q, want pod_gone", shortID(c.GetId()), reasons[c.GetId()])
		}
	}
	return true
}

// waitPLEGDied waits until the kubelet's log shows that its sync loop
// handled a ContainerDied event of each of ids (containers or sandboxes)
// of pod uid.
func (s *suite) waitPLEGDied(t *testing.T, uid string, ids []string) {
	t.Helper()
	var missing []string
	if err := poll(t.Context(), time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		data, err := os.ReadFile(s.kc.KubeletLogPath())
		if err != nil {
			return false, err
		}
		missing = missing[:0]
		for _, id := range ids {
			ev := fmt.Sprintf(`{"ID":"%s","Type":"ContainerDied","Data":"%s"}`, uid, id)
			if !strings.Contains(string(data), ev) {
				missing = append(missing, shortID(id))
			}
		}
		return len(missing) == 0, nil
	}); err != nil {
		t.Fatalf("the kubelet did not handle the death of %v: %v", missing, err)
	}
}

// logLinks returns the kubelet's /var/log/containers links of containers.
func (s *suite) logLinks(cs []*runtimeapi.Container) []string {
	var out []string
	for _, c := range cs {
		m, _ := filepath.Glob(filepath.Join("/var/log/containers", "*-"+c.GetId()+".log"))
		out = append(out, m...)
	}
	return out
}
