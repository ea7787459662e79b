package ownergc

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/nodegc/nodegc/pkg/config"
)

// TestFenceTransport: reads always pass; writes pass only while the window
// is open, and a refused one is never sent and fails with ErrLeaseLost.
func TestFenceTransport(t *testing.T) {
	var sent atomic.Int32
	next := roundTripperFunc(func(*http.Request) (*http.Response, error) {
		sent.Add(1)
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
	})
	for name, tc := range map[string]struct {
		method   string
		mayWrite bool
		wantSent bool
	}{
		"GET, fence closed":     {http.MethodGet, false, true},
		"HEAD, fence closed":    {http.MethodHead, false, true},
		"DELETE, fence open":    {http.MethodDelete, true, true},
		"DELETE, fence closed":  {http.MethodDelete, false, false},
		"PATCH, fence closed":   {http.MethodPatch, false, false},
		"POST, fence closed":    {http.MethodPost, false, false},
		"PUT, fence closed":     {http.MethodPut, false, false},
		"unknown, fence closed": {"PROPFIND", false, false},
	} {
		t.Run(name, func(t *testing.T) {
			sent.Store(0)
			asked := 0
			rt := fence(func() time.Duration {
				asked++
				if tc.mayWrite {
					return 5 * time.Second
				}
				return 0
			})(next)
			req, err := http.NewRequestWithContext(t.Context(), tc.method, "https://127.0.0.1:1/api/v1/namespaces/default/configmaps/x", http.NoBody)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := rt.RoundTrip(req)
			if resp != nil {
				resp.Body.Close()
			}
			if got := sent.Load() == 1; got != tc.wantSent {
				t.Errorf("sent = %t, want %t", got, tc.wantSent)
			}
			if tc.wantSent != (err == nil) || (err != nil && !errors.Is(err, ErrLeaseLost)) {
				t.Errorf("RoundTrip error = %v, want ErrLeaseLost only when not sent", err)
			}
			if write := tc.method != http.MethodGet && tc.method != http.MethodHead; (asked == 1) != write {
				t.Errorf("mayWrite asked %d times for %s", asked, tc.method)
			}
		})
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestNewFencesWrites: the clients New builds ask WriteWindow before a write,
// send none it refuses (counted as code "error"), and name the instance
// in their user agent.
func TestNewFencesWrites(t *testing.T) {
	var (
		mu     sync.Mutex
		agents []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		agents = append(agents, r.Method+" "+r.UserAgent())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Success"}`))
	}))
	defer srv.Close()
	var may atomic.Bool
	reg := prometheus.NewRegistry()
	c, err := New(Options{Config: config.Defaulted().OwnerGC, RESTConfig: &rest.Config{Host: srv.URL}, Registerer: reg,
		Identity: "node-a_1234", WriteWindow: func() time.Duration {
			if may.Load() {
				return 5 * time.Second
			}
			return 0
		}})
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	cms := c.metadata.Resource(gvr).Namespace("default")
	if err := cms.Delete(t.Context(), "refused", metav1.DeleteOptions{}); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("DELETE with the fence closed: %v, want ErrLeaseLost", err)
	}
	// The workers' deletes go through the writes client.
	if err := c.writes.delete(t.Context(), gvr, "default", "refused", metav1.DeleteOptions{}); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("DELETE of the writes client with the fence closed: %v, want ErrLeaseLost", err)
	}
	may.Store(true)
	if err := cms.Delete(t.Context(), "sent", metav1.DeleteOptions{}); err != nil {
		t.Errorf("DELETE with the fence open: %v", err)
	}
	if err := c.writes.delete(t.Context(), gvr, "default", "sent", metav1.DeleteOptions{}); err != nil {
		t.Errorf("DELETE of the writes client with the fence open: %v", err)
	}
	if diff := cmp.Diff([]string{"DELETE nodegc-owner-gc/node-a_1234", "DELETE nodegc-owner-gc/node-a_1234"}, agents); diff != "" {
		t.Errorf("requests the server saw (-want +got):\n%s", diff)
	}
	if got := testutil.ToFloat64(c.metrics.requests.WithLabelValues("DELETE", "error")); got != 2 {
		t.Errorf("DELETE requests with code error = %v, want 2 (the refused ones)", got)
	}
}

// TestFenceTimesWritesOut: a write is sent with a server-side timeout
// (?timeout=, what kube-apiserver bounds the request's work by) no longer
// than what remains of the write window when it is sent, so that
// kube-apiserver gives the write up if it has not run by the time the
// window closes (it may wait in a Priority and Fairness queue or on a
// webhook). A shorter timeout of the request's own is kept; reads are left
// alone. Before, no timeout reached the server (its default is 60s): a
// write sent just before the fence closed could run after another
// instance took the lease.
func TestFenceTimesWritesOut(t *testing.T) {
	var got []string
	next := roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		got = append(got, req.Method+" timeout="+req.URL.Query().Get("timeout"))
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
	})
	rt := fence(func() time.Duration { return 4500 * time.Millisecond })(next)
	for _, r := range []struct{ method, query string }{
		{http.MethodDelete, ""},
		{http.MethodPatch, "?timeout=1s"},
		{http.MethodPost, "?timeout=30s&fieldManager=x"},
		{http.MethodGet, ""},
	} {
		req, err := http.NewRequestWithContext(t.Context(), r.method, "https://127.0.0.1:1/api/v1/namespaces/default/configmaps/x"+r.query, http.NoBody)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if req.URL.RawQuery != strings.TrimPrefix(r.query, "?") {
			t.Errorf("%s: the caller's request changed to %q", r.method, req.URL.RawQuery)
		}
	}
	want := []string{"DELETE timeout=4.5s", "PATCH timeout=1s", "POST timeout=4.5s", "GET timeout="}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("requests sent (-want +got):\n%s", diff)
	}
}

// TestNewWritesTimeOut: every client New builds sends its writes with a
// server-side timeout no longer than the write window: the workers'
// deletes, their patches, and Events.
func TestNewWritesTimeOut(t *testing.T) {
	var (
		mu  sync.Mutex
		got = map[string]string{}
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Method] = r.URL.Query().Get("timeout")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.Method {
		case http.MethodDelete:
			w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Success"}`))
		default:
			w.Write([]byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"x","namespace":"default"}}`))
		}
	}))
	defer srv.Close()
	const window = 5 * time.Second
	c, err := New(Options{Config: config.Defaulted().OwnerGC, RESTConfig: &rest.Config{Host: srv.URL}, Registerer: prometheus.NewRegistry(),
		WriteWindow: func() time.Duration { return window }})
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	if err := c.writes.delete(t.Context(), gvr, "default", "x", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("DELETE: %v", err)
	}
	if _, err := c.metadata.Resource(gvr).Namespace("default").Patch(t.Context(), "x", types.JSONPatchType, []byte(`[]`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("PATCH: %v", err)
	}
	if _, err := c.kube.CoreV1().ConfigMaps("default").Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("POST: %v", err)
	}
	if _, err := c.metadata.Resource(gvr).Namespace("default").Get(t.Context(), "x", metav1.GetOptions{}); err != nil {
		t.Fatalf("GET: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, method := range []string{http.MethodDelete, http.MethodPatch, http.MethodPost} {
		d, err := time.ParseDuration(got[method])
		if err != nil || d <= 0 || d > window {
			t.Errorf("%s sent with timeout=%q; want a duration in (0, %s]", method, got[method], window)
		}
	}
	if got[http.MethodGet] != "" {
		t.Errorf("GET sent with timeout=%q; want none", got[http.MethodGet])
	}
}

// TestFenceRefusesHopelessWrites: with less than minWriteWindow left of the
// write window, a write is not sent: a server-side timeout of milliseconds
// would answer 504 (an action error, logged as one), and renewals have
// failed for most of renewDeadline by then. It is refused as a write of an
// instance that no longer holds the lease, which the workers try again a
// second later (TestFenceRefusalRetried). (Before, it went out with
// timeout=3ms.)
func TestFenceRefusesHopelessWrites(t *testing.T) {
	sent := 0
	next := roundTripperFunc(func(*http.Request) (*http.Response, error) {
		sent++
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
	})
	rt := fence(func() time.Duration { return 3 * time.Millisecond })(next)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodDelete, "https://127.0.0.1:1/api/v1/namespaces/default/configmaps/x", http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.RoundTrip(req); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("DELETE with 3ms left: %v, want ErrLeaseLost", err)
	}
	if sent != 0 {
		t.Errorf("%d requests sent, want none", sent)
	}
}

// TestFenceRefusalRetried: a write the lease fence refuses while the run
// goes on is tried again a second later, not dropped. The fence refuses a
// write when less than minWriteWindow is left, and the run's context ends
// only once the window is over: a renewal sent in that last second reopens
// the window, and the run goes on with the same graph and queues. Such a
// refusal reaches no server, counts no action error and is logged once
// (at V(2)) until a write is sent again; once the window is open again the
// write is sent. Before, the refusal was taken for the end of the run and
// the item dropped for good: a dependent of a deleted owner stayed, and an
// owner deleted in the foreground or with orphan kept its finalizer
// forever.
func TestFenceRefusalRetried(t *testing.T) {
	var closing atomic.Bool
	s := newRejectServer(t)
	r, tg, reg, logs := rejectRun(t, s, fence(func() time.Duration {
		if closing.Load() {
			return minWriteWindow / 2
		}
		return 10 * time.Second
	}))
	ns := rejectNamespace
	orphaner := object(ns, "orphaner", "orphaner", deleting(), withFinalizers(metav1.FinalizerOrphanDependents))
	orphaned := object(ns, "orphaned", "orphaned", ownedBy(resConfigMap, "orphaner", "orphaner", false))
	writes := deniedWrites(t, r, tg, s, answerPolicyDenied, orphaner, orphaned)
	for _, o := range []*metav1.PartialObjectMetadata{orphaner, orphaned} {
		s.refuse(o.Name, answerPolicyDenied(o.Name), o)
	}
	markSynced(r)
	cases := []struct {
		name    string
		act     func() outcome
		written []string // "METHOD name" of the writes sent once the window is open
	}{
		{writes[0].name, writes[0].act, []string{"DELETE delete-denied"}},
		{writes[1].name, writes[1].act, []string{"PATCH patch-denied"}},
		{writes[2].name, writes[2].act, []string{"PATCH fg-denied"}},
		{"orphan", func() outcome { return r.attemptToOrphan(t.Context(), "orphaner") }, []string{"PATCH orphaned", "PATCH orphaner"}},
	}
	refusals := func() int { return strings.Count(logs.String(), "refused by the lease fence") }
	for _, tc := range cases {
		closing.Store(true)
		before := refusals()
		for attempt := range 2 {
			if out := tc.act(); out != (outcome{after: time.Second}) {
				t.Errorf("%s, refused by the fence (attempt %d): outcome %+v, want a retry after a second", tc.name, attempt+1, out)
			}
		}
		for _, w := range tc.written {
			method, name, _ := strings.Cut(w, " ")
			if got := s.count(method, name); got != 0 {
				t.Errorf("%s: %d requests %s sent through a closed fence", tc.name, got, w)
			}
		}
		if got := refusals() - before; got != 1 {
			t.Errorf("%s: %d log lines about the refusals, want 1 for two refusals in a row", tc.name, got)
		}

		closing.Store(false)
		for _, w := range tc.written {
			_, name, _ := strings.Cut(w, " ")
			s.accept(name)
		}
		if out := tc.act(); out != done {
			t.Errorf("%s, the window open again: outcome %+v, want done", tc.name, out)
		}
		for _, w := range tc.written {
			method, name, _ := strings.Cut(w, " ")
			if got := s.count(method, name); got != 1 {
				t.Errorf("%s, the window open again: %d requests %s, want 1", tc.name, got, w)
			}
		}
	}
	for action, n := range counterByLabel(t, reg, "nodegc_owner_gc_action_errors_total", "action") {
		if n != 0 {
			t.Errorf("%v action errors %q for writes the fence refused", n, action)
		}
	}
}

// markSynced makes r synced, as after its first discovery round, with one
// monitor (of ConfigMaps) whose initial list is in the graph.
func markSynced(r *run) {
	r.discovered.Store(true)
	m := &monitor{started: r.c.clock.Now(), res: resConfigMap}
	m.markGraphSynced()
	r.monitors.mu.Lock()
	defer r.monitors.mu.Unlock()
	r.monitors.byGR[resConfigMap.gvr.GroupResource()] = m
}

// testFenceRefusalRetried: against kube-apiserver, the lease fence refuses
// the DELETE of a dependent whose owner was deleted (less than a second of
// the write window left), while the run goes on: the fence stays nearly
// closed until the dependent's next attempt, as when a renewal comes in
// the window's last second. The dependent is collected all the same, at
// that next attempt, with no action error. Before, the refusal dropped it
// for good: its owner's deletion was its only enqueue.
func testFenceRefusalRetried(t *testing.T, env *itEnv) {
	var closing atomic.Bool
	gc := env.startCollectorWith(t, Options{Config: testConfig(), RESTConfig: env.c.RESTConfig(), WriteWindow: func() time.Duration {
		if closing.Load() {
			return minWriteWindow / 2
		}
		return 10 * time.Second
	}})
	ns := env.namespace(t, "fence")
	owner := env.configMap(t, ns, "owner", nil)
	d := env.configMap(t, ns, "d", []metav1.OwnerReference{cmRef(owner, false)})
	gc.waitObserved(t, d.UID, d.ResourceVersion)
	// The fence closes right before d's first DELETE is sent, and reopens
	// right before its second is: every write between the two, d's first
	// DELETE included, is refused.
	var attempts atomic.Int32
	gc.beforeWrite.Store(ns, func(action string, id objectID) {
		if action == actDelete.String() && id.uid == d.UID {
			closing.Store(attempts.Add(1) == 1)
		}
	})
	env.deleteCM(t, ns, "owner", metav1.DeletePropagationBackground)
	eventually(t, 30*time.Second, "d to be collected after the fence refused its first DELETE", env.cmGone(ns, "d"))
	if got := attempts.Load(); got != 2 {
		t.Errorf("%d attempts to delete d, want 2 (one refused by the fence, then the one that deleted it)", got)
	}
	if !strings.Contains(gc.logs.String(), "refused by the lease fence") {
		t.Error("no log line about the write the fence refused")
	}
	for action, n := range counterByLabel(t, gc.reg, "nodegc_owner_gc_action_errors_total", "action") {
		if n != 0 {
			t.Errorf("%v action errors %q, want none: the fence's refusal is no error", n, action)
		}
	}
}
