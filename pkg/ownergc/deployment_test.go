package ownergc

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
)

// family is the seed's "Life of a Deployment": a Deployment D1, its
// ReplicaSet R1 and Pods P1..Pn, created by the test (no controller runs)
// with the ownerReferences their controllers would set.
type family struct {
	d    *appsv1.Deployment
	rs   *appsv1.ReplicaSet
	pods []*corev1.Pod
}

func (e *itEnv) deploymentFamily(t *testing.T, ns string, pods int) family {
	t.Helper()
	ctx := t.Context()
	labels := map[string]string{"app": "web"}
	template := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.invalid/web:1"}}},
	}
	controllerRef := func(apiVersion, kind string, o metav1.Object) []metav1.OwnerReference {
		r := ref(apiVersion, kind, o, true)
		r.Controller = ptr.To(true)
		return []metav1.OwnerReference{r}
	}
	var f family
	var err error
	f.d, err = e.cs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "d1"},
		Spec:       appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Deployment: %v", err)
	}
	f.rs, err = e.cs.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "r1", OwnerReferences: controllerRef("apps/v1", "Deployment", f.d)},
		Spec:       appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create ReplicaSet: %v", err)
	}
	for i := range pods {
		p, err := e.cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i+1), Labels: labels,
				OwnerReferences: controllerRef("apps/v1", "ReplicaSet", f.rs)},
			Spec: template.Spec,
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create Pod: %v", err)
		}
		f.pods = append(f.pods, p)
	}
	return f
}

// familyGone waits until every member of f is gone.
func (e *itEnv) familyGone(t *testing.T, ns string, f family, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "the Deployment, its ReplicaSet and its Pods to be gone", func(ctx context.Context) (bool, error) {
		if _, err := e.cs.AppsV1().Deployments(ns).Get(ctx, f.d.Name, metav1.GetOptions{}); err == nil {
			return false, nil
		}
		if _, err := e.cs.AppsV1().ReplicaSets(ns).Get(ctx, f.rs.Name, metav1.GetOptions{}); err == nil {
			return false, nil
		}
		pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return len(pods.Items) == 0, nil
	})
}

// deletionOrder watches Deployments, ReplicaSets and Pods of ns and returns
// a function giving the resourceVersion (the etcd revision, a total order)
// at which each was deleted, keyed "Kind/name".
func (e *itEnv) deletionOrder(t *testing.T, ns string) func() map[string]int64 {
	t.Helper()
	ctx := t.Context()
	var mu sync.Mutex
	deleted := map[string]int64{}
	watchers := []func() (watch.Interface, error){
		func() (watch.Interface, error) { return e.cs.AppsV1().Deployments(ns).Watch(ctx, metav1.ListOptions{}) },
		func() (watch.Interface, error) { return e.cs.AppsV1().ReplicaSets(ns).Watch(ctx, metav1.ListOptions{}) },
		func() (watch.Interface, error) { return e.cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{}) },
	}
	for _, start := range watchers {
		w, err := start()
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		t.Cleanup(w.Stop)
		go func() {
			for ev := range w.ResultChan() {
				if ev.Type != watch.Deleted {
					continue
				}
				o, ok := ev.Object.(metav1.Object)
				if !ok {
					continue
				}
				rv, _ := strconv.ParseInt(o.GetResourceVersion(), 10, 64)
				kind := fmt.Sprintf("%T", ev.Object)
				mu.Lock()
				deleted[kind+"/"+o.GetName()] = rv
				mu.Unlock()
			}
		}()
	}
	return func() map[string]int64 {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]int64{}
		for k, v := range deleted {
			out[k] = v
		}
		return out
	}
}

func testDeploymentBackground(t *testing.T, env *itEnv, gc *testCollector) {
	ns := env.namespace(t, "life-bg")
	f := env.deploymentFamily(t, ns, 3)
	if err := env.cs.AppsV1().Deployments(ns).Delete(t.Context(), f.d.Name, metav1.DeleteOptions{
		PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
		t.Fatal(err)
	}
	env.familyGone(t, ns, f, 30*time.Second)

	uids := []types.UID{f.rs.UID}
	for _, p := range f.pods {
		uids = append(uids, p.UID)
	}
	all := gc.settledRecords(t, uids...)
	recs := all[f.rs.UID]
	if len(recs) != 1 {
		t.Fatalf("ReplicaSet has %d decision records, want exactly 1: %+v", len(recs), recs)
	}
	r := recs[0].rec
	if r.action != actDelete || r.policy != metav1.DeletePropagationBackground || r.rule != ruleAllOwnersAbsent ||
		len(r.owners) != 1 || r.owners[0].UID != f.d.UID || r.owners[0].Class != "dangling" || r.owners[0].Reason != reasonDeleted {
		t.Errorf("ReplicaSet record = %+v; want a Background delete by %s with the Deployment dangling (%s)", r, ruleAllOwnersAbsent, reasonDeleted)
	}
	for _, p := range f.pods {
		if n := len(all[p.UID]); n != 1 {
			t.Errorf("Pod %s has %d decision records, want 1", p.Name, n)
		}
	}
}

func testDeploymentForeground(t *testing.T, env *itEnv, _ *testCollector) {
	ns := env.namespace(t, "life-fg")
	f := env.deploymentFamily(t, ns, 3)
	order := env.deletionOrder(t, ns)
	if err := env.cs.AppsV1().Deployments(ns).Delete(t.Context(), f.d.Name, metav1.DeleteOptions{
		PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		t.Fatal(err)
	}
	env.familyGone(t, ns, f, 30*time.Second)
	var got map[string]int64
	eventually(t, 10*time.Second, "the watches to see every deletion", func(context.Context) (bool, error) {
		got = order()
		return len(got) == 2+len(f.pods), nil
	})
	dRV, rsRV := got["*v1.Deployment/d1"], got["*v1.ReplicaSet/r1"]
	for _, p := range f.pods {
		if pRV := got["*v1.Pod/"+p.Name]; pRV >= rsRV {
			t.Errorf("Pod %s deleted at revision %d, not before its ReplicaSet (%d)", p.Name, pRV, rsRV)
		}
	}
	if rsRV >= dRV {
		t.Errorf("ReplicaSet deleted at revision %d, not before its Deployment (%d)", rsRV, dRV)
	}
}

func testDeploymentOrphan(t *testing.T, env *itEnv, _ *testCollector) {
	ctx := t.Context()
	ns := env.namespace(t, "life-orphan")
	f := env.deploymentFamily(t, ns, 3)
	if err := env.cs.AppsV1().Deployments(ns).Delete(ctx, f.d.Name, metav1.DeleteOptions{
		PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the Deployment to be gone", gone(func(ctx context.Context) error {
		_, err := env.cs.AppsV1().Deployments(ns).Get(ctx, f.d.Name, metav1.GetOptions{})
		return err
	}))
	rs, err := env.cs.AppsV1().ReplicaSets(ns).Get(ctx, f.rs.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the ReplicaSet must survive an orphaning delete: %v", err)
	}
	if rs.UID != f.rs.UID || len(rs.OwnerReferences) != 0 {
		t.Errorf("ReplicaSet uid %s refs %v; want the same object (%s) without owner references", rs.UID, rs.OwnerReferences, f.rs.UID)
	}
	for _, p := range f.pods {
		got, err := env.cs.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("Pod %s must survive: %v", p.Name, err)
		}
		if len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != rs.UID {
			t.Errorf("Pod %s references %v; want its ReplicaSet still", p.Name, got.OwnerReferences)
		}
	}
}
