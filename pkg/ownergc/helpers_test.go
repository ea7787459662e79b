package ownergc

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
)

// Resources used by the pure tests.
var (
	resConfigMap  = newResource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ConfigMap", true)
	resReplicaSet = newResource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}, "ReplicaSet", true)
	resPod        = newResource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "Pod", true)
	resNode       = newResource(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "Node", false)
)

// testScope is the scopeFunc of the pure tests: every kind of the
// resources above, nothing else.
func testScope(apiVersion, kind string) (namespaced, known bool) {
	for _, r := range []*resource{resConfigMap, resReplicaSet, resPod, resNode} {
		if r.apiVersion == apiVersion && r.gvk.Kind == kind {
			return r.namespaced, true
		}
	}
	return false, false
}

// testLogger logs through t (shown for failed tests and with -v).
func testLogger(t testing.TB) klog.Logger {
	return ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(4)))
}

// objOpt changes a test object.
type objOpt func(*metav1.PartialObjectMetadata)

func ownedBy(res *resource, name, uid string, block bool) objOpt {
	return func(o *metav1.PartialObjectMetadata) {
		o.OwnerReferences = append(o.OwnerReferences, metav1.OwnerReference{
			APIVersion: res.apiVersion, Kind: res.gvk.Kind, Name: name, UID: types.UID(uid),
			BlockOwnerDeletion: ptr.To(block),
		})
	}
}

// withOwner adds a reference to an owner of any kind.
func withOwner(apiVersion, kind, name, uid string) objOpt {
	return func(o *metav1.PartialObjectMetadata) {
		o.OwnerReferences = append(o.OwnerReferences, metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name,
			UID: types.UID(uid)})
	}
}

func withFinalizers(f ...string) objOpt {
	return func(o *metav1.PartialObjectMetadata) { o.Finalizers = append(o.Finalizers, f...) }
}

func deleting() objOpt {
	return func(o *metav1.PartialObjectMetadata) { o.DeletionTimestamp = ptr.To(metav1.Now()) }
}

func withRV(rv string) objOpt {
	return func(o *metav1.PartialObjectMetadata) { o.ResourceVersion = rv }
}

func object(ns, name, uid string, opts ...objOpt) *metav1.PartialObjectMetadata {
	o := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), ResourceVersion: "1"}}
	for _, f := range opts {
		f(o)
	}
	return o
}

func upsert(res *resource, o *metav1.PartialObjectMetadata) event {
	return event{typ: evUpsert, res: res, obj: o}
}

func del(res *resource, o *metav1.PartialObjectMetadata) event {
	return event{typ: evDelete, res: res, obj: o}
}

// testGraph is a graph with its builder and recording queues.
type testGraph struct {
	t       testing.TB
	g       *graph
	b       *builder
	deletes []types.UID
	orphans []types.UID
}

func newTestGraph(t testing.TB) *testGraph {
	tg := &testGraph{t: t, g: newGraph()}
	tg.b = &builder{g: tg.g, logger: klog.Background(),
		enqueueDelete: func(u types.UID) { tg.deletes = append(tg.deletes, u) },
		enqueueOrphan: func(u types.UID) { tg.orphans = append(tg.orphans, u) }}
	return tg
}

// apply applies events as the builder goroutine does and checks the
// invariants after each.
func (tg *testGraph) apply(evs ...event) {
	tg.t.Helper()
	for i := range evs {
		tg.g.mu.Lock()
		tg.b.apply(&evs[i])
		tg.g.mu.Unlock()
		verifyGraphInvariants(tg.t, tg.g)
	}
}

// takeQueues returns and clears what was enqueued, as sets.
func (tg *testGraph) takeQueues() (deletes, orphans map[types.UID]bool) {
	deletes, orphans = map[types.UID]bool{}, map[types.UID]bool{}
	for _, u := range tg.deletes {
		deletes[u] = true
	}
	for _, u := range tg.orphans {
		orphans[u] = true
	}
	tg.deletes, tg.orphans = nil, nil
	return deletes, orphans
}

// verifyGraphInvariants checks the structural invariants of the graph:
//   - every node is stored under its own UID and has a kind;
//   - links and dependents mirror each other: n links to o iff n is in
//     o.dependents, and every linked owner is the node stored for its UID;
//   - only observed nodes have owners; virtual nodes and tombstones exist
//     only while a dependent references them;
//   - no node is both observed and deleted; the absent-at-identity mark is
//     only on virtual nodes, the unmonitored mark only on observed nodes
//     of a resource the graph keeps unmonitored;
//   - a link's alternate coordinates differ from its owner's identity;
//   - kinds and namespaces are interned; the state counters are exact.
func verifyGraphInvariants(t testing.TB, g *graph) {
	t.Helper()
	var observed, virtual, deleted int64
	for uid, n := range g.nodes {
		fail := func(format string, args ...any) {
			t.Helper()
			t.Errorf("node %s (%s %s/%s): %s", uid, n.kind.kind, n.namespace, n.name, fmt.Sprintf(format, args...))
		}
		if n.uid != uid {
			fail("stored under another UID: %s", n.uid)
		}
		if n.kind == nil {
			fail("no kind")
			continue
		}
		if g.kinds[kindKey{n.kind.apiVersion, n.kind.kind}] != n.kind {
			fail("kind not interned")
		}
		if n.namespace != "" && g.namespaces[n.namespace] != n.namespace {
			fail("namespace not interned")
		}
		switch {
		case n.observed() && n.deleted():
			fail("both observed and deleted")
		case n.observed():
			observed++
		case n.deleted():
			deleted++
		default:
			virtual++
		}
		if n.flags&flagAbsentAtIdentity != 0 && !n.virtual() {
			fail("absent-at-identity mark on a node that is not virtual")
		}
		if n.unmonitored() && (!n.observed() || g.unmonitored[n.res] == nil) {
			fail("unmonitored mark on a node that is not observed, or whose resource is monitored")
		}
		if !n.observed() {
			if len(n.owners) > 0 {
				fail("unobserved node has owners")
			}
			if len(n.dependents) == 0 {
				fail("unobserved node without dependents was not dropped")
			}
		}
		for i := range n.owners {
			l := &n.owners[i]
			if g.nodes[l.owner.uid] != l.owner {
				fail("link %d to %s: owner is not the stored node", i, l.owner.uid)
			}
			if _, ok := l.owner.dependents[n]; !ok {
				fail("link %d to %s: missing from the owner's dependents", i, l.owner.uid)
			}
			if l.alt != nil && l.alt.kind == l.owner.kind && l.alt.name == l.owner.name {
				fail("link %d to %s: alternate coordinates equal the owner's identity", i, l.owner.uid)
			}
		}
		for dep := range n.dependents {
			if g.nodes[dep.uid] != dep {
				fail("dependent %s is not the stored node", dep.uid)
			}
			if !dep.observed() {
				fail("dependent %s is not observed", dep.uid)
			}
			if dep.linkTo(n) == nil {
				fail("dependent %s has no link back", dep.uid)
			}
		}
	}
	gotO, gotV, gotD := g.size()
	if gotO != observed || gotV != virtual || gotD != deleted {
		t.Errorf("counters observed/virtual/deleted = %d/%d/%d, graph holds %d/%d/%d", gotO, gotV, gotD, observed, virtual, deleted)
	}
}
