package ownergc

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
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
// its owner existed.
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
	l.waiting("gone", t0)
	l.waiting("b", t0.Add(2*ownerWatchLagBound))
	if _, ok := l.since["gone"]; ok {
		t.Error("the wait of a dependent not seen for twice the bound is kept")
	}
}
