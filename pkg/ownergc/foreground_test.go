package ownergc

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const holdFinalizer = "test.nodegc.io/hold"

// A Foreground owner waits until a blocking dependent is really gone, even
// while that dependent lingers with a deletionTimestamp.
func testForegroundDependentFinalizer(t *testing.T, env *itEnv, gc *testCollector) {
	ns := env.namespace(t, "fg-hold")
	owner := env.configMap(t, ns, "owner", nil)
	env.configMap(t, ns, "held", []metav1.OwnerReference{cmRef(owner, true)}, holdFinalizer)
	env.deleteCM(t, ns, "owner", metav1.DeletePropagationForeground)

	// The collector deletes the dependent; its finalizer keeps it.
	eventually(t, 30*time.Second, "the dependent to be deleted (and held by its finalizer)", func(ctx context.Context) (bool, error) {
		cm, err := env.cs.CoreV1().ConfigMaps(ns).Get(ctx, "held", metav1.GetOptions{})
		return err == nil && cm.DeletionTimestamp != nil, err
	})
	held := env.getCM(t, ns, "held")
	gc.waitObserved(t, held.UID, held.ResourceVersion)
	gc.waitIdle(t)
	o := env.getCM(t, ns, "owner")
	if o.DeletionTimestamp == nil || len(o.Finalizers) != 1 || o.Finalizers[0] != metav1.FinalizerDeleteDependents {
		t.Fatalf("owner has deletionTimestamp %v and finalizers %v; want it waiting with foregroundDeletion", o.DeletionTimestamp, o.Finalizers)
	}

	env.removeFinalizers(t, ns, "held")
	eventually(t, 30*time.Second, "the owner to go once its dependent is gone", env.cmGone(ns, "owner"))
}

// A dependent with blockOwnerDeletion=false does not hold a Foreground
// owner: the owner goes once its blocking dependent is gone, while the
// non-blocking one still exists.
func testNonBlockingDependent(t *testing.T, env *itEnv, _ *testCollector) {
	ns := env.namespace(t, "fg-nonblocking")
	owner := env.configMap(t, ns, "owner", nil)
	env.configMap(t, ns, "lingering", []metav1.OwnerReference{cmRef(owner, false)}, holdFinalizer)
	env.configMap(t, ns, "blocking", []metav1.OwnerReference{cmRef(owner, true)})
	env.deleteCM(t, ns, "owner", metav1.DeletePropagationForeground)

	eventually(t, 30*time.Second, "the owner to be gone", env.cmGone(ns, "owner"))
	if ok, _ := env.cmGone(ns, "blocking")(t.Context()); !ok {
		t.Error("the blocking dependent still exists after its owner went")
	}
	env.getCM(t, ns, "lingering") // still there when the owner went: its finalizer holds it
	eventually(t, 30*time.Second, "the non-blocking dependent to be deleted too", func(ctx context.Context) (bool, error) {
		cm, err := env.cs.CoreV1().ConfigMaps(ns).Get(ctx, "lingering", metav1.GetOptions{})
		return err == nil && cm.DeletionTimestamp != nil, err
	})
	env.removeFinalizers(t, ns, "lingering")
}

// Two objects owning each other, both blocking: a Foreground delete of one
// completes (upstream's cycle rule).
func testForegroundCycle(t *testing.T, env *itEnv, gc *testCollector) {
	ctx := t.Context()
	ns := env.namespace(t, "fg-cycle")
	a := env.configMap(t, ns, "a", nil)
	b := env.configMap(t, ns, "b", []metav1.OwnerReference{cmRef(a, true)})
	a.OwnerReferences = []metav1.OwnerReference{cmRef(b, true)}
	if _, err := env.cs.CoreV1().ConfigMaps(ns).Update(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.deleteCM(t, ns, "a", metav1.DeletePropagationForeground)
	eventually(t, 30*time.Second, "both members of the cycle to be gone", func(ctx context.Context) (bool, error) {
		ga, err := env.cmGone(ns, "a")(ctx)
		if err != nil {
			return false, err
		}
		gb, err := env.cmGone(ns, "b")(ctx)
		return ga && gb, err
	})
	var sawCycleRule bool
	for _, r := range gc.settledRecords(t, b.UID)[b.UID] {
		sawCycleRule = sawCycleRule || r.rec.rule == ruleCycle
	}
	if !sawCycleRule {
		t.Errorf("no decision on b used the %s rule: %+v", ruleCycle, gc.recordsFor(b.UID))
	}
}
