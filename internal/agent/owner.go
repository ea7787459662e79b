package agent

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodegc/nodegc/pkg/ownergc"
)

// ownerGC runs the ownerReference collector while this instance holds the
// lease (or always, with leaderElect false). With leader election the
// collector writes only while the lease fence is open (lease.go): every
// write request asks it (ownergc.Options.WriteWindow), and the collector's
// context ends when it closes.
type ownerGC struct {
	opts      Options
	collector *ownergc.Collector
	status    *status
	identity  string
	clock     clock.WithTicker
	// lock is the Lease the instances compete for; fence says whether this
	// instance may write (nil without leader election).
	lock  resourcelock.Interface
	fence *leaseFence
	// margin is how long after the fence closes the lease can pass to
	// another instance at the earliest: leaseDuration (in whole seconds,
	// as the Lease records it) - renewDeadline.
	margin time.Duration
	// exit ends the process when the collector did not stop within the
	// margin (a field so that tests can see it instead).
	exit func()

	// term is held by the one leadFenced that runs: client-go starts a
	// term's OnStartedLeading in a goroutine of its own, which may still
	// run (or not have started) when the next term begins.
	term    sync.Mutex
	mu      sync.Mutex
	stopped chan struct{} // closed when the running collector returns; nil when none runs

	// observedHolder is the current election term's elector's GetLeader:
	// leaderIdentity asks it for the holder it last observed. client-go
	// tells each change in a goroutine of its own (OnNewLeader), and after
	// two quick changes those may run in either order, so what they pass
	// is no guide.
	observedHolder atomic.Pointer[func() string]
}

// leaderIdentity is the identity of the instance that leads, as explain
// names it to a caller this instance cannot answer ("" while unknown), and
// whether that is this instance. It does not run the owner GC then
// (between fence windows while renewals fail, or after losing the lease
// before it read the new holder), and explain must not send the user back
// to it.
func (o *ownerGC) leaderIdentity() (identity string, self bool) {
	holder := o.observedHolder.Load()
	if holder == nil {
		return "", false
	}
	id := (*holder)()
	return id, id != "" && id == o.identity
}

// defaultIdentity is this instance's identity in the Lease: its pod's name,
// then a unique suffix. nodegc explain, asked of an instance that does not
// lead, names the pod to ask from it. The pod's name is POD_NAME, which the
// manifests set from the downward API; without it, the host name, which is
// the pod's name unless the pod runs on the host's network (the DaemonSet
// does: there it is the node's).
func defaultIdentity() string {
	name := os.Getenv("POD_NAME")
	if name == "" {
		name, _ = os.Hostname()
	}
	return name + "_" + string(uuid.NewUUID())
}

func newOwnerGC(opts Options, rc *rest.Config, reg prometheus.Registerer, st *status) (*ownerGC, error) {
	identity := opts.Identity
	if identity == "" {
		identity = defaultIdentity()
	}
	o := &ownerGC{opts: opts, status: st, identity: identity, clock: clock.RealClock{},
		exit: func() { klog.FlushAndExit(klog.ExitFlushTimeout, 1) }}
	le := opts.Config.LeaderElection
	gcOpts := ownergc.Options{Config: opts.Config.OwnerGC, RESTConfig: rc, Registerer: reg, Identity: identity}
	if *le.LeaderElect {
		// The others apply the lease's leaseDurationSeconds, whole seconds.
		o.margin = le.LeaseDuration.Duration.Truncate(time.Second) - le.RenewDeadline.Duration
		if o.margin <= 0 {
			return nil, fmt.Errorf("leader election: leaseDuration %s counts as %s (the Lease holds whole seconds), not more than renewDeadline %s",
				le.LeaseDuration.Duration, le.LeaseDuration.Duration.Truncate(time.Second), le.RenewDeadline.Duration)
		}
		o.fence = newLeaseFence(o.clock, le.RenewDeadline.Duration)
		gcOpts.WriteWindow = o.fence.left
		client, err := leaseClient(rc, identity, le.RenewDeadline.Duration)
		if err != nil {
			return nil, fmt.Errorf("leader election client: %w", err)
		}
		o.lock = &resourcelock.LeaseLock{
			LeaseMeta:  metaFor(le.ResourceNamespace, le.ResourceName),
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
		}
		// client-go's own checks (renewDeadline > 1.2 x retryPeriod among
		// them), now rather than as a panic in RunOrDie.
		if _, err := leaderelection.NewLeaderElector(o.electionConfig(klog.Background(), o.lock)); err != nil {
			return nil, fmt.Errorf("leader election: %w", err)
		}
	}
	var err error
	if o.collector, err = ownergc.New(gcOpts); err != nil {
		return nil, fmt.Errorf("owner GC: %w", err)
	}
	return o, nil
}

func (o *ownerGC) run(ctx context.Context) {
	if !*o.opts.Config.LeaderElection.LeaderElect {
		klog.FromContext(ctx).Info("Leader election is off: this instance runs the owner GC")
		o.lead(ctx)
		return
	}
	lock := &fencedLock{Interface: o.lock, fence: o.fence, clock: o.clock, beforeRelease: o.waitStopped}
	for ctx.Err() == nil {
		o.runTerm(ctx, o.electionConfig(klog.FromContext(ctx), lock))
	}
}

// runTerm runs one election term, as leaderelection.RunOrDie does, keeping
// its elector for leaderIdentity.
func (o *ownerGC) runTerm(ctx context.Context, cfg leaderelection.LeaderElectionConfig) {
	le, err := leaderelection.NewLeaderElector(cfg)
	if err != nil {
		panic(err) // as RunOrDie: the configuration was validated at start
	}
	holder := le.GetLeader
	o.observedHolder.Store(&holder)
	le.Run(ctx)
}

// electionConfig is the election of one term, on lock. ReleaseOnCancel:
// on SIGTERM the lease is given up at once (after the collector stopped:
// fencedLock).
func (o *ownerGC) electionConfig(logger klog.Logger, lock resourcelock.Interface) leaderelection.LeaderElectionConfig {
	le := o.opts.Config.LeaderElection
	term := &termLock{Interface: lock}
	return leaderelection.LeaderElectionConfig{
		Lock:            term,
		LeaseDuration:   le.LeaseDuration.Duration,
		RenewDeadline:   le.RenewDeadline.Duration,
		RetryPeriod:     le.RetryPeriod.Duration,
		ReleaseOnCancel: true,
		Name:            le.ResourceName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leadCtx context.Context) {
				logger.Info("Acquired the owner GC lease", "identity", o.identity)
				o.leadFenced(leadCtx)
			},
			OnStoppedLeading: func() {
				o.fence.revoke()
				// client-go calls this at the end of every term, also
				// of one that never acquired the lease (a standby shut
				// down): only a loss is worth a line.
				if term.acquired.Load() {
					logger.Info("This instance no longer holds the owner GC lease", "identity", o.identity)
				}
			},
			OnNewLeader: func(id string) {
				if id != o.identity {
					logger.Info("Another instance leads the owner GC", "leader", id)
				}
			},
		},
	}
}

// termLock is the lock of one election term; acquired says whether this
// instance wrote the Lease as its holder in the term (acquired or renewed
// it). Set before client-go starts OnStartedLeading in a goroutine of its
// own, it is what OnStoppedLeading goes by: that goroutine may not have
// run yet when a shutdown right after the acquisition ends the term.
type termLock struct {
	resourcelock.Interface
	acquired atomic.Bool
}

func (l *termLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Create(ctx, ler)
	l.wrote(ler, err)
	return err
}

func (l *termLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Update(ctx, ler)
	l.wrote(ler, err)
	return err
}

// wrote notes a successful write that names this instance the holder (a
// release names none).
func (l *termLock) wrote(ler resourcelock.LeaderElectionRecord, err error) {
	if err == nil && ler.HolderIdentity == l.Identity() {
		l.acquired.Store(true)
	}
}

// leadFenced runs the collector while this instance leads (leadCtx) and
// its fence is open. The collector's context ends when the fence closes,
// independently of client-go, which ends leadCtx only after its renew
// deadline and a release attempt have run out. Should a later renewal of
// the same term open the fence again, the collector starts again.
func (o *ownerGC) leadFenced(leadCtx context.Context) {
	o.term.Lock()
	defer o.term.Unlock()
	for o.fence.waitOpen(leadCtx) {
		ctx, cancel := context.WithCancel(leadCtx)
		stopped := make(chan struct{})
		o.mu.Lock()
		o.stopped = stopped
		o.mu.Unlock()
		go o.guard(ctx, cancel, stopped)
		o.lead(ctx)
		cancel()
		o.mu.Lock()
		o.stopped = nil
		o.mu.Unlock()
		close(stopped)
	}
}

// guard cancels the collector's context as soon as the fence closes and
// then gives the collector the margin to stop: after that the lease may
// have passed to another instance, and the process exits rather than
// risk two writers (the fence has been refusing its writes meanwhile).
// The same bound holds when the term ends first (ctx).
func (o *ownerGC) guard(ctx context.Context, cancel context.CancelFunc, stopped <-chan struct{}) {
	logger := klog.FromContext(ctx)
	if o.fence.waitClosed(ctx) {
		logger.Info("Lease not renewed within renewDeadline: stopping the owner GC before the lease can pass", "identity", o.identity, "margin", o.margin)
		cancel()
	}
	t := o.clock.NewTimer(o.margin)
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C():
		logger.Error(nil, "Owner GC did not stop before the lease could pass to another instance; exiting", "identity", o.identity)
		o.exit()
	}
}

// waitStopped returns once no collector runs, or an error when ctx ends
// first: fencedLock's beforeRelease. The fence is closed by then, so no
// collector starts again in this term (and one that would could not
// write).
func (o *ownerGC) waitStopped(ctx context.Context) error {
	o.mu.Lock()
	stopped := o.stopped
	o.mu.Unlock()
	if stopped == nil {
		return nil
	}
	select {
	case <-stopped:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the owner GC has not stopped: %w", ctx.Err())
	}
}

// lead runs the collector until ctx ends.
func (o *ownerGC) lead(ctx context.Context) {
	klog.FromContext(ctx).Info("Starting the owner GC", "identity", o.identity)
	o.status.setLeading(true, o.collector.HasSynced, o.collector.Stalled)
	defer o.status.setLeading(false, nil, nil)
	if err := o.collector.Run(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Owner GC stopped with an error")
	}
	klog.FromContext(ctx).Info("Owner GC stopped", "identity", o.identity)
}
