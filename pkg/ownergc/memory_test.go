package ownergc

import (
	"crypto/rand"
	"fmt"
	"runtime"
	"strconv"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// graphCost is the heap the graph takes per object.
type graphCost struct {
	// overhead: bytes per node with uid, name and resourceVersion shared with
	// the informer's cached objects (the situation in production).
	overhead float64
	// owned: bytes per node once nothing else holds those strings.
	owned float64
}

func heapAlloc() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func newUID() types.UID {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]))
}

// measureGraph builds a graph of n objects shaped like a cluster's: one
// ReplicaSet per nine Pods, each Pod owned by its ReplicaSet, in 50
// namespaces, and returns its cost.
func measureGraph(n int) graphCost {
	base := heapAlloc()
	objs := make([]event, 0, n)
	var rs *metav1.PartialObjectMetadata
	for i := range n {
		ns := "namespace-" + strconv.Itoa(i%50)
		o := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: "workload-" + strconv.Itoa(i) + "-7d9f8b6c5d", UID: newUID(),
			ResourceVersion: strconv.Itoa(1_000_000 + i),
		}}
		if i%10 == 0 {
			rs = o
			objs = append(objs, upsert(resReplicaSet, o))
			continue
		}
		o.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name,
			UID: rs.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
		objs = append(objs, upsert(resPod, o))
	}
	withObjects := heapAlloc()
	g := newGraph()
	b := &builder{g: g, logger: klog.Background(), enqueueDelete: func(types.UID) {}, enqueueOrphan: func(types.UID) {}}
	g.mu.Lock()
	for i := range objs {
		b.apply(&objs[i])
	}
	g.mu.Unlock()
	withGraph := heapAlloc()
	runtime.KeepAlive(objs) // the cached objects live until here
	objs = nil
	owned := heapAlloc()
	runtime.KeepAlive(g)
	return graphCost{
		overhead: float64(withGraph-withObjects) / float64(n),
		owned:    float64(owned-base) / float64(n),
	}
}

// TestGraphMemory holds 100k objects and checks that the graph stays
// compact (upstream's node alone, with four mutexes, a dependents map and
// full owner references, is several times larger).
func TestGraphMemory(t *testing.T) {
	const n = 100_000
	cost := measureGraph(n)
	t.Logf("graph of %d objects: %.0f bytes/node sharing strings with the informer cache, %.0f bytes/node owning them (%.1f MB)",
		n, cost.overhead, cost.owned, cost.owned*n/1e6)
	if cost.overhead > 250 || cost.owned > 400 {
		t.Errorf("graph too large: %.0f bytes/node shared, %.0f owned; want <= 250 and <= 400", cost.overhead, cost.owned)
	}
}

// BenchmarkGraphMemory reports the graph's bytes per node for 100k objects.
func BenchmarkGraphMemory(b *testing.B) {
	var cost graphCost
	for range b.N {
		cost = measureGraph(100_000)
	}
	b.ReportMetric(cost.overhead, "bytes/node")
	b.ReportMetric(cost.owned, "owned-bytes/node")
}
