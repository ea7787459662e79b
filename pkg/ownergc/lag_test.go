package ownergc

import (
	"context"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestMisnamedOwnerWhoseWatchLags, on kube-apiserver: a ConfigMap's
// reference states a wrong name for its owner, a Secret that exists, whose
// watch event reaches the collector 5 s after the ConfigMap's (two
// resources' watches, one behind the other). The look-up of the stated
// name finds nothing; the collector must not take that for the owner's
// absence before the Secrets' watch has reached the ConfigMap's version:
// the ConfigMap stays, and gets the OwnerRefNameMismatch Warning once the
// Secret is observed. A ConfigMap whose Secret owner never existed, beside
// it, is still collected, at most ownerWatchLagBound late. Before, the
// first ConfigMap was deleted (all-owners-absent, owner-not-found) while
// its owner existed. While the collector waits for the Secrets' watch,
// nodegc explain says so (before, it called the owner absent and the
// ConfigMap bound for deletion).
func TestMisnamedOwnerWhoseWatchLags(t *testing.T) {
	env := newEnv(t)
	const lag = 5 * time.Second
	gc := env.startCollector(t, testConfig(), func(c *Collector) {
		c.hooks.beforeFeed = func(res *resource, obj *metav1.PartialObjectMetadata) {
			if res.gvr.Resource == "secrets" && obj.Name == "lagging" {
				time.Sleep(lag)
			}
		}
	})
	ns := env.namespace(t, "watch-lag")
	owner, err := env.cs.CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "lagging"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secretRef := func(name string, uid types.UID) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "v1", Kind: "Secret", Name: name, UID: uid}}
	}
	misnamed := env.configMap(t, ns, "misnamed", secretRef("typo", owner.UID))
	orphan := env.configMap(t, ns, "orphan", secretRef("never", types.UID("00000000-0000-0000-0000-00000000beef")))
	gc.waitObserved(t, misnamed.UID, misnamed.ResourceVersion)
	e, err := gc.Explain(t.Context(), ExplainQuery{Resource: "configmaps", Namespace: ns, Name: "misnamed"})
	if err != nil {
		t.Fatal(err)
	}
	if e.Code != CodeUndecided || len(e.Owners) != 1 || e.Owners[0].Reason != reasonOwnerWatchBehind {
		t.Errorf("explain while the Secrets' watch is %s behind: %s: %s, owners %+v; want %s, the owner %s", lag, e.Code, e.Verdict, e.Owners, CodeUndecided, reasonOwnerWatchBehind)
	}
	warned, gone := env.hasWarning(ns, misnamed.UID, "OwnerRefNameMismatch"), env.cmGone(ns, "misnamed")
	eventually(t, 30*time.Second, "an OwnerRefNameMismatch Warning on the misnamed dependent, or its deletion", func(ctx context.Context) (bool, error) {
		if ok, err := gone(ctx); ok || err != nil {
			return ok, err
		}
		return warned(ctx)
	})
	gc.waitIdle(t)
	if got, err := env.cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "misnamed", metav1.GetOptions{}); err != nil || got.UID != misnamed.UID {
		t.Errorf("the ConfigMap whose owner Secret %s/lagging (uid %s) exists, under another name than its reference states, is gone (%v); records %+v",
			ns, owner.UID, err, gc.recordsFor(misnamed.UID))
	}
	eventually(t, 30*time.Second, "the dependent of a Secret that never existed to be collected", env.cmGone(ns, "orphan"))
	if recs := gc.settledRecords(t, orphan.UID)[orphan.UID]; len(recs) != 1 || recs[0].rec.owners[0].Reason != reasonNotFound {
		t.Errorf("records of the dependent of a Secret that never existed = %+v; want one delete with the owner %s", recs, reasonNotFound)
	}
}

// TestProgressAdvances: a resource's progress only grows, and versions
// that are not numbers (an aggregated API server of its own storage) leave
// it as it is.
func TestProgressAdvances(t *testing.T) {
	res := newResource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, "Secret", true)
	for _, rv := range []string{"10", "7", "abc", "", "12"} {
		res.advance(rv)
	}
	if got := res.progress.Load(); got != 12 {
		t.Errorf("progress after 10, 7, abc, \"\", 12 = %d, want 12", got)
	}
}

// TestLagWaitsAreBounded: a dependent waits for its owner's watch for
// ownerWatchLagBound from its first wait, then no longer (and a new wait
// starts over); waits of dependents not seen again for twice the bound
// are dropped as others come.
func TestLagWaitsAreBounded(t *testing.T) {
	var l lagWaits
	t0 := time.Unix(1000, 0)
	if !l.waiting("a", t0) || !l.waiting("a", t0.Add(ownerWatchLagBound-time.Millisecond)) {
		t.Fatal("a dependent does not wait within the bound")
	}
	if l.waiting("a", t0.Add(ownerWatchLagBound)) {
		t.Error("a dependent still waits at the bound")
	}
	if !l.waiting("a", t0.Add(ownerWatchLagBound+time.Second)) {
		t.Error("a wait after the bound ran out does not start over")
	}
	// wouldWait answers as waiting would, and records nothing.
	var fresh lagWaits
	if !fresh.wouldWait("x", t0) || len(fresh.since) != 0 {
		t.Errorf("wouldWait of a dependent that never waited: want true, nothing recorded (recorded %v)", fresh.since)
	}
	fresh.waiting("x", t0)
	for _, at := range []struct {
		after time.Duration
		want  bool
	}{{ownerWatchLagBound - time.Millisecond, true}, {ownerWatchLagBound, false}, {2 * ownerWatchLagBound, true}} {
		if got := fresh.wouldWait("x", t0.Add(at.after)); got != at.want || !fresh.since["x"].Equal(t0) {
			t.Errorf("wouldWait %v after the first wait = %v (wait from %v), want %v (wait from %v)", at.after, got, fresh.since["x"], at.want, t0)
		}
	}

	l.waiting("gone", t0)
	l.waiting("b", t0.Add(2*ownerWatchLagBound))
	if _, ok := l.since["gone"]; ok {
		t.Error("the wait of a dependent not seen for twice the bound is kept")
	}
}

// ownerWatchRun builds a run with a graph, a monitor of Secrets and the
// mapping of v1 Secret: what ownerWatchBehind reads.
func ownerWatchRun(t *testing.T, clk *clocktesting.FakeClock) (*run, *testGraph, *resource) {
	tg := newTestGraph(t)
	secrets := newResource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, "Secret", true)
	r := &run{c: &Collector{clock: clk}, graph: tg.g}
	r.monitors = &monitorSet{r: r, byGR: map[schema.GroupResource]*monitor{secrets.gvr.GroupResource(): {res: secrets}}}
	snap := &discoverySnapshot{}
	snap.mappings.Store(mappingKey{"v1", "Secret"}, mappingResult{m: &meta.RESTMapping{Resource: secrets.gvr}})
	r.snapshot.Store(snap)
	return r, tg, secrets
}

// TestOwnerWatchBehind: a dependent (resource version 100) whose look-up
// at the stated name of its Secret owner found nothing waits while the
// Secrets' watch is behind 100, for ownerWatchLagBound; not once the watch
// has passed 100; and, whatever the bound, once the graph holds the
// owner's UID alive where the reference may name it (applied after the
// view was taken: the next view finds the reference misnamed, and keeps
// the dependent). A later episode for the same dependent (the owner's
// monitor replaced an hour later, at progress 0) waits again. Before, a
// wait that had run out let the not-found verdict stand with the owner in
// the graph, and the entry of the first episode, never cleared once the
// owner was observed, left the second without a wait: the dependent went
// while its owner existed.
func TestOwnerWatchBehind(t *testing.T) {
	watched := func(res *resource, o *metav1.PartialObjectMetadata) event {
		ev := upsert(res, o)
		ev.seq = fromWatch
		return ev
	}
	view := func(tg *testGraph) (*itemView, *ownerView) {
		t.Helper()
		v, ok := tg.g.itemView("d1")
		if !ok {
			t.Fatal("no dependent d1 in the graph")
		}
		return &v, &v.owners[0]
	}
	// start is the scene of each case: the dependent, in the graph, on a
	// clock of its own.
	start := func(t *testing.T) (*clocktesting.FakeClock, *run, *testGraph, *resource, *itemView, *ownerView) {
		clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
		r, tg, secrets := ownerWatchRun(t, clk)
		tg.apply(upsert(resConfigMap, object("ns", "dep", "d1", withOwner("v1", "Secret", "typo", "o1"), withRV("100"))))
		v, o := view(tg)
		return clk, r, tg, secrets, v, o
	}

	t.Run("bound", func(t *testing.T) {
		clk, r, tg, secrets, v, o := start(t)
		if !r.ownerWatchBehind(v, o) {
			t.Fatal("the Secrets' watch is behind the dependent: it does not wait")
		}
		clk.Step(ownerWatchLagBound)
		if r.ownerWatchBehind(v, o) {
			t.Error("it still waits once the bound has run out")
		}
		tg.apply(watched(secrets, object("ns", "other", "o2", withRV("101"))))
		if r.ownerWatchBehind(v, o) {
			t.Error("it waits though the Secrets' watch has passed its version")
		}
	})
	t.Run("owner applied after the view", func(t *testing.T) {
		clk, r, tg, secrets, v, o := start(t)
		r.ownerWatchBehind(v, o)
		clk.Step(ownerWatchLagBound)
		tg.apply(watched(secrets, object("ns", "real", "o1", withRV("50"))))
		if !r.ownerWatchBehind(v, o) {
			t.Error("the graph holds the owner alive, yet the not-found verdict stands (the bound ran out)")
		}
		tg.apply(watched(secrets, object("ns", "later", "o3", withRV("150"))))
		if !r.ownerWatchBehind(v, o) {
			t.Error("the graph holds the owner alive, yet the not-found verdict stands (the watch passed the dependent)")
		}
	})
	t.Run("second episode", func(t *testing.T) {
		clk, r, tg, secrets, v, o := start(t)
		r.ownerWatchBehind(v, o)
		tg.apply(watched(secrets, object("ns", "real", "o1", withRV("120"))))
		clk.Step(time.Hour)
		tg.apply(event{typ: evResourceGone, res: secrets})
		r.monitors.byGR[secrets.gvr.GroupResource()] = &monitor{res: newResource(secrets.gvr, "Secret", true)}
		v, o = view(tg)
		if o.state == ownerObserved {
			t.Fatal("the owner is still observed after its resource went")
		}
		if !r.ownerWatchBehind(v, o) {
			t.Error("the owner's new monitor has not listed yet: the dependent does not wait (the first episode's wait was kept)")
		}
	})
}

// BenchmarkLagWaits: many dependents beginning to wait at once (a burst of
// new dependents of a quiet owner resource) cost each about the same,
// however many wait: the map is swept at most once per bound. Before, each
// new wait swept it all: 30,000 took 11 s, more than the bound.
func BenchmarkLagWaits(b *testing.B) {
	uids := make([]types.UID, 30000)
	for i := range uids {
		uids[i] = types.UID(strconv.Itoa(i))
	}
	now := time.Unix(1000, 0)
	for b.Loop() {
		var l lagWaits
		for _, u := range uids {
			l.waiting(u, now)
		}
	}
}
