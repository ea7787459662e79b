package containers

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodegc/nodegc/pkg/config"
)

// viewCase is a plan case that also says what the plan must say of the pod
// view it was made with.
type viewCase struct {
	planCase
	authoritative bool
	reason        string
	missing       []PodRef
	notInRuntime  []PodRef
	// nodeRuntime and runtime: what the plan says the Node reports and
	// the runtime answers, for ViewNodeOtherRuntime.
	nodeRuntime, runtime string
	// lease: why the Node's lease let no pod vouch (Plan.PodsLease).
	lease string
}

func runViewCases(t *testing.T, cases map[string]viewCase) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			plan := policyFor(t, tc.mutate).Plan(tc.node, tc.pods, t0)
			if diff := cmp.Diff(tc.want, summarize(plan)); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
			if plan.PodsAuthoritative != tc.authoritative || plan.PodsReason != tc.reason {
				t.Errorf("plan pod view: authoritative %v, reason %q; want %v, %q",
					plan.PodsAuthoritative, plan.PodsReason, tc.authoritative, tc.reason)
			}
			if diff := cmp.Diff(tc.missing, plan.PodsMissing); diff != "" {
				t.Errorf("pods missing from the view (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.notInRuntime, plan.PodsNotInRuntime); diff != "" {
				t.Errorf("pods missing from the runtime (-want +got):\n%s", diff)
			}
			if plan.NodeRuntime != tc.nodeRuntime || plan.Runtime != tc.runtime {
				t.Errorf("plan runtimes: the Node's %q, nodegc's %q; want %q, %q", plan.NodeRuntime, plan.Runtime, tc.nodeRuntime, tc.runtime)
			}
			if plan.PodsLease != tc.lease {
				t.Errorf("plan's node lease: %q; want %q", plan.PodsLease, tc.lease)
			}
		})
	}
}

// finished is a pod ("fin") whose sandbox is stopped and whose only
// container exited two hours before t0, with its log directory: gone from
// an authoritative view that does not list it.
func finished() NodeState {
	return NodeState{
		Containers: []Container{dead("fin", "app", 0, 2*time.Hour)},
		Sandboxes:  []Sandbox{sbx("fin", 0, false, 2*time.Hour)},
		LogDirs:    []PodLogDir{{Name: "ns_fin_fin", PodUID: "fin", ModTime: t0.Add(-2 * time.Hour)}},
	}
}

// plus returns a with b's containers, sandboxes and log directories added.
func plus(a, b NodeState) NodeState {
	a.Containers = append(append([]Container(nil), a.Containers...), b.Containers...)
	a.Sandboxes = append(append([]Sandbox(nil), a.Sandboxes...), b.Sandboxes...)
	a.LogDirs = append(append([]PodLogDir(nil), a.LogDirs...), b.LogDirs...)
	return a
}

var finishedGone = summary{
	Remove: []string{"fin/app/0:pod_gone"}, RemoveSandboxes: []string{"fin/sb0:pod_gone"}, RemoveLogDirs: []string{"ns_fin_fin:pod_gone"},
}

var finishedKept = summary{
	Keep: []string{"fin/app/0:within_limit"}, KeepSandboxes: []string{"fin/sb0:has_containers"}, KeepLogDirs: []string{"ns_fin_fin:pods_unknown"},
}

// merge adds b's entries to a, sorted as summarize sorts them.
func merge(a, b summary) summary {
	return a.add(b)
}

func (s summary) add(o summary) summary {
	cat := func(x, y []string) []string {
		out := append(append([]string(nil), x...), y...)
		if len(out) == 0 {
			return nil
		}
		slices.Sort(out)
		return out
	}
	return summary{
		Remove: cat(s.Remove, o.Remove), Keep: cat(s.Keep, o.Keep),
		RemoveSandboxes: cat(s.RemoveSandboxes, o.RemoveSandboxes), KeepSandboxes: cat(s.KeepSandboxes, o.KeepSandboxes),
		RemoveLogDirs: cat(s.RemoveLogDirs, o.RemoveLogDirs), KeepLogDirs: cat(s.KeepLogDirs, o.KeepLogDirs),
		RemoveLinks: cat(s.RemoveLinks, o.RemoveLinks), KeepLinks: cat(s.KeepLinks, o.KeepLinks),
	}
}

// TestPlanPodViewAgreesWithRuntime: a synced, reachable view that lacks pods
// the runtime runs (a wrong node name: the informer lists nobody's pods, or
// another node's) is not authoritative, so nothing goes as pod_gone; a pod
// with a ready sandbox or a running container is never gone. A pod the view
// lists that runs here (not static) shows the view is this node's: the
// kubelet runs only pods bound to its Node. The pods it lacks then were
// deleted from the API while they run (force-deleted, a process the
// kubelet cannot stop): named, kept as running, and the view stays
// authoritative. Before, one such pod stopped pod-gone collection, and the
// image GC, for as long as it stayed stuck, once nodegc had restarted and
// not seen its deletion.
func TestPlanPodViewAgreesWithRuntime(t *testing.T) {
	running := func(pod string, age time.Duration) NodeState {
		return NodeState{
			Containers: []Container{ctr(pod, "app", 0, StateRunning, age)},
			Sandboxes:  []Sandbox{sbx(pod, 0, true, age)},
		}
	}
	disagrees := func(want summary) viewCase {
		return viewCase{planCase: planCase{want: want}, reason: ViewDisagrees, missing: []PodRef{{UID: "run", Namespace: "ns", Name: "run"}}}
	}
	agrees := func(want summary) viewCase {
		return viewCase{planCase: planCase{want: want}, authoritative: true}
	}
	deletedRunning := func(want summary, pods ...string) viewCase {
		c := agrees(want)
		for _, p := range pods {
			c.missing = append(c.missing, PodRef{UID: p, Namespace: "ns", Name: p})
		}
		return c
	}
	// reported is a view of a Ready Node, whose kubelet renewed its lease
	// 5s before t0 and reports pods running.
	reported := func(v PodView, pods ...string) PodView {
		since := map[string]time.Time{}
		for _, p := range pods {
			since[p] = t0.Add(-3 * time.Hour)
		}
		v = runningIn(v, since)
		v.Node, v.NodeReady = "n1", true
		v.NodeLease = leaseReads(t, NodeLease{RenewTime: t0.Add(-5 * time.Second), Duration: 40 * time.Second})
		return v
	}
	// leased is reported with the Node's lease as read.
	leased := func(l NodeLease, v PodView, pods ...string) PodView {
		v = reported(v, pods...)
		v.NodeLease = leaseReads(t, l)
		return v
	}
	cases := map[string]viewCase{}
	add := func(name string, c viewCase, node NodeState, pods PodView) {
		c.node, c.pods = node, pods
		cases[name] = c
	}
	add("a pod the view lists runs here: a running pod it lacks was deleted from the API while it runs, and the rest goes",
		deletedRunning(merge(finishedGone, summary{
			Keep:          []string{"stuck/app/0:running", "web/app/0:running"},
			KeepSandboxes: []string{"stuck/sb0:ready", "web/sb0:ready"},
		}), "stuck"),
		plus(plus(finished(), running("web", 3*time.Hour)), running("stuck", 5*time.Hour)), reported(live("web"), "web"))
	// The machine ran under the view's node name before (renamed): a pod
	// of that name hung here, Terminating in the API (not reported
	// running), or on a Node whose kubelet is gone (not Ready), does not
	// vouch for that Node's view. Before, it did, and a finished pod of
	// the machine's new name went as pod_gone.
	renamed := merge(finishedKept, summary{
		Keep: []string{"orphan/app/0:running", "run/app/0:running"}, KeepSandboxes: []string{"orphan/sb0:ready", "run/sb0:ready"},
	})
	add("a pod of the machine's previous node name, Terminating, does not vouch",
		disagrees(renamed), plus(plus(finished(), running("run", 3*time.Hour)), running("orphan", 30*time.Hour)), with(live("orphan"), func(v *PodView) { v.NodeReady = true }))
	add("nor one the kubelet of a Node that is not Ready last reported running",
		disagrees(renamed), plus(plus(finished(), running("run", 3*time.Hour)), running("orphan", 30*time.Hour)),
		with(reported(live("orphan"), "orphan"), func(v *PodView) { v.NodeReady = false }))
	// The Ready condition outlives the kubelet: the node lifecycle
	// controller turns it Unknown only after its grace period (40s), and
	// never while kube-controller-manager is down. Only a fresh lease,
	// which the kubelet renews every 10s, shows the kubelet of the view's
	// Node runs. Before, a Ready Node was enough.
	staleLease := "node lease of n1 stale since 2026-11-21T11:58:40Z (renewed 2026-11-21T11:58:00Z, for 40s)"
	add("nor one of a Ready Node whose lease is stale: its kubelet is gone",
		with(disagrees(renamed), func(c *viewCase) { c.lease = staleLease }),
		plus(plus(finished(), running("run", 3*time.Hour)), running("orphan", 30*time.Hour)),
		leased(NodeLease{RenewTime: t0.Add(-2 * time.Minute), Duration: 40 * time.Second}, live("orphan"), "orphan"))
	add("nor one of a Ready Node without a lease",
		with(disagrees(renamed), func(c *viewCase) {
			c.lease = `node lease of n1 unreadable: leases.coordination.k8s.io "n1" not found`
		}),
		plus(plus(finished(), running("run", 3*time.Hour)), running("orphan", 30*time.Hour)),
		leased(NodeLease{Err: apierrors.NewNotFound(coordinationv1.Resource("leases"), "n1")}, live("orphan"), "orphan"))
	add("nor one of a Ready Node whose lease nodegc may not read (an RBAC without get on leases)",
		with(disagrees(renamed), func(c *viewCase) {
			c.lease = `node lease of n1 unreadable: leases.coordination.k8s.io "n1" is forbidden: no get on leases`
		}),
		plus(plus(finished(), running("run", 3*time.Hour)), running("orphan", 30*time.Hour)),
		leased(NodeLease{Err: apierrors.NewForbidden(coordinationv1.Resource("leases"), "n1", errors.New("no get on leases"))}, live("orphan"), "orphan"))
	add("nor one of a Ready Node whose lease was never renewed",
		with(disagrees(renamed), func(c *viewCase) { c.lease = "node lease of n1 never renewed" }),
		plus(plus(finished(), running("run", 3*time.Hour)), running("orphan", 30*time.Hour)),
		leased(NodeLease{Duration: 40 * time.Second}, live("orphan"), "orphan"))
	add("nor one of a Ready Node whose lease was renewed ahead of this clock (the clock stepped back since)",
		with(disagrees(renamed), func(c *viewCase) {
			c.lease = "node lease of n1 renewed at 2026-11-21T12:10:00Z, ahead of this clock (2026-11-21T12:00:00Z): stepped back?"
		}),
		plus(plus(finished(), running("run", 3*time.Hour)), running("orphan", 30*time.Hour)),
		leased(NodeLease{RenewTime: t0.Add(10 * time.Minute), Duration: 40 * time.Second}, live("orphan"), "orphan"))
	add("nor one whose lease looks fresh but was renewed before this clock was seen stepped back a minute",
		with(disagrees(renamed), func(c *viewCase) {
			c.lease = "node lease of n1 stale since 2026-11-21T11:59:35Z (renewed 2026-11-21T12:00:00Z, for 40s)"
		}),
		plus(plus(finished(), running("run", 3*time.Hour)), running("orphan", 30*time.Hour)),
		leased(NodeLease{RenewTime: t0, Duration: 40 * time.Second, ClockBack: -65 * time.Second}, live("orphan"), "orphan"))
	add("a fresh lease of another duration vouches (renewed 50s ago, for 60s)",
		deletedRunning(merge(finishedGone, summary{
			Keep:          []string{"stuck/app/0:running", "web/app/0:running"},
			KeepSandboxes: []string{"stuck/sb0:ready", "web/sb0:ready"},
		}), "stuck"),
		plus(plus(finished(), running("web", 3*time.Hour)), running("stuck", 5*time.Hour)),
		leased(NodeLease{RenewTime: t0.Add(-50 * time.Second), Duration: time.Minute}, live("web"), "web"))
	add("a lease without a duration lasts the kubelet's default, 40s",
		with(disagrees(renamed), func(c *viewCase) {
			c.lease = "node lease of n1 stale since 2026-11-21T11:59:50Z (renewed 2026-11-21T11:59:10Z, for 40s)"
		}),
		plus(plus(finished(), running("run", 3*time.Hour)), running("orphan", 30*time.Hour)),
		leased(NodeLease{RenewTime: t0.Add(-50 * time.Second)}, live("orphan"), "orphan"))
	add("a listed pod whose containers are not running but whose sandbox is ready runs here too",
		deletedRunning(merge(finishedGone, summary{
			Keep:          []string{"stuck/app/0:running", "web/app/0:within_limit"},
			KeepSandboxes: []string{"stuck/sb0:ready", "web/sb0:ready"},
		}), "stuck"),
		plus(plus(finished(), NodeState{
			Containers: []Container{dead("web", "app", 0, 3*time.Hour)},
			Sandboxes:  []Sandbox{sbx("web", 0, true, 3*time.Hour)},
		}), running("stuck", 5*time.Hour)), reported(live("web"), "web"))
	add("a listed pod with nothing running here does not show the view is this node's",
		disagrees(merge(finishedKept, summary{
			Keep:          []string{"old/app/0:within_limit", "run/app/0:running"},
			KeepSandboxes: []string{"old/sb0:has_containers", "run/sb0:ready"},
		})),
		plus(plus(finished(), NodeState{
			Containers: []Container{dead("old", "app", 0, 3*time.Hour)},
			Sandboxes:  []Sandbox{sbx("old", 0, false, 3*time.Hour)},
		}), running("run", 3*time.Hour)), live("old"))
	add("a static pod the view lists (its mirror pod) does not show it",
		disagrees(merge(finishedKept, summary{
			Keep:          []string{"run/app/0:running", "st/app/0:running"},
			KeepSandboxes: []string{"run/sb0:ready", "st/sb0:ready"},
		})),
		plus(plus(finished(), running("run", 3*time.Hour)), NodeState{
			Containers: []Container{ctr("st", "app", 0, StateRunning, 3*time.Hour)},
			Sandboxes:  []Sandbox{with(sbx("st", 0, true, 3*time.Hour), func(s *Sandbox) { s.Source = "file" })},
		}), live("st"))
	add("a pod running in the runtime but absent from a synced view: nothing goes as pod_gone",
		disagrees(merge(finishedKept, summary{Keep: []string{"run/app/0:running"}, KeepSandboxes: []string{"run/sb0:ready"}})),
		plus(finished(), running("run", 3*time.Hour)), live())
	add("a running container in a sandbox that is not ready counts too",
		disagrees(merge(finishedKept, summary{Keep: []string{"run/app/0:running"}, KeepSandboxes: []string{"run/sb0:has_containers"}})),
		plus(finished(), NodeState{
			Containers: []Container{ctr("run", "app", 0, StateRunning, 3*time.Hour)},
			Sandboxes:  []Sandbox{sbx("run", 0, false, 3*time.Hour)},
		}), live())
	add("a ready sandbox without containers counts too",
		disagrees(merge(finishedKept, summary{KeepSandboxes: []string{"run/sb0:ready"}})),
		plus(finished(), NodeState{Sandboxes: []Sandbox{sbx("run", 0, true, 3*time.Hour)}}), live())
	add("another node's pods in the view do not make it agree",
		disagrees(merge(finishedKept, summary{Keep: []string{"run/app/0:running"}, KeepSandboxes: []string{"run/sb0:ready"}})),
		plus(finished(), running("run", 3*time.Hour)), live("elsewhere-1", "elsewhere-2"))
	add("a running pod newer than the view's list is not a disagreement: the cache may lag",
		agrees(merge(finishedGone, summary{Keep: []string{"run/app/0:running"}, KeepSandboxes: []string{"run/sb0:ready"}})),
		plus(finished(), running("run", 30*time.Minute)), with(live(), func(v *PodView) { v.ListedAt = t0.Add(-time.Hour) }))
	add("a pod is dated by the oldest thing it has on the node: a new sandbox does not hide an old pod",
		disagrees(merge(finishedKept, summary{
			Keep: []string{"run/app/0:within_limit", "run/app/1:running"}, KeepSandboxes: []string{"run/sb0:has_containers", "run/sb1:ready"},
		})),
		plus(finished(), NodeState{
			Containers: []Container{dead("run", "app", 0, 3*time.Hour), with(ctr("run", "app", 1, StateRunning, 10*time.Minute),
				func(c *Container) { c.SandboxID = "run/sb1" })},
			Sandboxes: []Sandbox{sbx("run", 0, false, 3*time.Hour), sbx("run", 1, true, 10*time.Minute)},
		}), with(live(), func(v *PodView) { v.ListedAt = t0.Add(-time.Hour) }))
	add("a deleted pod the kubelet still terminates does not make the view disagree, and is not gone while it runs",
		agrees(merge(finishedGone, summary{
			Remove:        []string{"term/app/0:per_container_limit"},
			Keep:          []string{"term/app/1:within_limit", "term/web/0:running"},
			KeepSandboxes: []string{"term/sb0:ready"}, KeepLogDirs: []string{"ns_term_term:pod_running"},
		})),
		plus(finished(), NodeState{
			Containers: append(restarts("term", "app", 2), ctr("term", "web", 0, StateRunning, 3*time.Hour)),
			Sandboxes:  []Sandbox{sbx("term", 0, true, 3*time.Hour)},
			LogDirs:    []PodLogDir{{Name: "ns_term_term", PodUID: "term", ModTime: t0.Add(-3 * time.Hour)}},
		}), with(live(), func(v *PodView) { v.Deleted = map[string]bool{"term": true} }))
	add("a deleted pod whose containers all exited but whose sandbox is still ready is not gone",
		agrees(merge(finishedGone, summary{
			Remove: []string{"term/app/0:per_container_limit"}, Keep: []string{"term/app/1:within_limit"},
			KeepSandboxes: []string{"term/sb0:ready"},
		})),
		plus(finished(), NodeState{Containers: restarts("term", "app", 2), Sandboxes: []Sandbox{sbx("term", 0, true, 3*time.Hour)}}),
		with(live(), func(v *PodView) { v.Deleted = map[string]bool{"term": true, "fin": true} }))
	add("a static pod running without its mirror pod does not make the view disagree",
		agrees(merge(finishedGone, summary{Keep: []string{"st/app/0:running"}, KeepSandboxes: []string{"st/sb0:ready"}})),
		plus(finished(), NodeState{
			Containers: []Container{ctr("st", "app", 0, StateRunning, 3*time.Hour)},
			Sandboxes:  []Sandbox{with(sbx("st", 0, true, 3*time.Hour), func(s *Sandbox) { s.Source = "file" })},
		}), live())
	add("what the kubelet does not manage does not count",
		agrees(merge(finishedGone, summary{Keep: []string{"plain:unmanaged"}, KeepSandboxes: []string{"plain-sb:unmanaged"}})),
		plus(finished(), NodeState{
			Containers: []Container{{ID: "plain", SandboxID: "plain-sb", State: StateRunning, CreatedAt: t0.Add(-3 * time.Hour)}},
			Sandboxes:  []Sandbox{{ID: "plain-sb", Ready: true, CreatedAt: t0.Add(-3 * time.Hour)}},
		}), live())
	add("pods the view lists agree",
		agrees(merge(finishedGone, summary{Keep: []string{"run/app/0:running"}, KeepSandboxes: []string{"run/sb0:ready"}})),
		plus(finished(), running("run", 3*time.Hour)), live("run"))
	// A view that agrees needs no pod to vouch for it; the lease is read
	// only when something would go as pod_gone
	// (TestPlanPodGoneNeedsAFreshNodeLease).
	add("a view that agrees, of which nothing is gone, does not read the Node's lease",
		agrees(summary{Keep: []string{"run/app/0:running"}, KeepSandboxes: []string{"run/sb0:ready"}}),
		running("run", 3*time.Hour),
		with(reported(live("run"), "run"), func(v *PodView) {
			v.NodeLease = func() NodeLease { t.Error("the node lease read although the view agrees"); return NodeLease{} }
		}))
	add("every missing pod is named, by namespace, name and UID",
		viewCase{planCase: planCase{want: summary{
			Keep:          []string{"a/app/0:running", "b/app/0:running", "c/app/0:within_limit"},
			KeepSandboxes: []string{"a/sb0:ready", "b/sb0:ready", "c/sb0:has_containers"},
		}}, reason: ViewDisagrees, missing: []PodRef{{UID: "a", Namespace: "ns", Name: "a"}, {UID: "b", Namespace: "ns", Name: "b"}}},
		plus(plus(running("b", 3*time.Hour), running("a", 3*time.Hour)), NodeState{
			Containers: []Container{dead("c", "app", 0, 3*time.Hour)},
			Sandboxes:  []Sandbox{sbx("c", 0, false, 3*time.Hour)},
		}), live("c"))
	add("a view already not authoritative keeps its own reason",
		viewCase{planCase: planCase{want: merge(finishedKept, summary{Keep: []string{"run/app/0:running"}, KeepSandboxes: []string{"run/sb0:ready"}})},
			reason: ViewNotSynced},
		plus(finished(), running("run", 3*time.Hour)), PodView{Reason: ViewNotSynced})
	runViewCases(t, cases)
}

// leaseReads returns a PodView.NodeLease that reads l, and fails the test
// if a plan reads it more than once.
func leaseReads(t *testing.T, l NodeLease) func() NodeLease {
	reads := 0
	return func() NodeLease {
		if reads++; reads > 1 {
			t.Errorf("the node lease read %d times in one plan", reads)
		}
		return l
	}
}

// runningIn returns v with pods the kubelet reports running since the
// given times (namespace ns, name = UID).
func runningIn(v PodView, since map[string]time.Time) PodView {
	v.Running = map[string]RunningPod{}
	for uid, t := range since {
		v.Running[uid] = RunningPod{PodRef: PodRef{UID: uid, Namespace: "ns", Name: uid}, Since: t}
	}
	return v
}

// TestPlanRuntimeHasTheViewsRunningPods: an authoritative view whose pods
// the kubelet reports running since well before the runtime was listed,
// none of which the runtime lists a sandbox or container of, is not the
// runtime's (a CRI endpoint that is not the kubelet's runtime): the plan
// treats it as not authoritative, and nothing goes as pod_gone. One such
// pod the runtime has is enough to agree: a stale view of a pod whose
// sandbox was just removed makes no false alarm.
func TestPlanRuntimeHasTheViewsRunningPods(t *testing.T) {
	running := func(pod string, age time.Duration) NodeState {
		return NodeState{
			Containers: []Container{ctr(pod, "app", 0, StateRunning, age)},
			Sandboxes:  []Sandbox{sbx(pod, 0, true, age)},
		}
	}
	long := t0.Add(-3 * time.Hour)
	lacks := func(want summary, pods ...string) viewCase {
		c := viewCase{planCase: planCase{want: want}, reason: ViewRuntimeLacksPods}
		for _, p := range pods {
			c.notInRuntime = append(c.notInRuntime, PodRef{UID: p, Namespace: "ns", Name: p})
		}
		return c
	}
	agrees := func(want summary) viewCase {
		return viewCase{planCase: planCase{want: want}, authoritative: true}
	}
	cases := map[string]viewCase{}
	add := func(name string, c viewCase, node NodeState, pods PodView) {
		c.node, c.pods = node, pods
		cases[name] = c
	}
	add("a runtime that lists none of the pods the kubelet runs: nothing goes as pod_gone",
		lacks(finishedKept, "a", "b"),
		finished(), runningIn(live("a", "b"), map[string]time.Time{"b": long, "a": long}))
	add("an empty runtime: the log directory of a pod the watch saw deleted stays",
		lacks(summary{KeepLogDirs: []string{"ns_gone_gone:pods_unknown"}}, "a"),
		NodeState{LogDirs: []PodLogDir{{Name: "ns_gone_gone", PodUID: "gone", ModTime: t0.Add(-2 * time.Hour)}}},
		with(runningIn(live("a"), map[string]time.Time{"a": long}), func(v *PodView) { v.Deleted = map[string]bool{"gone": true} }))
	add("a dangling link of a container the runtime does not list stays",
		lacks(summary{KeepLinks: []string{"x.log:pods_unknown"}}, "a"),
		NodeState{LogLinks: []LogLink{{Name: "x.log", ContainerID: "0123456789ab", Dangling: true}}},
		runningIn(live("a"), map[string]time.Time{"a": long}))
	add("one running pod the runtime has is enough: a stale view of another whose sandbox is gone is no disagreement",
		agrees(merge(finishedGone, summary{Keep: []string{"run/app/0:running"}, KeepSandboxes: []string{"run/sb0:ready"}})),
		plus(finished(), running("run", 3*time.Hour)), runningIn(live("run", "stale"), map[string]time.Time{"run": long, "stale": long}))
	add("a sandbox in any state counts",
		agrees(merge(finishedGone, summary{KeepSandboxes: []string{"idle/sb0:newest"}})),
		plus(finished(), NodeState{Sandboxes: []Sandbox{sbx("idle", 0, false, 3*time.Hour)}}),
		runningIn(live("idle"), map[string]time.Time{"idle": long}))
	add("pods running since shortly before the listing do not count: their sandbox may be newer than it",
		agrees(finishedGone),
		finished(), runningIn(live("a"), map[string]time.Time{"a": t0.Add(-30 * time.Second)}))
	add("the listing dates the check, not the plan's time",
		agrees(finishedGone),
		with(finished(), func(n *NodeState) { n.ListedAt = t0.Add(-10 * time.Minute) }),
		runningIn(live("a"), map[string]time.Time{"a": t0.Add(-10 * time.Minute)}))
	add("no running pod in the view: nothing to check",
		agrees(finishedGone),
		finished(), live("a"))
	add("a view already not authoritative keeps its own reason",
		viewCase{planCase: planCase{want: finishedKept}, reason: ViewNotSynced},
		finished(), runningIn(PodView{Reason: ViewNotSynced}, map[string]time.Time{"a": long}))
	add("a view that lacks pods the runtime runs says so first",
		viewCase{planCase: planCase{want: merge(finishedKept, summary{Keep: []string{"run/app/0:running"}, KeepSandboxes: []string{"run/sb0:ready"}})},
			reason: ViewDisagrees, missing: []PodRef{{UID: "run", Namespace: "ns", Name: "run"}}},
		plus(finished(), running("run", 3*time.Hour)), runningIn(live("a"), map[string]time.Time{"a": long}))
	runViewCases(t, cases)
}

// TestPlanRuntimeIsTheNodes: an authoritative view whose Node reports
// another container runtime (status.nodeInfo.containerRuntimeVersion) than
// the one nodegc lists is not authoritative: the runtime is not the
// kubelet's. This holds on an idle node too, where no pod runs to compare.
// A runtime or Node that does not say which it is is not checked; the
// runtime's answer is compared as the kubelet writes it ("v2.1.4" is
// 2.1.4, Debian's "1.6.20~ds1" is 1.6.20, build metadata is kept).
func TestPlanRuntimeIsTheNodes(t *testing.T) {
	runs := func(name, version string, n NodeState) NodeState {
		n.RuntimeName, n.RuntimeVersion = name, version
		return n
	}
	reports := func(runtime string, v PodView) PodView {
		v.NodeRuntime = runtime
		return v
	}
	other := func(want summary, node, runtime string) viewCase {
		return viewCase{planCase: planCase{want: want}, reason: ViewNodeOtherRuntime, nodeRuntime: node, runtime: runtime}
	}
	agrees := func(want summary) viewCase {
		return viewCase{planCase: planCase{want: want}, authoritative: true}
	}
	danglingLink := NodeState{LogLinks: []LogLink{{Name: "x.log", ContainerID: "0123456789ab", Dangling: true}}}
	cases := map[string]viewCase{}
	add := func(name string, c viewCase, node NodeState, pods PodView) {
		c.node, c.pods = node, pods
		cases[name] = c
	}
	add("k3s's containerd on the Node, a distro containerd asked: nothing goes as pod_gone",
		other(finishedKept, "containerd://1.7.23-k3s2", "containerd://1.7.24"),
		runs("containerd", "v1.7.24", finished()), reports("containerd://1.7.23-k3s2", live()))
	add("another runtime: no dangling link goes",
		other(summary{KeepLinks: []string{"x.log:pods_unknown"}}, "cri-o://1.30.4", "containerd://2.1.4"),
		runs("containerd", "2.1.4", danglingLink), reports("cri-o://1.30.4", live()))
	add("the same runtime as the kubelet writes it",
		agrees(finishedGone),
		runs("containerd", "v2.1.4", finished()), reports("containerd://2.1.4", live()))
	add("build metadata, as the kubelet writes it",
		agrees(merge(finishedGone, summary{RemoveLinks: []string{"x.log:dangling"}})),
		runs("containerd", "2.1.4+unknown", with(finished(), func(n *NodeState) { n.LogLinks = danglingLink.LogLinks })), reports("containerd://2.1.4+unknown", live()))
	add("Debian's version, as the kubelet writes it",
		agrees(finishedGone),
		runs("containerd", "1.6.20~ds1", finished()), reports("containerd://1.6.20", live()))
	add("a pre-release is a version of its own",
		other(finishedKept, "containerd://2.1.4", "containerd://2.1.4-rc.1"),
		runs("containerd", "2.1.4-rc.1", finished()), reports("containerd://2.1.4", live()))
	add("k3s's containerd on the Node, Debian's of the same numbers asked",
		other(finishedKept, "containerd://1.6.20-k3s1", "containerd://1.6.20"),
		runs("containerd", "1.6.20~ds1", finished()), reports("containerd://1.6.20-k3s1", live()))
	add("a version with fewer numbers is another",
		other(finishedKept, "containerd://1.7.0-k3s1", "containerd://1.7"),
		runs("containerd", "1.7", finished()), reports("containerd://1.7.0-k3s1", live()))
	add("another name, whatever the version",
		other(finishedKept, "cri-o://1.30.4", "containerd://1.30.4"),
		runs("containerd", "1.30.4", finished()), reports("cri-o://1.30.4", live()))
	add("a runtime version the kubelet could not have read, on a Node that reports one: another runtime",
		other(finishedKept, "containerd://1.7.24", "containerd://weird"),
		runs("containerd", "weird", finished()), reports("containerd://1.7.24", live()))
	add("a Node whose kubelet could not ask its runtime: not checked",
		agrees(finishedGone),
		runs("containerd", "2.1.4", finished()), reports("containerd://Unknown", live()))
	add("a Node that reports no runtime: not checked",
		agrees(finishedGone),
		runs("containerd", "2.1.4", finished()), live())
	add("a runtime that did not say: not checked",
		agrees(finishedGone),
		finished(), reports("containerd://2.1.4", live()))
	add("a view already not authoritative keeps its own reason",
		viewCase{planCase: planCase{want: finishedKept}, reason: ViewUnreachable},
		runs("containerd", "2.1.4", finished()), reports("cri-o://1.30.4", PodView{Reason: ViewUnreachable}))
	runViewCases(t, cases)
}

// TestPlanNewestExitedStays: whatever the limits, the newest instance that
// ran of a live pod's container stays, and an instance created but never
// started is not evictable while it may still be starting (the window
// between CreateContainer and StartContainer).
func TestPlanNewestExitedStays(t *testing.T) {
	created := func(pod, name string, attempt uint32, age time.Duration) Container {
		return ctr(pod, name, attempt, StateCreated, age)
	}
	// An exited instance two hours old and a newer one created age ago,
	// never started.
	pair := func(pod, name string, age time.Duration) []Container {
		return []Container{dead(pod, name, 0, 2*time.Hour), created(pod, name, 1, age)}
	}
	grace := StartGrace(config.DefaultRuntimeRequestTimeout)
	minAge := func(d time.Duration, then func(*config.ContainerGCConfiguration)) func(*config.ContainerGCConfiguration) {
		return func(c *config.ContainerGCConfiguration) {
			then(c)
			c.MinAge = &metav1.Duration{Duration: d}
		}
	}
	runPlanCases(t, map[string]planCase{
		"maxPerPodContainer 1: a newer instance being started does not displace the exited one": {
			mutate: limits(1, -1),
			node:   NodeState{Containers: pair("p", "app", 10*time.Second)},
			pods:   live("p"),
			want:   summary{Keep: []string{"p/app/0:within_limit", "p/app/1:starting"}},
		},
		"maxContainers 0: neither the exited one nor the one being started goes": {
			mutate: limits(1, 0),
			node:   NodeState{Containers: pair("p", "app", 10*time.Second)},
			pods:   live("p"),
			want:   summary{Keep: []string{"p/app/0:newest_dead", "p/app/1:starting"}},
		},
		"maxContainers 0 without a per-pod limit": {
			mutate: limits(-1, 0),
			node:   NodeState{Containers: pair("p", "app", 10*time.Second)},
			pods:   live("p"),
			want:   summary{Keep: []string{"p/app/0:newest_dead", "p/app/1:starting"}},
		},
		"just under the grace it is starting; just over it, a stale created instance goes and the exited one stays": {
			mutate: limits(1, -1),
			node:   NodeState{Containers: append(pair("p", "a", grace-time.Second), pair("p", "b", grace+time.Second)...)},
			pods:   live("p"),
			want: summary{
				Remove: []string{"p/b/1:per_container_limit"},
				Keep:   []string{"p/a/0:within_limit", "p/a/1:starting", "p/b/0:newest_dead"},
			},
		},
		"maxContainers 0 past the grace: the stale created instance goes, the exited one stays": {
			mutate: limits(-1, 0),
			node:   NodeState{Containers: pair("p", "app", grace+time.Minute)},
			pods:   live("p"),
			want:   summary{Remove: []string{"p/app/1:node_limit"}, Keep: []string{"p/app/0:newest_dead"}},
		},
		"the grace is at least minAge": {
			mutate: minAge(2*grace, limits(1, -1)),
			node:   NodeState{Containers: pair("p", "app", grace+time.Minute)},
			pods:   live("p"),
			want:   summary{Keep: []string{"p/app/0:within_limit", "p/app/1:starting"}},
		},
		"maxPerPodContainer 2 keeps the exited one and the newest other": {
			mutate: limits(2, -1),
			node: NodeState{Containers: append(restarts("p", "app", 3),
				created("p", "app", 3, grace+time.Minute), created("p", "app", 4, grace+2*time.Minute))},
			pods: live("p"),
			want: summary{
				Remove: []string{"p/app/0:per_container_limit", "p/app/1:per_container_limit", "p/app/4:per_container_limit"},
				Keep:   []string{"p/app/2:newest_dead", "p/app/3:within_limit"},
			},
		},
		"an instance in an unknown state counts as one that ran": {
			mutate: limits(1, -1),
			node:   NodeState{Containers: []Container{ctr("p", "app", 0, StateUnknown, time.Hour), created("p", "app", 1, grace+time.Minute)}},
			pods:   live("p"),
			want:   summary{Remove: []string{"p/app/1:per_container_limit"}, Keep: []string{"p/app/0:newest_dead"}},
		},
		"node limit shares: each unit keeps its exited instance, not its newer created one": {
			mutate: limits(-1, 2),
			node: NodeState{Containers: append(append(pair("p", "a", grace+time.Minute), pair("q", "b", grace+time.Minute)...),
				dead("r", "c", 0, 2*time.Hour))},
			pods: live("p", "q", "r"),
			want: summary{
				Remove: []string{"p/a/1:node_limit", "q/b/1:node_limit"},
				Keep:   []string{"p/a/0:newest_dead", "q/b/0:newest_dead", "r/c/0:newest_dead"},
			},
		},
		"a container with only a created instance: starting within the grace": {
			mutate: limits(1, 0),
			node:   NodeState{Containers: []Container{created("p", "app", 0, 30*time.Second)}},
			pods:   live("p"),
			want:   summary{Keep: []string{"p/app/0:starting"}},
		},
		"a container with only a created instance: past the grace it is the newest dead instance": {
			mutate: limits(1, 0),
			node:   NodeState{Containers: []Container{created("p", "app", 0, grace+time.Minute)}},
			pods:   live("p"),
			want:   summary{Keep: []string{"p/app/0:newest_dead"}},
		},
		"a gone pod's instance being started stays, and so does its log directory": {
			node: NodeState{
				Containers: pair("gone", "app", 10*time.Second),
				Sandboxes:  []Sandbox{sbx("gone", 0, false, 2*time.Hour)},
				LogDirs:    []PodLogDir{{Name: "ns_gone_gone", PodUID: "gone", ModTime: t0.Add(-2 * time.Hour)}},
			},
			pods: live(),
			want: summary{
				Remove: []string{"gone/app/0:pod_gone"}, Keep: []string{"gone/app/1:starting"},
				KeepSandboxes: []string{"gone/sb0:has_containers"}, KeepLogDirs: []string{"ns_gone_gone:pod_active"},
			},
		},
	})
}

// TestPlanStartInFlightStays: the kubelet creates a container and then
// starts it, and gives StartContainer its runtimeRequestTimeout (2m by
// default); a start slowed down (a node under I/O pressure) leaves the
// container listed as created for up to that long. Pod p's container app
// exited as attempt 4 and the kubelet created attempt 5: while its start
// may still be in flight attempt 5 is kept as starting, whatever the
// limits; only past the kubelet's deadline and a margin is it a leftover.
func TestPlanStartInFlightStays(t *testing.T) {
	node := func(age time.Duration) NodeState {
		return NodeState{Containers: append(restarts("p", "app", 5), ctr("p", "app", 5, StateCreated, age))}
	}
	older := []string{"p/app/0:per_container_limit", "p/app/1:per_container_limit", "p/app/2:per_container_limit", "p/app/3:per_container_limit"}
	starting := summary{Remove: older, Keep: []string{"p/app/4:within_limit", "p/app/5:starting"}}
	runPlanCases(t, map[string]planCase{
		"61s after its creation, its start in flight": {
			node: node(61 * time.Second), pods: live("p"), want: starting,
		},
		"just within the kubelet's deadline (runtimeRequestTimeout 2m) and the margin": {
			node: node(3*time.Minute - time.Second), pods: live("p"), want: starting,
		},
		"the node limit does not remove it either": {
			mutate: limits(-1, 0),
			node:   node(2 * time.Minute), pods: live("p"),
			want: summary{
				Remove: []string{"p/app/0:node_limit", "p/app/1:node_limit", "p/app/2:node_limit", "p/app/3:node_limit"},
				Keep:   []string{"p/app/4:newest_dead", "p/app/5:starting"},
			},
		},
		"past the deadline and the margin it is a leftover; the exited one stays": {
			node: node(3*time.Minute + time.Second), pods: live("p"),
			want: summary{Remove: append(slices.Clone(older), "p/app/5:per_container_limit"), Keep: []string{"p/app/4:newest_dead"}},
		},
	})
	leftover := summary{Remove: append(slices.Clone(older), "p/app/5:per_container_limit"), Keep: []string{"p/app/4:newest_dead"}}
	for _, tc := range []struct {
		name    string
		timeout time.Duration // the kubelet's runtimeRequestTimeout
		age     time.Duration
		want    summary
	}{
		{"a longer runtimeRequestTimeout (10m): still starting at 10m59s", 10 * time.Minute, 11*time.Minute - time.Second, starting},
		{"a longer runtimeRequestTimeout (10m): a leftover at 11m1s", 10 * time.Minute, 11*time.Minute + time.Second, leftover},
		{"a shorter one (30s) counts as the kubelet's default: still starting at 2m59s", 30 * time.Second, 3*time.Minute - time.Second, starting},
		{"unset counts as the kubelet's default: still starting at 2m59s", 0, 3*time.Minute - time.Second, starting},
		// The longest duration, plus the margin, is past what a Duration
		// holds: StartGrace saturates rather than wrapping to -292 years,
		// which made every created container evictable at once.
		{"the longest duration (2562047h47m): still starting at 1s", 2562047*time.Hour + 47*time.Minute, time.Second, starting},
		{"the largest Duration: still starting at 1s", math.MaxInt64, time.Second, starting},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if g := StartGrace(tc.timeout); g < max(tc.timeout, config.DefaultRuntimeRequestTimeout) {
				t.Errorf("StartGrace(%v) = %v, shorter than the kubelet's deadline; want at least that", tc.timeout, g)
			}
			got := summarize(policyWithTimeout(t, nil, tc.timeout).Plan(node(tc.age), live("p"), t0))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPlanContainerIDFaults: the plan removes containers by ID, so a
// runtime that lists containers without an ID of their own misbehaves in
// a way that matters. An entry listed twice alike (same ID, same fields)
// is one container: pod p's only dead instance stays, the newest dead of a
// live pod's container (before, of its two entries one was kept and the
// other, the same container, removed, run after run). Two containers
// listed under one ID, or without an ID, are a fault: the one the runtime
// resolves the ID to may be the one the plan keeps, so each stays
// (id_fault), and with it its sandbox and its pod's log directory; the
// plan names the IDs (ContainerIDFaults), and the pod's other instances
// are planned as usual.
func TestPlanContainerIDFaults(t *testing.T) {
	shared := func(id string, cs ...Container) []Container {
		for i := range cs {
			cs[i].ID = id
		}
		return cs
	}
	goneDir := PodLogDir{Name: "ns_gone_gone", PodUID: "gone", ModTime: t0.Add(-3 * time.Hour)}
	for name, tc := range map[string]struct {
		node       NodeState
		want       summary
		wantFaults []string
	}{
		"one container listed twice alike": {
			node: NodeState{Containers: []Container{dead("p", "app", 0, time.Hour), dead("p", "app", 0, time.Hour)},
				Sandboxes: []Sandbox{sbx("p", 0, false, 2*time.Hour)}},
			want: summary{Keep: []string{"p/app/0:within_limit"}, KeepSandboxes: []string{"p/sb0:has_containers"}},
		},
		"two containers under one ID, the newest dead among them": {
			node: NodeState{Containers: append(shared("x", dead("p", "app", 1, 2*time.Hour), dead("p", "app", 2, time.Hour)), dead("p", "app", 0, 3*time.Hour)),
				Sandboxes: []Sandbox{sbx("p", 0, false, 4*time.Hour)}},
			want:       summary{Keep: []string{"p/app/0:within_limit", "x:id_fault", "x:id_fault"}, KeepSandboxes: []string{"p/sb0:has_containers"}},
			wantFaults: []string{"x"},
		},
		"two containers under one ID, one of them listed twice": {
			node: NodeState{Containers: shared("x", dead("p", "app", 1, 2*time.Hour), dead("p", "app", 2, time.Hour), dead("p", "app", 2, time.Hour)),
				Sandboxes: []Sandbox{sbx("p", 0, false, 4*time.Hour)}},
			want:       summary{Keep: []string{"x:id_fault", "x:id_fault"}, KeepSandboxes: []string{"p/sb0:has_containers"}},
			wantFaults: []string{"x"},
		},
		"containers of a gone pod without an ID": {
			node: NodeState{Containers: shared("", dead("gone", "app", 0, 2*time.Hour), dead("gone", "app", 1, time.Hour)),
				Sandboxes: []Sandbox{sbx("gone", 0, false, 3*time.Hour)}, LogDirs: []PodLogDir{goneDir}},
			want: summary{Keep: []string{":id_fault", ":id_fault"}, KeepSandboxes: []string{"gone/sb0:has_containers"},
				KeepLogDirs: []string{"ns_gone_gone:pod_active"}},
			wantFaults: []string{""},
		},
	} {
		t.Run(name, func(t *testing.T) {
			// The plan once depended on the order of equal entries: 20
			// plans, each of a shuffled listing.
			for i := range 20 {
				node := tc.node
				node.Containers = slices.Clone(node.Containers)
				rand.Shuffle(len(node.Containers), func(a, b int) { node.Containers[a], node.Containers[b] = node.Containers[b], node.Containers[a] })
				plan := policyFor(t, nil).Plan(node, live("p"), t0)
				if diff := cmp.Diff(tc.want, summarize(plan)); diff != "" {
					t.Fatalf("plan %d (-want +got):\n%s", i, diff)
				}
				if diff := cmp.Diff(tc.wantFaults, plan.ContainerIDFaults); diff != "" {
					t.Fatalf("plan %d: IDs given no container of its own (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

// TestPlanSandboxIDFaults: a live pod's only sandbox (stopped, without
// containers) listed twice alike is one sandbox, kept as the pod's newest;
// two sandboxes listed under one ID are both kept (id_fault), and so is
// their pod's log directory: the runtime stops and removes by ID. Before,
// the one sandbox listed twice was both kept (newest) and removed
// (superseded) by one plan, and the executor removed it.
func TestPlanSandboxIDFaults(t *testing.T) {
	sb := sbx("p", 0, false, 2*time.Hour)
	plan := policyFor(t, nil).Plan(NodeState{Sandboxes: []Sandbox{sb, sb}}, live("p"), t0)
	if got := summarize(plan); len(got.Remove) != 0 || len(plan.KeepSandboxes) != 1 || plan.KeepSandboxes[0].Reason != KeepNewestSandbox {
		t.Errorf("a live pod's only sandbox listed twice: removed %v, kept %+v; want it kept once, as %s", got.Remove, plan.KeepSandboxes, KeepNewestSandbox)
	}

	older, newer := sbx("gone", 0, false, 3*time.Hour), sbx("gone", 1, false, 2*time.Hour)
	older.ID, newer.ID = "shared", "shared"
	node := NodeState{Sandboxes: []Sandbox{older, newer}, LogDirs: []PodLogDir{{Name: "ns_gone_gone", PodUID: "gone", ModTime: t0.Add(-3 * time.Hour)}}}
	plan = policyFor(t, nil).Plan(node, live("p"), t0)
	if got := summarize(plan); len(got.Remove) != 0 {
		t.Errorf("two sandboxes of a gone pod listed under one ID: removed %v; want both kept (%s) with the pod's log directory", got.Remove, KeepIDFault)
	}
	for _, d := range plan.KeepSandboxes {
		if d.Reason != KeepIDFault {
			t.Errorf("sandbox %s kept as %s, want %s", d.Sandbox.ID, d.Reason, KeepIDFault)
		}
	}
	if !slices.Equal(plan.SandboxIDFaults, []string{"shared"}) || len(plan.ContainerIDFaults) != 0 {
		t.Errorf("sandbox ID faults %q, container ID faults %q; want [shared] and none", plan.SandboxIDFaults, plan.ContainerIDFaults)
	}
}
