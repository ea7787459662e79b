package ownergcbench

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/watch"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/cluster"
	"github.com/nodegc/nodegc/internal/testbed/proc"
)

// loopWorkers is how many goroutines the plain DELETE loop runs.
const loopWorkers = 20

// cascadeTimeout bounds one cascade.
const cascadeTimeout = 30 * time.Minute

// cascadeResult is one measured deletion of n ConfigMaps.
type cascadeResult struct {
	n    int
	took time.Duration
	// first is when the watch saw the first dependent deleted: what the
	// deleter took to start (for a collector: the owner's DELETE, its
	// watch event, its graph and queues).
	first     time.Duration
	requests  cluster.RequestCounts // on configmaps, as kube-apiserver counts them, of the deleter only
	perObject float64               // requests per deleted object
	perSecond float64               // objects deleted per second
	// cpu is the CPU time the processes used during the deletion: the
	// deleter ("collector"; the bench itself for the loop), kube-apiserver,
	// etcd, and the bench ("bench", when it is not the deleter: its watch
	// of the deletions runs whoever deletes).
	cpu map[string]time.Duration
	// cpuPerObject is the CPU time of each process above per deleted
	// object, in microseconds; for a median of several rounds, pooled over
	// all of them (their CPU time over their objects).
	cpuPerObject map[string]float64
	// rates are the objects/s of every round when the result is the median
	// of several (see median), in the order they ran.
	rates []float64
	// deleterCPU is the deleter's CPU time per object, in microseconds, of
	// every round, as rates.
	deleterCPU []float64
	// deleteSeconds is the time kube-apiserver spent in the deletion's
	// DELETEs of ConfigMaps (apiserver_request_duration_seconds).
	deleteSeconds float64
	// serverDeleting is how many of them it was handling at a time, on
	// average over the deletion (see atATime; pooled over the rounds for a
	// median): the concurrency the deleter keeps up, as the server sees it.
	serverDeleting float64
}

// cascade measures one Background cascade of n ConfigMaps owned by one
// ConfigMap under the collector col: the collector is started on the
// cluster as it is (n dependents and the rest), waited for until it has
// synced and has collected a warm-up probe; then the owner is deleted and
// the time runs until a watch has seen every dependent deleted.
func (e *benchEnv) cascade(n int, col collector) cascadeResult {
	e.b.Helper()
	ctx := e.b.Context()
	ns, cms := e.cascadeObjects(n)
	r := col.start(e)
	defer r.stop()
	r.sync(e)

	// Warm-up: a probe with a made-up owner is collected once the
	// collector's workers run.
	probe := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "ghost", UID: uuid.NewUUID()}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", OwnerReferences: []metav1.OwnerReference{probe}}}, metav1.CreateOptions{}); err != nil {
		e.b.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := testbed.Poll(pctx, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		_, err := cms.Get(ctx, "probe", metav1.GetOptions{})
		return err != nil, nil
	}); err != nil {
		e.b.Fatalf("%s never collected the warm-up probe in %s: %v", col.name, ns, err)
	}

	return e.timeDeletion(ns, n, deleter{name: col.short, pid: r.pid, profileURL: r.profileURL}, func() {
		if err := cms.Delete(ctx, "owner", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
			e.b.Fatal(err)
		}
	}, 1)
}

// deleteLoop measures the plain DELETE loop: n ConfigMaps shaped as a
// cascade's dependents, deleted by name by loopWorkers goroutines on an
// unthrottled client, timed as a cascade is. With watching, the loop also
// watches what a collector must: the metadata of the ConfigMaps of every
// namespace (client-go's metadata client, as kube-controller-manager's
// collector watches), every event decoded. That costs kube-apiserver the
// encoding of each deletion for one more watcher, and the loop the reading
// of it: the least any collector that learns of deletions by a watch
// spends beyond the loop.
func (e *benchEnv) deleteLoop(n int, watching bool) cascadeResult {
	e.b.Helper()
	ctx := e.b.Context()
	ns, _ := e.cascadeObjects(n)
	cms := e.fast.CoreV1().ConfigMaps(ns)
	name := "loop"
	if watching {
		name = "loopwatch"
		stop := e.watchMetadata(corev1.SchemeGroupVersion.WithResource("configmaps"))
		defer stop()
	}
	return e.timeDeletion(ns, n, deleter{name: name, pid: os.Getpid(), self: true}, func() {
		if err := runParallel(ctx, loopWorkers, n, func(ctx context.Context, i int) error {
			return cms.Delete(ctx, dependentName(i), metav1.DeleteOptions{})
		}); err != nil {
			e.b.Fatalf("plain DELETE loop in %s: %v", ns, err)
		}
	}, 0)
}

// watchMetadata watches the metadata of gvr's objects in every namespace
// from now on, reading every event, until the function it returns is
// called.
func (e *benchEnv) watchMetadata(gvr schema.GroupVersionResource) (stop func()) {
	e.b.Helper()
	ctx, cancel := context.WithCancel(e.b.Context())
	mc, err := metadata.NewForConfig(e.c.RESTConfig())
	if err != nil {
		e.b.Fatal(err)
	}
	res := mc.Resource(gvr)
	list, err := res.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		e.b.Fatal(err)
	}
	w, err := res.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		e.b.Fatal(err)
	}
	var stopped atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error && !stopped.Load() { // stopping may end the stream with an error
				e.b.Errorf("metadata watch of %s: %v", gvr, ev.Object)
			}
		}
		if !stopped.Load() {
			e.b.Errorf("metadata watch of %s ended before the deletion did: the loop watched only part of it", gvr)
		}
	}()
	return func() {
		stopped.Store(true)
		w.Stop()
		cancel()
		<-done
	}
}

// dependentName is the name of a cascade's i-th dependent.
func dependentName(i int) string { return fmt.Sprintf("d-%06d", i) }

// cascadeObjects creates a namespace holding the ConfigMap "owner" and n
// ConfigMaps dependentName(0..n-1) that it owns (blockOwnerDeletion, as
// ReplicaSets own Pods).
func (e *benchEnv) cascadeObjects(n int) (string, typedcorev1.ConfigMapInterface) {
	e.b.Helper()
	ctx := e.b.Context()
	ns := "cascade-" + strings.ToLower(string(uuid.NewUUID())[:8])
	if _, err := e.fast.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		e.b.Fatal(err)
	}
	cms := e.fast.CoreV1().ConfigMaps(ns)
	owner, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		e.b.Fatal(err)
	}
	refs := []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	e.parallel(fmt.Sprintf("cascade objects in %s", ns), n, func(ctx context.Context, i int) error {
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: dependentName(i), OwnerReferences: refs}}, metav1.CreateOptions{})
		return err
	})
	return ns, cms
}

// timeDeletion runs del and returns how long it took until a watch on the
// namespace's ConfigMaps had seen the n ConfigMaps dependentName(*)
// deleted, with the ConfigMap requests kube-apiserver counted meanwhile
// (minus LIST and WATCH, and minus ownDeletes: the bench's DELETE of the
// owner) and the CPU time of the deleter, kube-apiserver and etcd; with
// profiles (see profiler) when asked.
func (e *benchEnv) timeDeletion(ns string, n int, d deleter, del func(), ownDeletes int64) cascadeResult {
	e.b.Helper()
	ctx := e.b.Context()
	cms := e.fast.CoreV1().ConfigMaps(ns)
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		e.b.Fatal(err)
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		e.b.Fatal(err)
	}
	defer w.Stop()
	var deleted atomic.Int64
	allGone := make(chan time.Time, 1)
	var first atomic.Int64 // unix nanoseconds
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type != watch.Deleted {
				continue
			}
			if obj, ok := ev.Object.(metav1.Object); ok && strings.HasPrefix(obj.GetName(), "d-") {
				first.CompareAndSwap(0, time.Now().UnixNano())
				if deleted.Add(1) == int64(n) {
					allGone <- time.Now()
					return
				}
			}
		}
	}()

	// Each deletion starts on a quiet cluster: not while kube-apiserver
	// still digests the objects just created (the loop's come right
	// before it) or a collector's list, or collects its garbage.
	e.quiesce()
	before, secondsBefore, err := e.c.APIServerRequestStats(ctx, "configmaps")
	if err != nil {
		e.b.Fatal(err)
	}
	pids := map[string]int{"collector": d.pid, "kube-apiserver": e.c.PIDs()["kube-apiserver"], "etcd": e.c.PIDs()["etcd"]}
	if !d.self {
		pids["bench"] = os.Getpid()
	}
	cpuBefore := e.cpuTimes(pids)
	profiled := e.prof.start(e, d, fmt.Sprintf("%s-%d", d.name, n))
	traced := e.trace(pids, &deleted)
	begin := time.Now()
	del()
	var end time.Time
	select {
	case end = <-allGone:
	case <-time.After(cascadeTimeout):
		e.b.Fatalf("deletion in %s not finished after %s: %d of %d deleted", ns, cascadeTimeout, deleted.Load(), n)
	}
	cpuAfter := e.cpuTimes(pids)
	traced(fmt.Sprintf("%s-%d", d.name, n))
	profiled()
	// kube-apiserver counts a request once it has answered it, after the
	// watch saw its effect: wait until it counts a DELETE per object.
	var after cluster.RequestCounts
	var secondsAfter cluster.RequestSeconds
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := testbed.Poll(sctx, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		after, secondsAfter, err = e.c.APIServerRequestStats(ctx, "configmaps")
		return err == nil && after["DELETE"]-before["DELETE"] >= int64(n)+ownDeletes, err
	}); err != nil {
		e.b.Fatalf("kube-apiserver's request count of configmaps DELETE: %v (counted %d, want %d)", err, after["DELETE"]-before["DELETE"], int64(n)+ownDeletes)
	}
	// The deleter's requests: everything but the bench's own DELETE of the
	// owner, LIST and WATCH (collectors list and watch once at start; the
	// bench's watch is open).
	reqs := after.Sub(before)
	reqs["DELETE"] -= ownDeletes
	delete(reqs, "LIST")
	delete(reqs, "WATCH")
	cpu := map[string]time.Duration{}
	for name := range pids {
		cpu[name] = cpuAfter[name] - cpuBefore[name]
	}
	took := end.Sub(begin)
	deleteSeconds := secondsAfter["DELETE"] - secondsBefore["DELETE"]
	return cascadeResult{n: n, took: took, first: time.Unix(0, first.Load()).Sub(begin), requests: reqs, cpu: cpu,
		cpuPerObject: microsPerObject(cpu, n), perObject: float64(reqs.Total()) / float64(n), perSecond: float64(n) / took.Seconds(),
		deleteSeconds: deleteSeconds, serverDeleting: atATime(deleteSeconds, took)}
}

// atATime is how many requests were handled at a time, on average, when
// they took seconds in all over a span of took.
func atATime(seconds float64, took time.Duration) float64 { return seconds / took.Seconds() }

// microsPerObject is each process's CPU time in cpu over n objects, in
// microseconds.
func microsPerObject(cpu map[string]time.Duration, n int) map[string]float64 {
	out := map[string]float64{}
	for name, d := range cpu {
		out[name] = float64(d.Microseconds()) / float64(n)
	}
	return out
}

// cpuAll is the CPU time of every process per deleted object, in
// microseconds: what one deletion cost the machine.
func (r cascadeResult) cpuAll() float64 {
	var sum float64
	for _, v := range r.cpuPerObject {
		sum += v
	}
	return sum
}

// trace, with $NODEGC_BENCH_TRACE set, samples every 100 ms of a deletion
// the objects deleted so far and the CPU time of each process of pids;
// the function it returns stops it and prints, per 100 ms, the objects
// deleted and each process's CPU milliseconds, under what. The CPU times
// come in the kernel's 10 ms ticks. It shows how a deletion went
// (a slow start, a slow end, a dip in the middle and who was busy then),
// where the table shows only its whole.
func (e *benchEnv) trace(pids map[string]int, deleted *atomic.Int64) func(what string) {
	if os.Getenv("NODEGC_BENCH_TRACE") == "" {
		return func(string) {}
	}
	type sample struct {
		deleted int64
		cpu     map[string]time.Duration
	}
	var samples []sample
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			// A sample that cannot be read is left out: this is a trace,
			// not a figure of the table.
			if cpu, err := readCPUTimes(pids); err == nil {
				samples = append(samples, sample{deleted.Load(), cpu})
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return func(what string) {
		close(stop)
		<-done
		var b strings.Builder
		for j := 1; j < len(samples); j++ {
			fmt.Fprintf(&b, " %d", samples[j].deleted-samples[j-1].deleted)
		}
		fmt.Printf("[trace] %s, objects per 100 ms, deleted:%s\n", what, b.String())
		for _, name := range slices.Sorted(maps.Keys(pids)) {
			b.Reset()
			for j := 1; j < len(samples); j++ {
				fmt.Fprintf(&b, " %d", (samples[j].cpu[name] - samples[j-1].cpu[name]).Milliseconds())
			}
			fmt.Printf("[trace] %s, CPU ms per 100 ms, %s:%s\n", what, name, b.String())
		}
	}
}

func (e *benchEnv) cpuTimes(pids map[string]int) map[string]time.Duration {
	out, err := readCPUTimes(pids)
	if err != nil {
		e.b.Fatal(err)
	}
	return out
}

// readCPUTimes reads the CPU time of each process of pids.
func readCPUTimes(pids map[string]int) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	for name, pid := range pids {
		t, err := proc.ReadCPUTime(pid)
		if err != nil {
			return nil, fmt.Errorf("CPU time of %s (pid %d): %w", name, pid, err)
		}
		out[name] = t
	}
	return out, nil
}
