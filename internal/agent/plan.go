package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodegc/nodegc/pkg/containers"
	"github.com/nodegc/nodegc/pkg/cri"
	"github.com/nodegc/nodegc/pkg/images"
)

// PlanReport is what `nodegc plan` shows: the image and container plans for
// the node as it is now. Nothing is removed and no state is written.
type PlanReport struct {
	Node    string
	Runtime string
	// Images is nil when the image plan could not be made (ImagesErr).
	Images    *images.Plan
	ImagesErr error
	// ImagesToLow is the image plan of a collection under way
	// (images.Manager.PlanAndToLow), when usage is over the low threshold but
	// Images frees nothing: the agent's disk checks collect down to low
	// once usage reached the high threshold, until it is under low again.
	// Nil otherwise, or when it could not be made.
	ImagesToLow *images.Plan
	// Containers is nil when the container plan could not be made.
	Containers    *containers.Plan
	ContainersErr error
	// PodsSynced says whether the pod view from the API server synced in
	// time; without it no container is planned for removal as "pod gone".
	PodsSynced bool
	// NodeGCRunning says whether a nodegc runs node GC on this state
	// directory now (holds its lock: `nodegc run` would wait for it), and
	// NodeGCHolder who, as it wrote it; NodeGCErr why that is not known.
	NodeGCRunning bool
	NodeGCHolder  string
	NodeGCErr     error
}

// podSyncWait bounds how long `nodegc plan` waits for the pod informer.
const podSyncWait = 20 * time.Second

// Plan connects to the runtime (and the API server, if reachable) as Run
// does and returns the plans, without acting on them.
func Plan(ctx context.Context, opts Options) (*PlanReport, error) {
	reg := prometheus.NewRegistry()
	return plan(ctx, opts, reg, newStatus(reg))
}

// plan is Plan with the node GC's metrics registered in reg.
func plan(ctx context.Context, opts Options, reg prometheus.Registerer, st *status) (*PlanReport, error) {
	restCfg, _, err := restConfig(opts.Kubeconfig, opts.Config)
	if err != nil {
		return nil, err
	}
	n, err := newNodeGC(opts, restCfg, reg, nil, st)
	if err != nil {
		return nil, err
	}
	cfg := opts.Config
	c, err := cri.Dial(ctx, cri.Options{RuntimeEndpoint: cfg.ContainerRuntimeEndpoint, ImageEndpoint: cfg.ImageServiceEndpoint,
		Timeout: cfg.RuntimeRequestTimeout.Duration})
	if err != nil {
		if hint := dialHint(err); hint != "" {
			return nil, fmt.Errorf("%w: %s", err, hint)
		}
		return nil, fmt.Errorf("%w (is the runtime at %s running, and may this user open its socket?)", err, cfg.ContainerRuntimeEndpoint)
	}
	defer c.Close()
	v := c.RuntimeVersion()
	r := &PlanReport{Node: opts.NodeName, Runtime: v.GetRuntimeName() + " " + v.GetRuntimeVersion()}
	r.NodeGCRunning, r.NodeGCHolder, r.NodeGCErr = NodeGCHolder(cfg.StateDirectory)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the pod informer and closes the containerd client
	// The container GC's pod informer first: the image GC's scheduled rule
	// reads it too.
	pods, cmErr := n.podSource(ctx)
	rt := n.readRuntimeProfile(ctx, c, false)
	rt.logUnread(klog.FromContext(ctx))
	var cm *containers.Manager
	if cmErr == nil {
		cm, cmErr = n.containerManager(ctx, ctx, c, &rt, pods, reg)
	}
	if pods != nil {
		start := time.Now()
		syncCtx, stop := context.WithTimeout(ctx, podSyncWait)
		r.PodsSynced = cache.WaitForCacheSync(syncCtx.Done(), pods.HasSynced)
		stop()
		waited := time.Since(start).Round(time.Millisecond)
		switch {
		case ctx.Err() != nil:
			// Interrupted (SIGINT, SIGTERM): the plans would only fail
			// on the cancelled calls, which would blame the runtime.
			klog.FromContext(ctx).Info("Interrupted while waiting for the pod informer to sync; no plan is made", "waited", waited)
			err := fmt.Errorf("interrupted after %v, while waiting for the pod view: %w", waited, ctx.Err())
			r.ContainersErr, r.ImagesErr = err, err
			return r, nil
		case !r.PodsSynced:
			klog.FromContext(ctx).Info("The pod informer did not sync in time; the plan removes nothing because a pod is gone, and keeps every image that is not in use", "waited", waited)
		}
	}
	// The container GC's plan first: it checks the pod view against the
	// runtime, and the image GC's scheduled rule goes by what it found
	// (containers.APIPodSource.RuntimeChecked).
	if cmErr != nil {
		r.ContainersErr = cmErr
	} else {
		r.Containers, r.ContainersErr = cm.Plan(ctx)
	}
	n.agentRuns = r.NodeGCRunning
	if im, err := n.imageManager(ctx, ctx, c, &rt, true, pods, reg); err != nil {
		r.ImagesErr = err
	} else {
		r.Images, r.ImagesToLow, r.ImagesErr = im.PlanAndToLow(ctx)
	}
	return r, nil
}
