package ownergc

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// A Background cascade costs about one request per collected object: each
// dependent is judged from the graph and deleted with one DELETE. Counted
// both by the collector and by the API server.
func testRequestsPerObject(t *testing.T, env *itEnv) {
	const n = 200
	ctx := t.Context()
	ns := env.namespace(t, "requests")
	owner := env.configMap(t, ns, "owner", nil)
	env.configMaps(t, ctx, ns, "d", n, []metav1.OwnerReference{cmRef(owner, true)})
	gc := env.startCollector(t, testConfig())
	gc.waitIdle(t)

	before := gc.requests(t)
	serverBefore, err := env.c.APIServerRequests(ctx, "configmaps")
	if err != nil {
		t.Fatal(err)
	}
	env.deleteCM(t, ns, "owner", metav1.DeletePropagationBackground)
	eventually(t, 60*time.Second, "the cascade to finish", func(ctx context.Context) (bool, error) {
		left, err := env.countConfigMaps(ctx, ns, "d")
		return left == 0, err
	})
	gc.waitIdle(t)
	after := gc.requests(t)
	serverAfter, err := env.c.APIServerRequests(ctx, "configmaps")
	if err != nil {
		t.Fatal(err)
	}

	ours := map[string]float64{}
	var total float64
	for verb, v := range after {
		if d := v - before[verb]; d != 0 {
			ours[verb] = d
			total += d
		}
	}
	server := serverAfter.Sub(serverBefore)
	// The API server also counts the test's own requests: one DELETE of the
	// owner and its LIST polls.
	serverGC := float64(server.Total() - server["LIST"] - 1)
	t.Logf("cascade of %d: collector requests %v (%.2f/object); API server saw %v", n, ours, total/n, map[string]int64(server))
	if ours["DELETE"] != n {
		t.Errorf("collector sent %.0f DELETEs, want %d", ours["DELETE"], n)
	}
	if total > 1.1*n {
		t.Errorf("collector sent %.0f requests for %d objects (%.2f/object), want <= 1.1/object", total, n, total/n)
	}
	if serverGC > 1.1*n {
		t.Errorf("API server counted %.0f requests for %d objects beyond the test's own, want <= 1.1/object", serverGC, n)
	}
}

// Restart in the middle of a 1,000-object cascade: a slow first collector
// is stopped part-way, stops writing at once, and a second one finishes the
// cascade. Objects with a live owner are never deleted, and those that had
// both a live and the deleted owner only lose the dangling reference.
func testRestartMidCascade(t *testing.T, env *itEnv) {
	const n = 1000
	ctx := t.Context()
	ns := env.namespace(t, "restart")
	owner := env.configMap(t, ns, "owner", nil)
	live := env.configMap(t, ns, "live", nil)
	env.configMaps(t, ctx, ns, "d", n, []metav1.OwnerReference{cmRef(owner, true)})
	both := env.configMaps(t, ctx, ns, "both", 100, []metav1.OwnerReference{cmRef(owner, true), cmRef(live, true)})
	kept := env.configMaps(t, ctx, ns, "kept", 100, []metav1.OwnerReference{cmRef(live, true)})

	slow := testConfig()
	slow.KubeAPIQPS, slow.KubeAPIBurst = 100, 20
	first := env.startCollector(t, slow)
	env.deleteCM(t, ns, "owner", metav1.DeletePropagationBackground)
	eventually(t, 60*time.Second, "a third of the cascade", func(ctx context.Context) (bool, error) {
		left, err := env.countConfigMaps(ctx, ns, "d")
		return left <= 2*n/3, err
	})
	// Run must return once its context ends, without working off its
	// queue: stop fails the test if it has not within 30s, and a Run
	// that drained the queue first would have finished the cascade (at
	// 100 QPS, the 700-odd dependents left take 7s or more), which fails
	// below. How fast it returns is logged, not bounded: under leader
	// election what keeps writes within the lease is the write fence
	// (WriteWindow, see the package doc), not the time Run takes; and a
	// loaded CI machine can take seconds to schedule the workers.
	first.stop(t)
	stopped := first.requests(t)
	left, err := env.countConfigMaps(ctx, ns, "d")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first collector stopped in %s with %d of %d dependents left", first.stopped.Round(time.Millisecond), left, n)
	if left == 0 {
		t.Fatal("the first collector finished the cascade; nothing was left to restart on")
	}

	second := env.startCollector(t, testConfig())
	eventually(t, 60*time.Second, "the second collector to finish the cascade", func(ctx context.Context) (bool, error) {
		left, err := env.countConfigMaps(ctx, ns, "d")
		return left == 0, err
	})
	for _, cm := range both {
		eventually(t, 30*time.Second, "a dependent with a live owner to keep only that reference",
			env.refsAre(ns, cm.Name, cm.UID, live.UID))
	}
	second.waitIdle(t)
	for _, cm := range append(kept, env.getCM(t, ns, "live")) {
		if got := env.getCM(t, ns, cm.Name); got.UID != cm.UID {
			t.Errorf("%s was recreated or replaced", cm.Name)
		}
	}
	if diff := cmp.Diff(stopped, first.requests(t)); diff != "" {
		t.Errorf("the first collector sent requests after Run returned (-at return +now):\n%s", diff)
	}
}

// Dry run decides and records but writes nothing, Events included.
func testDryRun(t *testing.T, env *itEnv) {
	ns := env.namespace(t, "dry-run")
	cfg := testConfig()
	cfg.DryRun = true
	gc := env.startCollector(t, cfg)
	ghost := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "ghost", UID: uuid.NewUUID()}
	d := env.configMap(t, ns, "d", []metav1.OwnerReference{ghost})
	other := env.namespace(t, "dry-run-other")
	foreign := env.configMap(t, other, "foreign", []metav1.OwnerReference{cmRef(d, true)})

	eventually(t, 30*time.Second, "a dry-run decision to delete", func(context.Context) (bool, error) {
		return len(gc.recordsFor(d.UID)) > 0 && len(gc.recordsFor(foreign.UID)) > 0, nil
	})
	gc.waitIdle(t)
	for _, r := range append(gc.recordsFor(d.UID), gc.recordsFor(foreign.UID)...) {
		if !r.dryRun || r.rec.action != actDelete {
			t.Errorf("record %+v; want a dry-run delete", r)
		}
	}
	if len(gc.recordsFor(d.UID)) != 1 {
		t.Errorf("dry-run decision on d recorded %d times, want once", len(gc.recordsFor(d.UID)))
	}
	for _, cm := range []*corev1.ConfigMap{d, foreign} {
		if got := env.getCM(t, cm.Namespace, cm.Name); got.UID != cm.UID || got.DeletionTimestamp != nil {
			t.Errorf("dry run deleted %s/%s", cm.Namespace, cm.Name)
		}
	}
	if ok, _ := env.hasWarning(other, foreign.UID, "OwnerRefInvalidNamespace")(t.Context()); ok {
		t.Error("dry run recorded an Event")
	}
	if got := gc.requests(t); got["DELETE"] != 0 || got["PATCH"] != 0 || got["POST"] != 0 {
		t.Errorf("dry run sent writes: %v", got)
	}
}

// testStopDropsTheEventBacklog: a run that stops throws its graph away, so
// it must not apply the events still queued first (the initial lists of a
// large cluster queue millions, a few microseconds each, and outlasted the
// process's shutdown margin). The graph builder is held on the graph's
// lock while a backlog of made-up objects is queued and the run told to
// stop, then let go once the run closed its queue: it may apply the one
// batch it holds, no more.
func testStopDropsTheEventBacklog(t *testing.T, env *itEnv) {
	gc := env.startCollector(t, testConfig())
	gc.waitIdle(t)
	r := gc.current.Load()
	observed, _, _ := r.graph.size()

	const backlog = 100_000
	r.graph.mu.Lock()
	locked := true
	defer func() {
		if locked {
			r.graph.mu.Unlock()
		}
	}()
	evs := make([]event, backlog)
	for i := range evs {
		obj := &metav1.PartialObjectMetadata{}
		obj.UID = types.UID(fmt.Sprintf("backlog-%d", i))
		obj.Namespace, obj.Name, obj.ResourceVersion = "backlog", string(obj.UID), "1"
		evs[i] = event{typ: evUpsert, obj: obj, res: resPod}
	}
	r.events.pushAll(evs)
	stopped := make(chan time.Duration, 1)
	go func() { stopped <- gc.stop(t) }()
	closed := false
	for deadline := time.Now().Add(20 * time.Second); !closed && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		closed = r.events.isClosed()
	}
	r.graph.mu.Unlock()
	locked = false
	took := <-stopped
	if !closed {
		t.Errorf("the run did not close its event queue before waiting for its workers and monitors")
	}
	after, _, _ := r.graph.size()
	if added := after - observed; added > graphBatch {
		t.Errorf("the stopping run applied %d of the %d queued events, want at most one batch (%d)", added, backlog, graphBatch)
	}
	t.Logf("stopped in %v with %d events queued", took.Round(time.Millisecond), backlog)
}
