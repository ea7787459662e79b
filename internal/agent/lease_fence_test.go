package agent

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/cluster"
	"github.com/nodegc/nodegc/pkg/config"
)

// TestLeaseRequestsHang: the leader's lease requests hang (the API server
// answers everything else) right after a successful renewal, in the middle
// of a long cascade. Another instance may take the lease leaseDuration
// after that renewal; the collector's last write must be sent before then.
func TestLeaseRequestsHang(t *testing.T) {
	const (
		leaseDuration = 3 * time.Second
		renewDeadline = 2 * time.Second
		retryPeriod   = 500 * time.Millisecond
		n             = 1500
	)
	c := cluster.Start(t, cluster.Options{})
	ctx := t.Context()

	// A long cascade: one owner, n dependents, deleted at kubeAPIQPS 50.
	owner, err := c.Client().CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	createDependents(t, c, owner, n)

	cfg := config.Defaulted()
	cfg.LeaderElection.LeaseDuration.Duration = leaseDuration
	cfg.LeaderElection.RenewDeadline.Duration = renewDeadline
	cfg.LeaderElection.RetryPeriod.Duration = retryPeriod
	cfg.LeaderElection.ResourceName = "nodegc-fence-test"
	cfg.LeaderElection.ResourceNamespace = "default"
	cfg.OwnerGC.KubeAPIQPS, cfg.OwnerGC.KubeAPIBurst = 50, 50

	// Every write that leaves the process, but the lease's, with the time
	// it was sent.
	writes := &writeLog{}
	rc := c.RESTConfig()
	rc.Wrap(writes.wrap)
	st := newStatus(prometheus.NewRegistry())
	o, err := newOwnerGC(Options{Config: cfg, Identity: "fence-test"}, rc, prometheus.NewRegistry(), st)
	if err != nil {
		t.Fatal(err)
	}
	lock := &hangingLock{Interface: o.lock}
	o.lock = lock
	o.exit = func() { t.Error("the process would have exited: the collector did not stop in time") }

	runCtx, cancel := context.WithCancel(ctx)
	var running sync.WaitGroup
	running.Go(func() { o.run(runCtx) })
	t.Cleanup(func() { cancel(); running.Wait() })

	testbed.WaitFor(t, time.Minute, "the owner GC to lead and sync", func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.leading && st.ownerSynced != nil && st.ownerSynced()
	})
	if err := c.Client().CoreV1().ConfigMaps("default").Delete(ctx, owner.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
		t.Fatal(err)
	}
	testbed.WaitFor(t, time.Minute, "the cascade to be under way", func() bool { return writes.count() >= 100 })
	lock.hangAfterNextRenewal()
	testbed.WaitFor(t, 10*time.Second, "the lease requests to hang", lock.hanging)
	renewed := lock.lastRenewalSent()
	before := writes.count()

	// The lease may pass at renewed + leaseDuration at the earliest. Wait
	// until then and until the collector stopped.
	testbed.WaitFor(t, 30*time.Second, "the lease to be takeable and the owner GC stopped", func() bool {
		st.mu.Lock()
		leading := st.leading
		st.mu.Unlock()
		return !leading && time.Since(renewed) > leaseDuration+retryPeriod
	})
	last, total := writes.last(), writes.count()
	left := remainingDependents(t, c)
	t.Logf("last write sent %v after the last renewal (the lease may pass after %v); %d writes before the lease requests hung, %d after; %d of %d dependents left",
		last.Sub(renewed).Round(time.Millisecond), leaseDuration, before, total-before, left, n)
	if left == 0 {
		t.Fatal("the cascade finished: the test proves nothing; make it longer")
	}
	if !last.Before(renewed.Add(leaseDuration)) {
		t.Errorf("the collector wrote %v after its last lease renewal, when another instance may lead after %v",
			last.Sub(renewed).Round(time.Millisecond), leaseDuration)
	}
}

// createDependents creates n ConfigMaps owned by owner, labelled
// cascade=yes.
func createDependents(t *testing.T, c *cluster.Cluster, owner *corev1.ConfigMap, n int) {
	t.Helper()
	ref := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}
	for i := range n {
		if _, err := c.Client().CoreV1().ConfigMaps(owner.Namespace).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("dep-%04d", i), Labels: map[string]string{"cascade": "yes"}, OwnerReferences: []metav1.OwnerReference{ref},
		}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func remainingDependents(t *testing.T, c *cluster.Cluster) int {
	t.Helper()
	l, err := c.Client().CoreV1().ConfigMaps("default").List(t.Context(), metav1.ListOptions{LabelSelector: "cascade=yes"})
	if err != nil {
		t.Fatal(err)
	}
	return len(l.Items)
}

// writeLog records when each write request but the lease's was sent.
type writeLog struct {
	mu    sync.Mutex
	times []time.Time
}

func (w *writeLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet && !strings.Contains(req.URL.Path, "/coordination.k8s.io/") {
			w.mu.Lock()
			w.times = append(w.times, time.Now())
			w.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

func (w *writeLog) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.times)
}

func (w *writeLog) last() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.times) == 0 {
		return time.Time{}
	}
	return w.times[len(w.times)-1]
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// hangingLock passes lease requests through until told to hang: from the
// first successful Update or Create after hangAfterNextRenewal, every Get,
// Create and Update blocks until its context ends.
type hangingLock struct {
	resourcelock.Interface

	armed, hang atomic.Bool
	mu          sync.Mutex
	renewed     time.Time // when the last successful renewal was sent
}

func (l *hangingLock) hangAfterNextRenewal() { l.armed.Store(true) }
func (l *hangingLock) hanging() bool         { return l.hang.Load() }

func (l *hangingLock) lastRenewalSent() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewed
}

func (l *hangingLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	if l.hang.Load() {
		<-ctx.Done()
		return nil, nil, ctx.Err()
	}
	return l.Interface.Get(ctx)
}

func (l *hangingLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, ler, l.Interface.Create)
}

func (l *hangingLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, ler, l.Interface.Update)
}

func (l *hangingLock) write(ctx context.Context, ler resourcelock.LeaderElectionRecord, send func(context.Context, resourcelock.LeaderElectionRecord) error) error {
	if l.hang.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	sent := time.Now()
	err := send(ctx, ler)
	if err == nil && ler.HolderIdentity == l.Identity() {
		l.mu.Lock()
		l.renewed = sent
		l.mu.Unlock()
		if l.armed.Load() {
			l.hang.Store(true)
		}
	}
	return err
}
