package agent

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/nodegc/nodegc/pkg/ownergc"
)

// ownerGC runs the ownerReference collector while this instance holds the
// lease (or always, with leaderElect false).
type ownerGC struct {
	opts      Options
	collector *ownergc.Collector
	client    kubernetes.Interface
	status    *status
	identity  string
}

func newOwnerGC(opts Options, rc *rest.Config, reg prometheus.Registerer, st *status) (*ownerGC, error) {
	collector, err := ownergc.New(ownergc.Options{Config: opts.Config.OwnerGC, RESTConfig: rc, Registerer: reg})
	if err != nil {
		return nil, fmt.Errorf("owner GC: %w", err)
	}
	// The election has its own client: its renewals must not queue behind
	// the collector's requests.
	client, err := kubernetes.NewForConfig(rest.CopyConfig(rc))
	if err != nil {
		return nil, fmt.Errorf("leader election client: %w", err)
	}
	identity := opts.Identity
	if identity == "" {
		host, _ := os.Hostname()
		identity = host + "_" + string(uuid.NewUUID())
	}
	return &ownerGC{opts: opts, collector: collector, client: client, status: st, identity: identity}, nil
}

func (o *ownerGC) run(ctx context.Context) {
	le := o.opts.Config.LeaderElection
	if !*le.LeaderElect {
		klog.FromContext(ctx).Info("Leader election is off: this instance runs the owner GC")
		o.lead(ctx)
		return
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metaFor(le.ResourceNamespace, le.ResourceName),
		Client:     o.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: o.identity},
	}
	// After losing the lease the others wait leaseDuration from our last
	// renewal; we stop trying to renew at renewDeadline. The collector must
	// have stopped within the difference.
	stopWithin := le.LeaseDuration.Duration - le.RenewDeadline.Duration
	for ctx.Err() == nil {
		var done chan struct{}
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   le.LeaseDuration.Duration,
			RenewDeadline:   le.RenewDeadline.Duration,
			RetryPeriod:     le.RetryPeriod.Duration,
			ReleaseOnCancel: true,
			Name:            le.ResourceName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(leadCtx context.Context) {
					done = make(chan struct{})
					defer close(done)
					klog.FromContext(ctx).Info("Acquired the owner GC lease; starting the owner GC", "identity", o.identity)
					o.lead(leadCtx)
				},
				OnStoppedLeading: func() {
					o.status.setLeading(false, nil)
					if done == nil {
						return
					}
					select {
					case <-done:
						klog.FromContext(ctx).Info("Owner GC stopped: this instance no longer holds the lease", "identity", o.identity)
					case <-time.After(stopWithin):
						// Never two writers: exit before the lease can pass on.
						klog.FromContext(ctx).Error(nil, "Owner GC did not stop before the lease could pass to another instance; exiting", "identity", o.identity)
						klog.FlushAndExit(klog.ExitFlushTimeout, 1)
					}
				},
				OnNewLeader: func(id string) {
					if id != o.identity {
						klog.FromContext(ctx).Info("Another instance leads the owner GC", "leader", id)
					}
				},
			},
		})
	}
}

// lead runs the collector until ctx ends.
func (o *ownerGC) lead(ctx context.Context) {
	o.status.setLeading(true, o.collector.HasSynced)
	defer o.status.setLeading(false, nil)
	if err := o.collector.Run(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Owner GC stopped with an error")
	}
}
