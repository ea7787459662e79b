package agent

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/ownergc"
)

// explainAt asks the explain endpoint of the metrics server started by
// startServers and decodes its error answer.
func explainAt(t *testing.T, owner *ownerGC) (int, ownergc.ExplainError) {
	t.Helper()
	cfg := config.Defaulted()
	cfg.MetricsBindAddress, cfg.HealthzBindAddress = "127.0.0.1:0", "0"
	reg := prometheus.NewRegistry()
	servers, err := startServers(t.Context(), cfg, reg, newStatus(reg), owner)
	if err != nil {
		t.Fatal(err)
	}
	defer shutdownServers(t.Context(), servers)
	resp, err := http.Get("http://" + servers[0].lis.Addr().String() + ownergc.ExplainPath + "?resource=cm&namespace=ns&name=x")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body ownergc.ExplainError
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("status %d, body not an ExplainError: %v", resp.StatusCode, err)
	}
	return resp.StatusCode, body
}

// An instance that does not run the owner GC answers 503 naming the leader
// it heard of, unless that is itself.
func TestExplainEndpointNotLeader(t *testing.T) {
	cfg := config.Defaulted()
	o, err := newOwnerGC(Options{Config: cfg, Identity: "me_1"}, &rest.Config{Host: "https://127.0.0.1:1"}, prometheus.NewRegistry(), newStatus(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	code, body := explainAt(t, o)
	want := ownergc.ExplainError{Message: "this instance is not running the owner GC (it is not the leader)"}
	if diff := cmp.Diff(want, body); code != http.StatusServiceUnavailable || diff != "" {
		t.Errorf("before any leader is known: status %d, body (-want +got):\n%s", code, diff)
	}

	observed := func(id string) {
		holder := func() string { return id }
		o.observedHolder.Store(&holder)
	}
	observed("nodegc-owner-5b7c9-x2x_1f2e3d")
	code, body = explainAt(t, o)
	want = ownergc.ExplainError{LeaderIdentity: "nodegc-owner-5b7c9-x2x_1f2e3d",
		Message: "this instance is not running the owner GC (it is not the leader); the leader is nodegc-owner-5b7c9-x2x_1f2e3d"}
	if diff := cmp.Diff(want, body); code != http.StatusServiceUnavailable || diff != "" {
		t.Errorf("another instance leads: status %d, body (-want +got):\n%s", code, diff)
	}

	// This instance, as the last leader heard of, while its owner GC does
	// not run: between fence windows (renewals failing), or after the
	// lease passed before this instance read the new holder. It does not
	// send the user back to itself (review ownergc r9 N2), nor say it is
	// not the leader: the command then says how to find the holder from
	// the Lease.
	observed("me_1")
	code, body = explainAt(t, o)
	want = ownergc.ExplainError{Message: "this instance is not running the owner GC (it was last heard of as the leader: " +
		"its lease renewals are failing, or the lease just passed to another instance)"}
	if diff := cmp.Diff(want, body); code != http.StatusServiceUnavailable || diff != "" {
		t.Errorf("this instance last heard of as the leader: status %d, body (-want +got):\n%s", code, diff)
	}
}

// An agent without the owner GC (--owner-gc=off) says so.
func TestExplainEndpointWithoutOwnerGC(t *testing.T) {
	code, body := explainAt(t, nil)
	if code != http.StatusServiceUnavailable || body.Leader || !strings.Contains(body.Message, "--owner-gc=off") {
		t.Errorf("status %d, body %+v; want 503 saying the owner GC does not run here", code, body)
	}
}

// Go's profiles are served on the metrics address only when
// enableProfilingHandler is set.
func TestProfilingHandler(t *testing.T) {
	for _, enabled := range []bool{false, true} {
		cfg := config.Defaulted()
		cfg.MetricsBindAddress, cfg.HealthzBindAddress = "127.0.0.1:0", "0"
		cfg.EnableProfilingHandler = enabled
		reg := prometheus.NewRegistry()
		servers, err := startServers(t.Context(), cfg, reg, newStatus(reg), nil)
		if err != nil {
			t.Fatal(err)
		}
		base := "http://" + servers[0].lis.Addr().String()
		for path, want := range map[string]string{"/debug/pprof/": "goroutine", "/debug/pprof/heap?debug=1": "heap profile"} {
			resp, err := http.Get(base + path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			served := resp.StatusCode == http.StatusOK && strings.Contains(string(body), want)
			if served != enabled {
				t.Errorf("enableProfilingHandler=%t: GET %s: status %d, served %t", enabled, path, resp.StatusCode, served)
			}
		}
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("enableProfilingHandler=%t: /metrics status %d", enabled, resp.StatusCode)
		}
		shutdownServers(t.Context(), servers)
	}
}

// TestOwnerGCDebugOnlyOnLoopback: the metrics address is often reachable
// from the whole cluster (Prometheus scrapes it), but the owner GC's debug
// graph names every object it watches, Secrets included, and each explain
// request reads the API server with the collector's rights. Both answer
// only clients on the loopback (nodegc explain in the agent's pod, or
// through kubectl port-forward); others get 403 saying how to ask.
func TestOwnerGCDebugOnlyOnLoopback(t *testing.T) {
	cfg := config.Defaulted()
	o, err := newOwnerGC(Options{Config: cfg, Identity: "me_1"}, &rest.Config{Host: "https://127.0.0.1:1"}, prometheus.NewRegistry(), newStatus(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	for _, owner := range []*ownerGC{o, nil} {
		h := metricsMux(cfg, prometheus.NewRegistry(), owner)
		for _, tc := range []struct {
			path, remote string
			want         int
		}{
			{ownergc.ExplainPath + "?resource=cm&namespace=ns&name=x", "10.1.2.3:40000", http.StatusForbidden},
			{ownergc.ExplainPath + "?resource=cm&namespace=ns&name=x", "[fd00::7]:40000", http.StatusForbidden},
			{ownergc.ExplainPath + "?resource=cm&namespace=ns&name=x", "127.0.0.1:40000", http.StatusServiceUnavailable}, // not the leader
			{ownergc.ExplainPath + "?resource=cm&namespace=ns&name=x", "[::1]:40000", http.StatusServiceUnavailable},
			{ownergc.DebugGraphPath, "10.1.2.3:40000", http.StatusForbidden},
			{"/metrics", "10.1.2.3:40000", http.StatusOK},
		} {
			if owner == nil && tc.path == ownergc.DebugGraphPath {
				continue // served only with an owner GC
			}
			req := httptest.NewRequest(http.MethodGet, tc.path, nil)
			req.RemoteAddr = tc.remote
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Errorf("owner GC %v: GET %s from %s: status %d, want %d (%s)", owner != nil, tc.path, tc.remote, rec.Code, tc.want, rec.Body)
			}
			if rec.Code == http.StatusForbidden && !strings.Contains(rec.Body.String(), "port-forward") {
				t.Errorf("GET %s from %s: the refusal does not say how to ask: %s", tc.path, tc.remote, rec.Body)
			}
		}
	}
}

// TestProfilingOnlyOnLoopback: Go's profiles, when enableProfilingHandler
// is set, answer only clients on the loopback, as the owner GC's debug
// graph does: the node agent's metrics address is on the node's network
// (hostNetwork), and a profile holds the command line and what the heap
// holds. Others get 403 saying to use kubectl port-forward; /metrics stays
// open to all.
// TestDebugRefusalOffLoopback: with metricsBindAddress naming one address
// off the loopback (the node's internal IP, say), nothing of the agent
// listens on the loopback, and the usual ways to ask (in the agent's pod,
// kubectl port-forward) arrive there: the refusal says so and what to set,
// not to run explain where the operator already did (review config r10
// F1); nodegc explain then prints no leader hint. An address that binds
// every one keeps the usual refusal.
func TestDebugRefusalOffLoopback(t *testing.T) {
	const (
		explain = ownergc.ExplainPath + "?resource=cm&namespace=ns&name=x"
		pprof   = "/debug/pprof/"
		ask     = "run nodegc explain in the agent's pod (kubectl exec), or through kubectl port-forward"
		forward = "kubectl port-forward to the pod's metrics port"
		off     = "this agent's metricsBindAddress 192.0.2.2:10281 is not on the loopback, so no client can reach them: " +
			"set it to :10281 (every address, the loopback included"
	)
	for bind, want := range map[string]map[string]string{
		"192.0.2.2:10281": {explain: off, pprof: off},
		"[fd00::2]:10281": {explain: "metricsBindAddress [fd00::2]:10281 is not on the loopback", pprof: "set it to :10281"},
		":10281":          {explain: ask, pprof: forward},
		"0.0.0.0:10281":   {explain: ask, pprof: forward},
	} {
		cfg := config.Defaulted()
		cfg.MetricsBindAddress, cfg.EnableProfilingHandler = bind, true
		h := metricsMux(cfg, prometheus.NewRegistry(), nil)
		for path, says := range want {
			req := httptest.NewRequest(http.MethodGet, path, nil)
			req.RemoteAddr = "192.0.2.2:40000"
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), says) {
				t.Errorf("metricsBindAddress %s: GET %s: status %d, %q; want 403 saying %q", bind, path, rec.Code, rec.Body, says)
			}
		}
	}
}

func TestProfilingOnlyOnLoopback(t *testing.T) {
	cfg := config.Defaulted()
	cfg.EnableProfilingHandler = true
	h := metricsMux(cfg, prometheus.NewRegistry(), nil)
	paths := []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/symbol", "/debug/pprof/heap?debug=1",
		"/debug/pprof/profile?seconds=1", "/debug/pprof/trace?seconds=1"}
	for _, path := range paths {
		for remote, want := range map[string]int{
			"10.1.2.3:40000":    http.StatusForbidden,
			"192.0.2.2:40000":   http.StatusForbidden,
			"[fd00::7]:40000":   http.StatusForbidden,
			"127.0.0.1:40000":   http.StatusOK,
			"[::1]:40000":       http.StatusOK,
			"not-an-address:80": http.StatusForbidden,
		} {
			if want == http.StatusOK && (strings.Contains(path, "profile") || strings.Contains(path, "trace")) {
				continue // served (TestProfilingHandler); not run here for a second each
			}
			req := httptest.NewRequest(http.MethodGet, path, nil)
			req.RemoteAddr = remote
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != want {
				t.Errorf("GET %s from %s: status %d, want %d", path, remote, rec.Code, want)
			}
			if want == http.StatusForbidden && !strings.Contains(rec.Body.String(), "port-forward") {
				t.Errorf("GET %s from %s: the refusal does not say how to ask: %s", path, remote, rec.Body)
			}
		}
	}
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.RemoteAddr = "10.1.2.3:40000"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Errorf("GET /metrics from 10.1.2.3: status %d, want 200", rec.Code)
	}
}

// TestHealthzFailsWhileTheOwnerGCStalls: /healthz answers 500 saying why
// while the owner GC this instance runs is stalled, and 200 once it is not,
// or once this instance no longer leads (a stall of a collector that
// stopped is not this process's).
func TestHealthzFailsWhileTheOwnerGCStalls(t *testing.T) {
	cfg := config.Defaulted()
	cfg.MetricsBindAddress, cfg.HealthzBindAddress = "0", "127.0.0.1:0"
	reg := prometheus.NewRegistry()
	st := newStatus(reg)
	servers, err := startServers(t.Context(), cfg, reg, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer shutdownServers(t.Context(), servers)
	healthz := func() (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + servers[0].lis.Addr().String() + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	var stall error
	st.setLeading(true, func() bool { return true }, func() error { return stall })
	if code, body := healthz(); code != http.StatusOK {
		t.Fatalf("leading, not stalled: %d %s", code, body)
	}
	stall = errors.New("owner GC: none of the 20 delete workers made progress for 5m1s (ready items: 3)")
	if code, body := healthz(); code != http.StatusInternalServerError || !strings.Contains(body, "delete workers made progress") {
		t.Errorf("leading, stalled: %d %q, want 500 saying why", code, body)
	}
	st.setLeading(false, nil, nil)
	if code, body := healthz(); code != http.StatusOK {
		t.Errorf("no longer leading: %d %s", code, body)
	}
}
