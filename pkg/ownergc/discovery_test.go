package ownergc

import (
	"errors"
	"io"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/restmapper"
	testingclock "k8s.io/utils/clock/testing"
)

func apiGroup(name string, preferred string, versions map[string][]metav1.APIResource) *restmapper.APIGroupResources {
	g := &restmapper.APIGroupResources{VersionedResources: versions}
	g.Group.Name = name
	g.Group.PreferredVersion = metav1.GroupVersionForDiscovery{Version: preferred}
	for _, v := range slices.Sorted(maps.Keys(versions)) {
		g.Group.Versions = append(g.Group.Versions, metav1.GroupVersionForDiscovery{Version: v})
	}
	return g
}

func TestDeletableResources(t *testing.T) {
	all := metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}
	groups := []*restmapper.APIGroupResources{
		apiGroup("", "v1", map[string][]metav1.APIResource{"v1": {
			{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: all},
			{Name: "pods", Kind: "Pod", Namespaced: true, Verbs: all},
			{Name: "pods/status", Kind: "Pod", Namespaced: true, Verbs: all},
			{Name: "events", Kind: "Event", Namespaced: true, Verbs: all},
			{Name: "nodes", Kind: "Node", Verbs: all},
			{Name: "bindings", Kind: "Binding", Namespaced: true, Verbs: metav1.Verbs{"create"}},
			{Name: "componentstatuses", Kind: "ComponentStatus", Verbs: metav1.Verbs{"get", "list"}},
		}}),
		apiGroup("example.com", "v2", map[string][]metav1.APIResource{
			"v1": {{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: all}, {Name: "legacy", Kind: "Legacy", Verbs: all}},
			"v2": {{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: all}},
		}),
	}
	ignored := map[schema.GroupResource]struct{}{{Resource: "events"}: {}}
	got := map[string]bool{}
	for gvr, res := range deletableResources(groups, ignored) {
		got[gvr.String()+" "+res.gvk.Kind] = res.namespaced
	}
	want := map[string]bool{
		"/v1, Resource=configmaps ConfigMap":      true,
		"/v1, Resource=pods Pod":                  true,
		"/v1, Resource=nodes Node":                false,
		"example.com/v2, Resource=widgets Widget": true,  // the preferred version
		"example.com/v1, Resource=legacy Legacy":  false, // only served in another version
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("deletable resources (-want +got):\n%s", diff)
	}
}

// TestMonitorState covers what "synced" means: a monitor counts once its
// initial list is in the graph, or once it has failed (errors for the grace
// period, or no sync within the timeout), so that one broken resource does
// not hold back the others.
func TestMonitorState(t *testing.T) {
	const grace, timeout = 10 * time.Second, time.Minute
	start := time.Unix(1000, 0)
	tests := map[string]struct {
		synced  bool
		failing time.Duration // failing since start+failing; 0: no errors
		at      time.Duration // observed at start+at
		want    monitorState
	}{
		"fresh":                     {at: time.Second, want: stateSyncing},
		"synced":                    {synced: true, at: time.Second, want: stateSynced},
		"failing, within the grace": {failing: time.Second, at: 5 * time.Second, want: stateSyncing},
		"failing for the grace":     {failing: time.Second, at: 11 * time.Second, want: stateFailed},
		"no error but no sync within the timeout": {at: timeout, want: stateFailed},
		"synced after failing":                    {synced: true, failing: time.Second, at: 2 * timeout, want: stateSynced},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m := &monitor{started: start}
			if tc.failing > 0 {
				m.failing, m.failingSince = true, start.Add(tc.failing)
			}
			if tc.synced {
				m.markGraphSynced()
			}
			if got := m.state(start.Add(tc.at), grace, timeout); got != tc.want {
				t.Errorf("state = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestMonitorSetSynced: synced needs at least one monitor, and none still
// syncing.
func TestMonitorSetSynced(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	c := &Collector{clock: clk, failureGrace: 10 * time.Second, syncTimeout: time.Minute}
	r := &run{c: c, logger: testLogger(t)}
	ms := &monitorSet{r: r, byGVR: map[schema.GroupVersionResource]*monitor{}}
	if ms.synced(clk.Now()) {
		t.Error("synced without monitors")
	}
	a := &monitor{started: clk.Now(), res: resConfigMap}
	b := &monitor{started: clk.Now(), res: resPod}
	ms.byGVR[resConfigMap.gvr], ms.byGVR[resPod.gvr] = a, b
	a.markGraphSynced()
	if ms.synced(clk.Now()) {
		t.Error("synced while a monitor is syncing")
	}
	clk.Step(time.Minute)
	if !ms.synced(clk.Now()) {
		t.Error("not synced although the other monitor has failed (no sync within the timeout)")
	}
	if got, want := ms.states(clk.Now()), []int{stateSynced: 1, stateFailed: 1, stateFailing: 0}; !slices.Equal(got, want) {
		t.Errorf("states = %v, want %v", got, want)
	}
}

// TestMonitorFailingAfterSync: a synced monitor whose list or watch fails is
// failing (the graph may miss its changes) until a list or watch succeeds;
// unsyncedFor names it for owners that could have dependents there.
func TestMonitorFailingAfterSync(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	c := &Collector{clock: clk, failureGrace: 10 * time.Second, syncTimeout: time.Minute}
	registry := prometheus.NewRegistry()
	c.metrics = newMetrics(registry, c)
	r := &run{c: c, logger: testLogger(t)}
	ms := &monitorSet{r: r, ctx: t.Context(), byGVR: map[schema.GroupVersionResource]*monitor{}}
	nodes := newResource(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "Node", false)
	pods := &monitor{started: clk.Now(), res: resPod}
	cluster := &monitor{started: clk.Now(), res: nodes}
	ms.byGVR[resPod.gvr], ms.byGVR[nodes.gvr] = pods, cluster
	pods.markGraphSynced()
	cluster.markGraphSynced()

	ms.noteError(t.Context(), pods, io.EOF) // a watch that ended: no failure
	if got := ms.unsyncedFor(clk.Now(), "ns"); len(got) != 0 {
		t.Fatalf("unsyncedFor after a watch ended = %v, want none", got)
	}
	ms.noteError(t.Context(), pods, errors.New("connection refused"))
	ms.noteError(t.Context(), cluster, errors.New("conversion webhook failed"))
	if got := pods.state(clk.Now(), c.failureGrace, c.syncTimeout); got != stateFailing {
		t.Errorf("state after a failure = %s, want failing", monitorStates[got])
	}
	if got, want := ms.unsyncedFor(clk.Now(), "ns"), []string{"pods (failing)"}; !slices.Equal(got, want) {
		t.Errorf("unsyncedFor(namespaced owner) = %v, want %v (a cluster-scoped resource cannot hold its dependents)", got, want)
	}
	if got, want := ms.unsyncedFor(clk.Now(), ""), []string{"nodes (failing)", "pods (failing)"}; !slices.Equal(got, want) {
		t.Errorf("unsyncedFor(cluster-scoped owner) = %v, want %v", got, want)
	}
	clk.Step(time.Hour) // time alone heals nothing
	if got := pods.state(clk.Now(), c.failureGrace, c.syncTimeout); got != stateFailing {
		t.Errorf("state an hour later = %s, want failing", monitorStates[got])
	}
	pods.recovered()
	if got, want := ms.unsyncedFor(clk.Now(), ""), []string{"nodes (failing)"}; !slices.Equal(got, want) {
		t.Errorf("unsyncedFor after pods recovered = %v, want %v", got, want)
	}
	if got := counterByLabel(t, registry, "nodegc_owner_gc_monitor_errors_total", "resource"); got["pods"] != 1 || got["nodes"] != 1 {
		t.Errorf("monitor errors = %v, want pods 1 and nodes 1 (the EOF is not one)", got)
	}
}
