package containers

import (
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// TestPlanPodGoneNeedsAFreshNodeLease: a plan removes nothing as pod_gone
// unless the Node's lease is fresh, read (once, lazily) only when the plan
// has something to remove so. On a machine renamed without a reboot, the
// view of its old name's Node, which reports this boot ID and is Ready
// still, lacks nothing that runs (the new name's kubelet stopped the old
// name's pods) and so agrees with the runtime, while the pods of its new
// name, a finished Job's, are not in it: before, their container, sandbox
// and log directory went as pod_gone; the old Node's lease, renewed by no
// kubelet, is the sign. A kubelet that is down makes the lease stale too:
// then nothing goes as pod_gone until it renews.
func TestPlanPodGoneNeedsAFreshNodeLease(t *testing.T) {
	stale := NodeLease{RenewTime: t0.Add(-2 * time.Minute), Duration: 40 * time.Second}
	leased := func(l NodeLease) PodView {
		v := live()
		v.Node, v.NodeReady = "n1", true
		v.NodeLease = leaseReads(t, l)
		return v
	}
	kept := func(lease string) viewCase {
		return viewCase{planCase: planCase{want: finishedKept}, reason: ViewNodeLeaseStale, lease: lease}
	}
	liveOnly := NodeState{Containers: restarts("web", "app", 2), Sandboxes: []Sandbox{sbx("web", 0, false, 3*time.Hour)}}
	cases := map[string]viewCase{
		"a fresh lease: the finished pod the view lacks goes": {
			planCase:      planCase{node: finished(), pods: leased(NodeLease{RenewTime: t0.Add(-5 * time.Second), Duration: 40 * time.Second}), want: finishedGone},
			authoritative: true,
		},
		"a stale lease (no kubelet renews it: the machine renamed, or its kubelet down): kept, and why": func() viewCase {
			c := kept("node lease of n1 stale since 2026-11-21T11:58:40Z (renewed 2026-11-21T11:58:00Z, for 40s)")
			c.node, c.pods = finished(), leased(stale)
			return c
		}(),
		"no lease": func() viewCase {
			c := kept(`node lease of n1 unreadable: leases.coordination.k8s.io "n1" not found`)
			c.node, c.pods = finished(), leased(NodeLease{Err: apierrors.NewNotFound(coordinationv1.Resource("leases"), "n1")})
			return c
		}(),
		"a lease nodegc may not read (an RBAC without get on leases)": func() viewCase {
			c := kept(`node lease of n1 unreadable: leases.coordination.k8s.io "n1" is forbidden: no get on leases`)
			c.node, c.pods = finished(), leased(NodeLease{Err: apierrors.NewForbidden(coordinationv1.Resource("leases"), "n1", errors.New("no get on leases"))})
			return c
		}(),
		"a lease renewed before the clock was seen stepped back a minute": func() viewCase {
			c := kept("node lease of n1 stale since 2026-11-21T11:59:35Z (renewed 2026-11-21T12:00:00Z, for 40s)")
			c.node, c.pods = finished(), leased(NodeLease{RenewTime: t0, Duration: 40 * time.Second, ClockBack: -65 * time.Second})
			return c
		}(),
		"no lease reader": func() viewCase {
			c := kept("node lease of n1 not read")
			c.node, c.pods = finished(), with(leased(stale), func(v *PodView) { v.NodeLease = nil })
			return c
		}(),
		"nothing to remove as pod_gone (a limit's removal needs no lease): the lease is not read": {
			planCase: planCase{node: liveOnly, pods: with(leased(stale), func(v *PodView) {
				v.Live["web"] = true
				v.NodeLease = func() NodeLease { t.Error("the node lease read although nothing goes as pod_gone"); return NodeLease{} }
			}), want: summary{Remove: []string{"web/app/0:per_container_limit"}, Keep: []string{"web/app/1:within_limit"}, KeepSandboxes: []string{"web/sb0:has_containers"}}},
			authoritative: true,
		},
		"a view not authoritative keeps its reason, and the lease is not read": {
			planCase: planCase{node: finished(), pods: PodView{Reason: ViewNotSynced, NodeLease: func() NodeLease {
				t.Error("the node lease read for a view not authoritative")
				return NodeLease{}
			}}, want: finishedKept},
			reason: ViewNotSynced,
		},
	}
	runViewCases(t, cases)
}
