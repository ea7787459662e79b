package ownergc

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// feed is the queue of a monitor's reflector, and the only place where
// the monitor keeps objects: none. An informer would keep every object in
// its store (and the graph a second, compact copy); the collector never
// reads those stores, so the feed turns each change the reflector reports
// straight into an event for the graph builder and forgets the object.
// The graph is the store.
//
// What an informer's store does that the graph must do instead:
//   - a list (the first, or a relist after a watch could not resume)
//     replaces the resource's contents: objects of the resource that the
//     graph observed and that are not in the new list were deleted while
//     nobody watched. The feed sends the list's UIDs in an evRelisted
//     event after the list's upserts; the builder deletes the others.
//     The first list of a monitor needs no such event: the graph holds no
//     observed object of a resource whose monitor never listed (a
//     resource that left discovery had its nodes turned virtual).
//   - an object deleted and re-created under the same name between two
//     lists is, to the informer, an update; here it is a UID missing from
//     the relist (deleted) and a new UID (upserted).
//   - synced: after the upserts of the first list, the feed sends
//     evSynced.
//
// It implements cache.Queue so that a client-go controller (cache.New) runs
// the reflector with the monitor's watch error handler; its Pop only waits
// for Close, as nothing is ever queued in it.
type feed struct {
	m *monitor

	closed chan struct{}
	// synced is closed at the end of the first list. Only the reflector's
	// goroutine calls Replace, so it also tells Replace whether a list
	// came before.
	synced chan struct{}
	once   sync.Once
}

var _ cache.Queue = (*feed)(nil)

func newFeed(m *monitor) *feed {
	return &feed{m: m, closed: make(chan struct{}), synced: make(chan struct{})}
}

// Add, Update and Delete are the watch's events.
func (f *feed) Add(obj any) error    { f.m.pushObject(evUpsert, obj); return nil }
func (f *feed) Update(obj any) error { f.m.pushObject(evUpsert, obj); return nil }
func (f *feed) Delete(obj any) error { f.m.pushObject(evDelete, obj); return nil }

// Bookmark is a watch's bookmark: every change up to rv was delivered.
func (f *feed) Bookmark(rv string) error {
	f.m.pushProgress(rv)
	f.m.passed(rv)
	return nil
}

var _ cache.ReflectorBookmarkStore = (*feed)(nil)

// Replace delivers a complete list of the resource, queued for the graph
// in batches.
func (f *feed) Replace(list []any, rv string) error {
	relist := f.HasSynced()
	var uids map[types.UID]struct{}
	if relist {
		uids = make(map[types.UID]struct{}, len(list))
	}
	batch := make([]event, 0, min(len(list), replaceBatch))
	for _, obj := range list {
		o := slimMeta(obj)
		if o == nil {
			continue
		}
		batch = append(batch, event{typ: evUpsert, obj: o, res: f.m.res})
		if len(batch) == cap(batch) {
			f.m.pushAll(batch)
			batch = batch[:0]
		}
		if relist {
			uids[o.UID] = struct{}{}
		}
	}
	f.m.pushAll(batch)
	if relist {
		f.m.push(event{typ: evRelisted, res: f.m.res, uids: uids, mon: f.m})
		f.m.pushProgress(rv)
		return nil
	}
	f.m.push(event{typ: evSynced, mon: f.m})
	f.m.pushProgress(rv)
	close(f.synced)
	return nil
}

// replaceBatch is how many of a list's objects are queued at a time.
const replaceBatch = 256

// Resync is never called: the reflector runs without a resync period.
func (f *feed) Resync() error { return nil }

// Pop waits until the feed is closed: nothing is ever queued in it.
func (f *feed) Pop(cache.PopProcessFunc) (any, error) {
	<-f.closed
	return nil, cache.ErrFIFOClosed
}

// HasSynced reports whether the first list was delivered.
func (f *feed) HasSynced() bool {
	select {
	case <-f.synced:
		return true
	default:
		return false
	}
}

func (f *feed) HasSyncedChecker() cache.DoneChecker { return f }

// Name and Done implement cache.DoneChecker.
func (f *feed) Name() string          { return f.m.res.gvr.String() }
func (f *feed) Done() <-chan struct{} { return f.synced }

// Close ends Pop.
func (f *feed) Close() { f.once.Do(func() { close(f.closed) }) }

// slimMeta returns obj as the slimmed object metadata the builder reads,
// or nil for anything else (or an object without UID).
func slimMeta(obj any) *metav1.PartialObjectMetadata {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	o, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok || o.UID == "" {
		return nil
	}
	_, _ = slimObject(o)
	return o
}
