package ownergc

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// createCRD creates a namespaced CRD (group/plural, kind) with the given
// versions and conversion, and waits until it is established.
func (e *itEnv) createCRD(t testing.TB, group, plural, kind string, versions []any, conversion map[string]any) {
	t.Helper()
	e.createScopedCRD(t, group, plural, kind, "Namespaced", versions, conversion)
}

// createScopedCRD is createCRD with the CRD's scope (Namespaced or
// Cluster).
func (e *itEnv) createScopedCRD(t testing.TB, group, plural, kind, scope string, versions []any, conversion map[string]any) {
	t.Helper()
	spec := map[string]any{
		"group": group,
		"names": map[string]any{"plural": plural, "singular": strings.ToLower(kind), "kind": kind, "listKind": kind + "List"},
		"scope": scope, "versions": versions,
	}
	if conversion != nil {
		spec["conversion"] = conversion
	}
	name := plural + "." + group
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": name}, "spec": spec,
	}}
	if _, err := e.dyn.Resource(crdGVR).Create(t.Context(), crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CRD %s: %v", name, err)
	}
	eventually(t, 30*time.Second, "CRD "+name+" to be established", func(ctx context.Context) (bool, error) {
		got, err := e.dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
}

func crdVersion(name string, storage bool) map[string]any {
	return map[string]any{"name": name, "served": true, "storage": storage,
		"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}
}

func (e *itEnv) createCR(t *testing.T, gvr schema.GroupVersionResource, kind, ns, name string, owners []metav1.OwnerReference) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.GroupVersion().String(), "kind": kind,
		"metadata": map[string]any{"name": name},
	}}
	u.SetOwnerReferences(owners)
	got, err := e.dyn.Resource(gvr).Namespace(ns).Create(t.Context(), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s %s/%s: %v", kind, ns, name, err)
	}
	return got
}

// A CRD created while the collector runs: within a discovery period plus
// the time to sync its new monitor, its objects take part in collection,
// as owners and as dependents.
func testCRDCreatedWhileRunning(t *testing.T, env *itEnv, gc *testCollector) {
	ns := env.namespace(t, "crd")
	group := "ownergc-" + utilrand.String(5) + ".test.nodegc.io"
	begin := time.Now()
	env.createCRD(t, group, "widgets", "Widget", []any{crdVersion("v1", true)}, nil)
	gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "widgets"}

	owner := env.createCR(t, gvr, "Widget", ns, "owner", nil)
	ownerRef := metav1.OwnerReference{APIVersion: group + "/v1", Kind: "Widget", Name: "owner", UID: owner.GetUID()}
	live := env.configMap(t, ns, "live", nil)
	env.createCR(t, gvr, "Widget", ns, "child", []metav1.OwnerReference{ownerRef})
	multi := env.createCR(t, gvr, "Widget", ns, "multi", []metav1.OwnerReference{ownerRef, cmRef(live, false)})
	env.configMap(t, ns, "cm-child", []metav1.OwnerReference{ownerRef})
	if err := env.dyn.Resource(gvr).Namespace(ns).Delete(t.Context(), "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	limit := gc.period + 30*time.Second
	eventually(t, limit, "the Widget's dependents to be collected", func(ctx context.Context) (bool, error) {
		_, err := env.dyn.Resource(gvr).Namespace(ns).Get(ctx, "child", metav1.GetOptions{})
		if err == nil {
			return false, nil
		}
		return env.cmGone(ns, "cm-child")(ctx)
	})
	t.Logf("CRD objects collected %s after the CRD was created (discovery period %s)", time.Since(begin).Round(time.Millisecond), gc.period)
	// References of a custom resource are patched like any other (a JSON
	// patch; strategic merge patches do not work on custom resources).
	eventually(t, 30*time.Second, "the Widget with a live owner to lose only the dangling reference", func(ctx context.Context) (bool, error) {
		got, err := env.dyn.Resource(gvr).Namespace(ns).Get(ctx, "multi", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		refs := got.GetOwnerReferences()
		return got.GetUID() == multi.GetUID() && len(refs) == 1 && refs[0].UID == live.UID, nil
	})

	// The CRD goes: so does its monitor. Ignored resources never get one.
	if !gc.hasMonitor(gvr) || gc.hasMonitor(schema.GroupVersionResource{Version: "v1", Resource: "events"}) {
		t.Errorf("monitors: widgets %t, events %t; want widgets only", gc.hasMonitor(gvr), gc.hasMonitor(schema.GroupVersionResource{Version: "v1", Resource: "events"}))
	}
	if err := env.dyn.Resource(crdGVR).Delete(t.Context(), "widgets."+group, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, limit, "the monitor of a deleted CRD to stop", func(context.Context) (bool, error) { return !gc.hasMonitor(gvr), nil })
}

// A resource whose list fails (a CRD whose preferred version needs a
// conversion webhook that does not answer) is reported and does not hold
// back the collector: it syncs without it and collects the rest.
func testFailingResource(t *testing.T, env *itEnv) {
	ns := env.namespace(t, "failing")
	group := "ownergc-" + utilrand.String(5) + ".test.nodegc.io"
	env.createCRD(t, group, "gadgets", "Gadget",
		[]any{crdVersion("v1", true), crdVersion("v2", false)},
		map[string]any{"strategy": "Webhook", "webhook": map[string]any{
			"conversionReviewVersions": []any{"v1"},
			"clientConfig":             map[string]any{"url": "https://127.0.0.1:1/convert"},
		}})
	// Healed on the way out, so that the tests after this one do not meet
	// a resource that fails (while t.Context is live: before Cleanup).
	defer env.healCRD(t, "gadgets."+group)
	// Stored as v1; the collector watches the preferred v2, which needs the
	// webhook for every object.
	env.createCR(t, schema.GroupVersionResource{Group: group, Version: "v1", Resource: "gadgets"}, "Gadget", ns, "g", nil)

	gc := env.startCollector(t, testConfig()) // returns once synced
	// Depending on how the list fails (an error, or a list that hangs
	// while the API server's watch cache cannot initialize), the monitor
	// counts as failed after the failure grace or the sync timeout.
	states := counterByLabel(t, gc.reg, "nodegc_owner_gc_monitors", "state")
	if states["failed"] != 1 {
		t.Errorf("monitors by state = %v; want exactly the gadgets monitor failed", states)
	}

	owner := env.configMap(t, ns, "owner", nil)
	env.configMap(t, ns, "d", []metav1.OwnerReference{cmRef(owner, true)})
	env.deleteCM(t, ns, "owner", metav1.DeletePropagationBackground)
	eventually(t, 30*time.Second, "the rest to be collected", env.cmGone(ns, "d"))
}

// testVersionFailingDiscovery: a CRD serves widgets in v2 (preferred) and
// v1. While example.com/v2 fails discovery, the collector keeps its v2
// monitor and starts no v1 monitor beside it. Otherwise, once v2 is back,
// stopping the v1 monitor would take every widget out of the graph
// although the v2 monitor still watches them, and an owner deleted in the
// foreground would no longer wait for its blocking widget.
func testVersionFailingDiscovery(t *testing.T, env *itEnv) {
	ns := env.namespace(t, "versions")
	group := "ownergc-" + utilrand.String(5) + ".test.nodegc.io"
	env.createCRD(t, group, "widgets", "Widget", []any{crdVersion("v1", false), crdVersion("v2", true)}, nil)
	v1 := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "widgets"}
	v2 := schema.GroupVersionResource{Group: group, Version: "v2", Resource: "widgets"}
	owner := env.configMap(t, ns, "owner", nil)
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v2.GroupVersion().String(), "kind": "Widget",
		"metadata": map[string]any{"name": "w", "finalizers": []any{"test.nodegc.io/hold"}},
	}}
	w.SetOwnerReferences([]metav1.OwnerReference{cmRef(owner, true)})
	widgets := env.dyn.Resource(v2).Namespace(ns)
	if _, err := widgets.Create(t.Context(), w, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	fd := &failingDiscovery{}
	gc := env.startCollector(t, testConfig(), func(c *Collector) {
		fd.DiscoveryInterfaceWithContext = c.discovery
		c.discovery = fd
	})
	eventually(t, 30*time.Second, "a monitor of widgets at v2", func(context.Context) (bool, error) { return gc.hasMonitor(v2), nil })
	// nextRound waits until a discovery round begun now has completed.
	nextRound := func(what string) {
		t.Helper()
		r := gc.current.Load()
		begun := r.roundsStarted.Load()
		eventually(t, 30*time.Second, "a discovery round "+what, func(context.Context) (bool, error) { return r.roundDone.Load() > begun, nil })
		gc.waitIdle(t)
	}

	fd.failing(v2.GroupVersion())
	nextRound("while v2 fails")
	if gc.hasMonitor(v1) || !gc.hasMonitor(v2) {
		t.Errorf("while v2 fails discovery: monitors of widgets v1 %t, v2 %t; want v2 alone", gc.hasMonitor(v1), gc.hasMonitor(v2))
	}
	fd.failing()
	nextRound("after v2 is back")
	if gc.hasMonitor(v1) || !gc.hasMonitor(v2) {
		t.Errorf("after v2 is back: monitors of widgets v1 %t, v2 %t; want v2 alone", gc.hasMonitor(v1), gc.hasMonitor(v2))
	}

	// The owner waits for its blocking widget: the collector deletes the
	// widget, whose own finalizer keeps it.
	env.deleteCM(t, ns, "owner", metav1.DeletePropagationForeground)
	eventually(t, 30*time.Second, "the owner to go or its widget to be deleted", func(ctx context.Context) (bool, error) {
		ownerGone, err := env.cmGone(ns, "owner")(ctx)
		if err != nil || ownerGone {
			return ownerGone, err
		}
		got, err := widgets.Get(ctx, "w", metav1.GetOptions{})
		return err == nil && got.GetDeletionTimestamp() != nil, err
	})
	gc.waitIdle(t)
	if _, err := env.cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "owner", metav1.GetOptions{}); err != nil {
		t.Fatalf("the owner, deleted in the foreground while its blocking widget exists: %v; want it kept", err)
	}
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := widgets.Patch(t.Context(), "w", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the owner to go after its widget", env.cmGone(ns, "owner"))
}

// testOwnerKindLeftDiscovery: a cluster-scoped custom resource owns a
// ClusterRole, and its CRD is deleted. The API server deletes the custom
// resource (the collector observes the deletion), then the kind leaves
// discovery. The ClusterRole, which the collector looks at only after that
// (its one worker is busy until then), is collected all the same: the
// owner's deletion was observed, and the graph saw that the owner was
// cluster-scoped.
func testOwnerKindLeftDiscovery(t *testing.T, env *itEnv) {
	group := "ownergc-" + utilrand.String(5) + ".test.nodegc.io"
	env.createScopedCRD(t, group, "gizmos", "Gizmo", "Cluster", []any{crdVersion("v1", true)}, nil)
	gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "gizmos"}
	owner := env.createCR(t, gvr, "Gizmo", "", "g", nil)
	roles := env.cs.RbacV1().ClusterRoles()
	role, err := roles.Create(t.Context(), &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{
		Name:            "ownergc-gizmo-" + utilrand.String(5),
		OwnerReferences: []metav1.OwnerReference{ref(gvr.GroupVersion().String(), "Gizmo", owner, false)},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = roles.Delete(context.Background(), role.Name, metav1.DeleteOptions{}) })
	ns := env.namespace(t, "kindgone")
	env.configMap(t, ns, "blocker", nil)
	held := env.configMap(t, ns, "held", []metav1.OwnerReference{cmRef(env.getCM(t, ns, "blocker"), false)})

	cfg := testConfig()
	cfg.ConcurrentGCSyncs = 1
	gc := env.startCollector(t, cfg)
	gc.waitObserved(t, role.UID, "")
	gc.waitObserved(t, held.UID, "")
	// The worker waits in the delete of "held" until the kind has left
	// discovery.
	entered, release := make(chan struct{}), make(chan struct{})
	enter, unblock := sync.OnceFunc(func() { close(entered) }), sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock)
	gc.beforeWrite.Store(ns, func(_ string, id objectID) {
		if id.uid == held.UID {
			enter()
			<-release
		}
	})
	env.deleteCM(t, ns, "blocker", metav1.DeletePropagationBackground)
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the collector did not delete the blocker's dependent")
	}

	if err := env.dyn.Resource(crdGVR).Delete(t.Context(), "gizmos."+group, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gc.waitGraph(t, "the Gizmo's deletion to be observed", func(g *graph) bool {
		n := g.nodes[owner.GetUID()]
		return n != nil && n.deleted()
	})
	r := gc.current.Load()
	eventually(t, 30*time.Second, "Gizmo to leave the collector's discovery", func(context.Context) (bool, error) {
		_, known := r.scope(gvr.GroupVersion().String(), "Gizmo")
		return !known, nil
	})
	unblock()
	eventually(t, 30*time.Second, "the ClusterRole of the deleted Gizmo to be collected", gone(func(ctx context.Context) error {
		_, err := roles.Get(ctx, role.Name, metav1.GetOptions{})
		return err
	}))
}
