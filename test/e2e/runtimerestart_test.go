//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// probeRecord is what the agent's /healthz and /readyz answered while a
// case ran: every answer that was not 200, and when /readyz was last seen
// failing and first seen ok again.
type probeRecord struct {
	mu                  sync.Mutex
	polls               int
	healthzFailures     []string
	readyzFailures      int
	lastReadyzFailure   string
	readyzFailedAt      time.Time
	readyzOKAfterOutage time.Time
}

// watchProbes polls the DaemonSet pod's /healthz and /readyz every 200ms
// until ctx ends, as the kubelet's probes would.
func (s *suite) watchProbes(ctx context.Context, r *probeRecord) {
	get := func(path string) (int, string) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", s.healthzPort, path), nil)
		if err != nil {
			return 0, err.Error()
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return resp.StatusCode, strings.TrimSpace(string(body))
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		hc, hbody := get("/healthz")
		rc, rbody := get("/readyz")
		now := time.Now()
		r.mu.Lock()
		if ctx.Err() == nil {
			r.polls++
			if hc != http.StatusOK {
				r.healthzFailures = append(r.healthzFailures, fmt.Sprintf("%s: %d %s", now.Format("15:04:05.000"), hc, hbody))
			}
			switch {
			case rc != http.StatusOK:
				r.readyzFailures++
				r.lastReadyzFailure = fmt.Sprintf("%d %s", rc, rbody)
				r.readyzFailedAt = now
				r.readyzOKAfterOutage = time.Time{}
			case !r.readyzFailedAt.IsZero() && r.readyzOKAfterOutage.IsZero():
				r.readyzOKAfterOutage = now
			}
		}
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// agentContainer returns the DaemonSet pod's container ID and restart
// count as the API reports them.
func (s *suite) agentContainer(t *testing.T) (id string, restarts int32) {
	t.Helper()
	p, err := s.client.CoreV1().Pods(s.nodePod.Namespace).Get(t.Context(), s.nodePod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("DaemonSet pod %s: %v", s.nodePod.Name, err)
	}
	if len(p.Status.ContainerStatuses) != 1 {
		t.Fatalf("DaemonSet pod: %s", describePod(p))
	}
	return p.Status.ContainerStatuses[0].ContainerID, p.Status.ContainerStatuses[0].RestartCount
}

// testRuntimeRestart: containerd restarts on the node (SIGTERM, then a new
// process and a new socket file) under the running DaemonSet. Then a pod
// whose container exits is deleted, and nodegc must remove its dead
// container and its sandbox within two container GC periods of the pod
// leaving the API, as on a node whose runtime never restarted, without its
// own pod being restarted (same container, restartCount 0) and with
// /healthz answering ok throughout. The kubelet's own container GC is held
// back on this node (--minimum-container-ttl-duration=1h) and the kubelet
// handled every death before the delete (see deletedPodOnce), so what
// removes them is nodegc: its log names each removal with reason pod_gone.
func (s *suite) testRuntimeRestart(t *testing.T) {
	ctx := t.Context()
	ns := s.namespace(t, "runtime-restart")
	period, err := time.ParseDuration(e2eContainerGCPeriod)
	if err != nil {
		t.Fatal(err)
	}
	agentID, agentRestarts := s.agentContainer(t)
	before := s.nodeMetrics(t)

	probes := &probeRecord{}
	pctx, stopProbes := context.WithCancel(ctx)
	probesDone := make(chan struct{})
	go func() { defer close(probesDone); s.watchProbes(pctx, probes) }()
	defer func() { stopProbes(); <-probesDone }()

	oldPID := s.kc.Node.PID()
	began := time.Now()
	if err := s.kc.Node.Restart(ctx); err != nil {
		t.Fatalf("restart containerd: %v", err)
	}
	restarted := time.Now()
	t.Logf("containerd restarted (pid %d -> %d) in %v: SIGTERM, new process, new socket file %s, CRI answers again",
		oldPID, s.kc.Node.PID(), restarted.Sub(began).Round(time.Millisecond), s.kc.Node.Socket)

	name := "exits"
	spec := podSpec(s.sleepImage.Ref, "exit", "0")
	spec.RestartPolicy = corev1.RestartPolicyNever
	created, err := s.client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.waitPod(t, ns, name, time.Minute, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	uid := string(created.UID)
	cs, err := podContainers(ctx, s.kc.Node.Runtime, uid)
	if err != nil || len(cs) != 1 || cs[0].GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Fatalf("pod %s: want 1 exited container: %v %v", name, err, cs)
	}
	sbs, err := podSandboxes(ctx, s.kc.Node.Runtime, uid)
	if err != nil || len(sbs) != 1 {
		t.Fatalf("pod %s: want 1 sandbox: %v %d", name, err, len(sbs))
	}
	s.waitPLEGDied(t, uid, []string{sbs[0].GetId(), cs[0].GetId()})

	deleteAt := time.Now()
	if err := s.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitPodGone(t, ns, name, time.Minute)
	goneAt := time.Now()
	var left []string
	err = poll(ctx, 2*period, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		left = left[:0]
		if cs, err := podContainers(ctx, s.kc.Node.Runtime, uid); err != nil || len(cs) > 0 {
			left = append(left, fmt.Sprintf("%d containers (%v)", len(cs), err))
		}
		if sbs, err := podSandboxes(ctx, s.kc.Node.Runtime, uid); err != nil || len(sbs) > 0 {
			left = append(left, fmt.Sprintf("%d sandboxes (%v)", len(sbs), err))
		}
		return len(left) == 0, nil
	})
	collected := time.Since(goneAt)
	stopProbes()
	<-probesDone
	if err != nil {
		after := s.nodeMetrics(t)
		t.Fatalf("containerd restarted %v ago: the dead container and sandbox of deleted pod %s/%s are still on the node %v after the pod left the API (two container GC periods: %v): %v left; nodegc's container GC runs since the restart: %v, of which failed: %v; /readyz now: %s",
			time.Since(restarted).Round(time.Millisecond), ns, name, collected.Round(time.Millisecond), 2*period, left,
			after.sum("nodegc_container_gc_runs_total")-before.sum("nodegc_container_gc_runs_total"),
			after.sum("nodegc_container_gc_runs_total", "result", "error")-before.sum("nodegc_container_gc_runs_total", "result", "error"),
			probes.lastReadyzFailure)
	}

	// The run that removed them counts its removals when it ends, a moment
	// after they are gone from the node.
	var after metrics
	delta := func(metric string, kv ...string) float64 { return after.sum(metric, kv...) - before.sum(metric, kv...) }
	_ = poll(ctx, 30*time.Second, 100*time.Millisecond, func(context.Context) (bool, error) {
		after = s.nodeMetrics(t)
		return delta("nodegc_container_gc_containers_removed_total", "reason", "pod_gone") >= 1 &&
			delta("nodegc_container_gc_sandboxes_removed_total", "reason", "pod_gone") >= 1, nil
	})
	reasons := map[string]string{}
	for _, msg := range []string{"Removing container", "Removing sandbox"} {
		for _, r := range s.agentLog(t, s.nodePod, msg) {
			if id := r.kv["containerID"] + r.kv["sandboxID"]; id != "" {
				reasons[id] = r.kv["reason"]
			}
		}
	}
	agentIDAfter, agentRestartsAfter := s.agentContainer(t)
	probes.mu.Lock()
	defer probes.mu.Unlock()
	outage := "never seen failing (the outage was shorter than a poll)"
	if !probes.readyzFailedAt.IsZero() {
		outage = fmt.Sprintf("failed %d times, last at +%v with %q; ok again at +%v", probes.readyzFailures,
			probes.readyzFailedAt.Sub(began).Round(time.Millisecond), probes.lastReadyzFailure, probes.readyzOKAfterOutage.Sub(began).Round(time.Millisecond))
	}
	rows := [][]string{
		{"container " + cs[0].GetMetadata().GetName(), shortID(cs[0].GetId()), "REMOVED", "nodegc: " + reasons[cs[0].GetId()]},
		{"sandbox", shortID(sbs[0].GetId()), "REMOVED", "nodegc: " + reasons[sbs[0].GetId()]},
		{"nodegc's container", shortID(strings.TrimPrefix(agentIDAfter, "containerd://")), "KEPT", fmt.Sprintf("restartCount %d", agentRestartsAfter)},
	}
	table(t, fmt.Sprintf("after a containerd restart (%v), deleted pod %s/%s: created %v after the restart, gone from the API %v after its delete, its container and sandbox gone from the node %v later (bound: two container GC periods, %v); nodegc_cri_reconnects_total +%v, nodegc_cri_connected %v; /healthz: %d polls, %d not ok; /readyz: %s",
		restarted.Sub(began).Round(time.Millisecond), ns, name, deleteAt.Sub(restarted).Round(time.Millisecond), goneAt.Sub(deleteAt).Round(time.Millisecond),
		collected.Round(time.Millisecond), 2*period, delta("nodegc_cri_reconnects_total"), after.sum("nodegc_cri_connected"),
		probes.polls, len(probes.healthzFailures), outage),
		[]string{"WHAT", "ID", "OUTCOME", "WHY"}, rows)

	for _, id := range []string{cs[0].GetId(), sbs[0].GetId()} {
		if reasons[id] != "pod_gone" {
			t.Errorf("%s was removed, but nodegc's log has reason %q for it, want pod_gone", shortID(id), reasons[id])
		}
	}
	if got := delta("nodegc_container_gc_containers_removed_total", "reason", "pod_gone"); got < 1 {
		t.Errorf("nodegc_container_gc_containers_removed_total{reason=pod_gone} +%v, want +1", got)
	}
	if got := delta("nodegc_container_gc_sandboxes_removed_total", "reason", "pod_gone"); got < 1 {
		t.Errorf("nodegc_container_gc_sandboxes_removed_total{reason=pod_gone} +%v, want +1", got)
	}
	if agentIDAfter != agentID || agentRestartsAfter != agentRestarts || agentRestarts != 0 {
		t.Errorf("nodegc's pod was restarted: container %s (restartCount %d) before the runtime restart, %s (restartCount %d) after; want the same container, restartCount 0",
			agentID, agentRestarts, agentIDAfter, agentRestartsAfter)
	}
	if len(probes.healthzFailures) > 0 {
		t.Errorf("/healthz failed %d of %d times across the runtime restart (a liveness probe would have restarted nodegc), first: %s",
			len(probes.healthzFailures), probes.polls, probes.healthzFailures[0])
	}
	if got := delta("nodegc_cri_reconnects_total"); got != 1 {
		t.Errorf("nodegc_cri_reconnects_total +%v across one runtime restart, want +1", got)
	}
	if got := after.sum("nodegc_cri_connected"); got != 1 {
		t.Errorf("nodegc_cri_connected = %v after the restart, want 1", got)
	}
}
