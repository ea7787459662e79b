package ownergc

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// refsAre reports whether ConfigMap ns/name exists with uid and exactly the
// owner UIDs want.
func (e *itEnv) refsAre(ns, name string, uid types.UID, want ...types.UID) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		cm, err := e.cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if cm.UID != uid {
			return false, fmt.Errorf("%s/%s was recreated (uid %s, want %s)", ns, name, cm.UID, uid)
		}
		if len(cm.OwnerReferences) != len(want) {
			return false, nil
		}
		for i, r := range cm.OwnerReferences {
			if r.UID != want[i] {
				return false, nil
			}
		}
		return true, nil
	}
}

// A dependent with one live owner survives and loses only the reference to
// the owner that went (Background) or that waits for it (Foreground).
func testMultipleOwners(t *testing.T, env *itEnv, gc *testCollector) {
	ns := env.namespace(t, "multi")
	o1, o2 := env.configMap(t, ns, "o1", nil), env.configMap(t, ns, "o2", nil)
	d := env.configMap(t, ns, "d", []metav1.OwnerReference{cmRef(o1, true), cmRef(o2, false)})
	env.deleteCM(t, ns, "o1", metav1.DeletePropagationBackground)
	eventually(t, 30*time.Second, "d to keep only its reference to o2", env.refsAre(ns, "d", d.UID, o2.UID))
	recs := gc.settledRecords(t, d.UID)[d.UID]
	if len(recs) != 1 || recs[0].rec.action != actRemoveRefs || len(recs[0].rec.owners) != 2 ||
		recs[0].rec.owners[0].Class != "dangling" || recs[0].rec.owners[1].Class != "solid" {
		t.Errorf("records of d = %+v; want one removal of references with o1 dangling and o2 solid", recs)
	}

	o3, o4 := env.configMap(t, ns, "o3", nil), env.configMap(t, ns, "o4", nil)
	d2 := env.configMap(t, ns, "d2", []metav1.OwnerReference{cmRef(o3, true), cmRef(o4, true)})
	env.deleteCM(t, ns, "o3", metav1.DeletePropagationForeground)
	eventually(t, 30*time.Second, "the Foreground owner to go", env.cmGone(ns, "o3"))
	eventually(t, 10*time.Second, "d2 to keep only its reference to o4", env.refsAre(ns, "d2", d2.UID, o4.UID))
	env.getCM(t, ns, "o4")
}

// A dependent whose owner never existed is collected, whether nothing has
// the owner's name or an object of another UID has it.
func testMadeUpOwner(t *testing.T, env *itEnv, gc *testCollector) {
	ns := env.namespace(t, "madeup")
	other := env.configMap(t, ns, "real", nil)
	ghost := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "ghost", UID: uuid.NewUUID()}
	impostor := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "real", UID: uuid.NewUUID()}
	d1 := env.configMap(t, ns, "d1", []metav1.OwnerReference{ghost})
	d2 := env.configMap(t, ns, "d2", []metav1.OwnerReference{impostor})
	eventually(t, 30*time.Second, "d1 to be collected", env.cmGone(ns, "d1"))
	eventually(t, 30*time.Second, "d2 to be collected", env.cmGone(ns, "d2"))
	if got := env.getCM(t, ns, "real"); got.UID != other.UID {
		t.Errorf("the object named by the impostor reference was replaced")
	}
	all := gc.settledRecords(t, d1.UID, d2.UID)
	for uid, reason := range map[types.UID]string{d1.UID: reasonNotFound, d2.UID: reasonUIDMismatch} {
		recs := all[uid]
		if len(recs) != 1 || recs[0].rec.owners[0].Reason != reason {
			t.Errorf("records of %s = %+v; want one delete with the owner %s", uid, recs, reason)
		}
	}
}

// testOwnerNamedWrong: a dependent's reference states the UID, group and
// kind of an owner in its namespace but another name (a typo). The owner
// exists, so the dependent stays (safety rule 4), with an
// OwnerRefNameMismatch Warning; once the owner is deleted, the dependent
// goes. kube-controller-manager looks the owner up by the stated name,
// finds nothing, and deletes the dependent at once; so did nodegc before.
func testOwnerNamedWrong(t *testing.T, env *itEnv, gc *testCollector) {
	ns := env.namespace(t, "name-mismatch")
	owner := env.configMap(t, ns, "b", nil)
	wrong := cmRef(owner, false)
	wrong.Name = "a"
	d := env.configMap(t, ns, "d", []metav1.OwnerReference{wrong})
	gc.waitObserved(t, d.UID, d.ResourceVersion)
	gc.waitIdle(t)
	if got, err := env.cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "d", metav1.GetOptions{}); err != nil || got.UID != d.UID {
		t.Fatalf("d, whose owner (uid %s) exists as ConfigMap %s/b, is gone (%v); records %+v", owner.UID, ns, err, gc.recordsFor(d.UID))
	}
	eventually(t, 30*time.Second, "an OwnerRefNameMismatch Warning on d", env.hasWarning(ns, d.UID, "OwnerRefNameMismatch"))

	env.deleteCM(t, ns, "b", metav1.DeletePropagationBackground)
	eventually(t, 30*time.Second, "d to be collected once its owner is gone", env.cmGone(ns, "d"))
	if recs := gc.settledRecords(t, d.UID)[d.UID]; len(recs) != 1 || recs[0].rec.owners[0].Reason != reasonDeleted {
		t.Errorf("records of d = %+v; want one delete with the owner %s", recs, reasonDeleted)
	}
}

// An owner deleted and recreated under the same name is another object: its
// old dependents are collected, and so is a dependent created later that
// references the old UID.
func testOwnerRecreated(t *testing.T, env *itEnv, gc *testCollector) {
	ns := env.namespace(t, "recreated-owner")
	old := env.configMap(t, ns, "owner", nil)
	env.configMap(t, ns, "d", []metav1.OwnerReference{cmRef(old, true)})
	env.deleteCM(t, ns, "owner", metav1.DeletePropagationBackground)
	fresh := env.configMap(t, ns, "owner", nil)
	eventually(t, 30*time.Second, "the old owner's dependent to be collected", env.cmGone(ns, "d"))
	gc.waitGraph(t, "the old owner's tombstone to go", func(g *graph) bool { _, ok := g.nodes[old.UID]; return !ok })

	late := env.configMap(t, ns, "late", []metav1.OwnerReference{cmRef(old, true)})
	eventually(t, 30*time.Second, "a later dependent of the old owner to be collected", env.cmGone(ns, "late"))
	if recs := gc.settledRecords(t, late.UID)[late.UID]; len(recs) != 1 || recs[0].rec.owners[0].Reason != reasonUIDMismatch {
		t.Errorf("records of the late dependent = %+v; want one delete with the owner %s", recs, reasonUIDMismatch)
	}
	if got := env.getCM(t, ns, "owner"); got.UID != fresh.UID {
		t.Errorf("the recreated owner was touched")
	}
}

// The collector decides to delete an object; before its request arrives the
// object is deleted and recreated under the same name. The UID
// precondition protects the new object.
func testObjectRecreatedAfterDecision(t *testing.T, env *itEnv, gc *testCollector) {
	ns := env.namespace(t, "recreated-object")
	var (
		once    sync.Once
		fresh   *corev1.ConfigMap
		hookErr error
		fired   = make(chan struct{})
	)
	gc.beforeWrite.Store(ns, func(action string, id objectID) {
		if action != actDelete.String() || id.name != "victim" {
			return
		}
		once.Do(func() {
			defer close(fired)
			ctx := context.Background()
			cms := env.cs.CoreV1().ConfigMaps(ns)
			if hookErr = cms.Delete(ctx, "victim", metav1.DeleteOptions{}); hookErr != nil {
				return
			}
			fresh, hookErr = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "victim"}}, metav1.CreateOptions{})
		})
	})
	ghost := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "ghost", UID: uuid.NewUUID()}
	victim := env.configMap(t, ns, "victim", []metav1.OwnerReference{ghost})

	select {
	case <-fired:
	case <-time.After(30 * time.Second):
		t.Fatal("the collector never decided to delete the victim")
	}
	if hookErr != nil {
		t.Fatalf("recreate the victim: %v", hookErr)
	}
	gc.waitObserved(t, fresh.UID, fresh.ResourceVersion)
	gc.waitIdle(t)
	if got := env.getCM(t, ns, "victim"); got.UID != fresh.UID {
		t.Errorf("victim has uid %s, want the recreated object %s", got.UID, fresh.UID)
	}
	if recs := gc.recordsFor(victim.UID); len(recs) != 0 {
		t.Errorf("a delete of the old object was recorded although the API server refused it: %+v", recs)
	}
}
