package containers

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/pkg/config"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func policyFor(t *testing.T, mutate func(*config.ContainerGCConfiguration)) *Policy {
	t.Helper()
	return policyWithTimeout(t, mutate, config.DefaultRuntimeRequestTimeout)
}

// policyWithTimeout is policyFor with the kubelet's runtimeRequestTimeout.
func policyWithTimeout(t *testing.T, mutate func(*config.ContainerGCConfiguration), runtimeRequestTimeout time.Duration) *Policy {
	t.Helper()
	c := config.Defaulted().ContainerGC
	if mutate != nil {
		mutate(&c)
	}
	if errs := config.ValidateContainerGC(&c); len(errs) > 0 {
		t.Fatal(errs.ToAggregate())
	}
	return NewPolicy(c, runtimeRequestTimeout)
}

func limits(perPod, node int32) func(*config.ContainerGCConfiguration) {
	return func(c *config.ContainerGCConfiguration) {
		c.MaxPerPodContainer, c.MaxContainers = ptr.To(perPod), ptr.To(node)
	}
}

// ctr is a kubelet-managed container of pod (UID = name = pod) in the
// pod's first sandbox, created age before t0; its ID is POD/NAME/ATTEMPT.
func ctr(pod, name string, attempt uint32, state State, age time.Duration) Container {
	return Container{
		ID: fmt.Sprintf("%s/%s/%d", pod, name, attempt), SandboxID: pod + "/sb0", Managed: true,
		PodUID: pod, PodName: pod, PodNamespace: "ns", Name: name, Attempt: attempt,
		State: state, CreatedAt: t0.Add(-age), GracePeriod: 30,
	}
}

func dead(pod, name string, attempt uint32, age time.Duration) Container {
	return ctr(pod, name, attempt, StateExited, age)
}

// restarts returns n exited instances of one container, attempt i created
// (n-i) hours before t0: the last attempt is the newest.
func restarts(pod, name string, n int) []Container {
	var cs []Container
	for i := range n {
		cs = append(cs, dead(pod, name, uint32(i), time.Duration(n-i)*time.Hour))
	}
	return cs
}

// sbx is a kubelet-managed sandbox POD/sbN of pod, created age before t0.
func sbx(pod string, attempt uint32, ready bool, age time.Duration) Sandbox {
	return Sandbox{
		ID: fmt.Sprintf("%s/sb%d", pod, attempt), Managed: true, PodUID: pod, PodName: pod, PodNamespace: "ns",
		Attempt: attempt, Ready: ready, CreatedAt: t0.Add(-age), Source: SourceAPI,
	}
}

func with[T any](v T, f func(*T)) T { f(&v); return v }

// live is an authoritative view in which the given pods exist, listed at t0,
// of a Node whose kubelet renewed its lease at t0 (pods go as gone only
// while it is fresh).
func live(pods ...string) PodView {
	v := PodView{Authoritative: true, Live: map[string]bool{}, ListedAt: t0,
		NodeLease: func() NodeLease { return NodeLease{RenewTime: t0, Duration: DefaultNodeLeaseDuration} }}
	for _, p := range pods {
		v.Live[p] = true
	}
	return v
}

// summary renders a plan as sorted "id:reason" lists.
type summary struct {
	Remove, Keep                   []string
	RemoveSandboxes, KeepSandboxes []string
	RemoveLogDirs, KeepLogDirs     []string
	RemoveLinks, KeepLinks         []string
}

func summarize(p *Plan) summary {
	var s summary
	for _, d := range p.RemoveContainers {
		e := d.Container.ID + ":" + d.Reason
		if d.StopFirst {
			e += "+stop"
		}
		s.Remove = append(s.Remove, e)
	}
	for _, d := range p.KeepContainers {
		s.Keep = append(s.Keep, d.Container.ID+":"+d.Reason)
	}
	for _, d := range p.RemoveSandboxes {
		s.RemoveSandboxes = append(s.RemoveSandboxes, d.Sandbox.ID+":"+d.Reason)
	}
	for _, d := range p.KeepSandboxes {
		s.KeepSandboxes = append(s.KeepSandboxes, d.Sandbox.ID+":"+d.Reason)
	}
	for _, d := range p.RemoveLogDirs {
		s.RemoveLogDirs = append(s.RemoveLogDirs, d.Dir.Name+":"+d.Reason)
	}
	for _, d := range p.KeepLogDirs {
		s.KeepLogDirs = append(s.KeepLogDirs, d.Dir.Name+":"+d.Reason)
	}
	for _, d := range p.RemoveLogLinks {
		s.RemoveLinks = append(s.RemoveLinks, d.Link.Name+":"+d.Reason)
	}
	for _, d := range p.KeepLogLinks {
		s.KeepLinks = append(s.KeepLinks, d.Link.Name+":"+d.Reason)
	}
	for _, l := range [][]string{s.Remove, s.Keep, s.RemoveSandboxes, s.KeepSandboxes, s.RemoveLogDirs, s.KeepLogDirs, s.RemoveLinks, s.KeepLinks} {
		slices.Sort(l)
	}
	return s
}

type planCase struct {
	mutate func(*config.ContainerGCConfiguration)
	node   NodeState
	pods   PodView
	want   summary
}

func runPlanCases(t *testing.T, cases map[string]planCase) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := summarize(policyFor(t, tc.mutate).Plan(tc.node, tc.pods, t0))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPlanKubeletParity checks the plan against the kubelet's container GC
// (kuberuntime_gc.go), rule by rule: what is evictable, the per-pod-container
// limit, the node-wide limit with its max(1, maxContainers/units) share,
// minimum age, pod gone, unknown state, sandboxes, and what the kubelet
// does not manage.
func TestPlanKubeletParity(t *testing.T) {
	runPlanCases(t, map[string]planCase{
		"per-pod limit keeps the newest maxPerPodContainer instances": {
			mutate: limits(2, -1),
			node:   NodeState{Containers: restarts("p", "app", 5), Sandboxes: []Sandbox{sbx("p", 0, true, 6*time.Hour)}},
			pods:   live("p"),
			want: summary{
				Remove:        []string{"p/app/0:per_container_limit", "p/app/1:per_container_limit", "p/app/2:per_container_limit"},
				Keep:          []string{"p/app/3:within_limit", "p/app/4:within_limit"},
				KeepSandboxes: []string{"p/sb0:ready"},
			},
		},
		"default limit is one dead instance": {
			node: NodeState{Containers: restarts("p", "app", 3)},
			pods: live("p"),
			want: summary{
				Remove: []string{"p/app/0:per_container_limit", "p/app/1:per_container_limit"},
				Keep:   []string{"p/app/2:within_limit"},
			},
		},
		// The kubelet keeps the newest created; where the attempts say
		// otherwise (a step of the clock swapped two instances'
		// times), the highest attempt stays too, above the limit.
		"newest created stays, and so does the highest attempt": {
			node: NodeState{Containers: []Container{dead("p", "app", 7, 3*time.Hour), dead("p", "app", 1, time.Minute)}},
			pods: live("p"),
			want: summary{Keep: []string{"p/app/1:within_limit", "p/app/7:newest_dead"}},
		},
		"units are (pod UID, container name)": {
			node: NodeState{Containers: slices.Concat(restarts("p", "app", 2), restarts("p", "side", 2), restarts("q", "app", 2))},
			pods: live("p", "q"),
			want: summary{
				Remove: []string{"p/app/0:per_container_limit", "p/side/0:per_container_limit", "q/app/0:per_container_limit"},
				Keep:   []string{"p/app/1:within_limit", "p/side/1:within_limit", "q/app/1:within_limit"},
			},
		},
		"a negative per-pod limit keeps every dead instance": {
			mutate: limits(-1, -1),
			node:   NodeState{Containers: restarts("p", "app", 3)},
			pods:   live("p"),
			want:   summary{Keep: []string{"p/app/0:within_limit", "p/app/1:within_limit", "p/app/2:within_limit"}},
		},
		"running containers are never evictable": {
			mutate: limits(1, 0),
			node: NodeState{Containers: []Container{
				ctr("p", "app", 5, StateRunning, 9*time.Hour), dead("p", "app", 4, time.Hour), dead("p", "app", 3, 2*time.Hour),
				ctr("gone", "app", 0, StateRunning, time.Hour),
			}},
			pods: live("p"),
			want: summary{
				Remove: []string{"p/app/3:per_container_limit"},
				Keep:   []string{"gone/app/0:running", "p/app/4:newest_dead", "p/app/5:running"},
			},
		},
		"created and unknown containers are evictable; unknown ones are stopped first": {
			mutate: limits(1, -1),
			node: NodeState{Containers: []Container{
				ctr("p", "a", 0, StateCreated, 2*time.Hour), dead("p", "a", 1, time.Hour),
				ctr("p", "b", 0, StateUnknown, 2*time.Hour), dead("p", "b", 1, time.Hour),
			}},
			pods: live("p"),
			want: summary{
				Remove: []string{"p/a/0:per_container_limit", "p/b/0:per_container_limit+stop"},
				Keep:   []string{"p/a/1:within_limit", "p/b/1:within_limit"},
			},
		},
		"node limit: each unit is cut to maxContainers/units first": {
			// 7 dead > 6: every unit keeps at most 6/2 = 3, which leaves 4.
			mutate: limits(-1, 6),
			node:   NodeState{Containers: slices.Concat(restarts("p", "a", 6), restarts("q", "b", 1))},
			pods:   live("p", "q"),
			want: summary{
				Remove: []string{"p/a/0:node_limit", "p/a/1:node_limit", "p/a/2:node_limit"},
				Keep:   []string{"p/a/3:within_limit", "p/a/4:within_limit", "p/a/5:within_limit", "q/b/0:within_limit"},
			},
		},
		"node limit: the share is at least one per unit; the newest dead of each stays": {
			// 6 dead > 2: max(1, 2/3) = 1 per unit leaves 3. The kubelet
			// would then remove the oldest of those (p/a/1), but it is the
			// newest dead instance of a live pod's container: it stays
			// (see doc.go), and the node ends above maxContainers.
			mutate: limits(-1, 2),
			node: NodeState{Containers: []Container{
				dead("p", "a", 0, 5*time.Hour), dead("p", "a", 1, 4*time.Hour),
				dead("q", "b", 0, 5*time.Hour), dead("q", "b", 1, 3*time.Hour),
				dead("r", "c", 0, 5*time.Hour), dead("r", "c", 1, 3*time.Hour),
			}},
			pods: live("p", "q", "r"),
			want: summary{
				Remove: []string{"p/a/0:node_limit", "q/b/0:node_limit", "r/c/0:node_limit"},
				Keep:   []string{"p/a/1:newest_dead", "q/b/1:within_limit", "r/c/1:within_limit"},
			},
		},
		"node limit applies after the per-pod limit": {
			mutate: limits(1, 1),
			node:   NodeState{Containers: slices.Concat(restarts("p", "a", 2), []Container{dead("q", "b", 0, 30*time.Minute)})},
			pods:   live("p", "q"),
			want: summary{
				Remove: []string{"p/a/0:per_container_limit"},
				Keep:   []string{"p/a/1:newest_dead", "q/b/0:within_limit"},
			},
		},
		"node limit not reached: nothing more goes": {
			mutate: limits(-1, 3),
			node:   NodeState{Containers: restarts("p", "a", 3)},
			pods:   live("p"),
			want:   summary{Keep: []string{"p/a/0:within_limit", "p/a/1:within_limit", "p/a/2:within_limit"}},
		},
		"min age from creation": {
			mutate: func(c *config.ContainerGCConfiguration) {
				limits(1, -1)(c)
				c.MinAge = &metav1.Duration{Duration: time.Hour}
			},
			node: NodeState{Containers: []Container{dead("p", "a", 0, 2*time.Hour), dead("p", "a", 1, time.Hour), dead("p", "a", 2, 59*time.Minute)}},
			pods: live("p"),
			want: summary{
				Remove: []string{"p/a/0:per_container_limit"},
				Keep:   []string{"p/a/1:within_limit", "p/a/2:min_age"},
			},
		},
		"min age from exit": {
			mutate: func(c *config.ContainerGCConfiguration) {
				limits(1, -1)(c)
				c.MinAge = &metav1.Duration{Duration: time.Hour}
				c.MinAgeFrom = config.AgeFromExit
			},
			node: NodeState{Containers: []Container{
				with(dead("p", "a", 0, 6*time.Hour), func(c *Container) { c.FinishedAt = t0.Add(-3 * time.Hour) }),
				with(dead("p", "a", 1, 5*time.Hour), func(c *Container) { c.FinishedAt = t0.Add(-2 * time.Hour) }),
				with(dead("p", "a", 2, 5*time.Hour), func(c *Container) { c.FinishedAt = t0.Add(-10 * time.Minute) }),
				dead("p", "a", 3, 5*time.Hour), // exit time unknown: kept
				ctr("p", "b", 0, StateCreated, 2*time.Hour),
			}},
			pods: live("p"),
			want: summary{
				// By exit time a/0 and a/1 are old enough; a/1 is the newer.
				Remove: []string{"p/a/0:per_container_limit"},
				Keep:   []string{"p/a/1:within_limit", "p/a/2:min_age", "p/a/3:min_age", "p/b/0:within_limit"},
			},
		},
		"pod gone: every evictable container and every inactive sandbox go, whatever the limits": {
			// A pod that still runs something is not gone: see
			// TestPlanPodViewAgreesWithRuntime.
			mutate: limits(5, -1),
			node: NodeState{
				Containers: restarts("gone", "app", 3),
				Sandboxes: []Sandbox{
					sbx("gone", 0, false, 9*time.Hour), sbx("gone", 1, false, 8*time.Hour),
					with(sbx("gone", 3, false, 6*time.Hour), func(s *Sandbox) { s.ID = "gone/sb-web" }),
				},
			},
			pods: live(),
			want: summary{
				Remove:          []string{"gone/app/0:pod_gone", "gone/app/1:pod_gone", "gone/app/2:pod_gone"},
				RemoveSandboxes: []string{"gone/sb-web:pod_gone", "gone/sb0:pod_gone", "gone/sb1:pod_gone"},
			},
		},
		"pod gone still honours min age": {
			mutate: func(c *config.ContainerGCConfiguration) { c.MinAge = &metav1.Duration{Duration: time.Hour} },
			node:   NodeState{Containers: []Container{dead("gone", "a", 0, 2*time.Hour), dead("gone", "a", 1, time.Minute)}},
			pods:   live(),
			want:   summary{Remove: []string{"gone/a/0:pod_gone"}, Keep: []string{"gone/a/1:min_age"}},
		},
		"pod view not synced: nothing goes for pod gone, limits still apply": {
			node: NodeState{
				Containers: restarts("gone", "app", 2),
				Sandboxes:  []Sandbox{sbx("gone", 0, false, 9*time.Hour), sbx("gone", 1, false, 2*time.Hour), sbx("gone", 2, false, time.Hour)},
			},
			pods: PodView{Reason: ViewNotSynced},
			want: summary{
				Remove:          []string{"gone/app/0:per_container_limit"},
				Keep:            []string{"gone/app/1:within_limit"},
				RemoveSandboxes: []string{"gone/sb1:superseded"},
				KeepSandboxes:   []string{"gone/sb0:has_containers", "gone/sb2:newest"},
			},
		},
		"API unreachable: nothing goes for pod gone": {
			mutate: limits(-1, -1),
			node:   NodeState{Containers: restarts("gone", "app", 2), Sandboxes: []Sandbox{sbx("gone", 0, false, 9*time.Hour)}},
			pods:   PodView{Reason: ViewUnreachable, Live: map[string]bool{}, Deleted: map[string]bool{"gone": true}},
			want: summary{
				Keep:          []string{"gone/app/0:within_limit", "gone/app/1:within_limit"},
				KeepSandboxes: []string{"gone/sb0:has_containers"},
			},
		},
		"node-only: nothing goes for pod gone": {
			mutate: limits(-1, -1),
			node: NodeState{Containers: restarts("gone", "app", 1), Sandboxes: []Sandbox{
				sbx("gone", 0, false, 9*time.Hour), sbx("gone", 1, false, 8*time.Hour), sbx("gone", 2, false, 7*time.Hour),
			}},
			pods: NodeOnlyView(),
			want: summary{
				Keep:            []string{"gone/app/0:within_limit"},
				RemoveSandboxes: []string{"gone/sb1:superseded"},
				KeepSandboxes:   []string{"gone/sb0:has_containers", "gone/sb2:newest"},
			},
		},
		"sandboxes: a live pod keeps its newest and loses its other inactive ones": {
			node: NodeState{Sandboxes: []Sandbox{sbx("p", 0, false, 3*time.Hour), sbx("p", 1, false, 2*time.Hour), sbx("p", 2, false, time.Hour)}},
			pods: live("p"),
			want: summary{RemoveSandboxes: []string{"p/sb0:superseded", "p/sb1:superseded"}, KeepSandboxes: []string{"p/sb2:newest"}},
		},
		"sandboxes: a live pod whose newest sandbox is ready loses every inactive one": {
			node: NodeState{Sandboxes: []Sandbox{sbx("p", 0, false, 3*time.Hour), sbx("p", 1, false, 2*time.Hour), sbx("p", 2, true, time.Hour)}},
			pods: live("p"),
			want: summary{RemoveSandboxes: []string{"p/sb0:superseded", "p/sb1:superseded"}, KeepSandboxes: []string{"p/sb2:ready"}},
		},
		// The kubelet keeps the newest by creation alone, and removes
		// p/sb9 (attempt 9, dated before p/sb1 by a step of the clock
		// back): nodegc keeps the newest by attempt too (review
		// containers r14 R14-3).
		"sandboxes: newest by creation and by attempt, and one with a remaining container is active": {
			node: NodeState{
				Containers: []Container{dead("p", "app", 0, 5*time.Hour)}, // in p/sb0
				Sandboxes: []Sandbox{sbx("p", 0, false, 5*time.Hour), sbx("p", 1, false, time.Hour), sbx("p", 9, false, 2*time.Hour),
					sbx("p", 2, false, 3*time.Hour)},
			},
			pods: live("p"),
			want: summary{
				Keep:            []string{"p/app/0:within_limit"},
				RemoveSandboxes: []string{"p/sb2:superseded"},
				KeepSandboxes:   []string{"p/sb0:has_containers", "p/sb1:newest", "p/sb9:newest"},
			},
		},
		"sandboxes: a sandbox whose containers all go in this run is inactive": {
			node: NodeState{
				Containers: []Container{dead("gone", "app", 0, 5*time.Hour)},
				Sandboxes:  []Sandbox{sbx("gone", 0, false, 5*time.Hour)},
			},
			pods: live(),
			want: summary{Remove: []string{"gone/app/0:pod_gone"}, RemoveSandboxes: []string{"gone/sb0:pod_gone"}},
		},
		"only what the kubelet manages is considered": {
			mutate: limits(1, 0),
			node: NodeState{
				Containers: []Container{
					{ID: "plain", SandboxID: "plain-sb", State: StateExited, CreatedAt: t0.Add(-time.Hour)},
					{ID: "no-name", SandboxID: "plain-sb", PodUID: "gone", State: StateExited, CreatedAt: t0.Add(-time.Hour)},
				},
				Sandboxes: []Sandbox{{ID: "plain-sb", CreatedAt: t0.Add(-time.Hour)}, {ID: "other-sb", CreatedAt: t0.Add(-time.Hour)}},
			},
			pods: live(),
			want: summary{
				Keep:          []string{"no-name:unmanaged", "plain:unmanaged"},
				KeepSandboxes: []string{"other-sb:unmanaged", "plain-sb:unmanaged"},
			},
		},
	})
}
