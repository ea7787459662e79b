package containers

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// nodeLease is the lease of node name, renewed at renewed for seconds
// (unset if 0), as the kubelet keeps it.
func nodeLease(name string, renewed time.Time, seconds int32) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: name},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), RenewTime: &metav1.MicroTime{Time: renewed}},
	}
	if seconds > 0 {
		l.Spec.LeaseDurationSeconds = ptr.To(seconds)
	}
	return l
}

// countLeaseGets counts the GETs of leases client serves.
func countLeaseGets(client *fake.Clientset) *atomic.Int64 {
	gets := new(atomic.Int64)
	client.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets.Add(1)
		return false, nil, nil
	})
	return gets
}

// TestNodeLeaseReadLazily: the source reads its Node's lease with a GET
// when asked (never to take a view), answers again from that read for
// nodeLeaseCacheFor, and says why it could not read it.
func TestNodeLeaseReadLazily(t *testing.T) {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		nodeLease("n1", t0.Add(-5*time.Second), 40), nodeLease("unset", t0.Add(-5*time.Second), 0))
	gets := countLeaseGets(client)
	clk := clocktesting.NewFakeClock(t0)
	s, ctx := runSyncedSource(t, client, PodSourceOptions{NodeName: "n1", Clock: clk})
	s.View(clk.Now())
	if n := gets.Load(); n != 0 {
		t.Errorf("the view read the lease %d times; want none", n)
	}
	want := NodeLease{RenewTime: t0.Add(-5 * time.Second), Duration: 40 * time.Second, ReadAt: t0}
	if diff := cmp.Diff(want, s.NodeLease(ctx)); diff != "" {
		t.Errorf("lease (-want +got):\n%s", diff)
	}
	if _, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, nodeLease("n1", t0.Add(5*time.Second), 40), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	clk.Step(nodeLeaseCacheFor - time.Millisecond)
	if diff := cmp.Diff(want, s.NodeLease(ctx)); diff != "" || gets.Load() != 1 {
		t.Errorf("within %v of the read: %d reads, lease (-want +got):\n%s; want the first read again", nodeLeaseCacheFor, gets.Load(), diff)
	}
	clk.Step(time.Millisecond)
	want.RenewTime, want.ReadAt = t0.Add(5*time.Second), clk.Now()
	if diff := cmp.Diff(want, s.NodeLease(ctx)); diff != "" || gets.Load() != 2 {
		t.Errorf("%v after the read: %d reads, lease (-want +got):\n%s; want a second read", nodeLeaseCacheFor, gets.Load(), diff)
	}

	unset, err := NewAPIPodSource(client, PodSourceOptions{NodeName: "unset", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if got := unset.NodeLease(ctx); got.Duration != DefaultNodeLeaseDuration || got.Err != nil {
		t.Errorf("a lease without a duration: %+v; want the default %v", got, DefaultNodeLeaseDuration)
	}
	missing, err := NewAPIPodSource(client, PodSourceOptions{NodeName: "missing", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if got := missing.NodeLease(ctx); !apierrors.IsNotFound(got.Err) {
		t.Errorf("no lease: %+v; want not found", got)
	}

	forbidden := fake.NewClientset(nodeLease("n1", t0, 40))
	forbidden.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(coordinationv1.Resource("leases"), "n1", errors.New("no rule"))
	})
	old, err := NewAPIPodSource(forbidden, PodSourceOptions{NodeName: "n1", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if got := old.NodeLease(ctx); !apierrors.IsForbidden(got.Err) {
		t.Errorf("a role without get on leases: %+v; want forbidden", got)
	}
}

// TestNodeLeaseClockStepBack: a step back of the wall clock since the last
// list of pods (on the monotonic clock) makes the lease that much older
// (NodeLease.ClockBack): a renewal written before the step would otherwise
// look fresh for as long again.
func TestNodeLeaseClockStepBack(t *testing.T) {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, nodeLease("n1", t0.Add(-5*time.Second), 40))
	clk := clocktesting.NewFakeClock(t0)
	s, mono := steppedSource(t, client, clk)
	ctx := runSynced(t, s)
	if got := s.NodeLease(ctx); got.ClockBack != 0 {
		t.Errorf("no step: clock back %v; want 0", got.ClockBack)
	}
	mono.Add(int64(10 * time.Second))
	clk.SetTime(t0.Add(-50 * time.Second)) // 10s on, the wall clock steps back a minute
	got := s.NodeLease(ctx)
	if got.ClockBack != -time.Minute {
		t.Errorf("after a step back of a minute: clock back %v; want -1m", got.ClockBack)
	}
	if fresh, why := got.Fresh("n1", clk.Now()); fresh {
		t.Errorf("a lease renewed 15s ago, before a step back of a minute, is fresh; want stale")
	} else {
		t.Log(why)
	}
}

// TestNodeLeaseClockStepBackPasses: a step back of the wall clock counts
// against the lease only while a renewal made before it could still look
// fresh (the lease's duration plus the step, on the monotonic clock, after
// the step was seen); then renewals made since, on the stepped clock, are
// judged as they are. Before, the step counted until the pods were listed
// again (days, with a healthy watch): every pod_gone removal waited,
// blaming the kubelet.
func TestNodeLeaseClockStepBackPasses(t *testing.T) {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, nodeLease("n1", t0.Add(-5*time.Second), 40))
	clk := clocktesting.NewFakeClock(t0)
	s, mono := steppedSource(t, client, clk)
	ctx := runSynced(t, s)
	_ = s.NodeLease(ctx)
	mono.Add(int64(10 * time.Second))
	clk.SetTime(t0.Add(-50 * time.Second)) // 10s on, the wall clock steps back a minute
	if got := s.NodeLease(ctx); got.ClockBack != -time.Minute {
		t.Errorf("just after a step back of a minute: clock back %v; want -1m", got.ClockBack)
	}
	// 40s + 1m + a margin on: the kubelet renewed 5s ago on the stepped clock.
	after := 40*time.Second + time.Minute + 10*time.Second
	mono.Add(int64(after))
	clk.SetTime(t0.Add(-50*time.Second + after))
	renewNow := nodeLease("n1", clk.Now().Add(-5*time.Second), 40)
	if _, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, renewNow, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := s.NodeLease(ctx)
	if fresh, why := got.Fresh("n1", clk.Now()); got.ClockBack != 0 || !fresh {
		t.Errorf("%v after the step, a lease renewed 5s ago: clock back %v, fresh %v (%s); want 0 and fresh", after, got.ClockBack, fresh, why)
	}
}

// TestNodeLeaseRenewedDuringTheRead: a plan's time is taken before the
// lease is read, and a read may take seconds (up to nodeLeaseTimeout): a
// renewal the kubelet made while the read was under way is after the
// plan's time, yet not ahead of the clock. It counts as fresh when no
// further ahead than the tolerance of the read's own time; before, one
// more than 5s after the plan's time read as "ahead of this clock:
// stepped back?".
func TestNodeLeaseRenewedDuringTheRead(t *testing.T) {
	l := NodeLease{RenewTime: t0.Add(7 * time.Second), Duration: 40 * time.Second, ReadAt: t0.Add(8 * time.Second)}
	if fresh, why := l.Fresh("n1", t0); !fresh {
		t.Errorf("renewed 7s after the plan's time, during a read that ended 8s after it: %s; want fresh", why)
	}
	l.ReadAt = t0.Add(time.Second)
	if fresh, _ := l.Fresh("n1", t0); fresh {
		t.Error("renewed 7s after the plan's time, 6s after the read ended: fresh; want ahead of the clock")
	}
}
