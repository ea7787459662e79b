package ownergc

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// createCRD creates a namespaced CRD (group/plural, kind) with the given
// versions and conversion, and waits until it is established.
func (e *itEnv) createCRD(t testing.TB, group, plural, kind string, versions []any, conversion map[string]any) {
	t.Helper()
	spec := map[string]any{
		"group": group,
		"names": map[string]any{"plural": plural, "singular": strings.ToLower(kind), "kind": kind, "listKind": kind + "List"},
		"scope": "Namespaced", "versions": versions,
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
