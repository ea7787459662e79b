package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

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
	// Identity names this instance in the leader election; empty means
	// host name plus a random suffix.
	Identity string
	// ShutdownTimeout bounds how long the GC loops may take to stop after
	// the context ended (state saved, lease released). Default 8s.
	ShutdownTimeout time.Duration
}

// Run runs the agent until ctx ends.
func Run(ctx context.Context, opts Options) error {
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 8 * time.Second
	}
	cfg := opts.Config
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	status := newStatus(reg)

	restCfg, err := restConfig(opts.Kubeconfig, cfg)
	if err != nil {
		return err
	}
	if restCfg == nil {
		klog.InfoS("No kubeconfig and not in a cluster: running node-only (no pod informer, no Node events, no owner GC)")
		if opts.OwnerGC == OwnerGCOnly {
			return errors.New("--owner-gc=only needs API access: give --kubeconfig or run in a cluster")
		}
	}

	runCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	var wg sync.WaitGroup
	var servers []*server

	var events *nodeEvents
	if restCfg != nil && opts.OwnerGC != OwnerGCOnly {
		client, err := kubernetes.NewForConfig(restCfg)
		if err != nil {
			return fmt.Errorf("API client: %w", err)
		}
		events = newNodeEvents(client, opts.NodeName)
		defer events.shutdown()
	}

	if opts.OwnerGC != OwnerGCOnly {
		node, err := newNodeGC(opts, restCfg, reg, events, status)
		if err != nil {
			return err
		}
		wg.Go(func() { node.run(runCtx) })
	}

	var owner *ownerGC
	if restCfg != nil && opts.OwnerGC != OwnerGCOff && *cfg.OwnerGC.EnableGarbageCollector {
		if owner, err = newOwnerGC(opts, restCfg, reg, status); err != nil {
			return err
		}
		// The owner GC stops with ctx itself (it releases the lease), not
		// after the node GC's grace.
		wg.Go(func() { owner.run(ctx) })
	}

	servers, err = startServers(ctx, cfg, reg, status, owner)
	if err != nil {
		stopWork()
		wg.Wait()
		return err
	}
	klog.InfoS("nodegc agent started", "node", opts.NodeName, "ownerGC", opts.OwnerGC, "nodeOnly", restCfg == nil)

	<-ctx.Done()
	klog.InfoS("Shutting down: no new work; in-flight GC runs stop after their current removal", "timeout", opts.ShutdownTimeout)
	status.watchdog.shutdown() // loops that stop now are not wedged
	// The GC loops stop taking work at once. A removal in flight is
	// cancelled with its context: CRI removals are idempotent, so an
	// abandoned one is finished by the next run, and the executors never
	// start another after the context ended.
	stopWork()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(opts.ShutdownTimeout):
		klog.InfoS("Some work did not end in time; abandoning it")
	}
	shutdownServers(ctx, servers)
	klog.InfoS("nodegc agent stopped")
	return nil
}

// restConfig returns the API configuration: the kubeconfig given, else the
// in-cluster config, else nil (node-only).
func restConfig(kubeconfig string, cfg *config.NodeGCConfiguration) (*rest.Config, error) {
	if kubeconfig == "" {
		kubeconfig = cfg.ClientConnection.Kubeconfig
	}
	var (
		rc  *rest.Config
		err error
	)
	if kubeconfig != "" {
		if rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
	} else if rc, err = rest.InClusterConfig(); errors.Is(err, rest.ErrNotInCluster) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("in-cluster API config: %w", err)
	}
	rc.QPS = cfg.ClientConnection.QPS
	rc.Burst = int(cfg.ClientConnection.Burst)
	rc.ContentType = cfg.ClientConnection.ContentType
	rc.AcceptContentTypes = cfg.ClientConnection.AcceptContentTypes
	rc.UserAgent = "nodegc"
	return rc, nil
}
