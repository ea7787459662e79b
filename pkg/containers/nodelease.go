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
// NodeLease.Err. ClockBack is how much younger the renewal may look for the
// steps of the wall clock back seen (leaseClockBack).
func (s *APIPodSource) NodeLease(ctx context.Context) NodeLease {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	if r := s.leaseRead; r == nil || !s.recentRead(r.at) {
		s.leaseRead = &nodeLeaseRead{lease: s.getNodeLease(ctx), at: s.clock.Now()}
	}
	l := s.leaseRead.lease
	s.mu.Lock()
	s.followBack(&s.podHealth)
	l.ClockBack = s.leaseClockBack(l.Duration)
	s.mu.Unlock()
	return l
}

// stepsKeptFor bounds how long a step of the wall clock back is kept for
// leases: past it, no renewal made before the step can look fresh (a
// lease lasts 40s; see leaseClockBack).
const stepsKeptFor = 10 * time.Minute

// followLeaseSteps records a step of the wall clock back, of a
// millisecond or more, since the last reading (now on the wall clock, mono
// on the monotonic one), and forgets those older than stepsKeptFor. A
// clock slewed by a time daemon moves less than that between readings.
// Called with s.mu held.
func (s *APIPodSource) followLeaseSteps(now time.Time, mono time.Duration) {
	if s.stepRef.IsZero() {
		s.stepRef, s.stepRefMono = now, mono
		return
	}
	off := now.Sub(s.stepRef) - (mono - s.stepRefMono)
	if by := off - s.stepOffset; by <= -time.Millisecond {
		s.leaseSteps = append(s.leaseSteps, clockStepBack{at: mono, by: by})
	}
	s.stepOffset = off
	for len(s.leaseSteps) > 0 && mono-s.leaseSteps[0].at > stepsKeptFor {
		s.leaseSteps = s.leaseSteps[1:]
	}
}

// leaseClockBack is how much younger a renewal of a lease lasting d may
// look than it is, by the steps of the wall clock back seen (0 or less).
// A step back by D seen at monotonic T makes a renewal made before it look
// |D| younger, and such a renewal looks fresh on the stepped clock only
// until T + d + |D| (and |D| more for each further step): so each step
// counts until then, with the steps since added, and a sampling interval's
// margin. A step counted until the pods were listed again, as the view's
// list date does, would count for as long as the watch lasts (days), and
// make every renewal since stale. Called with s.mu held.
func (s *APIPodSource) leaseClockBack(d time.Duration) time.Duration {
	if d <= 0 {
		d = DefaultNodeLeaseDuration
	}
	var all time.Duration
	for _, st := range s.leaseSteps {
		all += st.by
	}
	if all == 0 || s.monotonic == nil {
		return 0
	}
	mono := s.monotonic()
	var back time.Duration
	for _, st := range s.leaseSteps {
		if mono-st.at < d-all+NodeLeaseAheadTolerance+s.stepSampleEvery {
			back += st.by
		}
	}
	return back
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
	// From kube-apiserver's watch cache (resourceVersion 0), not a
	// quorum read of etcd: a cache that lags can only give an older
	// renewal, or none, which never makes the lease look fresher.
	lease, err := s.leases.Get(ctx, s.nodeName, metav1.GetOptions{ResourceVersion: "0"})
	if err != nil {
		return NodeLease{Err: err}
	}
	l := NodeLease{Duration: DefaultNodeLeaseDuration, ReadAt: s.clock.Now()}
	if rt := lease.Spec.RenewTime; rt != nil {
		l.RenewTime = rt.Time
	}
	if d := lease.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
		l.Duration = time.Duration(*d) * time.Second
	}
	return l
}
