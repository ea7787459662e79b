package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/nodegc/nodegc/internal/version"
	"github.com/nodegc/nodegc/pkg/config"
)

// OwnerGCMode says where the owner GC runs (`nodegc run --owner-gc`).
type OwnerGCMode string

const (
	// OwnerGCAuto joins the leader election wherever the agent runs.
	OwnerGCAuto OwnerGCMode = "auto"
	// OwnerGCOnly runs the owner GC (elected) and no node GC.
	OwnerGCOnly OwnerGCMode = "only"
	// OwnerGCOff runs node GC only.
	OwnerGCOff OwnerGCMode = "off"
)

// Options configure the agent.
type Options struct {
	Config *config.NodeGCConfiguration
	// Kubeconfig overrides clientConnection.kubeconfig.
	Kubeconfig string
	OwnerGC    OwnerGCMode
	// NodeName is the node this agent collects for (resolved by the caller
	// from the config, NODE_NAME or the host name).
	NodeName string
	// BootID is this machine's boot ID (the nodegc command reads
	// /proc/sys/kernel/random/boot_id): the pod view is
	// authoritative only while the Node of NodeName reports it, so that a
	// node name that is another machine's collects nothing as pod_gone.
	// Empty: not checked.
	BootID string
	// Identity names this instance in the leader election; empty means
	// host name plus a random suffix.
	Identity string
	// ShutdownTimeout bounds how long the GC loops may take to stop after
	// the context ended (state saved, lease released). Default 8s.
	ShutdownTimeout time.Duration
	// BindSource says what set a bind address field (metricsBindAddress,
	// healthzBindAddress): a line of the configuration file, a flag, the
	// default. An address that cannot be listened on is named with it.
	// Nil, or "" for a field: the field is named alone.
	BindSource func(field string) string
}

// Run runs the agent until ctx ends: it builds its parts (newAgent), starts
// them as runnables, serves /metrics and /healthz, and on the way out stops
// the work (at most ShutdownTimeout) before the servers.
func Run(ctx context.Context, opts Options) error {
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 8 * time.Second
	}
	logger := klog.FromContext(ctx)
	a, err := newAgent(ctx, opts)
	if err != nil {
		return err
	}
	defer a.close()
	// The listeners first: an address that cannot be listened on stops
	// the agent before any work began.
	servers, err := startServers(ctx, opts.Config, a.reg, a.status, a.owner)
	if err != nil {
		if be := (*bindError)(nil); errors.As(err, &be) {
			be.source = opts.BindSource
		}
		return err
	}
	work := startAll(ctx, a.runnables)
	v := version.Get()
	logger.Info("nodegc agent started", "version", v.Version, "revision", v.Commit, "configSHA256", a.configDigest,
		"node", opts.NodeName, "ownerGC", opts.OwnerGC, "nodeOnly", a.rest == nil)

	<-ctx.Done()
	logger.Info("Shutting down: no new work; GC runs stop now, a runtime call in flight is cancelled, not awaited", "timeout", opts.ShutdownTimeout)
	a.status.watchdog.shutdown() // loops that stop now are not wedged
	// The GC loops stop taking work at once. A runtime call in flight is
	// cancelled with its context: it returns Canceled at once, and gRPC
	// cancels it on the runtime's side too, which may still complete it
	// or stop partway (containerd, in a StopContainer's grace period,
	// stops waiting without the SIGKILL that would end it). CRI removals
	// are idempotent, so the next run finishes what was left, and the
	// executors never start another removal after the context ended. The
	// owner GC's API requests are cancelled the same way, and it releases
	// its lease on the way out.
	if !work.stop(opts.ShutdownTimeout) {
		logger.Info("Some work did not end in time; abandoning it")
	}
	shutdownServers(ctx, servers)
	logger.Info("nodegc agent stopped")
	return nil
}

// agent holds the parts Run starts: what runs, and what the servers show.
type agent struct {
	reg       *prometheus.Registry
	status    *status
	rest      *rest.Config // nil: node-only
	events    *nodeEvents  // nil without API access or without node GC
	owner     *ownerGC     // nil when the owner GC does not run here
	runnables []runnable
	// configDigest is nodegc_config_info's sha256, for the start-up log.
	configDigest string
}

// newAgent builds every part of the agent, starting nothing: the node GC
// unless --owner-gc=only, the owner GC where there is API access and it is
// enabled.
func newAgent(ctx context.Context, opts Options) (*agent, error) {
	cfg := opts.Config
	a := &agent{reg: prometheus.NewRegistry()}
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a.status = newStatus(a.reg)

	var (
		err      error
		nodeOnly string
	)
	if a.configDigest, err = registerInfo(a.reg, cfg); err != nil {
		return nil, err
	}
	if a.rest, nodeOnly, err = restConfig(opts.Kubeconfig, cfg); err != nil {
		return nil, err
	}
	if a.rest == nil {
		if opts.OwnerGC == OwnerGCOnly {
			return nil, fmt.Errorf("--owner-gc=only needs API access: give --kubeconfig, or run in a pod with a service-account token (%s)", nodeOnly)
		}
		klog.FromContext(ctx).Info("Running node-only (no pod informer, no Node events, no owner GC)", "reason", nodeOnly)
	}
	if opts.OwnerGC != OwnerGCOnly {
		if a.rest != nil {
			client, err := kubernetes.NewForConfig(a.rest)
			if err != nil {
				return nil, fmt.Errorf("API client: %w", err)
			}
			a.events = newNodeEvents(klog.FromContext(ctx), client, opts.NodeName)
		}
		node, err := newNodeGC(opts, a.rest, a.reg, a.events, a.status)
		if err != nil {
			a.close()
			return nil, err
		}
		a.runnables = append(a.runnables, runnable{name: "node-gc", run: node.run})
	}
	if a.rest != nil && opts.OwnerGC != OwnerGCOff && *cfg.OwnerGC.EnableGarbageCollector {
		if a.owner, err = newOwnerGC(opts, a.rest, a.reg, a.status); err != nil {
			a.close()
			return nil, err
		}
		a.runnables = append(a.runnables, runnable{name: "owner-gc", run: a.owner.run})
	}
	return a, nil
}

// close releases what newAgent holds outside the runnables.
func (a *agent) close() {
	if a.events != nil {
		a.events.shutdown()
	}
}

// restConfig returns the API configuration: the kubeconfig given, else the
// in-cluster config, else nil (node-only) with why in nodeOnly: not in a
// cluster, or in a pod without a service-account token
// (automountServiceAccountToken: false), the one way to ask for node-only
// in a pod, where KUBERNETES_SERVICE_HOST is always set. A token that is
// there but cannot be read is an error.
func restConfig(kubeconfig string, cfg *config.NodeGCConfiguration) (rc *rest.Config, nodeOnly string, err error) {
	source := "--kubeconfig"
	if kubeconfig == "" {
		kubeconfig, source = cfg.ClientConnection.Kubeconfig, "clientConnection.kubeconfig"
	}
	if kubeconfig != "" {
		if rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
			return nil, "", fmt.Errorf("%s %s: %w (give a kubeconfig this process can read, or none for the in-cluster config)",
				source, kubeconfig, err)
		}
	} else if rc, err = rest.InClusterConfig(); errors.Is(err, rest.ErrNotInCluster) {
		return nil, "no kubeconfig and not in a cluster", nil
	} else if errors.Is(err, fs.ErrNotExist) {
		// The kubelet starts no container whose volumes failed to
		// mount: a missing token was not mounted at all.
		return nil, fmt.Sprintf("no kubeconfig, and in a pod without a service-account token (automountServiceAccountToken: false): %v", err), nil
	} else if err != nil {
		return nil, "", fmt.Errorf("in-cluster API config: %w", err)
	}
	rc.QPS = cfg.ClientConnection.QPS
	rc.Burst = int(cfg.ClientConnection.Burst)
	rc.ContentType = cfg.ClientConnection.ContentType
	rc.AcceptContentTypes = cfg.ClientConnection.AcceptContentTypes
	rc.UserAgent = "nodegc"
	return rc, "", nil
}
