package ownergc

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/nodegc/nodegc/pkg/config"
)

// Objects deleted and recreated under the same name while the collector
// could not watch: its informers relist, and a relist reports the new
// object as an update of the old one (same name), not as a delete and an
// add. The old UIDs must leave the graph: a dependent of the old owner is
// collected, and a foreground deletion that waited for the old blocking
// dependent finishes. The collector reaches the API server through a proxy
// that is cut while the objects change; the API server restarts meanwhile,
// so that its watch cache no longer holds the events the collector missed
// and the informers must relist.
func testRelistAcrossRecreate(t *testing.T, env *itEnv) {
	ns := env.namespace(t, "relist")
	owner := env.configMap(t, ns, "owner", nil)
	env.configMap(t, ns, "dep", []metav1.OwnerReference{cmRef(owner, false)})
	fgOwner := env.configMap(t, ns, "fg-owner", nil)
	held := env.configMap(t, ns, "held", []metav1.OwnerReference{cmRef(fgOwner, true)}, "test.nodegc.io/hold")

	proxy, rc := env.viaProxy(t)
	gc := env.startCollectorVia(t, rc, testConfig())

	// fg-owner waits, in the foreground, for "held": the collector deleted
	// it, and its own finalizer keeps it.
	env.deleteCM(t, ns, "fg-owner", metav1.DeletePropagationForeground)
	gc.waitGraph(t, "fg-owner deleting in the foreground and held being deleted", func(g *graph) bool {
		f, h := g.nodes[fgOwner.UID], g.nodes[held.UID]
		return f != nil && f.deletingDependents() && h != nil && h.beingDeleted()
	})

	proxy.Cut()
	env.deleteCM(t, ns, "owner", metav1.DeletePropagationOrphan) // orphan: no collector may act on dep meanwhile
	env.removeFinalizers(t, ns, "owner")
	newOwner := env.configMap(t, ns, "owner", nil)
	env.removeFinalizers(t, ns, "held")
	eventually(t, 30*time.Second, "held to go", env.cmGone(ns, "held"))
	newHeld := env.configMap(t, ns, "held", nil)
	env.c.StopAPIServer(t)
	env.c.StartAPIServer(t)
	if err := proxy.Resume(); err != nil {
		t.Fatal(err)
	}

	eventually(t, 60*time.Second, "the old owner's dependent to be collected", env.cmGone(ns, "dep"))
	eventually(t, 60*time.Second, "the foreground deletion to finish", env.cmGone(ns, "fg-owner"))
	if got := env.getCM(t, ns, "owner"); got.UID != newOwner.UID {
		t.Errorf("the recreated owner was touched")
	}
	if got := env.getCM(t, ns, "held"); got.UID != newHeld.UID {
		t.Errorf("the recreated held was touched")
	}
	gc.waitGraph(t, "the old UIDs to leave the graph", func(g *graph) bool {
		o, h := g.nodes[owner.UID], g.nodes[held.UID]
		return (o == nil || o.deleted()) && (h == nil || h.deleted())
	})
}

// The graph holds an object that no longer exists (a ghost, as a missed
// delete leaves it): the write about it fails with 404 (nothing has its
// name) or a UID mismatch (another object has its name now). Either answer
// proves the UID gone, and the graph must learn it: the ghost's own
// dependent, kept while its owner looked alive, is then collected.
func testGhostHealedByFailedWrite(t *testing.T, env *itEnv, gc *testCollector) {
	ns := env.namespace(t, "ghost")
	r := gc.current.Load()
	res := r.monitors.resourceFor(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	if res == nil {
		t.Fatal("no ConfigMap monitor")
	}
	goneOwner := env.configMap(t, ns, "gone-owner", nil)
	env.deleteCM(t, ns, "gone-owner", metav1.DeletePropagationBackground)
	env.configMap(t, ns, "ghost-b", nil) // holds ghost-b's name under another UID

	for _, name := range []string{"ghost-a", "ghost-b"} {
		ghost := &metav1.PartialObjectMetadata{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uuid.NewUUID(), ResourceVersion: "1",
				OwnerReferences: []metav1.OwnerReference{cmRef(goneOwner, false)}},
		}
		// The dependent must find its owner observed: the ghost enters the
		// graph, the write about it waits until the dependent is in the
		// graph too.
		release := make(chan struct{})
		gc.beforeWrite.Store(ns, func(_ string, id objectID) {
			if id.uid == ghost.UID {
				<-release
			}
		})
		r.events.push(event{typ: evUpsert, obj: ghost, res: res})
		gc.waitObserved(t, ghost.UID, "")
		dep := env.configMap(t, ns, name+"-dep", []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "ConfigMap", Name: name, UID: ghost.UID}})
		gc.waitObserved(t, dep.UID, "")
		close(release)
		eventually(t, 30*time.Second, name+"'s dependent to be collected", env.cmGone(ns, dep.Name))
		gc.waitGraph(t, name+" to be known deleted", func(g *graph) bool {
			n := g.nodes[ghost.UID]
			return n == nil || n.deleted()
		})
	}
	if _, err := env.cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "ghost-b", metav1.GetOptions{}); err != nil {
		t.Errorf("the object now named ghost-b: %v; want it untouched", err)
	}
}

// A dependent that changes more often than the collector's round trip:
// every DELETE with a resourceVersion precondition would fail. Once a
// delete is refused and the dependent's owner references are unchanged,
// the collector deletes with the UID precondition only, as
// kube-controller-manager does. Here the dependent changes every 100ms, and
// also right before every delete the collector sends.
func testFrequentlyUpdatedDependent(t *testing.T, env *itEnv, gc *testCollector) {
	ns := env.namespace(t, "busy")
	owner := env.configMap(t, ns, "owner", nil)
	env.configMap(t, ns, "busy", []metav1.OwnerReference{cmRef(owner, true)})
	cms := env.cs.CoreV1().ConfigMaps(ns)
	var n atomic.Int32
	touch := func() {
		n.Add(1)
		patch := []byte(`{"data":{"n":"` + time.Now().Format(time.RFC3339Nano) + `"}}`)
		_, _ = cms.Patch(context.Background(), "busy", types.MergePatchType, patch, metav1.PatchOptions{})
	}
	gc.beforeWrite.Store(ns, func(action string, id objectID) {
		if action == actDelete.String() && id.name == "busy" {
			touch()
		}
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				touch()
			}
		}
	}()
	env.deleteCM(t, ns, "owner", metav1.DeletePropagationBackground)
	eventually(t, 30*time.Second, "the busy dependent to be collected", env.cmGone(ns, "busy"))
	cancel()
	t.Logf("the dependent changed %d times before it was collected", n.Load())
}

// resourceFor returns the monitored resource gvr, or nil.
func (ms *monitorSet) resourceFor(gvr schema.GroupVersionResource) *resource {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if m, ok := ms.byGR[gvr.GroupResource()]; ok && m.res.gvr == gvr {
		return m.res
	}
	return nil
}

// A 404 is proof that an object is gone only when it is about the object:
// the API server also answers 404 for a resource it does not serve (a CRD
// version removed, a group gone), and the object may exist.
func testNotFoundOfResourceIsNoProof(t *testing.T, env *itEnv, gc *testCollector) {
	ns := env.namespace(t, "notfound")
	env.configMap(t, ns, "here", nil)
	cms := gc.metadata.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace(ns)
	_, err := cms.Get(t.Context(), "absent", metav1.GetOptions{})
	if !objectNotFound(err, "absent") {
		t.Errorf("GET of a missing ConfigMap: %v; want the object's 404", err)
	}
	bogus := gc.metadata.Resource(schema.GroupVersionResource{Group: "nosuch.test.nodegc.io", Version: "v1", Resource: "things"}).Namespace(ns)
	_, err = bogus.Get(t.Context(), "here", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) || objectNotFound(err, "here") {
		t.Errorf("GET through a resource that is not served: %v; want a 404 that is not the object's", err)
	}
	_, err = cms.Get(t.Context(), "here", metav1.GetOptions{})
	if objectNotFound(err, "here") {
		t.Errorf("GET of an existing object: %v", err)
	}
}

// An owner the graph does not watch (its resource is ignored) is looked up
// through the version its reference states. When the API server stops
// serving that version (the CRD changed since the last discovery), the GET
// answers 404 about the resource, not the object: the owner may well exist
// (here it does), so the lookup fails and the dependent waits; it is not
// deleted.
func testOwnerLookupThroughUnservedVersion(t *testing.T, env *itEnv) {
	ns := env.namespace(t, "unserved")
	group := "ownergc-" + utilrand.String(5) + ".test.nodegc.io"
	env.createCRD(t, group, "sprockets", "Sprocket", []any{crdVersion("v1", true), crdVersion("v2", false)}, nil)
	v1 := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "sprockets"}
	owner := env.createCR(t, v1, "Sprocket", ns, "s", nil)

	cfg := testConfig()
	cfg.DiscoveryResyncPeriod = metav1.Duration{Duration: time.Hour} // the collector keeps mapping v1
	cfg.GCIgnoredResources = append(cfg.GCIgnoredResources, config.GroupResource{Group: group, Resource: "sprockets"})
	gc := env.startCollector(t, cfg)

	// v2 becomes the storage version and v1 is no longer served.
	patch := []byte(`{"spec":{"versions":[` +
		`{"name":"v1","served":false,"storage":false,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}},` +
		`{"name":"v2","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}`)
	if _, err := env.dyn.Resource(crdGVR).Patch(t.Context(), "sprockets."+group, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "v1 of sprockets to be no longer served", func(ctx context.Context) (bool, error) {
		_, err := env.dyn.Resource(v1).Namespace(ns).Get(ctx, "s", metav1.GetOptions{})
		return apierrors.IsNotFound(err) && !objectNotFound(err, "s"), nil
	})

	env.configMap(t, ns, "dep", []metav1.OwnerReference{{APIVersion: group + "/v1", Kind: "Sprocket", Name: "s", UID: owner.GetUID()}})
	eventually(t, 30*time.Second, "the collector to look the owner up", func(context.Context) (bool, error) {
		return counterByLabel(t, gc.reg, "nodegc_owner_gc_owner_lookups_total", "result")[lookupError] > 0 ||
			counterByLabel(t, gc.reg, "nodegc_owner_gc_owner_lookups_total", "result")[lookupAbsent] > 0, nil
	})
	time.Sleep(2 * time.Second) // a delete follows its lookup within milliseconds: give a wrong one time to land
	if _, err := env.cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "dep", metav1.GetOptions{}); err != nil {
		t.Fatalf("the dependent of an existing owner: %v; want it kept (lookups %v)", err,
			counterByLabel(t, gc.reg, "nodegc_owner_gc_owner_lookups_total", "result"))
	}
}
