package containers

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
)

// The informer side of APIPodSource runs against a real kube-apiserver in
// TestPodGoneWithAPIServer; these are the parts that need none.

func TestAPIPodSourceBeforeRun(t *testing.T) {
	if _, err := NewAPIPodSource(fake.NewClientset(), "", nil); err == nil {
		t.Error("NewAPIPodSource accepted an empty node name")
	}
	s, err := NewAPIPodSource(fake.NewClientset(), "n1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if v := s.View(t0); v.Authoritative || v.Reason != ViewNotSynced {
		t.Errorf("view before Run = %+v, want not synced", v)
	}
}

func TestAPIPodSourceRemembersDeletions(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	s, err := NewAPIPodSource(fake.NewClientset(), "n1", clk)
	if err != nil {
		t.Fatal(err)
	}
	pod := func(uid string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "ns", UID: k8stypes.UID("uid-" + uid)}}
	}
	s.podHealth.listedAt = t0.Add(-time.Hour) // as a complete list would have set it
	s.onDelete(pod("a"))
	s.onDelete(cache.DeletedFinalStateUnknown{Key: "ns/b", Obj: pod("b")})
	s.onDelete("not a pod")
	clk.Step(time.Minute)
	s.onDelete(pod("c"))
	if diff := cmp.Diff(map[string]time.Time{"uid-a": t0, "uid-b": t0, "uid-c": t0.Add(time.Minute)}, s.deleted); diff != "" {
		t.Errorf("deletions (-want +got):\n%s", diff)
	}
	// Pods with nothing left on the node are forgotten.
	s.Retain(map[string]bool{"uid-a": true, "uid-c": true})
	if diff := cmp.Diff(map[string]time.Time{"uid-a": t0, "uid-c": t0.Add(time.Minute)}, s.deleted); diff != "" {
		t.Errorf("after Retain (-want +got):\n%s", diff)
	}
	// A later complete list does not make the source forget a deletion
	// while the pod has something on the node: the kubelet may still be
	// terminating it, and the view must not take it for a pod it never
	// listed.
	s.podHealth.listedAt = t0.Add(listSkew + 30*time.Second)
	s.Retain(map[string]bool{"uid-a": true, "uid-c": true})
	if diff := cmp.Diff(map[string]time.Time{"uid-a": t0, "uid-c": t0.Add(time.Minute)}, s.deleted); diff != "" {
		t.Errorf("after a newer list (-want +got):\n%s", diff)
	}
	if v := s.View(t0); v.Node != "n1" {
		t.Errorf("view of node %q, want n1", v.Node)
	}
}

func TestSlimNodeKeepsItsIdentity(t *testing.T) {
	in := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid", ResourceVersion: "7", Labels: map[string]string{"kubernetes.io/hostname": "n1"}},
		Status:     corev1.NodeStatus{Images: []corev1.ContainerImage{{Names: []string{"big"}, SizeBytes: 1 << 30}}},
	}
	got, err := slimNode(in)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid", ResourceVersion: "7"}}, got); diff != "" {
		t.Errorf("slimNode (-want +got):\n%s", diff)
	}
}

func TestSlimPodKeepsWhatTheSourceReads(t *testing.T) {
	in := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "etcd-n1", Namespace: "kube-system", UID: "mirror-uid", ResourceVersion: "42",
			Labels:      map[string]string{"tier": "control-plane"},
			Annotations: map[string]string{annotationConfigMirror: "static-uid", "other": "x"}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "etcd", Image: "etcd"}}},
	}
	got, err := slimPod(in)
	if err != nil {
		t.Fatal(err)
	}
	want := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "etcd-n1", Namespace: "kube-system", UID: "mirror-uid", ResourceVersion: "42",
		Annotations: map[string]string{annotationConfigMirror: "static-uid"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("slimPod (-want +got):\n%s", diff)
	}
	if got, _ := slimPod("tombstone"); got != "tombstone" {
		t.Errorf("slimPod changed a non-pod: %v", got)
	}
}
