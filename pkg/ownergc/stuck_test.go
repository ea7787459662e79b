package ownergc

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
)

func deletingFg(uid types.UID, waitsFor ...types.UID) deletingObject {
	return deletingObject{id: objectID{uid: uid, apiVersion: "v1", kind: "ConfigMap", namespace: "ns", name: string(uid)},
		finalizer: metav1.FinalizerDeleteDependents, waitsFor: waitsFor}
}

// TestStuckTracker: an object is stuck once it made no progress (a
// dependent it waits for went, or its finalizer went) for longer than the
// threshold; it is reported once, and stops counting when it progresses or
// goes.
func TestStuckTracker(t *testing.T) {
	const threshold = 10 * time.Second
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	orphaning := func(uid types.UID, deps ...types.UID) deletingObject {
		o := deletingFg(uid, deps...)
		o.finalizer = metav1.FinalizerOrphanDependents
		return o
	}
	type step struct {
		after time.Duration
		scan  []deletingObject
		// newly: reported stuck by this scan; stuck: counted stuck after it.
		newly, stuck []types.UID
	}
	tests := map[string][]step{
		"no progress: stuck after the threshold, reported once": {
			{0, []deletingObject{deletingFg("a", "x")}, nil, nil},
			{threshold, []deletingObject{deletingFg("a", "x")}, nil, nil},
			{threshold + time.Second, []deletingObject{deletingFg("a", "x")}, []types.UID{"a"}, []types.UID{"a"}},
			{threshold + 2*time.Second, []deletingObject{deletingFg("a", "x")}, nil, []types.UID{"a"}},
		},
		"a dependent went: progress, counting starts again": {
			{0, []deletingObject{deletingFg("a", "x", "y")}, nil, nil},
			{threshold + time.Second, []deletingObject{deletingFg("a", "x", "y")}, []types.UID{"a"}, []types.UID{"a"}},
			{threshold + 2*time.Second, []deletingObject{deletingFg("a", "y")}, nil, nil},
			{2*threshold + 2*time.Second, []deletingObject{deletingFg("a", "y")}, nil, nil},
			{2*threshold + 3*time.Second, []deletingObject{deletingFg("a", "y")}, []types.UID{"a"}, []types.UID{"a"}},
		},
		"new dependents without one going are no progress": {
			{0, []deletingObject{deletingFg("a", "x")}, nil, nil},
			{5 * time.Second, []deletingObject{deletingFg("a", "x", "y")}, nil, nil},
			{threshold + time.Second, []deletingObject{deletingFg("a", "x", "y", "z")}, []types.UID{"a"}, []types.UID{"a"}},
		},
		"the finalizer changed: progress": {
			{0, []deletingObject{orphaning("a", "x")}, nil, nil},
			{threshold, []deletingObject{deletingFg("a", "x")}, nil, nil},
			{threshold + time.Second, []deletingObject{deletingFg("a", "x")}, nil, nil},
		},
		"gone: no longer counted": {
			{0, []deletingObject{deletingFg("a", "x"), orphaning("b", "y")}, nil, nil},
			{threshold + time.Second, []deletingObject{deletingFg("a", "x"), orphaning("b", "y")}, []types.UID{"a", "b"}, []types.UID{"a", "b"}},
			{threshold + 2*time.Second, []deletingObject{orphaning("b", "y")}, nil, []types.UID{"b"}},
			{threshold + 3*time.Second, nil, nil, nil},
		},
		"nothing to wait for is no progress either": {
			{0, []deletingObject{deletingFg("a")}, nil, nil},
			{threshold + time.Second, []deletingObject{deletingFg("a")}, []types.UID{"a"}, []types.UID{"a"}},
		},
	}
	for name, steps := range tests {
		t.Run(name, func(t *testing.T) {
			var s stuckTracker
			for i, st := range steps {
				newly := s.observe(st.scan, t0.Add(st.after), threshold)
				var got []types.UID
				for _, e := range newly {
					got = append(got, e.obj.id.uid)
					s.markStuck(e, "blocking-dependent") // as reportStuck does once it reported
				}
				var stuck []types.UID
				for uid, e := range s.entries {
					if e.stuck {
						stuck = append(stuck, uid)
					}
				}
				if diff := cmp.Diff(st.newly, got, sortUIDs); diff != "" {
					t.Errorf("step %d: newly stuck (-want +got):\n%s", i, diff)
				}
				if diff := cmp.Diff(st.stuck, stuck, sortUIDs); diff != "" {
					t.Errorf("step %d: stuck (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

var sortUIDs = cmp.Transformer("sort", func(in []types.UID) []string {
	out := []string{}
	for _, u := range in {
		out = append(out, string(u))
	}
	slices.Sort(out)
	return out
})

func TestStuckCounts(t *testing.T) {
	var s stuckTracker
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	scan := []deletingObject{deletingFg("a", "x"), deletingFg("b", "y"), deletingFg("c", "z")}
	s.observe(scan, t0, time.Second)
	for _, e := range s.observe(scan, t0.Add(2*time.Second), time.Second) {
		reason := stuckBlockingDependent
		if e.obj.id.uid == "c" {
			reason = stuckUnsyncedResource
		}
		s.markStuck(e, reason)
	}
	want := map[string]int{stuckBlockingDependent: 2, stuckDependentsToOrphan: 0, stuckUnsyncedResource: 1, stuckFinalizerNotRemoved: 0}
	if diff := cmp.Diff(want, s.counts()); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
}

func TestStuckScanInterval(t *testing.T) {
	for threshold, want := range map[time.Duration]time.Duration{
		2 * time.Second: 500 * time.Millisecond, time.Minute: 15 * time.Second, 15 * time.Minute: time.Minute, time.Hour: time.Minute,
	} {
		if got := stuckScanInterval(threshold); got != want {
			t.Errorf("stuckScanInterval(%s) = %s, want %s", threshold, got, want)
		}
	}
}

// The graph's scan finds the objects deleted with foregroundDeletion (and
// their blocking dependents) or orphan (and all their dependents).
func TestDeletingObjects(t *testing.T) {
	tg := newTestGraph(t)
	tg.apply(
		upsert(resConfigMap, object("ns", "fg", "fg", deleting(), withFinalizers(metav1.FinalizerDeleteDependents))),
		upsert(resConfigMap, object("ns", "b", "b", ownedBy(resConfigMap, "fg", "fg", true))),
		upsert(resConfigMap, object("ns", "n", "n", ownedBy(resConfigMap, "fg", "fg", false))),
		upsert(resConfigMap, object("ns", "or", "or", deleting(), withFinalizers(metav1.FinalizerOrphanDependents))),
		upsert(resConfigMap, object("ns", "d", "d", ownedBy(resConfigMap, "or", "or", false))),
		upsert(resConfigMap, object("ns", "plain", "plain", deleting(), withFinalizers("x"))),
		upsert(resConfigMap, object("ns", "alive", "alive", withFinalizers(metav1.FinalizerDeleteDependents))),
	)
	got := map[types.UID]string{}
	for _, o := range tg.g.deletingObjects() {
		var deps []string
		for _, u := range o.waitsFor {
			deps = append(deps, string(u))
		}
		slices.Sort(deps)
		got[o.id.uid] = o.finalizer + " " + strings.Join(deps, ",")
	}
	want := map[types.UID]string{"fg": metav1.FinalizerDeleteDependents + " b", "or": metav1.FinalizerOrphanDependents + " d"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("deleting objects (-want +got):\n%s", diff)
	}
}

// TestStuckForegroundDeletion: a foreground deletion held by a dependent's
// own finalizer is explained (the verdict names the dependent and its
// finalizer) and reported stuck after the threshold: the gauge counts it
// and a Warning Event on the owner names the blocker. Once the finalizer
// goes, the owner goes and the gauge is back at 0.
func TestStuckForegroundDeletion(t *testing.T) {
	env := newEnv(t)
	cfg := testConfig()
	cfg.StuckDeletionThreshold = &metav1.Duration{Duration: 2 * time.Second}
	gc := env.startCollector(t, cfg)
	ns := env.namespace(t, "stuck")
	owner := env.configMap(t, ns, "owner", nil)
	held := env.configMap(t, ns, "held", []metav1.OwnerReference{cmRef(owner, true)}, exampleHold)
	gc.waitObserved(t, held.UID, held.ResourceVersion)
	env.deleteCM(t, ns, "owner", metav1.DeletePropagationForeground)
	eventually(t, 30*time.Second, "the dependent to be deleted (and held by its finalizer)", func(ctx context.Context) (bool, error) {
		cm, err := env.cs.CoreV1().ConfigMaps(ns).Get(ctx, "held", metav1.GetOptions{})
		return err == nil && cm.DeletionTimestamp != nil, err
	})
	held = env.getCM(t, ns, "held")
	gc.waitObserved(t, held.UID, held.ResourceVersion)
	gc.waitIdle(t)

	blocker := fmt.Sprintf("waits for dependent ConfigMap %s/held (uid %s) (blockOwnerDeletion) which is held by finalizer %s", ns, held.UID, exampleHold)
	e, err := gc.Explain(t.Context(), ExplainQuery{Resource: "configmaps", Namespace: ns, Name: "owner"})
	if err != nil {
		t.Fatal(err)
	}
	if e.Code != CodeWaitsForDependents || e.Verdict != blocker {
		t.Errorf("verdict:\n got %s: %s\nwant %s: %s", e.Code, e.Verdict, CodeWaitsForDependents, blocker)
	}
	logExplanation(t, e)
	if out := cliExplain(t, gc, "cm/owner", "-n", ns); !strings.HasPrefix(out, "Verdict: "+blocker+"\n") {
		t.Errorf("nodegc explain does not begin with the verdict:\n%s", out)
	}
	// The dependent: another controller's finalizer holds it, and the owner
	// GC's record says why it deleted it.
	heldVerdict := "Verdict: being deleted: held by finalizer " + exampleHold + ", which another controller must remove\n"
	if out := cliExplain(t, gc, "cm/held", "-n", ns); !strings.HasPrefix(out, heldVerdict) || !strings.Contains(out, ruleOwnerForeground) {
		t.Errorf("nodegc explain cm/held: want %q and the record of rule %s:\n%s", heldVerdict, ruleOwnerForeground, out)
	}

	stuck := func() map[string]float64 {
		return counterByLabel(t, gc.reg, "nodegc_owner_gc_stuck_deletions", "reason")
	}
	eventually(t, 30*time.Second, "the owner to be counted stuck", func(context.Context) (bool, error) {
		return stuck()[stuckBlockingDependent] == 1, nil
	})
	if got := stuck(); got[stuckDependentsToOrphan]+got[stuckUnsyncedResource]+got[stuckFinalizerNotRemoved] != 0 {
		t.Errorf("stuck deletions by reason: %v; want only %s", got, stuckBlockingDependent)
	}
	var event *corev1.Event
	eventually(t, 30*time.Second, "the DeletionStuck Warning on the owner", func(ctx context.Context) (bool, error) {
		l, err := env.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
			"involvedObject.uid": string(owner.UID), "reason": "DeletionStuck"}.AsSelector().String()})
		if err != nil || len(l.Items) == 0 {
			return false, err
		}
		event = &l.Items[0]
		return true, nil
	})
	t.Logf("Event on the owner: %s %s: %s", event.Type, event.Reason, event.Message)
	if event.Type != corev1.EventTypeWarning || !strings.HasSuffix(event.Message, ": "+blocker) || event.Count > 1 {
		t.Errorf("event %s %q (count %d); want one Warning ending in %q", event.Type, event.Message, event.Count, blocker)
	}
	if !strings.Contains(gc.logs.tail(1000), `"Deletion stuck"`) {
		t.Errorf("no error log line for the stuck deletion")
	}

	env.removeFinalizers(t, ns, "held")
	eventually(t, 30*time.Second, "the owner to go once its dependent is gone", env.cmGone(ns, "owner"))
	eventually(t, 30*time.Second, "the stuck gauge back at 0", func(context.Context) (bool, error) {
		return stuck()[stuckBlockingDependent] == 0, nil
	})
}
