package ownergc

import (
	"context"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
)

// hasWarning reports whether namespace ns holds a Warning Event about uid
// with reason.
func (e *itEnv) hasWarning(ns string, uid types.UID, reason string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		evs, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			if ev.InvolvedObject.UID == uid && ev.Reason == reason && ev.Type == "Warning" {
				return true, nil
			}
		}
		return false, nil
	}
}

// A namespaced dependent referencing an owner that lives in another
// namespace: as upstream, the owner is absent from the dependent's namespace,
// so the dependent is collected (or, with another live owner, loses the
// reference), and it gets an OwnerRefInvalidNamespace Warning.
func testCrossNamespace(t *testing.T, env *itEnv, _ *testCollector) {
	ns1, ns2 := env.namespace(t, "xns-owner"), env.namespace(t, "xns-dependent")
	owner := env.configMap(t, ns1, "owner", nil)
	local := env.configMap(t, ns2, "local", nil)
	alone := env.configMap(t, ns2, "alone", []metav1.OwnerReference{cmRef(owner, true)})
	mixed := env.configMap(t, ns2, "mixed", []metav1.OwnerReference{cmRef(owner, true), cmRef(local, false)})

	eventually(t, 30*time.Second, "the dependent with only the foreign owner to be collected", env.cmGone(ns2, "alone"))
	eventually(t, 30*time.Second, "the dependent with a local owner to lose the foreign reference", env.refsAre(ns2, "mixed", mixed.UID, local.UID))
	for _, uid := range []types.UID{alone.UID, mixed.UID} {
		eventually(t, 30*time.Second, "an OwnerRefInvalidNamespace event", env.hasWarning(ns2, uid, "OwnerRefInvalidNamespace"))
	}
	if got := env.getCM(t, ns1, "owner"); got.UID != owner.UID {
		t.Error("the owner in the other namespace was touched")
	}
}

// A cluster-scoped dependent referencing a namespaced kind is never
// deleted, even when that owner is gone, and gets the same Warning (in the
// default namespace, where Events about cluster-scoped objects go).
func testClusterScopedDependent(t *testing.T, env *itEnv, gc *testCollector) {
	ctx := t.Context()
	ns := env.namespace(t, "cluster-dep")
	owner := env.configMap(t, ns, "owner", nil)
	name := "ownergc-test-" + utilrand.String(5)
	cr, err := env.cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{
		Name: name, OwnerReferences: []metav1.OwnerReference{cmRef(owner, true)},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.cs.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	// The dependent in the graph first: one that reaches it after the
	// owner's deletion names an owner the graph no longer has, and keeps a
	// placeholder of it (under load, the ClusterRoles' watch may lag the
	// ConfigMaps').
	gc.waitGraph(t, "the dependent to reach the graph", func(g *graph) bool {
		_, ok := g.nodes[cr.UID]
		return ok
	})
	env.deleteCM(t, ns, "owner", metav1.DeletePropagationBackground)

	eventually(t, 30*time.Second, "an OwnerRefInvalidNamespace event in default", env.hasWarning(metav1.NamespaceDefault, cr.UID, "OwnerRefInvalidNamespace"))
	gc.waitGraph(t, "the owner's deletion to reach the graph", func(g *graph) bool {
		n, ok := g.nodes[owner.UID]
		return !ok || n.deleted()
	})
	gc.waitIdle(t)
	got, err := env.cs.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
	if err != nil || got.UID != cr.UID || got.DeletionTimestamp != nil {
		t.Errorf("the cluster-scoped dependent was collected (err %v); it must never be", err)
	}
}
