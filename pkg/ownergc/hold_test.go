package ownergc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
)

// failingCRD creates a namespaced CRD whose list fails: objects are stored
// as v1, the collector watches the preferred v2, and converting needs a
// webhook that does not answer. It returns the group and the v1 resource
// (which needs no conversion, for creating objects).
func (e *itEnv) failingCRD(t *testing.T, plural, kind string) (string, schema.GroupVersionResource) {
	t.Helper()
	group := "ownergc-" + utilrand.String(5) + ".test.nodegc.io"
	e.createCRD(t, group, plural, kind,
		[]any{crdVersion("v1", true), crdVersion("v2", false)},
		map[string]any{"strategy": "Webhook", "webhook": map[string]any{
			"conversionReviewVersions": []any{"v1"},
			"clientConfig":             map[string]any{"url": "https://127.0.0.1:1/convert"},
		}})
	return group, schema.GroupVersionResource{Group: group, Version: "v1", Resource: plural}
}

// healCRD makes the CRD's list work: no conversion webhook any more.
func (e *itEnv) healCRD(t *testing.T, name string) {
	t.Helper()
	patch := []byte(`{"spec":{"conversion":{"strategy":"None","webhook":null}}}`)
	if _, err := e.dyn.Resource(crdGVR).Patch(t.Context(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("heal CRD %s: %v", name, err)
	}
}

// hasEvent reports whether obj in ns has an Event with reason whose message
// contains every one of words.
func (e *itEnv) hasEvent(ns, obj, reason string, words ...string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		evs, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			if ev.InvolvedObject.Name == obj && ev.Reason == reason &&
				!slices.ContainsFunc(words, func(w string) bool { return !strings.Contains(ev.Message, w) }) {
				return true, nil
			}
		}
		return false, nil
	}
}

// An owner deleted with the orphan propagation while a resource that could
// hold its dependents cannot be listed (a CRD whose conversion webhook is
// down): the collector orphans the dependents it knows, keeps the orphan
// finalizer and says why in a Warning Event; once the resource lists again,
// its objects are orphaned too, not deleted, and only then does the owner
// go. kube-controller-manager removes the finalizer at once and later
// deletes those objects, though the user asked to keep them.
func testOrphanHeldWhileResourceFails(t *testing.T, env *itEnv) {
	ns := env.namespace(t, "orphan-held")
	group, v1 := env.failingCRD(t, "gizmos", "Gizmo")
	owner := env.configMap(t, ns, "owner", nil)
	env.configMap(t, ns, "known", []metav1.OwnerReference{cmRef(owner, true)})
	env.createCR(t, v1, "Gizmo", ns, "g", []metav1.OwnerReference{cmRef(owner, true)})
	// And a foreground deletion whose only blocking dependent is a gizmo.
	fgOwner := env.configMap(t, ns, "fg-owner", nil)
	env.createCR(t, v1, "Gizmo", ns, "fg-g", []metav1.OwnerReference{cmRef(fgOwner, true)})

	cfg := testConfig()
	cfg.UnsyncedResourceHold = &metav1.Duration{Duration: 10 * time.Minute}
	env.startCollector(t, cfg)
	env.deleteCM(t, ns, "owner", metav1.DeletePropagationOrphan)
	env.deleteCM(t, ns, "fg-owner", metav1.DeletePropagationForeground)

	eventually(t, 30*time.Second, "the known dependent to be orphaned", func(ctx context.Context) (bool, error) {
		cm, err := env.cs.CoreV1().ConfigMaps(ns).Get(ctx, "known", metav1.GetOptions{})
		return err == nil && len(cm.OwnerReferences) == 0, err
	})
	eventually(t, 30*time.Second, "a Warning on the owner naming the failing resource",
		env.hasEvent(ns, "owner", "DependentsUnknown", "orphan", "gizmos."+group))
	eventually(t, 30*time.Second, "a Warning on the foreground owner naming the failing resource",
		env.hasEvent(ns, "fg-owner", "DependentsUnknown", "foregroundDeletion", "gizmos."+group))
	if got := env.getCM(t, ns, "owner"); !slices.Contains(got.Finalizers, metav1.FinalizerOrphanDependents) {
		t.Fatalf("owner finalizers = %v while gizmos cannot be listed; want orphan kept", got.Finalizers)
	}
	if got := env.getCM(t, ns, "fg-owner"); !slices.Contains(got.Finalizers, metav1.FinalizerDeleteDependents) {
		t.Fatalf("fg-owner finalizers = %v while gizmos cannot be listed; want foregroundDeletion kept", got.Finalizers)
	}

	env.healCRD(t, "gizmos."+group)
	eventually(t, 90*time.Second, "the owner to go once gizmos list again", env.cmGone(ns, "owner"))
	eventually(t, 90*time.Second, "the foreground owner to go once gizmos list again", env.cmGone(ns, "fg-owner"))
	eventually(t, 30*time.Second, "its gizmo to be gone", gone(func(ctx context.Context) error {
		_, err := env.dyn.Resource(v1).Namespace(ns).Get(ctx, "fg-g", metav1.GetOptions{})
		return err
	}))
	g, err := env.dyn.Resource(v1).Namespace(ns).Get(t.Context(), "g", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the gizmo of the orphaning owner: %v; want it kept", err)
	}
	if refs := g.GetOwnerReferences(); len(refs) != 0 {
		t.Errorf("the gizmo still references %v; want it orphaned", refs)
	}
}

// The hold is bounded: with unsyncedResourceHold 3s the collector finishes
// the orphaning after 3s, as kube-controller-manager would, and says so.
func testOrphanHoldExpires(t *testing.T, env *itEnv) {
	ns := env.namespace(t, "hold-expires")
	group, v1 := env.failingCRD(t, "doodads", "Doodad")
	owner := env.configMap(t, ns, "owner", nil)
	env.createCR(t, v1, "Doodad", ns, "d", []metav1.OwnerReference{cmRef(owner, true)})

	cfg := testConfig()
	cfg.UnsyncedResourceHold = &metav1.Duration{Duration: 3 * time.Second}
	env.startCollector(t, cfg)
	begin := time.Now()
	env.deleteCM(t, ns, "owner", metav1.DeletePropagationOrphan)
	eventually(t, 30*time.Second, "the owner to go when the hold expires", env.cmGone(ns, "owner"))
	if took := time.Since(begin); took < 3*time.Second {
		t.Errorf("the orphan finalizer went after %s; want it held 3s", took)
	}
	eventually(t, 30*time.Second, "a Warning that the hold expired",
		env.hasEvent(ns, "owner", "UnsyncedResourceHoldExpired", "doodads."+group))
	// Leave no failing resource behind for the next tests.
	if err := env.dyn.Resource(crdGVR).Delete(t.Context(), "doodads."+group, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A CRD created shortly before its objects' owner is deleted with the
// orphan propagation, long before the next discovery refresh: the
// collector refreshes discovery before it finishes, so the new resource
// gets a monitor, and its objects are orphaned, not forgotten.
func testOrphanWithUndiscoveredResource(t *testing.T, env *itEnv) {
	ns := env.namespace(t, "undiscovered")
	cfg := testConfig()
	cfg.DiscoveryResyncPeriod = metav1.Duration{Duration: time.Hour}
	cfg.UnsyncedResourceHold = &metav1.Duration{Duration: 10 * time.Minute}
	env.startCollector(t, cfg)

	group := "ownergc-" + utilrand.String(5) + ".test.nodegc.io"
	env.createCRD(t, group, "thingamajigs", "Thingamajig", []any{crdVersion("v1", true)}, nil)
	gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "thingamajigs"}
	owner := env.configMap(t, ns, "owner", nil)
	env.createCR(t, gvr, "Thingamajig", ns, "t", []metav1.OwnerReference{cmRef(owner, true)})
	env.deleteCM(t, ns, "owner", metav1.DeletePropagationOrphan)

	eventually(t, 30*time.Second, "the owner to go", env.cmGone(ns, "owner"))
	got, err := env.dyn.Resource(gvr).Namespace(ns).Get(t.Context(), "t", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the new resource's object: %v; want it kept", err)
	}
	if refs := got.GetOwnerReferences(); len(refs) != 0 {
		t.Errorf("the new resource's object still references %v; want it orphaned", refs)
	}
}

// TestHoldFinalizer: the hold waits for a discovery round begun after it,
// then for every resource that could hold dependents; it warns once per
// set of resources and ends at the bound.
func TestHoldFinalizer(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	c := &Collector{clock: clk, failureGrace: 10 * time.Second, syncTimeout: time.Minute, unsyncedHold: time.Minute}
	r, pods, events := holdingRun(t, c)
	owner := objectID{uid: "o", apiVersion: "v1", kind: "ConfigMap", namespace: "ns", name: "owner"}

	out, held := r.holdFinalizer(owner, metav1.FinalizerOrphanDependents)
	if !held || out.after <= 0 || len(r.kick) != 1 {
		t.Fatalf("before any discovery round: held %t after %s, kicked %d; want held and a round asked for", held, out.after, len(r.kick))
	}
	<-r.kick
	r.roundsStarted.Add(1)
	r.roundDone.Store(1) // a round begun after the hold, done; pods are fine
	if _, held := r.holdFinalizer(owner, metav1.FinalizerOrphanDependents); held {
		t.Fatal("held although discovery is fresh and every monitor synced")
	}

	// A second owner while pods fail.
	owner.uid = "o2"
	r.monitors.noteError(t.Context(), pods, errors.New("connection refused"))
	r.holdFinalizer(owner, metav1.FinalizerOrphanDependents) // begins the hold (after round 1)
	r.roundsStarted.Add(1)
	r.roundDone.Store(2)
	for range 3 {
		if _, held := r.holdFinalizer(owner, metav1.FinalizerOrphanDependents); !held {
			t.Fatal("not held while pods fail")
		}
		clk.Step(10 * time.Second)
	}
	if got := events(); len(got) != 1 || !strings.Contains(got[0], "DependentsUnknown") || !strings.Contains(got[0], "pods (failing)") {
		t.Errorf("events while held = %q; want one DependentsUnknown naming pods", got)
	}
	clk.Step(time.Minute)
	if _, held := r.holdFinalizer(owner, metav1.FinalizerOrphanDependents); held {
		t.Fatal("still held after the bound")
	}
	if got := events(); len(got) != 1 || !strings.Contains(got[0], "UnsyncedResourceHoldExpired") {
		t.Errorf("events at the bound = %q; want UnsyncedResourceHoldExpired", got)
	}
	// The finalizer's removal failed and the worker looks again: the hold
	// that expired does not begin anew, for another bound and with another
	// Warning. (Before, it did.)
	clk.Step(time.Second)
	if _, held := r.holdFinalizer(owner, metav1.FinalizerOrphanDependents); held {
		t.Error("held again after the hold expired")
	}
	if got := events(); len(got) != 0 {
		t.Errorf("events after the hold expired = %q; want none", got)
	}

	// A cluster-scoped resource failing holds no namespaced owner.
	pods.listed() // pods relisted, and the relist applied
	pods.recovered()
	nodes := &monitor{started: clk.Now(), res: newResource(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "Node", false)}
	nodes.markGraphSynced()
	r.monitors.byGR[nodes.res.gvr.GroupResource()] = nodes
	r.monitors.noteError(t.Context(), nodes, errors.New("connection refused"))
	owner.uid = "o3"
	r.holdFinalizer(owner, metav1.FinalizerDeleteDependents)
	r.roundsStarted.Add(1)
	r.roundDone.Store(3)
	if _, held := r.holdFinalizer(owner, metav1.FinalizerDeleteDependents); held {
		t.Error("a namespaced owner held for a cluster-scoped resource")
	}
	cluster := objectID{uid: "c", apiVersion: "v1", kind: "Namespace", name: "x"}
	r.holdFinalizer(cluster, metav1.FinalizerDeleteDependents)
	r.roundsStarted.Add(1)
	r.roundDone.Store(4)
	if _, held := r.holdFinalizer(cluster, metav1.FinalizerDeleteDependents); !held {
		t.Error("a cluster-scoped owner not held while nodes fail")
	}
}

// testDependentResourceLeftDiscovery: a resource holding dependents leaves
// discovery while they exist (here the CRD's only version is set served:
// false; an aggregated API that stops listing a version does the same).
// Its objects are still there, unseen. An owner deleted with orphan, and
// one deleted in the foreground whose only blocking dependent is such an
// object, keep their finalizer, with a DependentsUnknown Warning naming
// the resource, until it is served again; then the orphan's dependent is
// orphaned (kept, without the reference) and the foreground's deleted.
// Before, both finalizers went within a discovery round: the orphan's
// dependent, dangling once served again, was deleted although the user
// asked to orphan it, and the foreground owner went before its blocking
// dependent.
func testDependentResourceLeftDiscovery(t *testing.T, env *itEnv) {
	ctx := t.Context()
	ns := env.namespace(t, "dep-unserved")
	group := "ownergc-" + utilrand.String(5) + ".test.nodegc.io"
	env.createCRD(t, group, "widgets", "Widget", []any{crdVersion("v1", true)}, nil)
	crd := "widgets." + group
	t.Cleanup(func() { _ = env.dyn.Resource(crdGVR).Delete(context.Background(), crd, metav1.DeleteOptions{}) })
	v1 := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "widgets"}
	owner := env.configMap(t, ns, "owner", nil)
	w := env.createCR(t, v1, "Widget", ns, "w", []metav1.OwnerReference{cmRef(owner, true)})
	fgOwner := env.configMap(t, ns, "fg-owner", nil)
	fgW := env.createCR(t, v1, "Widget", ns, "fg-w", []metav1.OwnerReference{cmRef(fgOwner, true)})

	cfg := testConfig()
	cfg.UnsyncedResourceHold = &metav1.Duration{Duration: 10 * time.Minute}
	gc := env.startCollector(t, cfg)
	gc.waitObserved(t, w.GetUID(), "")
	gc.waitObserved(t, fgW.GetUID(), "")
	served := func(on bool) {
		t.Helper()
		patch := fmt.Appendf(nil, `[{"op":"replace","path":"/spec/versions/0/served","value":%t}]`, on)
		if _, err := env.dyn.Resource(crdGVR).Patch(ctx, crd, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	served(false)
	eventually(t, 30*time.Second, "widgets to leave the collector's discovery", func(context.Context) (bool, error) {
		return !gc.hasMonitor(v1), nil
	})
	env.deleteCM(t, ns, "owner", metav1.DeletePropagationOrphan)
	env.deleteCM(t, ns, "fg-owner", metav1.DeletePropagationForeground)
	ownerGone, fgGone := env.cmGone(ns, "owner"), env.cmGone(ns, "fg-owner")
	warned, fgWarned := env.hasEvent(ns, "owner", "DependentsUnknown", "orphan", crd), env.hasEvent(ns, "fg-owner", "DependentsUnknown", "foregroundDeletion", crd)
	eventually(t, 30*time.Second, "each owner gone or warned about widgets", func(ctx context.Context) (bool, error) {
		var done [4]bool
		for i, f := range []func(context.Context) (bool, error){ownerGone, warned, fgGone, fgWarned} {
			done[i], _ = f(ctx)
		}
		return (done[0] || done[1]) && (done[2] || done[3]), nil
	})
	// Two more discovery rounds (2s each) for a finalizer to go.
	time.Sleep(5 * time.Second)
	if gone, _ := ownerGone(ctx); gone {
		t.Errorf("owner deleted with orphan went while its dependent's resource was not served")
	} else if got := env.getCM(t, ns, "owner"); !slices.Contains(got.Finalizers, metav1.FinalizerOrphanDependents) {
		t.Errorf("owner finalizers = %v while widgets are not served; want orphan kept", got.Finalizers)
	}
	if gone, _ := fgGone(ctx); gone {
		t.Errorf("fg-owner went before its blocking dependent, whose resource was not served")
	}

	served(true)
	eventually(t, 90*time.Second, "the owner to go once widgets are served again", ownerGone)
	eventually(t, 90*time.Second, "the foreground owner to go once widgets are served again", fgGone)
	eventually(t, 30*time.Second, "the foreground owner's widget to be gone", gone(func(ctx context.Context) error {
		_, err := env.dyn.Resource(v1).Namespace(ns).Get(ctx, "fg-w", metav1.GetOptions{})
		return err
	}))
	// Long enough for a dangling reference to be collected.
	gc.waitIdle(t)
	got, err := env.dyn.Resource(v1).Namespace(ns).Get(ctx, "w", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the widget of the owner deleted with orphan: %v; want it kept", err)
	}
	if refs := got.GetOwnerReferences(); len(refs) != 0 {
		t.Errorf("the widget still references %v; want it orphaned", refs)
	}
}

// monitorState returns the state of the collector's monitor of gvr's
// resource ("" without one).
func (tc *testCollector) monitorState(gvr schema.GroupVersionResource) string {
	r := tc.current.Load()
	if r == nil {
		return ""
	}
	r.monitors.mu.Lock()
	defer r.monitors.mu.Unlock()
	m, ok := r.monitors.byGR[gvr.GroupResource()]
	if !ok {
		return ""
	}
	return monitorStates[m.state(r.c.clock.Now(), r.c.failureGrace, r.c.syncTimeout)]
}

// testOrphanSeesDependentsOfARecoveredResource: an owner is deleted with
// orphan while a resource that holds one of its dependents fails (its
// conversion webhook is down; w2 was created meanwhile, unseen): the
// collector orphans the dependents it knows and holds the finalizer. Then
// a new dependent, k3, is created; while the collector patches it, the
// resource recovers and brings w2 into the graph, so that the hold, looked
// at right after, finds nothing failing. Before, the finalizer went on
// the view taken before the patch, without w2: w2's owner was then gone,
// and w2 was deleted although the user asked to orphan it. Now the view is
// taken again once the hold passes, and w2 is orphaned first.
func testOrphanSeesDependentsOfARecoveredResource(t *testing.T, env *itEnv) {
	ctx := t.Context()
	ns := env.namespace(t, "orphan-recovered")
	group := "ownergc-" + utilrand.String(5) + ".test.nodegc.io"
	env.createCRD(t, group, "sprockets", "Sprocket", []any{crdVersion("v1", true), crdVersion("v2", false)}, nil)
	crd := "sprockets." + group
	t.Cleanup(func() { _ = env.dyn.Resource(crdGVR).Delete(context.Background(), crd, metav1.DeleteOptions{}) })
	v1 := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "sprockets"}
	owner := env.configMap(t, ns, "owner", nil)
	known := env.configMap(t, ns, "known", []metav1.OwnerReference{cmRef(owner, true)})

	cfg := testConfig()
	cfg.UnsyncedResourceHold = &metav1.Duration{Duration: 10 * time.Minute}
	cfg.ConcurrentGCSyncs = 1
	gc := env.startCollector(t, cfg)
	gc.waitObserved(t, known.UID, "")
	v2 := schema.GroupVersionResource{Group: group, Version: "v2", Resource: "sprockets"}
	eventually(t, 30*time.Second, "the sprockets monitor to sync", func(context.Context) (bool, error) {
		return gc.hasMonitor(v2) && gc.monitorState(v2) == monitorStates[stateSynced], nil
	})
	// The conversion webhook goes down: kube-apiserver's watch cache of
	// sprockets re-initializes, cannot list w1 as v2, and refuses the
	// collector's watch (429). Then w2 is created (as v1, which needs no
	// conversion), unseen.
	w1 := env.createCR(t, v1, "Sprocket", ns, "w1", nil)
	gc.waitObserved(t, w1.GetUID(), "")
	breakConversion := []byte(`{"spec":{"conversion":{"strategy":"Webhook","webhook":{"conversionReviewVersions":["v1"],"clientConfig":{"url":"https://127.0.0.1:1/convert"}}}}}`)
	if _, err := env.dyn.Resource(crdGVR).Patch(ctx, crd, types.MergePatchType, breakConversion, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the sprockets monitor to fail", func(context.Context) (bool, error) {
		return gc.monitorState(v2) == monitorStates[stateFailing], nil
	})
	w2 := env.createCR(t, v1, "Sprocket", ns, "w2", []metav1.OwnerReference{cmRef(owner, true)})
	time.Sleep(2 * time.Second) // what a working watch would have delivered by now
	if r := gc.current.Load(); r.graph.hasObserved(w2.GetUID(), "") {
		t.Fatal("w2 is in the graph before the resource recovered; the test needs it missing")
	}

	env.deleteCM(t, ns, "owner", metav1.DeletePropagationOrphan)
	eventually(t, 30*time.Second, "the known dependent to be orphaned", func(ctx context.Context) (bool, error) {
		cm, err := env.cs.CoreV1().ConfigMaps(ns).Get(ctx, "known", metav1.GetOptions{})
		return err == nil && len(cm.OwnerReferences) == 0, err
	})
	eventually(t, 30*time.Second, "the owner's finalizer held for sprockets",
		env.hasEvent(ns, "owner", "DependentsUnknown", "orphan", crd))

	// k3 is created; while it is patched, the webhook is healed and the
	// resource's watch or relist brings w2 into the graph.
	var once sync.Once
	gc.beforeWrite.Store(ns, func(action string, id objectID) {
		if action != actOrphanDependent.String() || id.name != "k3" {
			return
		}
		once.Do(func() {
			env.healCRD(t, crd)
			deadline := time.Now().Add(60 * time.Second)
			for r := gc.current.Load(); time.Now().Before(deadline) && !(r.graph.hasObserved(w2.GetUID(), "") && len(r.unsyncedFor(ns)) == 0); r = gc.current.Load() {
				time.Sleep(50 * time.Millisecond)
			}
		})
	})
	env.configMap(t, ns, "k3", []metav1.OwnerReference{cmRef(owner, true)})
	// The relist that brings w2 follows the reflector's backoff (up to
	// half a minute) after the hook's wait.
	eventually(t, 3*time.Minute, "the owner to go", env.cmGone(ns, "owner"))
	gc.waitIdle(t)
	got, err := env.dyn.Resource(v1).Namespace(ns).Get(ctx, "w2", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("w2, a dependent of the owner deleted with orphan: %v; want it kept", err)
	}
	if refs := got.GetOwnerReferences(); len(refs) != 0 {
		t.Errorf("w2 still references %v; want it orphaned", refs)
	}
}

// A watch refused for a while (kube-apiserver down, here its address
// refusing connections) is opened again from where it stopped, without a
// relist: the objects created meanwhile come as the watch's first events.
// While they are still on their way to the graph, the monitor has not
// caught up, and an orphaning that needs every dependent must wait. Here
// the secrets watch's delivery of "dep", created while refused, is held
// back in the feed; its owner, deleted with orphan meanwhile, must stay
// until the graph has it, and then "dep" is orphaned, not deleted. The
// graph has caught up at the watch's next bookmark or, with within set
// shorter than the API server's bookmark period, through the relist that
// ends a watch which has not caught up within that bound.
func testOrphanWaitsForAResumedWatchsBacklog(t *testing.T, env *itEnv, within time.Duration) {
	ctx := t.Context()
	ns := env.namespace(t, "orphan-resumed")
	owner := env.configMap(t, ns, "owner", nil)

	proxy, rc := env.viaProxy(t)
	delivered, release := make(chan struct{}), make(chan struct{})
	var once, released sync.Once
	let := func() { released.Do(func() { close(release) }) }
	cfg := testConfig()
	cfg.UnsyncedResourceHold = &metav1.Duration{Duration: 10 * time.Minute}
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	gc := env.startCollectorVia(t, rc, cfg, func(c *Collector) {
		c.catchUpWithin = within
		c.hooks.beforeFeed = func(res *resource, obj *metav1.PartialObjectMetadata) {
			if res.gvr == secrets && obj.Namespace == ns && obj.Name == "dep" {
				once.Do(func() { close(delivered) })
				<-release
			}
		}
	})
	t.Cleanup(let) // before the collector's stop (cleanups run last first)

	// A watch cut within a second of opening ends as "very short", which
	// the reflector answers with a relist: cut watches that lasted.
	time.Sleep(2 * time.Second)
	proxy.Refuse()
	eventually(t, 30*time.Second, "the secrets monitor to fail", func(context.Context) (bool, error) {
		return gc.monitorState(secrets) == monitorStates[stateFailing], nil
	})
	dep, err := env.cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "dep",
		OwnerReferences: []metav1.OwnerReference{cmRef(owner, false)}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	env.deleteCM(t, ns, "owner", metav1.DeletePropagationOrphan)
	if err := proxy.Resume(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-delivered:
	case <-time.After(60 * time.Second):
		t.Fatal("the secrets watch did not deliver dep within 60s of the API server's return")
	}
	// The owner's deletion reached the graph (another watch) and its
	// worker looks again every holdRecheck, after a discovery round.
	deadline := time.Now().Add(2*holdRecheck + 2*cfg.DiscoveryResyncPeriod.Duration)
	for time.Now().Before(deadline) {
		if gone, _ := env.cmGone(ns, "owner")(ctx); gone {
			t.Fatal("the owner went while its dependent was still on its way to the graph: dep will be deleted, not orphaned")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !gc.current.Load().graph.hasObserved(owner.UID, "") {
		t.Fatal("the owner is not in the graph; the test needs its worker looking")
	}

	let()
	// Without a change of secrets, the watch's next bookmark (about a
	// minute after it opened) tells the graph has caught up, or the bound
	// ends the watch, and the relist does.
	eventually(t, 3*time.Minute, "the owner to go", env.cmGone(ns, "owner"))
	if relisted := strings.Contains(gc.logs.String(), "did not catch up within"); relisted != (within > 0) {
		t.Errorf("relisted because the resumed watch did not catch up: %v; want %v", relisted, within > 0)
	}
	gc.waitIdle(t)
	got, err := env.cs.CoreV1().Secrets(ns).Get(ctx, "dep", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("dep, a dependent of the owner deleted with orphan: %v; want it kept", err)
	}
	if got.UID != dep.UID || len(got.OwnerReferences) != 0 {
		t.Errorf("dep: UID %s (created %s), references %v; want it orphaned", got.UID, dep.UID, got.OwnerReferences)
	}
}

// podMonitorRun is a run on a fake clock with one monitor, of pods, that
// runs no reflector: the test drives it.
func podMonitorRun(t *testing.T) (*testingclock.FakeClock, *run, *monitor) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	c := &Collector{clock: clk, failureGrace: 10 * time.Second, syncTimeout: time.Minute}
	c.metrics = newMetrics(prometheus.NewRegistry(), c)
	r := &run{c: c, logger: testLogger(t), graph: newGraph()}
	r.monitors = &monitorSet{r: r, ctx: t.Context(), byGR: map[schema.GroupResource]*monitor{}}
	pods := &monitor{started: clk.Now(), res: resPod}
	r.monitors.byGR[resPod.gvr.GroupResource()] = pods
	return clk, r, pods
}

// TestRelistRecoversWhenApplied: a failing monitor whose relist returned is
// not trusted until the graph has applied that relist (its evRelisted):
// the objects created while it failed may still be queued. The watch that
// the reflector opens right after the list does not end the failure
// either. The first list ends a failure at once (the monitor is syncing
// until evSynced anyway).
func TestRelistRecoversWhenApplied(t *testing.T) {
	clk, r, pods := podMonitorRun(t)
	tg := newTestGraph(t)

	pods.mu.Lock()
	pods.failing, pods.failingSince = true, clk.Now()
	pods.mu.Unlock()
	pods.listed() // the first list
	tg.apply(event{typ: evSynced, mon: pods})
	if got := r.monitors.unsyncedFor(clk.Now(), "ns"); len(got) != 0 {
		t.Fatalf("after the first list is applied: unsynced %q, want none", got)
	}

	pods.mu.Lock()
	pods.failing, pods.failingSince = true, clk.Now() // its watch failed
	pods.mu.Unlock()
	pods.listed()   // the relist returned
	pods.watching() // and the watch after it opened
	if got := r.monitors.unsyncedFor(clk.Now(), "ns"); len(got) != 1 {
		t.Errorf("relist returned, not applied: unsynced %q, want pods", got)
	}
	tg.apply(event{typ: evRelisted, res: resPod, uids: map[types.UID]struct{}{}, mon: pods})
	if got := r.monitors.unsyncedFor(clk.Now(), "ns"); len(got) != 0 {
		t.Errorf("relist applied: unsynced %q, want none", got)
	}
	// A relist returns, and the watch opened right after it fails (429)
	// before the relist is applied: applying it does not end that failure.
	pods.listed()
	r.monitors.noteError(t.Context(), pods, apierrors.NewTooManyRequests("storage is (re)initializing", 1))
	tg.apply(event{typ: evRelisted, res: resPod, uids: map[types.UID]struct{}{}, mon: pods})
	if got := r.monitors.unsyncedFor(clk.Now(), "ns"); len(got) != 1 {
		t.Errorf("a watch failed after the relist returned, relist applied: unsynced %q, want pods", got)
	}
	// A relist returns, its first watch is refused, the next one opens
	// before the relist is applied: that watch resumes, and what was
	// created while it was refused comes behind the relist, so applying
	// the relist does not end the failure; the graph catching up does.
	pods.listed()
	r.monitors.noteError(t.Context(), pods, apierrors.NewTooManyRequests("storage is (re)initializing", 1))
	if !pods.watching() {
		t.Error("a watch refused after a relist returned, then opened before it was applied: watching says it does not resume")
	}
	pods.awaitCatchUp(70)
	tg.apply(event{typ: evRelisted, res: resPod, uids: map[types.UID]struct{}{}, mon: pods})
	if got := r.monitors.unsyncedFor(clk.Now(), "ns"); len(got) != 1 || !strings.Contains(got[0], "catching up") {
		t.Errorf("a watch refused, then opened, relist applied: unsynced %q, want pods catching up", got)
	}
	pods.mu.Lock()
	seq := pods.catchUpAt
	pods.mu.Unlock()
	pods.caughtUp(seq)
	if got := r.monitors.unsyncedFor(clk.Now(), "ns"); len(got) != 0 {
		t.Errorf("the resumed watch caught up: unsynced %q, want none", got)
	}
	// The same, but the relist is applied while the resumed watch reads
	// the version it must reach: the failure stays until it is reached.
	pods.listed()
	r.monitors.noteError(t.Context(), pods, apierrors.NewTooManyRequests("storage is (re)initializing", 1))
	if !pods.watching() {
		t.Error("a watch refused after a relist returned, then opened before it was applied: watching says it does not resume")
	}
	tg.apply(event{typ: evRelisted, res: resPod, uids: map[types.UID]struct{}{}, mon: pods})
	pods.awaitCatchUp(80)
	if got := r.monitors.unsyncedFor(clk.Now(), "ns"); len(got) != 1 || !strings.Contains(got[0], "catching up") {
		t.Errorf("relist applied while the resumed watch read its version: unsynced %q, want pods catching up", got)
	}
	pods.mu.Lock()
	seq = pods.catchUpAt
	pods.mu.Unlock()
	pods.caughtUp(seq)
	if got := r.monitors.unsyncedFor(clk.Now(), "ns"); len(got) != 0 {
		t.Errorf("the resumed watch caught up: unsynced %q, want none", got)
	}
	// A watch that opens after a relist returned, with no failure since,
	// does not resume: the relist's application ends the failure.
	pods.mu.Lock()
	pods.failing = true
	pods.mu.Unlock()
	pods.listed()
	if pods.watching() {
		t.Error("the watch right after a relist, no failure since: watching says it resumes")
	}
	tg.apply(event{typ: evRelisted, res: resPod, uids: map[types.UID]struct{}{}, mon: pods})
	if got := r.monitors.unsyncedFor(clk.Now(), "ns"); len(got) != 0 {
		t.Errorf("the watch right after a relist, relist applied: unsynced %q, want none", got)
	}
	// A watch that ends because its version is too old is no failure, but
	// the graph misses what changed since until the relist it starts is
	// applied, however long that relist is in flight.
	pods.mu.Lock()
	pods.failing = false
	pods.mu.Unlock()
	r.monitors.noteError(t.Context(), pods, apierrors.NewResourceExpired("too old resource version: 3174 (3182)"))
	pods.listing() // the reflector relists
	if got := r.monitors.unsyncedFor(clk.Now(), "ns"); len(got) != 1 || !strings.Contains(got[0], "relisting") {
		t.Errorf("relist in flight after a watch ended with a version too old: unsynced %q, want pods relisting", got)
	}
	pods.listed()
	tg.apply(event{typ: evRelisted, res: resPod, uids: map[types.UID]struct{}{}, mon: pods})
	if got := r.monitors.unsyncedFor(clk.Now(), "ns"); len(got) != 0 {
		t.Errorf("relist applied: unsynced %q, want none", got)
	}
	// A watch that reopens with no relist resumes: the failure ends when
	// the graph has caught up (TestResumedWatchCatchesUp).
	pods.mu.Lock()
	pods.failing = true
	pods.mu.Unlock()
	if !pods.watching() {
		t.Error("a watch reopened after a failure, no relist: watching says it does not resume")
	}
	if got := r.monitors.unsyncedFor(clk.Now(), "ns"); len(got) != 1 {
		t.Errorf("watch reopened, not caught up: unsynced %q, want pods", got)
	}
}

// TestResumedWatchCatchesUp: a watch that resumes after a failure, with no
// relist, ends the failure only once the graph has applied an event or a
// bookmark of it at or after the resource version read when it opened
// (what was created meanwhile comes first). A failure or a relist since
// voids the mark, and so does a failure between the mark's queueing and
// its application.
func TestResumedWatchCatchesUp(t *testing.T) {
	clk, r, pods := podMonitorRun(t)
	q := newEventQueue()
	pods.queue = q
	f := newFeed(pods)
	tg := newTestGraph(t)
	applyQueued := func() {
		t.Helper()
		for q.len() > 0 {
			evs, _ := q.pop(nil, 100)
			tg.apply(evs...)
		}
	}
	unsynced := func() []string { return r.monitors.unsyncedFor(clk.Now(), "ns") }
	fail := func() { r.monitors.noteError(t.Context(), pods, errors.New("dial tcp: connection refused")) }
	pod := func(name, rv string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
			UID: types.UID("uid-" + name), ResourceVersion: rv}}
	}
	// resumeAt: the watch opens again, the version read then is rv.
	resumeAt := func(rv uint64) {
		t.Helper()
		if !pods.watching() {
			t.Fatal("watching after a failure: want a resume")
		}
		pods.awaitCatchUp(rv)
	}
	if err := f.Replace(nil, "10"); err != nil {
		t.Fatal(err)
	}
	applyQueued()
	if got := unsynced(); len(got) != 0 {
		t.Fatalf("synced: unsynced %q, want none", got)
	}

	// Refused, then resumed: what was created meanwhile (rv 15) is not
	// enough, the version read at the reopen (20) is.
	fail()
	resumeAt(20)
	_ = f.Add(pod("made-meanwhile", "15"))
	applyQueued()
	if got := unsynced(); len(got) != 1 || !strings.Contains(got[0], "catching up") {
		t.Errorf("an event before the version read at the reopen applied: unsynced %q, want pods catching up", got)
	}
	_ = f.Bookmark("20")
	if got := unsynced(); len(got) != 1 {
		t.Errorf("the bookmark queued, not applied: unsynced %q, want pods", got)
	}
	applyQueued()
	if got := unsynced(); len(got) != 0 {
		t.Errorf("the bookmark applied: unsynced %q, want none", got)
	}
	if !tg.g.hasObserved("uid-made-meanwhile", "") {
		t.Error("the object created meanwhile is not in the graph")
	}

	// An event at or after the version ends it as well.
	fail()
	resumeAt(30)
	_ = f.Update(pod("made-meanwhile", "31"))
	applyQueued()
	if got := unsynced(); len(got) != 0 {
		t.Errorf("an event after the version applied: unsynced %q, want none", got)
	}

	// The mark is queued, then the watch fails again: applying the mark
	// does not end the new failure, and a later resume needs its own.
	fail()
	resumeAt(40)
	_ = f.Bookmark("40")
	fail()
	applyQueued()
	if got := unsynced(); len(got) != 1 || strings.Contains(got[0], "catching up") {
		t.Errorf("a failure after the mark was queued: unsynced %q, want pods failing", got)
	}
	resumeAt(50)
	_ = f.Bookmark("45")
	applyQueued()
	if got := unsynced(); len(got) != 1 {
		t.Errorf("a bookmark before the version of the second resume: unsynced %q, want pods", got)
	}
	_ = f.Bookmark("50")
	applyQueued()
	if got := unsynced(); len(got) != 0 {
		t.Errorf("the second resume caught up: unsynced %q, want none", got)
	}

	// A relist that begins supersedes the resume: only its application
	// ends the failure.
	fail()
	resumeAt(60)
	pods.listing()
	_ = f.Bookmark("60")
	applyQueued()
	if got := unsynced(); len(got) != 1 {
		t.Errorf("a relist in flight: unsynced %q, want pods", got)
	}
	pods.listed()
	if err := f.Replace([]any{pod("made-meanwhile", "61")}, "61"); err != nil {
		t.Fatal(err)
	}
	applyQueued()
	if got := unsynced(); len(got) != 0 {
		t.Errorf("the relist applied: unsynced %q, want none", got)
	}
}

// downDiscovery is a discovery client whose every round fails whole, as
// when /api and /apis cannot be read (an overloaded API server).
type downDiscovery struct {
	discovery.DiscoveryInterfaceWithContext
}

func (downDiscovery) ServerGroupsAndResourcesWithContext(context.Context) ([]*metav1.APIGroup, []*metav1.APIResourceList, error) {
	return nil, nil, errors.New("the server was unable to return a response in the time allotted")
}

// TestHoldWhileDiscoveryFails: while every discovery round fails whole, a
// hold waits for a round that completes, as any hold does, but it is
// bounded as any hold: once a round begun after the hold has failed, the
// owner gets a DependentsUnknown Warning naming discovery, is looked at
// again every holdRecheck (not every 100 ms), and the finalizer goes at
// ownerGC.unsyncedResourceHold with UnsyncedResourceHoldExpired. While
// the round is under way the hold is silent (it normally lasts a second).
// Before, the hold lasted as long as discovery failed, requeued every
// 100 ms, with no Warning and no log.
func TestHoldWhileDiscoveryFails(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	const bound = 10 * time.Minute
	c := &Collector{clock: clk, failureGrace: 10 * time.Second, syncTimeout: time.Minute, unsyncedHold: bound,
		requestTimeout: time.Minute, discovery: downDiscovery{}}
	r, _, events := holdingRun(t, c)
	r.roundsStarted.Add(1)
	r.roundDone.Store(1) // the run's first round, before the hold
	owner := objectID{uid: "o", apiVersion: "v1", kind: "ConfigMap", namespace: "ns", name: "owner"}

	begin := clk.Now()
	out, held := r.holdFinalizer(owner, metav1.FinalizerOrphanDependents)
	if !held || out.after != 100*time.Millisecond || len(r.kick) != 1 {
		t.Fatalf("hold begins: held %t after %s, kicked %d; want held, 100ms, a round asked for", held, out.after, len(r.kick))
	}
	if got := events(); len(got) != 0 {
		t.Errorf("events while the round is under way = %q; want none", got)
	}
	<-r.kick
	if err := r.syncResources(t.Context()); err == nil {
		t.Fatal("discovery round succeeded; want it to fail whole")
	}
	var warned, wrongAfter []string
	for clk.Since(begin) < bound {
		out, held := r.holdFinalizer(owner, metav1.FinalizerOrphanDependents)
		if !held {
			t.Fatalf("released after %s while discovery fails; want held until %s", clk.Since(begin), bound)
		}
		if want := min(holdRecheck, bound-clk.Since(begin)); out.after != want {
			wrongAfter = append(wrongAfter, fmt.Sprintf("%s in: %s, want %s", clk.Since(begin), out.after, want))
		}
		warned = append(warned, events()...)
		select {
		case <-r.kick:
			_ = r.syncResources(t.Context())
		default:
		}
		clk.Step(min(holdRecheck, bound-clk.Since(begin)))
	}
	if len(wrongAfter) > 0 {
		t.Errorf("after a failed round, looked at again after (first of %d): %s", len(wrongAfter), wrongAfter[0])
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "DependentsUnknown") || !strings.Contains(warned[0], "discovery") {
		t.Errorf("events while held = %q; want one DependentsUnknown naming discovery", warned)
	}
	if _, held := r.holdFinalizer(owner, metav1.FinalizerOrphanDependents); held {
		t.Fatalf("still held after %s with a bound of %s", clk.Since(begin), bound)
	}
	if got := events(); len(got) != 1 || !strings.Contains(got[0], "UnsyncedResourceHoldExpired") || !strings.Contains(got[0], "discovery") {
		t.Errorf("events at the bound = %q; want UnsyncedResourceHoldExpired naming discovery", got)
	}
}

// TestHoldForFailedDiscovery: a group version that fails discovery holds
// orphan and foregroundDeletion finalizers only when, at its last
// successful discovery in this process, it served a resource the collector
// monitors (list, watch and delete, not ignored), or when this process
// never discovered it (unknown: hold). metrics.k8s.io, whose resources
// only get and list, holds nothing once it was discovered; neither does
// events.k8s.io/v1 with events ignored. What the process learnt outlives
// the run. Before, every failed group version held every owner in the
// cluster for the bound (a crashlooping metrics-server delayed each
// cascading delete by 10 minutes). The failed group versions this process
// never read, which have no monitor, are counted in
// nodegc_owner_gc_unread_group_versions (NodegcOwnerGCMonitorsFailing
// fires on it); before, nothing but the discovery error counter told them.
func TestHoldForFailedDiscovery(t *testing.T) {
	all := metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}
	group := func(name string, versions ...string) *metav1.APIGroup {
		g := &metav1.APIGroup{Name: name}
		for _, v := range versions {
			gv := schema.GroupVersion{Group: name, Version: v}.String()
			g.Versions = append(g.Versions, metav1.GroupVersionForDiscovery{GroupVersion: gv, Version: v})
		}
		g.PreferredVersion = g.Versions[0]
		return g
	}
	list := func(gv string, rs ...metav1.APIResource) *metav1.APIResourceList {
		return &metav1.APIResourceList{GroupVersion: gv, APIResources: rs}
	}
	static := &staticDiscovery{}
	serve := func(withNew, withMetrics bool) {
		groups := []*metav1.APIGroup{group("", "v1"), group("events.k8s.io", "v1"), group("example.com", "v1")}
		resources := []*metav1.APIResourceList{
			list("v1", metav1.APIResource{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: all}),
			list("events.k8s.io/v1", metav1.APIResource{Name: "events", Kind: "Event", Namespaced: true, Verbs: all}),
			list("example.com/v1", metav1.APIResource{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: all},
				metav1.APIResource{Name: "widgets/status", Kind: "Widget", Namespaced: true, Verbs: all}),
		}
		if withMetrics {
			groups = append(groups, group("metrics.k8s.io", "v1beta1"))
			resources = append(resources, list("metrics.k8s.io/v1beta1",
				metav1.APIResource{Name: "pods", Kind: "PodMetrics", Namespaced: true, Verbs: metav1.Verbs{"get", "list"}}))
		}
		if withNew {
			groups = append(groups, group("new.example.com", "v1"))
			resources = append(resources, list("new.example.com/v1", metav1.APIResource{Name: "gadgets", Kind: "Gadget", Namespaced: true, Verbs: all}))
		}
		static.set(groups, resources)
	}
	serve(false, true)
	d := &failingDiscovery{DiscoveryInterfaceWithContext: static}
	metricsGV := schema.GroupVersion{Group: "metrics.k8s.io", Version: "v1beta1"}
	eventsGV := schema.GroupVersion{Group: "events.k8s.io", Version: "v1"}
	widgetsGV := schema.GroupVersion{Group: "example.com", Version: "v1"}
	newGV := schema.GroupVersion{Group: "new.example.com", Version: "v1"}

	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	c := &Collector{clock: clk, failureGrace: 10 * time.Second, syncTimeout: time.Minute, requestTimeout: time.Minute,
		unsyncedHold: 10 * time.Minute, discovery: d, ignored: map[schema.GroupResource]struct{}{{Group: "events.k8s.io", Resource: "events"}: {}}}
	reg := prometheus.NewRegistry()
	c.metrics = newMetrics(reg, c)
	c.watches = emptyResourceServer(t)
	newTestRun := func() *run {
		r := &run{c: c, logger: testLogger(t), events: newEventQueue(), kick: make(chan struct{}, 1)}
		r.graph = newGraph()
		r.deletes, r.orphans = newQueue(c, queueDelete), newQueue(c, queueOrphan)
		r.monitors = newMonitorSet(t.Context(), r)
		t.Cleanup(func() { r.monitors.stopAll(); r.deletes.ShutDown(); r.orphans.ShutDown() })
		c.current.Store(r)
		return r
	}
	unread := func() float64 {
		t.Helper()
		return counterByLabel(t, reg, "nodegc_owner_gc_unread_group_versions", "")[""]
	}
	// holding runs a discovery round and returns the group versions that
	// failed it and hold an owner.
	holding := func(r *run) []string {
		t.Helper()
		_ = r.syncResources(t.Context())
		var out []string
		for _, s := range r.unsyncedFor("ns") {
			if strings.HasSuffix(s, " (discovery failed)") {
				out = append(out, strings.TrimSuffix(s, " (discovery failed)"))
			}
		}
		return out
	}

	r := newTestRun()
	d.failing(newGV) // not served yet: nothing to fail
	steps := []struct {
		name    string
		do      func()
		holding []string
		unread  float64 // failed group versions never read
	}{
		{name: "everything discovered", do: func() {}},
		{name: "metrics.k8s.io fails: it served nothing to monitor", do: func() { d.failing(metricsGV) }},
		{name: "events.k8s.io fails: it served only an ignored resource", do: func() { d.failing(eventsGV) }},
		{name: "example.com fails: it served widgets", do: func() { d.failing(widgetsGV, metricsGV) }, holding: []string{"example.com/v1"}},
		{name: "a new group version fails from the start: unknown, it holds", do: func() { serve(true, true); d.failing(newGV, metricsGV) },
			holding: []string{"new.example.com/v1"}, unread: 1},
		{name: "the new group version is discovered", do: func() { d.failing() }},
		{name: "the new group version fails: it served gadgets", do: func() { d.failing(newGV) }, holding: []string{"new.example.com/v1"}},
		{name: "metrics.k8s.io is no longer served", do: func() { serve(true, false); d.failing() }},
		{name: "metrics.k8s.io is back, failing: unknown again, it holds", do: func() { serve(true, true); d.failing(metricsGV) },
			holding: []string{"metrics.k8s.io/v1beta1"}, unread: 1},
		{name: "metrics.k8s.io is discovered", do: func() { d.failing() }},
	}
	for _, s := range steps {
		s.do()
		if got := holding(r); !slices.Equal(got, s.holding) {
			t.Errorf("%s: holding %q, want %q", s.name, got, s.holding)
		}
		if got := unread(); got != s.unread {
			t.Errorf("%s: nodegc_owner_gc_unread_group_versions = %v, want %v", s.name, got, s.unread)
		}
	}
	// A new run of the same process: what the last one learnt holds.
	r = newTestRun()
	d.failing(metricsGV, widgetsGV)
	if got, want := holding(r), []string{"example.com/v1"}; !slices.Equal(got, want) {
		t.Errorf("the next run's first round, metrics.k8s.io and example.com failing: holding %q, want %q", got, want)
	}
}

// holdingRun is a run of c with a synced pods monitor (returned) and a fake
// event recorder, to look at holds; events drains the recorder.
func holdingRun(t *testing.T, c *Collector) (r *run, pods *monitor, events func() []string) {
	t.Helper()
	c.metrics = newMetrics(prometheus.NewRegistry(), c)
	rec := record.NewFakeRecorder(10)
	r = &run{c: c, logger: testLogger(t), recorder: rec, kick: make(chan struct{}, 1), graph: newGraph()}
	r.monitors = &monitorSet{r: r, ctx: t.Context(), byGR: map[schema.GroupResource]*monitor{}}
	pods = &monitor{started: c.clock.Now(), res: resPod}
	r.monitors.byGR[resPod.gvr.GroupResource()] = pods
	pods.markGraphSynced()
	events = func() (out []string) {
		for {
			select {
			case e := <-rec.Events:
				out = append(out, e)
			default:
				return out
			}
		}
	}
	return r, pods, events
}

// TestHoldDroppedWithItsFinalizer: a hold that lasted its bound stays,
// expired, while its owner's finalizer does (its removal failed and is
// tried again), and goes with the finalizer: once removed, nothing may
// look at the owner again (its deletion queues its dependents, not the
// owner), and before, the entry stayed for the rest of the run (review
// ownergc r10 nit).
func TestHoldDroppedWithItsFinalizer(t *testing.T) {
	s := newRejectServer(t)
	r, tg, _, _ := rejectRun(t, s)
	fg := object(rejectNamespace, "fg", "fg", deleting(), withFinalizers(metav1.FinalizerDeleteDependents))
	tg.apply(upsert(resConfigMap, fg))
	s.refuse("fg", metav1.Status{Code: 500, Message: "try again"}, fg)
	id := nodeID(r.graph.nodes["fg"])
	r.holds.get(id.uid, r.c.clock.Now(), 0)
	r.holds.expire(id.uid)
	if out := r.removeFinalizer(t.Context(), id, metav1.FinalizerDeleteDependents, 0, ruleNoBlocking); out != retry {
		t.Fatalf("a refused removal: outcome %+v, want a retry", out)
	}
	if h, ok := r.holds.peek(id.uid); !ok || !h.expired {
		t.Errorf("after a refused removal the hold is %+v (present %t); want it kept, expired", h, ok)
	}
	s.accept("fg")
	if out := r.removeFinalizer(t.Context(), id, metav1.FinalizerDeleteDependents, 0, ruleNoBlocking); out != done {
		t.Fatalf("a removal: outcome %+v, want done", out)
	}
	if h, ok := r.holds.peek(id.uid); ok {
		t.Errorf("after the finalizer's removal the hold %+v stays; want it dropped", h)
	}
}

// heldOnceRun is a synced run on the reject server whose finalizer holds
// last a minute, on a fake clock, with its Pods monitor begun now.
func heldOnceRun(t *testing.T) (*rejectServer, *run, *testGraph, *testingclock.FakeClock, *monitor) {
	s := newRejectServer(t)
	r, tg := syncedRejectRun(t, s)
	clk := testingclock.NewFakeClock(time.Now())
	r.c.clock = clk
	r.c.unsyncedHold = time.Minute
	r.c.failureGrace, r.c.syncTimeout = 10*time.Second, time.Minute
	pods := r.monitors.byGR[resPod.gvr.GroupResource()]
	pods.started = clk.Now()
	return s, r, tg, clk, pods
}

// deletedOwner puts ConfigMap name, being deleted with finalizer, into the
// graph and has s take its writes; it returns the object.
func deletedOwner(s *rejectServer, tg *testGraph, name, finalizer string) *metav1.PartialObjectMetadata {
	o := object(rejectNamespace, name, name, deleting(), withFinalizers(finalizer))
	s.refuse(name, metav1.Status{}, o)
	s.accept(name)
	tg.apply(upsert(resConfigMap, o))
	return o
}

// holdWhilePodsFail makes Pods fail and has attempt (a worker's) look at
// owner uid until a discovery round begun after its hold completed: the
// owner must be held.
func holdWhilePodsFail(t *testing.T, r *run, pods *monitor, attempt func(*run, context.Context, types.UID) outcome, uid types.UID) {
	t.Helper()
	r.monitors.noteError(t.Context(), pods, errors.New("connection refused"))
	attempt(r, t.Context(), uid)
	r.roundsStarted.Add(1)
	r.roundDone.Store(2)
	if out := attempt(r, t.Context(), uid); out.after <= 0 {
		t.Fatalf("Pods failing: %+v; want held", out)
	}
}

// TestHoldCountsEachEpisode: a foreground owner's hold, begun while Pods
// failed, pauses when Pods recover with a blocking dependent the graph had
// missed, and the owner waits for it; as Pods recovered, it ends there. When that dependent goes much later
// (20 minutes, over the bound) while Pods lag again (a kube-apiserver
// restart, an etcd restore that brings another blocking dependent back),
// a new hold begins. Before, the hold was counted from the owner's first
// one, the finalizer went at once as if this one had lasted the bound, and
// the owner went before a blocking dependent the lagging monitor had not
// delivered (review ownergc r11 F1).
func TestHoldCountsEachEpisode(t *testing.T) {
	s, r, tg, clk, pods := heldOnceRun(t)
	ns := rejectNamespace
	deletedOwner(s, tg, "fg", metav1.FinalizerDeleteDependents)

	holdWhilePodsFail(t, r, pods, (*run).attemptToDelete, "fg")
	pods.listed()
	pods.recovered()
	p := object(ns, "p", "p", ownedBy(resConfigMap, "fg", "fg", true))
	tg.apply(upsert(resPod, p))
	r.attemptToDelete(t.Context(), "fg")
	if h, ok := r.holds.peek("fg"); ok && !h.paused {
		t.Errorf("the owner waits for a blocking dependent the graph shows, and its hold %+v goes on; want it ended or paused", h)
	}
	clk.Step(20 * time.Minute)
	tg.apply(del(resPod, p))
	r.monitors.noteError(t.Context(), pods, errors.New("connection refused"))
	out := r.attemptToDelete(t.Context(), "fg")
	if n := s.count(http.MethodPatch, "fg"); n != 0 || out.after <= 0 {
		t.Errorf("the blocker gone while Pods fail again: outcome %+v, %d PATCH of the finalizer; want a new hold, no PATCH", out, n)
	}
}

// TestOrphanHoldCountsEachEpisode: the orphan finalizer's hold, begun
// while Pods failed, ends when Pods recover with a dependent whose
// orphaning patch is then refused for 30 minutes (a webhook down). When it
// is accepted while Pods fail again, a new hold begins. Before, the
// finalizer went at once, and a dependent the lagging monitor had not
// delivered was never orphaned, then deleted as dangling although the
// user asked to keep it (review ownergc r11 F1).
func TestOrphanHoldCountsEachEpisode(t *testing.T) {
	s, r, tg, clk, pods := heldOnceRun(t)
	ns := rejectNamespace
	deletedOwner(s, tg, "o", metav1.FinalizerOrphanDependents)

	holdWhilePodsFail(t, r, pods, (*run).attemptToOrphan, "o")
	pods.listed()
	pods.recovered()
	p := object(ns, "p", "p", ownedBy(resConfigMap, "o", "o", false))
	tg.apply(upsert(resPod, p))
	s.refuse("p", metav1.Status{Status: metav1.StatusFailure, Code: 500, Message: "webhook down"}, p)
	for range 3 {
		if out := r.attemptToOrphan(t.Context(), "o"); !out.retry {
			t.Fatalf("p refused: %+v; want a retry", out)
		}
		clk.Step(10 * time.Minute)
	}
	s.accept("p")
	r.monitors.noteError(t.Context(), pods, errors.New("connection refused"))
	out := r.attemptToOrphan(t.Context(), "o")
	if n := s.count(http.MethodPatch, "o"); n != 0 || out.after <= 0 {
		t.Errorf("p orphaned while Pods fail again: outcome %+v, %d PATCH of the owner's finalizer; want a new hold, no PATCH", out, n)
	}
}

// TestHoldEndsWithItsDeletion: an owner held while Pods failed comes back
// not being deleted (an etcd restore; or its finalizer removed by hand),
// and is deleted again 20 minutes later, over the bound, while Pods lag
// again: a new hold begins, for the foreground and the orphan finalizer
// alike. Before, the first deletion's hold outlived it (nothing looks at
// the owner when it stops being deleted), the new deletion was measured
// from it, and the finalizer went at once (review ownergc r12 F1).
func TestHoldEndsWithItsDeletion(t *testing.T) {
	for _, tc := range []struct {
		finalizer string
		attempt   func(*run, context.Context, types.UID) outcome
	}{
		{metav1.FinalizerDeleteDependents, (*run).attemptToDelete},
		{metav1.FinalizerOrphanDependents, (*run).attemptToOrphan},
	} {
		t.Run(tc.finalizer, func(t *testing.T) {
			s, r, tg, clk, pods := heldOnceRun(t)
			ns := rejectNamespace
			deleted := deletedOwner(s, tg, "o", tc.finalizer)
			holdWhilePodsFail(t, r, pods, tc.attempt, "o")
			tg.apply(upsert(resConfigMap, object(ns, "o", "o"))) // back, not being deleted
			pods.listed()
			pods.recovered()
			if h, ok := r.holds.peek("o"); ok {
				t.Errorf("the owner is no longer being deleted, and its hold %+v stays; want it ended", h)
			}
			clk.Step(20 * time.Minute)
			tg.apply(upsert(resConfigMap, deleted))
			r.monitors.noteError(t.Context(), pods, errors.New("connection refused"))
			out := tc.attempt(r, t.Context(), "o")
			if n := s.count(http.MethodPatch, "o"); n != 0 || out.after <= 0 {
				t.Errorf("deleted again while Pods fail: outcome %+v, %d PATCH of the finalizer; want a new hold, no PATCH", out, n)
			}
		})
	}
}

// TestHoldResumesWhileItsResourceLaggedAllAlong: a foreground owner held
// while Pods fail comes to wait for a blocking dependent the graph shows
// (for 2 minutes, over the bound of 1), then for nothing but Pods, which
// have failed all along; and an orphaning owner, held so, has a
// dependent's patch refused for as long. The hold goes on from where it
// was, not afresh: Pods have lagged for longer than the bound, and the
// finalizer goes at once, with the UnsyncedResourceHoldExpired Warning, as
// kube-controller-manager would have removed it long ago. Before, every
// wait for something the graph shows began the hold again, and a
// controller that kept making blockers, or a webhook that kept refusing,
// held the finalizer past the bound for as long as it went on (review
// ownergc r12 F2). A resource that recovered in between begins a new hold
// (TestHoldCountsEachEpisode).
func TestHoldResumesWhileItsResourceLaggedAllAlong(t *testing.T) {
	for _, tc := range []struct {
		name, finalizer string
		attempt         func(*run, context.Context, types.UID) outcome
		// wait makes the owner wait for dependent p the graph shows, and
		// release ends that wait 2 minutes later.
		wait, release func(s *rejectServer, tg *testGraph, p *metav1.PartialObjectMetadata)
	}{
		{
			name: "foreground, blocker", finalizer: metav1.FinalizerDeleteDependents, attempt: (*run).attemptToDelete,
			wait:    func(*rejectServer, *testGraph, *metav1.PartialObjectMetadata) {},
			release: func(_ *rejectServer, tg *testGraph, p *metav1.PartialObjectMetadata) { tg.apply(del(resPod, p)) },
		},
		{
			name: "orphan, refused patch", finalizer: metav1.FinalizerOrphanDependents, attempt: (*run).attemptToOrphan,
			wait: func(s *rejectServer, _ *testGraph, p *metav1.PartialObjectMetadata) {
				s.refuse("p", metav1.Status{Status: metav1.StatusFailure, Code: 500, Message: "webhook down"}, p)
			},
			release: func(s *rejectServer, _ *testGraph, _ *metav1.PartialObjectMetadata) { s.accept("p") },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, r, tg, clk, pods := heldOnceRun(t)
			deletedOwner(s, tg, "o", tc.finalizer)
			holdWhilePodsFail(t, r, pods, tc.attempt, "o")
			p := object(rejectNamespace, "p", "p", ownedBy(resConfigMap, "o", "o", true))
			tg.apply(upsert(resPod, p))
			tc.wait(s, tg, p)
			tc.attempt(r, t.Context(), "o")
			if h, ok := r.holds.peek("o"); !ok || !h.paused {
				t.Fatalf("the owner waits for p: its hold %+v (present %t); want it paused", h, ok)
			}
			clk.Step(2 * time.Minute)
			tc.release(s, tg, p)
			out := tc.attempt(r, t.Context(), "o")
			if n := s.count(http.MethodPatch, "o"); n != 1 || out != done {
				t.Errorf("the wait for p over, Pods failing all along for 2m (bound 1m): outcome %+v, %d PATCH of the owner's finalizer; want it removed, done", out, n)
			}
		})
	}
}
