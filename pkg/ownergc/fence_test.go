package ownergc

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/nodegc/nodegc/pkg/config"
)

// TestFenceTransport: reads always pass; writes pass only while mayWrite
// says yes, and a refused one is never sent and fails with ErrLeaseLost.
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
			rt := fence(func() bool { asked++; return tc.mayWrite })(next)
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

// TestNewFencesWrites: the clients New builds ask MayWrite before a write,
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
		Identity: "node-a_1234", MayWrite: may.Load})
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
