package ownergc

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodegc/nodegc/internal/testbed"
)

// TestResumeReadsWhereTheServerIs: a resumed watch awaits the resource
// version of a consistent list of one object; a version that is not a
// number (an aggregated API server's own) cannot be compared and ends the
// watch as expired, so that the reflector relists; a read that fails is an
// error, and nothing is awaited.
func TestResumeReadsWhereTheServerIs(t *testing.T) {
	for _, tc := range []struct {
		name, rv string
		code     int
		want     uint64
		expired  bool
	}{
		{name: "etcd revision", rv: "4711", want: 4711},
		{name: "opaque version", rv: "v-4711", expired: true},
		{name: "no version", rv: "", expired: true},
		{name: "server unavailable", code: http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			queries := make(chan url.Values, 1)
			client := testMetaClient(t, func(w http.ResponseWriter, req *http.Request) {
				queries <- req.URL.Query()
				if tc.code != 0 {
					http.Error(w, "unavailable", tc.code)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(&metav1.PartialObjectMetadataList{
					TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadataList"},
					ListMeta: metav1.ListMeta{ResourceVersion: tc.rv}})
			})
			m := &monitor{res: resPod}
			err := m.resume(t.Context(), client)
			if q := <-queries; q.Get("limit") != "1" || q.Has("resourceVersion") {
				t.Errorf("read with query %v; want a consistent list of one object (limit=1, no resourceVersion)", q)
			}
			switch {
			case tc.want != 0:
				if err != nil || m.catchUp.Load() != tc.want || !m.catchingUpNow() {
					t.Errorf("resume: %v, awaits %d (catching up %v); want nil, %d", err, m.catchUp.Load(), m.catchingUpNow(), tc.want)
				}
			case tc.expired:
				if !apierrors.IsResourceExpired(err) || m.catchingUpNow() {
					t.Errorf("resume: %v (catching up %v); want a resource-expired error, nothing awaited", err, m.catchingUpNow())
				}
			default:
				if err == nil || apierrors.IsResourceExpired(err) || m.catchingUpNow() {
					t.Errorf("resume: %v (catching up %v); want the read's error, nothing awaited", err, m.catchingUpNow())
				}
			}
		})
	}
}

// TestResumedWatchThatDoesNotCatchUpEnds: a resumed watch that has not
// caught up within its bound (no bookmark, as from etcd directly, and no
// change) ends with an "expired" error, for the reflector to relist; one
// that caught up goes on, and stops when told.
func TestResumedWatchThatDoesNotCatchUpEnds(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	m := &monitor{res: resPod, clock: clk, catchUpWithin: time.Minute, queue: newEventQueue()}
	next := func(w watch.Interface) (watch.Event, bool) {
		t.Helper()
		select {
		case ev, ok := <-w.ResultChan():
			return ev, ok
		case <-time.After(5 * time.Second):
			t.Fatal("no event and no end within 5s")
			return watch.Event{}, false
		}
	}
	pod := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "p", ResourceVersion: "50"}}

	m.awaitCatchUp(100)
	inner := watch.NewFake()
	w := m.expireUnlessCaughtUp(inner)
	go inner.Add(pod)
	if ev, ok := next(w); !ok || ev.Type != watch.Added {
		t.Fatalf("first event %v (open %v); want the inner watch's Added", ev.Type, ok)
	}
	testbed.WaitFor(t, 5*time.Second, "the bound's timer", clk.HasWaiters)
	clk.Step(time.Minute)
	ev, ok := next(w)
	if !ok || ev.Type != watch.Error || !apierrors.IsResourceExpired(apierrors.FromObject(ev.Object)) {
		t.Fatalf("after the bound, not caught up: %v %v (open %v); want an expired error", ev.Type, ev.Object, ok)
	}
	if _, ok := next(w); ok {
		t.Error("the watch goes on after its expired error")
	}
	if !inner.IsStopped() {
		t.Error("the inner watch was not stopped")
	}

	m.awaitCatchUp(200)
	inner = watch.NewFake()
	w = m.expireUnlessCaughtUp(inner)
	m.passed("200")
	m.caughtUp(m.catchUpAt)
	testbed.WaitFor(t, 5*time.Second, "the bound's timer", clk.HasWaiters)
	clk.Step(time.Minute)
	go inner.Modify(pod)
	if ev, ok := next(w); !ok || ev.Type != watch.Modified {
		t.Fatalf("after the bound, caught up: %v (open %v); want the inner watch's Modified", ev.Type, ok)
	}
	w.Stop()
	if _, ok := next(w); ok {
		t.Error("the watch goes on after Stop")
	}
	if !inner.IsStopped() {
		t.Error("Stop did not stop the inner watch")
	}
}
