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
// namespaces, and returns the heap it takes per object once the objects
// that fed it are gone: the collector keeps nothing else per object (the
// monitors' feeds forget each object once it is in the graph).
func measureGraph(n int) float64 {
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
	g := newGraph()
	b := &builder{g: g, logger: klog.Background(), enqueueDelete: func(types.UID) {}, enqueueOrphan: func(types.UID) {}}
	g.mu.Lock()
	for i := range objs {
		b.apply(&objs[i])
	}
	g.mu.Unlock()
	objs = nil
	withGraph := heapAlloc()
	runtime.KeepAlive(g)
	return float64(withGraph-base) / float64(n)
}

// TestGraphMemory holds 100k objects and checks that the graph, the only
// per-object state of the collector, stays compact (upstream's node alone,
// with four mutexes, a dependents map and full owner references, is
// several times larger, and sits beside the informers' cached objects).
func TestGraphMemory(t *testing.T) {
	const n = 100_000
	perObject := measureGraph(n)
	t.Logf("graph of %d objects: %.0f bytes/object (%.1f MB)", n, perObject, perObject*n/1e6)
	if perObject > 350 {
		t.Errorf("graph too large: %.0f bytes/object, want <= 350", perObject)
	}
}

// BenchmarkGraphMemory reports the graph's bytes per object for 100k
// objects.
func BenchmarkGraphMemory(b *testing.B) {
	var perObject float64
	for range b.N {
		perObject = measureGraph(100_000)
	}
	b.ReportMetric(perObject, "bytes/object")
}
