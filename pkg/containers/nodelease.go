package containers

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// nodeLeaseCacheFor is how long the source answers NodeLease with its
// last read: a plan reads the lease at most once, and a GC pass, or a
// `nodegc plan` beside it, shares one GET. The kubelet renews the lease
// every 10s of its 40s, so a read that old still tells a live kubelet.
const nodeLeaseCacheFor = 10 * time.Second

// nodeLeaseTimeout bounds one read of the lease.
const nodeLeaseTimeout = 10 * time.Second

// nodeLeaseRead is the source's last read of the Node's lease.
type nodeLeaseRead struct {
	lease NodeLease
	at    time.Time // on the source's clock (with its monotonic reading, on the real clock)
}

// NodeLease reads the lease of the source's Node (namespace
// kube-node-lease, the node's name), which its kubelet renews: a GET, only
// when a plan needs it (PodView.NodeLease: a pod the view lists would
// vouch for it, or something would go as its pod is gone), and not more
// than once every nodeLeaseCacheFor. A watch
// of the lease would cost the API server, for every node's agent, the
// filtering of every node's renewals. A failed read (no such lease, a
// role without get on leases, an unreachable server) says why in
// NodeLease.Err. ClockBack is the furthest step back of the wall clock
// seen since the last complete list of pods (as for PodView.ListedAt).
func (s *APIPodSource) NodeLease(ctx context.Context) NodeLease {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	if r := s.leaseRead; r == nil || !s.recentRead(r.at) {
		s.leaseRead = &nodeLeaseRead{lease: s.getNodeLease(ctx), at: s.clock.Now()}
	}
	l := s.leaseRead.lease
	s.mu.Lock()
	s.followBack(&s.podHealth)
	l.ClockBack = s.podHealth.back
	s.mu.Unlock()
	return l
}

// recentRead says whether a read of the lease at at is recent enough to
// answer again (a clock stepped back since makes it not).
func (s *APIPodSource) recentRead(at time.Time) bool {
	age := s.clock.Since(at)
	return age >= 0 && age < nodeLeaseCacheFor
}

func (s *APIPodSource) getNodeLease(ctx context.Context) NodeLease {
	ctx, cancel := context.WithTimeout(ctx, nodeLeaseTimeout)
	defer cancel()
	lease, err := s.leases.Get(ctx, s.nodeName, metav1.GetOptions{})
	if err != nil {
		return NodeLease{Err: err}
	}
	l := NodeLease{Duration: DefaultNodeLeaseDuration}
	if rt := lease.Spec.RenewTime; rt != nil {
		l.RenewTime = rt.Time
	}
	if d := lease.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
		l.Duration = time.Duration(*d) * time.Second
	}
	return l
}
