package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/ownergc"
)

func metaFor(namespace, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: namespace, Name: name}
}

// server is one HTTP listener.
type server struct {
	srv *http.Server
	lis net.Listener
}

// bindError is a listener that could not start: its address, the fields
// of the configuration that gave it, and (source, Options.BindSource) what
// set each of them.
type bindError struct {
	addr   string
	fields []string
	source func(field string) string
	err    error
}

func (e *bindError) Error() string {
	who := make([]string, 0, len(e.fields))
	for _, f := range e.fields {
		if e.source != nil {
			if s := e.source(f); s != "" {
				f += ", " + s
			}
		}
		who = append(who, f)
	}
	return fmt.Sprintf("listening on %s (%s): %v; give it an address that is free here, or 0 to serve nothing there",
		e.addr, strings.Join(who, "; "), e.err)
}

func (e *bindError) Unwrap() error { return e.err }

// startServers serves metricsMux on
// metricsBindAddress and /healthz, /readyz on healthzBindAddress; one
// listener when both addresses are equal; none for "0".
func startServers(ctx context.Context, cfg *config.NodeGCConfiguration, reg *prometheus.Registry, st *status, owner *ownerGC) ([]*server, error) {
	metrics := metricsMux(cfg, reg, owner)
	health := healthMux(st)

	var servers []*server
	listen := func(addr string, h http.Handler, fields ...string) error {
		if addr == "0" {
			return nil
		}
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			return &bindError{addr: addr, fields: fields, err: err}
		}
		s := &server{srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, lis: lis}
		go func() {
			if err := s.srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				klog.FromContext(ctx).Error(err, "HTTP server stopped", "address", lis.Addr().String())
			}
		}()
		klog.FromContext(ctx).Info("Serving HTTP", "address", lis.Addr().String())
		servers = append(servers, s)
		return nil
	}
	if cfg.MetricsBindAddress == cfg.HealthzBindAddress {
		both := http.NewServeMux()
		both.Handle("/", metrics)
		both.Handle("/healthz", health)
		both.Handle("/readyz", health)
		return servers, listen(cfg.MetricsBindAddress, both, "metricsBindAddress", "healthzBindAddress")
	}
	if err := listen(cfg.MetricsBindAddress, metrics, "metricsBindAddress"); err != nil {
		return servers, err
	}
	if err := listen(cfg.HealthzBindAddress, health, "healthzBindAddress"); err != nil {
		shutdownServers(ctx, servers)
		return nil, err
	}
	return servers, nil
}

// explainWithoutOwnerGC answers `nodegc explain` in an agent that does not
// run the owner GC at all.
// metricsMux serves /metrics, the owner GC's debug graph and explain, and
// Go's profiles when enableProfilingHandler is set; all but /metrics to
// loopback clients only.
func metricsMux(cfg *config.NodeGCConfiguration, reg *prometheus.Registry, owner *ownerGC) *http.ServeMux {
	metrics := http.NewServeMux()
	metrics.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	if owner != nil {
		metrics.Handle(ownergc.DebugGraphPath, loopbackOnly(cfg.MetricsBindAddress, owner.collector.DebugHandler()))
		metrics.Handle(ownergc.ExplainPath, loopbackOnly(cfg.MetricsBindAddress, owner.collector.ExplainHandler(owner.leaderIdentity)))
	} else {
		metrics.Handle(ownergc.ExplainPath, loopbackOnly(cfg.MetricsBindAddress, http.HandlerFunc(explainWithoutOwnerGC)))
	}
	if cfg.EnableProfilingHandler {
		// Loopback only, as the debug graph: the node agent's metrics
		// address is on the node's network (hostNetwork), and a profile
		// holds the command line and whatever the heap holds; a CPU
		// profile or trace also costs the agent CPU while it runs.
		metrics.Handle("/debug/pprof/", loopbackOnlyText(cfg.MetricsBindAddress, http.HandlerFunc(pprof.Index)))
		metrics.Handle("/debug/pprof/cmdline", loopbackOnlyText(cfg.MetricsBindAddress, http.HandlerFunc(pprof.Cmdline)))
		metrics.Handle("/debug/pprof/profile", loopbackOnlyText(cfg.MetricsBindAddress, http.HandlerFunc(pprof.Profile)))
		metrics.Handle("/debug/pprof/symbol", loopbackOnlyText(cfg.MetricsBindAddress, http.HandlerFunc(pprof.Symbol)))
		metrics.Handle("/debug/pprof/trace", loopbackOnlyText(cfg.MetricsBindAddress, http.HandlerFunc(pprof.Trace)))
	}
	return metrics
}

// fromLoopback says whether r comes from a client on the loopback.
func fromLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	ip := net.ParseIP(host)
	return err == nil && ip != nil && ip.IsLoopback()
}

// offLoopback says, when metricsBindAddress (bind) names one address that
// is not on the loopback, that nothing of the agent listens there: the
// debug endpoints cannot answer anyone, and the usual ways to ask (in the
// agent's pod, kubectl port-forward) arrive on the loopback. "" otherwise.
func offLoopback(bind string) string {
	host, port, err := net.SplitHostPort(bind)
	ip := net.ParseIP(host)
	if err != nil || ip == nil || ip.IsLoopback() || ip.IsUnspecified() {
		return ""
	}
	return fmt.Sprintf("this agent's metricsBindAddress %s is not on the loopback, so no client can reach them: "+
		"set it to :%s (every address, the loopback included; these endpoints still answer loopback clients only)", bind, port)
}

// loopbackOnly serves h to clients on the loopback only. The metrics
// address is often reachable from the whole cluster, but the owner GC's
// debug graph names every object it watches, Secrets included, and each
// explain request reads the API server with the collector's rights
// (kube-controller-manager serves its graph only behind authentication).
// nodegc explain asks 127.0.0.1 by default: run it in the agent's pod, or
// through kubectl port-forward, whose connections arrive on the loopback.
func loopbackOnly(bind string, h http.Handler) http.Handler {
	msg := "the owner GC's debug endpoints answer clients on the loopback only: " +
		cmp.Or(offLoopback(bind), "run nodegc explain in the agent's pod (kubectl exec), or through kubectl port-forward")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !fromLoopback(r) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			_ = json.NewEncoder(w).Encode(ownergc.ExplainError{Message: msg})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// loopbackOnlyText is loopbackOnly for Go's profiles, whose clients (go
// tool pprof, curl) read a plain-text refusal.
func loopbackOnlyText(bind string, h http.Handler) http.Handler {
	msg := "Go's profiles (enableProfilingHandler) answer clients on the loopback only: " +
		cmp.Or(offLoopback(bind), "kubectl port-forward to the pod's metrics port, then go tool pprof http://127.0.0.1:PORT/debug/pprof/...")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !fromLoopback(r) {
			http.Error(w, msg, http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func explainWithoutOwnerGC(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	_ = json.NewEncoder(w).Encode(ownergc.ExplainError{Message: "the owner GC does not run in this agent " +
		"(--owner-gc=off, ownerGC.enableGarbageCollector false, or no API access): ask an instance that runs it " +
		"(in deploy/, the nodegc-owner Deployment)"})
}

// healthMux serves /healthz (500 while a GC loop is wedged: the kubelet's
// liveness probe then restarts the agent) and /readyz (503 with every
// reason the agent cannot work now).
func healthMux(st *status) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := st.healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := st.ready(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// shutdownServers stops the listeners within 2s of now; ctx may be done
// already (shutdown), only its values are kept.
func shutdownServers(ctx context.Context, servers []*server) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.srv.Shutdown(ctx)
	}
}
