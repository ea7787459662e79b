package ownergc

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// drain returns the events queued so far, as "type uid" strings ("type
// uid watch" for a watch's events, "progress rv" for evProgress), and the
// uids of the evRelisted events.
func drain(q *eventQueue) (got []string, relisted []map[types.UID]struct{}) {
	names := map[eventType]string{evUpsert: "upsert", evDelete: "delete", evSynced: "synced", evRelisted: "relisted", evProgress: "progress"}
	for q.len() > 0 {
		batch, _ := q.pop(nil, 100)
		for _, ev := range batch {
			s := names[ev.typ]
			switch {
			case ev.typ == evProgress:
				s += " " + ev.obj.ResourceVersion
			case ev.obj != nil:
				s += " " + string(ev.obj.UID)
				if ev.seq == fromWatch {
					s += " watch"
				}
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
// UIDs (the builder deletes the rest), each then with evProgress at the
// list's version, as a bookmark; a watch's events are marked so (they come
// in resource-version order, a list's do not); slimmed objects; tombstones
// of DeletedFinalStateUnknown unwrapped.
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
	if diff := cmp.Diff([]string{"upsert a", "upsert b", "synced", "progress 1"}, got); diff != "" {
		t.Errorf("first list (-want +got):\n%s", diff)
	}

	_ = f.Add(obj("c"))
	_ = f.Update(obj("a"))
	_ = f.Delete(cache.DeletedFinalStateUnknown{Key: "ns/n-b", Obj: obj("b")})
	if err := f.Bookmark("3"); err != nil {
		t.Fatal(err)
	}
	if err := f.Replace([]any{obj("a"), obj("d")}, "4"); err != nil {
		t.Fatal(err)
	}
	got, relisted := drain(q)
	want := []string{"upsert c watch", "upsert a watch", "delete b watch", "progress 3", "upsert a", "upsert d", "relisted", "progress 4"}
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

// TestEventQueue: events come out in the order they went in, across chunk
// boundaries, whatever the sizes of pushes and pops; a queue that holds a
// few events at a time allocates nothing per event; pop blocks until
// there is an event; close drops what is queued and later pushes, and
// releases their barriers.
func TestEventQueue(t *testing.T) {
	q := newEventQueue()
	buf := make([]event, 0, 8)
	if allocs := testing.AllocsPerRun(1000, func() {
		q.push(event{typ: evBarrier})
		q.push(event{typ: evBarrier})
		buf, _ = q.pop(buf[:0], 8)
	}); allocs != 0 {
		t.Errorf("a push and pop of a few events allocate %.1f times, want 0", allocs)
	}
	mon := make([]monitor, 3*eventChunk+7) // distinct pointers to tell events apart
	next := 0
	for _, n := range []int{1, eventChunk - 1, 2, eventChunk + 3, 0, 5, len(mon)} {
		var evs []event
		for ; len(evs) < n && next < len(mon); next++ {
			evs = append(evs, event{typ: evSynced, mon: &mon[next]})
		}
		q.pushAll(evs)
	}
	if q.len() != len(mon) {
		t.Fatalf("len %d, want %d", q.len(), len(mon))
	}
	got := 0
	for _, max := range []int{1, 3, eventChunk, eventChunk + 1, 2 * eventChunk} {
		batch, ok := q.pop(nil, max)
		if !ok || len(batch) != min(max, len(mon)-got) {
			t.Fatalf("pop(%d) after %d: %d events, ok %v", max, got, len(batch), ok)
		}
		for _, ev := range batch {
			if ev.mon != &mon[got] {
				t.Fatalf("event %d out of order", got)
			}
			got++
		}
		if q.len() != len(mon)-got {
			t.Fatalf("len %d after %d popped, want %d", q.len(), got, len(mon)-got)
		}
	}
	if got != len(mon) {
		t.Fatalf("popped %d of %d", got, len(mon))
	}

	popped := make(chan []event)
	go func() {
		batch, _ := q.pop(nil, 10)
		popped <- batch
	}()
	select {
	case b := <-popped:
		t.Fatalf("pop on an empty queue returned %d events", len(b))
	case <-time.After(50 * time.Millisecond):
	}
	q.push(event{typ: evBarrier})
	if b := <-popped; len(b) != 1 || b[0].typ != evBarrier {
		t.Fatalf("pop after a push: %+v", b)
	}

	// A stopping run throws its graph away: close drops the backlog
	// rather than have the builder apply it (a large one outlasted the
	// shutdown margin), and releases the barriers in it.
	newEventQueue().close() // nothing ever queued
	before, after := make(chan struct{}), make(chan struct{})
	for range 3 * eventChunk {
		q.push(event{typ: evSynced})
	}
	q.push(event{typ: evBarrier, done: before})
	q.close()
	q.push(event{typ: evBarrier, done: after})
	if b, ok := q.pop(nil, 10); ok || len(b) != 0 {
		t.Fatalf("pop after close: %d events, ok %v; want none and the end", len(b), ok)
	}
	if n := q.len(); n != 0 {
		t.Fatalf("len after close %d, want 0", n)
	}
	for name, done := range map[string]chan struct{}{"queued before close": before, "pushed after close": after} {
		select {
		case <-done:
		default:
			t.Errorf("a barrier %s is not released", name)
		}
	}
}
