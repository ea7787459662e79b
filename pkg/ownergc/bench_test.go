package ownergc

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodegc/nodegc/internal/testbed/cluster"
)

// benchObjects is N, the dependents of the benchmark's owner:
// $NODEGC_BENCH_OBJECTS, default 5000.
func benchObjects(b *testing.B) int {
	if s := os.Getenv("NODEGC_BENCH_OBJECTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("NODEGC_BENCH_OBJECTS=%q: want a positive integer", s)
		}
		return n
	}
	return 5000
}

// cascadeResult is one measured Background cascade.
type cascadeResult struct {
	name      string
	took      time.Duration
	requests  cluster.RequestCounts // of the collector, on configmaps, as the API server counts them
	perObject float64
	perSecond float64
}

// BenchmarkCascade compares nodegc's owner GC with kube-controller-manager's
// garbage collector on the same real API server: N ConfigMaps owned by one
// ConfigMap, Background delete of the owner, time until every dependent is
// gone and API requests per collected object from kube-apiserver's own
// apiserver_request_total. Both run at the same effective client rate (40
// QPS, burst 60: kube-controller-manager's collector runs at twice its
// --kube-api-qps/--kube-api-burst) and once practically unlimited.
func BenchmarkCascade(b *testing.B) {
	n := benchObjects(b)
	env := newBenchEnv(b)
	cases := []struct {
		name  string
		start func(b *testing.B) (stop func())
	}{
		{"nodegc/qps=40,burst=60", env.nodegcStarter(40, 60)},
		{"kube-controller-manager/qps=20x2,burst=30x2", env.kcmStarter("--kube-api-qps=20", "--kube-api-burst=30")},
		{"nodegc/unlimited", env.nodegcStarter(5000, 10000)},
		{"kube-controller-manager/unlimited", env.kcmStarter("--kube-api-qps=500", "--kube-api-burst=1000")},
	}
	var results []cascadeResult
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			var res cascadeResult
			for range b.N {
				res = env.cascade(b, n, tc.start)
			}
			res.name = tc.name
			results = append(results, res)
			b.ReportMetric(res.perSecond, "objects/s")
			b.ReportMetric(res.perObject, "requests/object")
			b.ReportMetric(res.took.Seconds(), "s/cascade")
		})
	}
	var table strings.Builder
	fmt.Fprintf(&table, "Background cascade of %d ConfigMaps (requests: kube-apiserver's apiserver_request_total on configmaps, minus the owner's DELETE)\n", n)
	fmt.Fprintf(&table, "%-46s %10s %11s %14s  %s\n", "collector", "time", "objects/s", "requests/obj", "requests by verb")
	for _, r := range results {
		fmt.Fprintf(&table, "%-46s %9.1fs %11.1f %14.2f  %v\n", r.name, r.took.Seconds(), r.perSecond, r.perObject, map[string]int64(r.requests))
	}
	if len(results) == 4 {
		fmt.Fprintf(&table, "nodegc / kube-controller-manager rate: %.2fx at 40 QPS, %.2fx unlimited\n",
			results[0].perSecond/results[1].perSecond, results[2].perSecond/results[3].perSecond)
	}
	// Printed directly: the log of a benchmark with sub-benchmarks is not.
	fmt.Print(table.String())
}

type benchEnv struct{ *itEnv }

func newBenchEnv(b *testing.B) *benchEnv {
	c := cluster.Start(b, cluster.Options{})
	return &benchEnv{&itEnv{c: c, cs: c.Client()}}
}

func (e *benchEnv) nodegcStarter(qps float32, burst int32) func(*testing.B) func() {
	return func(b *testing.B) func() {
		cfg := testConfig()
		cfg.KubeAPIQPS, cfg.KubeAPIBurst = qps, burst
		cfg.DiscoveryResyncPeriod = metav1.Duration{Duration: 30 * time.Second}
		gc := e.startCollector(b, cfg)
		return func() { gc.stop(b) }
	}
}

func (e *benchEnv) kcmStarter(flags ...string) func(*testing.B) func() {
	return func(b *testing.B) func() {
		m := e.c.StartControllerManagerWith(b, cluster.ControllerManagerOptions{Controllers: []string{"garbagecollector"}, Flags: flags})
		return func() { m.Stop(b) }
	}
}

// cascade measures one Background cascade of n dependents under the
// collector that start starts.
func (e *benchEnv) cascade(b *testing.B, n int, start func(*testing.B) func()) cascadeResult {
	b.StopTimer()
	ctx := b.Context()
	ns := "bench-" + strings.ToLower(string(uuid.NewUUID())[:8])
	if _, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	cms := e.cs.CoreV1().ConfigMaps(ns)
	owner, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	e.configMaps(b, ctx, ns, "d", n, []metav1.OwnerReference{cmRef(owner, true)})
	stop := start(b)
	defer stop()

	// Warm-up: a probe with a made-up owner is collected once the collector
	// has synced and works.
	probe := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "ghost", UID: uuid.NewUUID()}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", OwnerReferences: []metav1.OwnerReference{probe}}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cms.Get(ctx, "probe", metav1.GetOptions{})
		return err != nil, nil
	}); err != nil {
		b.Fatalf("the collector never collected the warm-up probe: %v", err)
	}

	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	var deleted atomic.Int64
	allGone := make(chan time.Time, 1)
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Deleted && strings.HasPrefix(ev.Object.(metav1.Object).GetName(), "d-") {
				if deleted.Add(1) == int64(n) {
					allGone <- time.Now()
					return
				}
			}
		}
	}()

	before, err := e.c.APIServerRequests(ctx, "configmaps")
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	begin := time.Now()
	if err := cms.Delete(ctx, "owner", metav1.DeleteOptions{PropagationPolicy: new(metav1.DeletePropagationBackground)}); err != nil {
		b.Fatal(err)
	}
	var end time.Time
	select {
	case end = <-allGone:
	case <-time.After(20 * time.Minute):
		b.Fatalf("cascade not finished after 20 minutes: %d of %d dependents deleted", deleted.Load(), n)
	}
	b.StopTimer()
	after, err := e.c.APIServerRequests(ctx, "configmaps")
	if err != nil {
		b.Fatal(err)
	}
	// The collector's requests: everything but the benchmark's own DELETE of
	// the owner, LIST and WATCH (the collectors list and watch once at start;
	// the benchmark's watch is open).
	reqs := after.Sub(before)
	reqs["DELETE"]--
	delete(reqs, "LIST")
	delete(reqs, "WATCH")
	took := end.Sub(begin)
	return cascadeResult{took: took, requests: reqs,
		perObject: float64(reqs.Total()) / float64(n), perSecond: float64(n) / took.Seconds()}
}
