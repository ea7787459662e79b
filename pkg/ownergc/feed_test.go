package ownergc

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// drain returns the events queued so far, as "type uid" strings, and the
// uids of the evRelisted events.
func drain(q *eventQueue) (got []string, relisted []map[types.UID]struct{}) {
	names := map[eventType]string{evUpsert: "upsert", evDelete: "delete", evSynced: "synced", evRelisted: "relisted"}
	for q.len() > 0 {
		batch, _ := q.pop(nil, 100)
		for _, ev := range batch {
			s := names[ev.typ]
			if ev.obj != nil {
				s += " " + string(ev.obj.UID)
			}
			got = append(got, s)
			if ev.typ == evRelisted {
				relisted = append(relisted, ev.uids)
			}
		}
	}
	return got, relisted
}

// TestFeed: the reflector's calls become graph events and the feed keeps
// nothing: the first list ends with evSynced, a later one with the list's
// UIDs (the builder deletes the rest); slimmed objects; tombstones of
// DeletedFinalStateUnknown unwrapped.
func TestFeed(t *testing.T) {
	q := newEventQueue()
	m := &monitor{res: resConfigMap, queue: q}
	f := newFeed(m)
	obj := func(uid string) *metav1.PartialObjectMetadata {
		o := object("ns", "n-"+uid, uid)
		o.Labels = map[string]string{"app": "x"}
		o.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
		return o
	}
	if f.HasSynced() {
		t.Fatal("synced before any list")
	}
	a := obj("a")
	if err := f.Replace([]any{a, obj("b"), &metav1.PartialObjectMetadata{}}, "1"); err != nil {
		t.Fatal(err)
	}
	if !f.HasSynced() {
		t.Error("not synced after the first list")
	}
	if a.Labels != nil || a.ManagedFields != nil {
		t.Errorf("object not slimmed: %+v", a.ObjectMeta)
	}
	got, _ := drain(q)
	if diff := cmp.Diff([]string{"upsert a", "upsert b", "synced"}, got); diff != "" {
		t.Errorf("first list (-want +got):\n%s", diff)
	}

	_ = f.Add(obj("c"))
	_ = f.Update(obj("a"))
	_ = f.Delete(cache.DeletedFinalStateUnknown{Key: "ns/n-b", Obj: obj("b")})
	if err := f.Replace([]any{obj("a"), obj("d")}, "2"); err != nil {
		t.Fatal(err)
	}
	got, relisted := drain(q)
	want := []string{"upsert c", "upsert a", "delete b", "upsert a", "upsert d", "relisted"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("watch and relist (-want +got):\n%s", diff)
	}
	if len(relisted) != 1 || len(relisted[0]) != 2 {
		t.Fatalf("relisted uids = %v, want a and d", relisted)
	}
	for _, uid := range []types.UID{"a", "d"} {
		if _, ok := relisted[0][uid]; !ok {
			t.Errorf("relisted uids %v lack %s", relisted[0], uid)
		}
	}

	f.Close()
	if _, err := f.Pop(nil); err != cache.ErrFIFOClosed {
		t.Errorf("Pop after Close = %v, want ErrFIFOClosed", err)
	}
}
