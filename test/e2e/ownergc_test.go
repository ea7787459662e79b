//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

// testOwnerGC: kube-controller-manager runs without its garbage collector,
// so when a Deployment is deleted with Background propagation, only
// nodegc's owner collector can delete its ReplicaSet and then the Pods; the
// kubelet then stops the pods' containers. A second Deployment, whose owner
// chain is intact, keeps everything.
func (s *suite) testOwnerGC(t *testing.T) {
	ctx := t.Context()
	ns := s.namespace(t, "owner-gc")
	deploy := func(name string, replicas int32) {
		labels := map[string]string{"app": name}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To(replicas),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec(s.sleepImage.Ref)},
			},
		}
		if _, err := s.client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	deploy("doomed", 2)
	deploy("kept", 1)

	objects := func(app string) (rs *appsv1.ReplicaSet, pods []corev1.Pod) {
		rss, err := s.client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil || len(rss.Items) != 1 {
			return nil, nil
		}
		ps, err := s.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil {
			return nil, nil
		}
		return &rss.Items[0], ps.Items
	}
	var doomedRS, keptRS *appsv1.ReplicaSet
	var doomedPods, keptPods []corev1.Pod
	if err := poll(ctx, 90*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		doomedRS, doomedPods = objects("doomed")
		keptRS, keptPods = objects("kept")
		running := 0
		for _, p := range append(append([]corev1.Pod{}, doomedPods...), keptPods...) {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return doomedRS != nil && keptRS != nil && len(doomedPods) == 2 && len(keptPods) == 1 && running == 3, nil
	}); err != nil {
		t.Fatalf("Deployments' pods not Running: %v", err)
	}
	// The containers of the pods to be collected, to see the kubelet stop them.
	doomedContainers := map[string]string{} // container ID -> pod name
	for _, p := range doomedPods {
		cs, err := podContainers(ctx, s.kc.Node.Runtime, string(p.UID))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			doomedContainers[c.GetId()] = p.Name
		}
	}
	before := s.ownerMetrics(t)

	began := time.Now()
	if err := s.client.AppsV1().Deployments(ns).Delete(ctx, "doomed", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
		t.Fatal(err)
	}
	// The ReplicaSet, then the pods, go; the kubelet stops the pods' containers.
	var rsGone, podsGone time.Duration
	if err := poll(ctx, 90*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		if rsGone == 0 {
			_, err := s.client.AppsV1().ReplicaSets(ns).Get(ctx, doomedRS.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				rsGone = time.Since(began)
			}
		}
		for _, p := range doomedPods {
			if _, err := s.client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		podsGone = time.Since(began)
		return rsGone > 0, nil
	}); err != nil {
		t.Fatalf("ReplicaSet and Pods of the deleted Deployment not collected: %v\n%s", err, s.ownerLogTail(t))
	}
	// The kubelet stopped them. (It then also removes the dead containers
	// of a deleted pod itself, when it handles their death: its pod
	// container deletor; nodegc collects what is left.)
	stopped, removedAfter := 0, 0
	for id, pod := range doomedContainers {
		st, err := s.kc.Node.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		switch {
		case err != nil && status.Code(err) == codes.NotFound:
			stopped++
			removedAfter++
		case err != nil:
			t.Fatal(err)
		case st.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING:
			t.Errorf("pod %s deleted but its container %s still runs", pod, shortID(id))
		default:
			stopped++
		}
	}
	for _, p := range doomedPods {
		sbs, _ := podSandboxes(ctx, s.kc.Node.Runtime, string(p.UID))
		for _, sb := range sbs {
			if sb.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
				t.Errorf("pod %s deleted but its sandbox %s is still ready", p.Name, shortID(sb.GetId()))
			}
		}
	}
	if stopped != len(doomedContainers) {
		t.Errorf("%d of the %d containers of the collected pods stopped", stopped, len(doomedContainers))
	}

	// The intact chain stays.
	if _, err := s.client.AppsV1().ReplicaSets(ns).Get(ctx, keptRS.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("ReplicaSet %s of the live Deployment: %v", keptRS.Name, err)
	}
	for _, p := range keptPods {
		got, err := s.client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil || got.UID != p.UID || got.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s of the live Deployment: %v %s", p.Name, err, describePod(got))
		}
	}

	after := s.ownerMetrics(t)
	deletes := after.sum("nodegc_owner_gc_actions_total", "action", "delete") - before.sum("nodegc_owner_gc_actions_total", "action", "delete")
	if deletes < 3 {
		t.Errorf("nodegc_owner_gc_actions_total{action=delete} grew by %v, want at least 3 (the ReplicaSet and 2 Pods)", deletes)
	}
	requests := after.sum("nodegc_owner_gc_api_requests_total") - before.sum("nodegc_owner_gc_api_requests_total")

	// What nodegc's owner collector logged for this namespace.
	actions := map[string]logRecord{}
	for _, r := range s.agentLog(t, s.ownerPod, "Owner GC action") {
		if strings.HasPrefix(r.kv["object"], ns+"/") {
			actions[r.kv["kind"]+" "+strings.TrimPrefix(r.kv["object"], ns+"/")] = r
		}
	}
	row := func(kind, name, owner, outcome string) []string {
		why := "-"
		if r, ok := actions[kind+" "+name]; ok {
			why = fmt.Sprintf("nodegc: action=%s rule=%s propagation=%s", r.kv["action"], r.kv["rule"], r.kv["propagationPolicy"])
		}
		return []string{kind, name, owner, outcome, why}
	}
	rows := [][]string{
		{"Deployment", "doomed", "-", "deleted by the test (Background)", "-"},
		row("ReplicaSet", doomedRS.Name, "Deployment doomed (gone)", fmt.Sprintf("REMOVED after %v", rsGone.Round(time.Millisecond))),
	}
	for _, p := range doomedPods {
		rows = append(rows, row("Pod", p.Name, "ReplicaSet "+doomedRS.Name+" (gone)", fmt.Sprintf("REMOVED, kubelet stopped it (pods gone after %v)", podsGone.Round(time.Millisecond))))
	}
	rows = append(rows,
		row("Deployment", "kept", "-", "kept: not deleted"),
		row("ReplicaSet", keptRS.Name, "Deployment kept (exists)", "kept: owner exists"))
	for _, p := range keptPods {
		rows = append(rows, row("Pod", p.Name, "ReplicaSet "+keptRS.Name+" (exists)", "kept: owner exists, Running"))
	}
	table(t, fmt.Sprintf("owner GC on the real cluster (namespace %s): %v owner GC deletes, %v API requests of the owner GC; the kubelet stopped the %d containers of the collected pods (%d already removed too)",
		ns, deletes, requests, stopped, removedAfter), []string{"KIND", "NAME", "OWNER", "OUTCOME", "WHY (nodegc's record)"}, rows)
	for _, k := range []string{"ReplicaSet " + doomedRS.Name, "Pod " + doomedPods[0].Name, "Pod " + doomedPods[1].Name} {
		if r, ok := actions[k]; !ok || r.kv["action"] != "delete" {
			t.Errorf("no delete record of %s in the owner collector's log", k)
		}
	}
	for _, k := range []string{"ReplicaSet " + keptRS.Name, "Pod " + keptPods[0].Name} {
		if r, ok := actions[k]; ok {
			t.Errorf("owner collector acted on %s, whose owner exists: %v", k, r.kv)
		}
	}
}

func (s *suite) ownerLogTail(t *testing.T) string {
	recs := s.agentLog(t, s.ownerPod, "Owner GC action")
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "  %v\n", r.kv)
	}
	return "owner GC actions logged:\n" + b.String()
}
