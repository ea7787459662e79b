package containers

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodegc/nodegc/pkg/config"
)

func maxAge(d time.Duration, then func(*config.ContainerGCConfiguration)) func(*config.ContainerGCConfiguration) {
	return func(c *config.ContainerGCConfiguration) {
		c.MaxAge = &metav1.Duration{Duration: d}
		if then != nil {
			then(c)
		}
	}
}

// TestPlanBeyond checks what the kubelet does not do: the maximum age of
// dead containers, which always keeps the newest dead container of a live
// pod's container.
func TestPlanBeyond(t *testing.T) {
	runPlanCases(t, map[string]planCase{
		"max age removes old dead containers but keeps the newest dead one": {
			mutate: maxAge(30*time.Minute, limits(-1, -1)),
			node:   NodeState{Containers: slices.Concat(restarts("p", "a", 3), []Container{dead("p", "b", 0, 30*time.Minute)})},
			pods:   live("p"),
			want: summary{
				Remove: []string{"p/a/0:max_age", "p/a/1:max_age"},
				Keep:   []string{"p/a/2:newest_dead", "p/b/0:within_limit"},
			},
		},
		"max age: the newest dead may be too young to count; the old ones still go": {
			mutate: maxAge(30*time.Minute, func(c *config.ContainerGCConfiguration) {
				limits(-1, -1)(c)
				c.MinAge = &metav1.Duration{Duration: 5 * time.Minute}
			}),
			node: NodeState{Containers: slices.Concat(restarts("p", "a", 2), []Container{dead("p", "a", 2, time.Minute)})},
			pods: live("p"),
			want: summary{
				Remove: []string{"p/a/0:max_age", "p/a/1:max_age"},
				Keep:   []string{"p/a/2:min_age"},
			},
		},
		"max age never removes the newest dead even when the pod view is unknown": {
			mutate: maxAge(30*time.Minute, limits(-1, -1)),
			node:   NodeState{Containers: restarts("p", "a", 2)},
			pods:   PodView{Reason: ViewUnreachable},
			want:   summary{Remove: []string{"p/a/0:max_age"}, Keep: []string{"p/a/1:newest_dead"}},
		},
		"max age counts from the exit with minAgeFrom Exited": {
			mutate: maxAge(time.Hour, func(c *config.ContainerGCConfiguration) {
				limits(-1, -1)(c)
				c.MinAgeFrom = config.AgeFromExit
			}),
			node: NodeState{Containers: []Container{
				with(dead("p", "a", 0, 9*time.Hour), func(c *Container) { c.FinishedAt = t0.Add(-30 * time.Minute) }),
				with(dead("p", "a", 1, 8*time.Hour), func(c *Container) { c.FinishedAt = t0.Add(-20 * time.Minute) }),
			}},
			pods: live("p"),
			want: summary{Keep: []string{"p/a/0:within_limit", "p/a/1:within_limit"}},
		},
		"max age protects the newest instance that ran, not a newer one never started": {
			mutate: maxAge(30*time.Minute, limits(-1, -1)),
			node: NodeState{Containers: slices.Concat(restarts("p", "a", 2), []Container{
				ctr("p", "a", 2, StateCreated, 40*time.Minute), ctr("p", "b", 0, StateCreated, 40*time.Minute),
			})},
			pods: live("p"),
			want: summary{
				Remove: []string{"p/a/0:max_age", "p/a/2:max_age"},
				Keep:   []string{"p/a/1:newest_dead", "p/b/0:newest_dead"},
			},
		},
		"max age does not protect the containers of a gone pod": {
			mutate: maxAge(time.Hour, nil),
			node:   NodeState{Containers: restarts("gone", "a", 2)},
			pods:   live(),
			want:   summary{Remove: []string{"gone/a/0:pod_gone", "gone/a/1:pod_gone"}},
		},
	})
}

// TestPlanPodGone checks when a pod counts as gone: only from an
// authoritative view, never for a static pod, and only when the watch saw
// it deleted or all it has on the node predates the view's list.
func TestPlanPodGone(t *testing.T) {
	static := func(s Sandbox) Sandbox { s.Source = "file"; return s }
	runPlanCases(t, map[string]planCase{
		"a static pod without its mirror pod is never gone": {
			mutate: limits(-1, -1),
			node:   NodeState{Containers: restarts("st", "a", 2), Sandboxes: []Sandbox{static(sbx("st", 0, false, 9*time.Hour)), static(sbx("st", 1, false, 8*time.Hour))}},
			pods:   live(),
			want: summary{
				Keep:          []string{"st/a/0:within_limit", "st/a/1:within_limit"},
				KeepSandboxes: []string{"st/sb0:has_containers", "st/sb1:newest"},
			},
		},
		"a pod newer than the view's list and not seen deleted is not gone": {
			node: NodeState{
				Containers: []Container{dead("new", "a", 0, 2*time.Hour)},
				Sandboxes:  []Sandbox{sbx("new", 0, false, 2*time.Hour)},
			},
			pods: with(live(), func(v *PodView) { v.ListedAt = t0.Add(-3 * time.Hour) }),
			want: summary{Keep: []string{"new/a/0:within_limit"}, KeepSandboxes: []string{"new/sb0:has_containers"}},
		},
		"a pod the watch saw deleted is gone even if newer than the list": {
			node: NodeState{
				Containers: []Container{dead("del", "a", 0, 2*time.Hour)},
				Sandboxes:  []Sandbox{sbx("del", 0, false, 2*time.Hour)},
			},
			pods: with(live(), func(v *PodView) { v.ListedAt = t0.Add(-3 * time.Hour); v.Deleted = map[string]bool{"del": true} }),
			want: summary{Remove: []string{"del/a/0:pod_gone"}, RemoveSandboxes: []string{"del/sb0:pod_gone"}},
		},
		"a live pod is not gone": {
			node: NodeState{Containers: []Container{dead("p", "a", 0, 2*time.Hour)}, Sandboxes: []Sandbox{sbx("p", 0, false, 2*time.Hour)}},
			pods: live("p"),
			want: summary{Keep: []string{"p/a/0:within_limit"}, KeepSandboxes: []string{"p/sb0:has_containers"}},
		},
	})
}

// TestPlanLogs checks pod log directories and dangling container log links.
func TestPlanLogs(t *testing.T) {
	dir := func(name, uid string, age time.Duration) PodLogDir {
		return PodLogDir{Name: name, PodUID: uid, ModTime: t0.Add(-age)}
	}
	link := func(name, id string, dangling bool) LogLink {
		return LogLink{Name: name, ContainerID: id, Dangling: dangling}
	}
	// cutLink is a dangling link whose name the kubelet's cut left no ID,
	// pointing at the log of attempt of container p/name.
	cutLink := func(linkName, name string, attempt uint32) LogLink {
		return LogLink{Name: linkName, Dangling: true, Target: &LogTarget{PodUID: "p", Container: name, Attempt: attempt}}
	}
	runPlanCases(t, map[string]planCase{
		"the log directory of a gone pod goes with its last container and sandbox": {
			node: NodeState{
				Containers: []Container{dead("gone", "a", 0, 2*time.Hour)},
				Sandboxes:  []Sandbox{sbx("gone", 0, false, 2*time.Hour)},
				LogDirs:    []PodLogDir{dir("ns_gone_gone", "gone", 2*time.Hour), dir("ns_p_p", "p", 2*time.Hour)},
			},
			pods: live("p"),
			want: summary{
				Remove: []string{"gone/a/0:pod_gone"}, RemoveSandboxes: []string{"gone/sb0:pod_gone"},
				RemoveLogDirs: []string{"ns_gone_gone:pod_gone"}, KeepLogDirs: []string{"ns_p_p:pod_live"},
			},
		},
		"the log directory of a deleted pod stays while the pod still runs something": {
			node: NodeState{
				Containers: []Container{ctr("gone", "a", 0, StateRunning, 2*time.Hour)},
				Sandboxes:  []Sandbox{sbx("gone", 0, true, 2*time.Hour)},
				LogDirs:    []PodLogDir{dir("ns_gone_gone", "gone", 2*time.Hour)},
			},
			pods: with(live(), func(v *PodView) { v.Deleted = map[string]bool{"gone": true} }),
			want: summary{
				Keep: []string{"gone/a/0:running"}, KeepSandboxes: []string{"gone/sb0:ready"},
				KeepLogDirs: []string{"ns_gone_gone:pod_running"},
			},
		},
		"the log directory of a gone pod stays while a container of it may be starting": {
			node: NodeState{
				Containers: []Container{ctr("gone", "a", 0, StateCreated, 10*time.Second)},
				Sandboxes:  []Sandbox{sbx("gone", 0, false, 2*time.Hour)},
				LogDirs:    []PodLogDir{dir("ns_gone_gone", "gone", 2*time.Hour)},
			},
			pods: with(live(), func(v *PodView) { v.Deleted = map[string]bool{"gone": true} }),
			want: summary{
				Keep: []string{"gone/a/0:starting"}, KeepSandboxes: []string{"gone/sb0:has_containers"},
				KeepLogDirs: []string{"ns_gone_gone:pod_active"},
			},
		},
		"an orphan log directory older than the list goes; a newer one stays": {
			node: NodeState{LogDirs: []PodLogDir{dir("ns_old_u1", "u1", 2*time.Hour), dir("ns_new_u2", "u2", -time.Minute)}},
			pods: live(),
			want: summary{RemoveLogDirs: []string{"ns_old_u1:pod_gone"}, KeepLogDirs: []string{"ns_new_u2:pod_live"}},
		},
		"log directories stay while the pod view is unknown or the pod is static": {
			node: NodeState{
				Sandboxes: []Sandbox{with(sbx("st", 0, true, time.Hour), func(s *Sandbox) { s.Source = "http" })},
				LogDirs:   []PodLogDir{dir("ns_st_st", "st", 2*time.Hour)},
			},
			pods: live(),
			want: summary{KeepSandboxes: []string{"st/sb0:ready"}, KeepLogDirs: []string{"ns_st_st:static_pod"}},
		},
		// The kubelet removed the sandboxes of a finished static pod (under
		// disk pressure) and its mirror pod is missing: its UID, 32 hex
		// digits as the kubelet makes for a static pod (the API server makes
		// UUIDs), still says static. (Before, its log directory went as
		// pod_gone.)
		"the log directory of a static pod without sandbox or mirror pod stays": {
			node: NodeState{LogDirs: []PodLogDir{
				dir("kube-system_etcd-n1_8f3c2e1d0b9a87654321fedcba987654", "8f3c2e1d0b9a87654321fedcba987654", 2*time.Hour),
				dir("ns_web_6f58246d-8219-4c2a-a0ed-86724aaec471", "6f58246d-8219-4c2a-a0ed-86724aaec471", 2*time.Hour),
			}},
			pods: live(),
			want: summary{
				RemoveLogDirs: []string{"ns_web_6f58246d-8219-4c2a-a0ed-86724aaec471:pod_gone"},
				KeepLogDirs:   []string{"kube-system_etcd-n1_8f3c2e1d0b9a87654321fedcba987654:static_pod"},
			},
		},
		"log directories stay while the pod view is not synced": {
			node: NodeState{LogDirs: []PodLogDir{dir("ns_old_u1", "u1", 2*time.Hour)}},
			pods: PodView{Reason: ViewNotSynced},
			want: summary{KeepLogDirs: []string{"ns_old_u1:pods_unknown"}},
		},
		"dangling links go unless their container has not exited": {
			node: NodeState{
				Containers: []Container{ctr("p", "run", 0, StateRunning, time.Hour), dead("p", "dead", 0, time.Minute)},
				LogLinks: []LogLink{
					link("p_ns_run-p/run/0.log", "p/run/0", true),
					link("p_ns_dead-p/dead/0.log", "p/dead/0", true),
					link("p_ns_x-unknown.log", "unknown", true),
					link("p_ns_fine-p/run/0.log", "p/run/0", false),
					link("cut.log", "", true),
				},
			},
			pods: live("p"),
			want: summary{
				Keep:        []string{"p/dead/0:within_limit", "p/run/0:running"},
				RemoveLinks: []string{"cut.log:dangling", "p_ns_dead-p/dead/0.log:dangling", "p_ns_x-unknown.log:dangling"},
				KeepLinks:   []string{"p_ns_run-p/run/0.log:not_exited"},
			},
		},
		"a link cut to a prefix of its container's ID counts as that container's": {
			node: NodeState{
				Containers: []Container{ctr("p", "run", 0, StateRunning, time.Hour), dead("p", "dead", 0, time.Minute)},
				LogLinks: []LogLink{
					link("long_ns_run-p/run/.log", "p/run/", true),  // 6 characters: the running container's
					link("long_ns_dead-p/dead.log", "p/dead", true), // the exited one's
					link("long_ns_short-p/ru.log", "p/ru", true),    // under 6: no container, as for the kubelet
				},
			},
			pods: live("p"),
			want: summary{
				Keep:        []string{"p/dead/0:within_limit", "p/run/0:running"},
				RemoveLinks: []string{"long_ns_dead-p/dead.log:dangling", "long_ns_short-p/ru.log:dangling"},
				KeepLinks:   []string{"long_ns_run-p/run/.log:not_exited"},
			},
		},
		// With a long pod name, namespace and container name, the cut
		// leaves no ID: the link names no container, but its target says
		// whose log it is. The running instance's log is missing for a
		// moment while the kubelet rotates it; before, its link went then.
		"a link cut to no ID stays while the container whose log it points at has not exited": {
			node: NodeState{
				Containers: []Container{ctr("p", "run", 1, StateRunning, time.Hour), dead("p", "run", 0, 2*time.Hour), dead("p", "dead", 0, time.Minute)},
				LogLinks:   []LogLink{cutLink("long_ns_run.log", "run", 1), cutLink("long_ns_dead.log", "dead", 0), cutLink("long_ns_old.log", "run", 0)},
			},
			pods: live("p"),
			want: summary{
				Keep:        []string{"p/dead/0:within_limit", "p/run/0:within_limit", "p/run/1:running"},
				RemoveLinks: []string{"long_ns_dead.log:dangling", "long_ns_old.log:dangling"},
				KeepLinks:   []string{"long_ns_run.log:not_exited"},
			},
		},
	})
}

// TestPodViewGone checks PodView.Gone point by point.
func TestPodViewGone(t *testing.T) {
	v := PodView{Authoritative: true, Live: map[string]bool{"live": true}, Deleted: map[string]bool{"del": true, "live": true}, ListedAt: t0}
	cases := map[string]struct {
		view   PodView
		uid    string
		newest time.Time
		want   bool
	}{
		"live":                        {v, "live", t0.Add(-time.Hour), false},
		"seen deleted":                {v, "del", t0.Add(time.Hour), true},
		"absent, older than the list": {v, "old", t0.Add(-time.Second), true},
		"absent, newer than the list": {v, "new", t0.Add(time.Second), false},
		"absent, at the list":         {v, "new", t0, false},
		"no creation time known":      {v, "old", time.Time{}, false},
		"not authoritative":           {with(v, func(v *PodView) { v.Authoritative = false }), "del", t0.Add(-time.Hour), false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.view.Gone(tc.uid, tc.newest); got != tc.want {
				t.Errorf("Gone(%q) = %v, want %v", tc.uid, got, tc.want)
			}
		})
	}
}
