package ownergc

import (
	"bytes"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodegc/nodegc/internal/testbed"
)

// parkedInFlights counts the goroutines blocked inside flights.do: the one
// running the lookup (blocked in it) and those waiting for its result.
func parkedInFlights() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		header, _, _ := bytes.Cut(g, []byte("\n"))
		blocked := bytes.Contains(header, []byte("[chan receive")) || bytes.Contains(header, []byte("[sync.WaitGroup.Wait"))
		if blocked && bytes.Contains(g, []byte("ownergc.(*flights).do")) {
			n++
		}
	}
	return n
}

// TestFlightsShareOneLookup: concurrent lookups of one key share a single
// request and all get its result, its error included; a lookup after it
// ends makes a new request.
func TestFlightsShareOneLookup(t *testing.T) {
	errLookup := errors.New("lookup failed")
	key := ownerKey{uid: "u", group: "apps", kind: "ReplicaSet", name: "web", namespace: "shop"}
	for name, tc := range map[string]struct {
		res lookupResult
		err error
	}{
		"a result": {res: lookupResult{class: classWaiting, reason: reasonWaiting}},
		"an error": {err: errLookup},
	} {
		t.Run(name, func(t *testing.T) {
			const n = 8
			var f flights
			var calls atomic.Int32
			release := make(chan struct{})
			lookup := func() (lookupResult, error) {
				calls.Add(1)
				<-release
				return tc.res, tc.err
			}
			type answer struct {
				res lookupResult
				err error
			}
			answers := make([]answer, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					res, err := f.do(key, lookup)
					answers[i] = answer{res, err}
				})
			}
			testbed.WaitFor(t, 10*time.Second, "every lookup to wait in flights.do", func() bool { return parkedInFlights() == n })
			close(release)
			wg.Wait()
			if got := calls.Load(); got != 1 {
				t.Errorf("%d concurrent lookups of one key made %d requests, want 1", n, got)
			}
			for i, a := range answers {
				if a.res != tc.res || !errors.Is(a.err, tc.err) || (tc.err == nil && a.err != nil) {
					t.Errorf("lookup %d got (%v, %v), want (%v, %v)", i, a.res, a.err, tc.res, tc.err)
				}
			}
			if _, err := f.do(key, func() (lookupResult, error) { calls.Add(1); return lookupResult{}, nil }); err != nil || calls.Load() != 2 {
				t.Errorf("a lookup after the shared one: err %v, %d requests in all, want a second request", err, calls.Load())
			}
		})
	}
}

// TestFlightsKeepKeysApart: a lookup of another key, even one that differs
// only where a joined string form could blur it (a "/" moved between
// fields), makes its own request while the first is in flight.
func TestFlightsKeepKeysApart(t *testing.T) {
	// A reference's name is whatever its writer put there, "/" included.
	base := ownerKey{uid: "u", group: "apps", kind: "ReplicaSet", name: "web/a", namespace: "shop"}
	for name, other := range map[string]ownerKey{
		"another uid":       {uid: "v", group: "apps", kind: "ReplicaSet", name: "web/a", namespace: "shop"},
		"another group":     {uid: "u", group: "extensions", kind: "ReplicaSet", name: "web/a", namespace: "shop"},
		"another kind":      {uid: "u", group: "apps", kind: "Deployment", name: "web/a", namespace: "shop"},
		"another name":      {uid: "u", group: "apps", kind: "ReplicaSet", name: "api", namespace: "shop"},
		"another namespace": {uid: "u", group: "apps", kind: "ReplicaSet", name: "web/a", namespace: "shop2"},
		"cluster-scoped":    {uid: "u", group: "apps", kind: "ReplicaSet", name: "web/a"},
		"separator moved":   {uid: "u", group: "apps", kind: "ReplicaSet", name: "a", namespace: "shop/web"},
		"fields swapped":    {uid: "u", group: "apps", kind: "ReplicaSet", name: "shop", namespace: "web/a"},
	} {
		t.Run(name, func(t *testing.T) {
			var f flights
			release := make(chan struct{})
			first := make(chan lookupResult, 1)
			go func() {
				res, _ := f.do(base, func() (lookupResult, error) {
					<-release
					return lookupResult{class: classSolid, reason: reasonPresent}, nil
				})
				first <- res
			}()
			testbed.WaitFor(t, 10*time.Second, "the first lookup to be in flight", func() bool { return parkedInFlights() == 1 })
			// Were the keys merged, this lookup would wait for the first,
			// which waits for release: give up after a while.
			timer := time.AfterFunc(10*time.Second, func() { close(release) })
			want := lookupResult{class: classDangling, reason: reasonNotFound}
			got, err := f.do(other, func() (lookupResult, error) { return want, nil })
			if timer.Stop() {
				close(release)
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got, cmp.AllowUnexported(lookupResult{})); diff != "" {
				t.Errorf("lookup of %+v while %+v is in flight (-want +got):\n%s", other, base, diff)
			}
			if res := <-first; res.reason != reasonPresent {
				t.Errorf("the first lookup got %+v, want its own result", res)
			}
		})
	}
}
