package ownergc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
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
	for gr, res := range deletableResources(groups, ignored) {
		if gr != res.gvr.GroupResource() {
			t.Errorf("resource %s picked as %s", res.gvr, gr)
		}
		got[res.gvr.String()+" "+res.gvk.Kind] = res.namespaced
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
	ms := &monitorSet{r: r, byGR: map[schema.GroupResource]*monitor{}}
	if ms.synced(clk.Now()) {
		t.Error("synced without monitors")
	}
	a := &monitor{started: clk.Now(), res: resConfigMap}
	b := &monitor{started: clk.Now(), res: resPod}
	ms.byGR[resConfigMap.gvr.GroupResource()], ms.byGR[resPod.gvr.GroupResource()] = a, b
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
	ms := &monitorSet{r: r, ctx: t.Context(), byGR: map[schema.GroupResource]*monitor{}}
	nodes := newResource(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "Node", false)
	pods := &monitor{started: clk.Now(), res: resPod}
	cluster := &monitor{started: clk.Now(), res: nodes}
	ms.byGR[resPod.gvr.GroupResource()], ms.byGR[nodes.gvr.GroupResource()] = pods, cluster
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
	pods.listed() // a relist, applied
	pods.recovered()
	if got, want := ms.unsyncedFor(clk.Now(), ""), []string{"nodes (failing)"}; !slices.Equal(got, want) {
		t.Errorf("unsyncedFor after pods recovered = %v, want %v", got, want)
	}
	if got := counterByLabel(t, registry, "nodegc_owner_gc_monitor_errors_total", "resource"); got["pods"] != 1 || got["nodes"] != 1 {
		t.Errorf("monitor errors = %v, want pods 1 and nodes 1 (the EOF is not one)", got)
	}
}

// staticDiscovery is a discovery client that serves fixed groups and
// resources.
type staticDiscovery struct {
	discovery.DiscoveryInterfaceWithContext
	mu        sync.Mutex
	groups    []*metav1.APIGroup
	resources []*metav1.APIResourceList
}

func (d *staticDiscovery) set(groups []*metav1.APIGroup, resources []*metav1.APIResourceList) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.groups, d.resources = groups, resources
}

func (d *staticDiscovery) ServerGroupsAndResourcesWithContext(context.Context) ([]*metav1.APIGroup, []*metav1.APIResourceList, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.groups, d.resources, nil
}

// failingDiscovery is a discovery client whose chosen group versions fail,
// as client-go reports a group version it could not read: the group still
// lists the version, the version's resources are missing, and the error
// names it.
type failingDiscovery struct {
	discovery.DiscoveryInterfaceWithContext
	mu   sync.Mutex
	fail map[schema.GroupVersion]bool
}

// failing makes exactly gvs fail from now on.
func (d *failingDiscovery) failing(gvs ...schema.GroupVersion) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fail = map[schema.GroupVersion]bool{}
	for _, gv := range gvs {
		d.fail[gv] = true
	}
}

func (d *failingDiscovery) ServerGroupsAndResourcesWithContext(ctx context.Context) ([]*metav1.APIGroup, []*metav1.APIResourceList, error) {
	groups, resources, err := d.DiscoveryInterfaceWithContext.ServerGroupsAndResourcesWithContext(ctx)
	failed, partial := discovery.GroupDiscoveryFailedErrorGroups(err)
	if err != nil && !partial {
		return groups, resources, err
	}
	failed = maps.Clone(failed)
	if failed == nil {
		failed = map[schema.GroupVersion]error{}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var kept []*metav1.APIResourceList
	for _, l := range resources {
		gv, _ := schema.ParseGroupVersion(l.GroupVersion)
		if d.fail[gv] {
			failed[gv] = errors.New("the server is currently unable to handle the request")
			continue
		}
		kept = append(kept, l)
	}
	if len(failed) == 0 {
		return groups, kept, nil
	}
	return groups, kept, &discovery.ErrGroupDiscoveryFailed{Groups: failed}
}

// emptyResourceServer is a metaClient of a server whose every resource is
// empty: lists answer no object, watches stay open and quiet.
func emptyResourceServer(t *testing.T) *metaClient {
	t.Helper()
	empty := encodeProtobuf(t, withKind(&metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}, "PartialObjectMetadataList"))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Query().Get("watch") == "true" {
			w.Header().Set("Content-Type", runtime.ContentTypeProtobuf+";stream=watch")
			w.WriteHeader(http.StatusOK)
			<-req.Context().Done()
			return
		}
		w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
		_, _ = w.Write(empty)
	}))
	// A monitor stopped while it connects leaves the server a handshake
	// error to log: nothing to see.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	c, err := newMetaClient(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestOneMonitorPerResource: however discovery fails, a group and resource
// never has two monitors. example.com serves widgets in v2 (preferred) and
// v1. When example.com/v2 fails discovery, the v2 monitor is kept and no v1
// monitor starts beside it (its relist would delete from the graph the
// widgets the v2 monitor saw created after the v1 list, and its removal
// would turn every widget virtual while v2 still watches them). Only when
// discovery prefers another version, without a failure, does the monitor
// move to that version.
func TestOneMonitorPerResource(t *testing.T) {
	all := metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}
	widgets := func(gv string) *metav1.APIResourceList {
		return &metav1.APIResourceList{GroupVersion: gv, APIResources: []metav1.APIResource{
			{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: all}}}
	}
	group := func(preferred string) *metav1.APIGroup {
		return &metav1.APIGroup{Name: "example.com",
			Versions: []metav1.GroupVersionForDiscovery{
				{GroupVersion: "example.com/v2", Version: "v2"}, {GroupVersion: "example.com/v1", Version: "v1"}},
			PreferredVersion: metav1.GroupVersionForDiscovery{GroupVersion: "example.com/" + preferred, Version: preferred}}
	}
	static := &staticDiscovery{}
	static.set([]*metav1.APIGroup{group("v2")}, []*metav1.APIResourceList{widgets("example.com/v2"), widgets("example.com/v1")})
	d := &failingDiscovery{DiscoveryInterfaceWithContext: static}

	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	c := &Collector{clock: clk, failureGrace: 10 * time.Second, syncTimeout: time.Minute, requestTimeout: time.Minute, discovery: d}
	c.metrics = newMetrics(prometheus.NewRegistry(), c)
	c.watches = emptyResourceServer(t)
	r := &run{c: c, logger: testLogger(t), events: newEventQueue()}
	r.monitors = newMonitorSet(t.Context(), r)
	t.Cleanup(r.monitors.stopAll) // before the server closes: its watches wait for the monitors

	// round runs a discovery round and returns the monitored resources and
	// the resources whose objects the graph was told to forget.
	round := func() (monitored, forgotten []string) {
		t.Helper()
		_ = r.syncResources(t.Context())
		r.monitors.mu.Lock()
		for _, m := range r.monitors.byGR {
			monitored = append(monitored, m.res.gvr.String())
		}
		r.monitors.mu.Unlock()
		slices.Sort(monitored)
		if n := r.events.len(); n > 0 {
			evs, _ := r.events.pop(nil, n)
			for _, ev := range evs {
				if ev.typ == evResourceGone {
					forgotten = append(forgotten, ev.res.gvr.String())
				}
			}
		}
		return monitored, forgotten
	}
	v1 := "example.com/v1, Resource=widgets"
	v2 := "example.com/v2, Resource=widgets"
	steps := []struct {
		name      string
		do        func()
		monitored []string
		forgotten []string
	}{
		{name: "both versions served", do: func() {}, monitored: []string{v2}},
		{name: "the preferred version fails discovery", do: func() { d.failing(schema.GroupVersion{Group: "example.com", Version: "v2"}) },
			monitored: []string{v2}},
		{name: "and keeps failing", do: func() {}, monitored: []string{v2}},
		{name: "the preferred version is back", do: func() { d.failing() }, monitored: []string{v2}},
		{name: "discovery prefers v1", do: func() {
			static.set([]*metav1.APIGroup{group("v1")}, []*metav1.APIResourceList{widgets("example.com/v2"), widgets("example.com/v1")})
		}, monitored: []string{v1}, forgotten: []string{v2}},
	}
	for _, s := range steps {
		s.do()
		monitored, forgotten := round()
		if !slices.Equal(monitored, s.monitored) || !slices.Equal(forgotten, s.forgotten) {
			t.Errorf("%s: monitors %q, objects forgotten of %q; want monitors %q, forgotten %q", s.name, monitored, forgotten, s.monitored, s.forgotten)
		}
	}
}

// TestMonitorFollowsKindAndScope: a resource that discovery serves at the
// same group, version and plural with another kind, or another scope (a
// CRD deleted and created again within a discovery period), gets a new
// monitor, and the graph forgets what the old one delivered. Before, the
// old monitor stayed: new objects entered the graph with the old kind
// (their writes then failed for good as errUnknownKind), and a resource
// that turned namespaced was skipped by the finalizer holds of namespaced
// owners (an orphaning could then finish without seeing dependents there).
func TestMonitorFollowsKindAndScope(t *testing.T) {
	all := metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}
	widgets := func(kind string, namespaced bool) []*metav1.APIResourceList {
		return []*metav1.APIResourceList{{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{
			{Name: "widgets", Kind: kind, Namespaced: namespaced, Verbs: all}}}}
	}
	groups := []*metav1.APIGroup{{Name: "example.com",
		Versions:         []metav1.GroupVersionForDiscovery{{GroupVersion: "example.com/v1", Version: "v1"}},
		PreferredVersion: metav1.GroupVersionForDiscovery{GroupVersion: "example.com/v1", Version: "v1"}}}
	static := &staticDiscovery{}
	static.set(groups, widgets("Widget", true))

	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	c := &Collector{clock: clk, failureGrace: 10 * time.Second, syncTimeout: time.Minute, requestTimeout: time.Minute, discovery: static}
	c.metrics = newMetrics(prometheus.NewRegistry(), c)
	c.watches = emptyResourceServer(t)
	r := &run{c: c, logger: testLogger(t), events: newEventQueue()}
	r.monitors = newMonitorSet(t.Context(), r)
	t.Cleanup(r.monitors.stopAll) // before the server closes: its watches wait for the monitors

	// round runs a discovery round and returns the kind and scope of the
	// widgets monitor, and the kinds whose objects the graph was told to
	// forget.
	round := func() (monitored string, forgotten []string) {
		t.Helper()
		_ = r.syncResources(t.Context())
		r.monitors.mu.Lock()
		if m, ok := r.monitors.byGR[schema.GroupResource{Group: "example.com", Resource: "widgets"}]; ok {
			monitored = fmt.Sprintf("%s namespaced=%t", m.res.gvk.Kind, m.res.namespaced)
		}
		r.monitors.mu.Unlock()
		if n := r.events.len(); n > 0 {
			evs, _ := r.events.pop(nil, n)
			for _, ev := range evs {
				if ev.typ == evResourceGone {
					forgotten = append(forgotten, fmt.Sprintf("%s namespaced=%t", ev.res.gvk.Kind, ev.res.namespaced))
				}
			}
		}
		return monitored, forgotten
	}
	steps := []struct {
		name       string
		kind       string
		namespaced bool
		monitored  string
		forgotten  []string
	}{
		{name: "widgets served", kind: "Widget", namespaced: true, monitored: "Widget namespaced=true"},
		{name: "the same again", kind: "Widget", namespaced: true, monitored: "Widget namespaced=true"},
		{name: "another kind", kind: "Gizmo", namespaced: true, monitored: "Gizmo namespaced=true",
			forgotten: []string{"Widget namespaced=true"}},
		{name: "cluster-scoped now", kind: "Gizmo", namespaced: false, monitored: "Gizmo namespaced=false",
			forgotten: []string{"Gizmo namespaced=true"}},
	}
	for _, s := range steps {
		static.set(groups, widgets(s.kind, s.namespaced))
		monitored, forgotten := round()
		if monitored != s.monitored || !slices.Equal(forgotten, s.forgotten) {
			t.Errorf("%s: monitor %q, objects forgotten of %q; want monitor %q, forgotten %q", s.name, monitored, forgotten, s.monitored, s.forgotten)
		}
	}
}

// TestSyncedGauge: nodegc_owner_gc_synced (HasSynced, the leader's
// readiness) is 1 once discovery ran and every monitor has synced or
// failed: a failed monitor's resource may be missing from the graph. Its
// help says so. It said the graph held the initial state of every
// monitored resource, which a failed monitor's resource does not.
func TestSyncedGauge(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	c := &Collector{clock: clk, failureGrace: 10 * time.Second, syncTimeout: time.Minute}
	reg := prometheus.NewRegistry()
	c.metrics = newMetrics(reg, c)
	r := &run{c: c, logger: testLogger(t), graph: newGraph(), events: newEventQueue()}
	r.deletes, r.orphans = newQueue(c, queueDelete), newQueue(c, queueOrphan)
	t.Cleanup(func() { r.deletes.ShutDown(); r.orphans.ShutDown() })
	r.monitors = &monitorSet{r: r, ctx: t.Context(), byGR: map[schema.GroupResource]*monitor{}}
	cms, pods := &monitor{started: clk.Now(), res: resConfigMap}, &monitor{started: clk.Now(), res: resPod}
	r.monitors.byGR[resConfigMap.gvr.GroupResource()], r.monitors.byGR[resPod.gvr.GroupResource()] = cms, pods
	r.discovered.Store(true)
	c.current.Store(r)
	cms.markGraphSynced()
	clk.Step(time.Minute) // pods has not synced within the timeout: failed

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var help string
	var value float64 = -1
	for _, f := range families {
		if f.GetName() == "nodegc_owner_gc_synced" {
			help, value = f.GetHelp(), f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	if value != 1 || !c.HasSynced() {
		t.Fatalf("nodegc_owner_gc_synced = %v, HasSynced %t with configmaps synced and pods failed; want 1, true", value, c.HasSynced())
	}
	if !strings.Contains(help, "failed") || strings.Contains(help, "every monitored resource.") {
		t.Errorf("help %q: want it to say that a failed monitor's resource counts as synced, not that every monitored resource is in the graph", help)
	}
}

// TestFailedGroupVersionKeepsItsMapping: a group version that fails
// discovery keeps, in the REST mapper, the resources it served when this
// process last read it, as it keeps its monitor: the workers' writes and
// reads of the objects that monitor delivers find their resource. Before,
// every write to them failed with errUnknownKind, logged as an action
// error and counted, until discovery read the group again. A group
// version this process never read stays unknown (its items are parked).
// The resources discovery hands to the monitors are what it read.
func TestFailedGroupVersionKeepsItsMapping(t *testing.T) {
	all := metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}
	group := func(name string) *metav1.APIGroup {
		gv := metav1.GroupVersionForDiscovery{GroupVersion: schema.GroupVersion{Group: name, Version: "v1"}.String(), Version: "v1"}
		return &metav1.APIGroup{Name: name, Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv}
	}
	list := func(gv, name, kind string) *metav1.APIResourceList {
		return &metav1.APIResourceList{GroupVersion: gv, APIResources: []metav1.APIResource{{Name: name, Kind: kind, Namespaced: true, Verbs: all}}}
	}
	static := &staticDiscovery{}
	static.set([]*metav1.APIGroup{group(""), group("example.com"), group("new.example.com")},
		[]*metav1.APIResourceList{list("v1", "configmaps", "ConfigMap"), list("example.com/v1", "widgets", "Widget"),
			list("new.example.com/v1", "gadgets", "Gadget")})
	d := &failingDiscovery{DiscoveryInterfaceWithContext: static}
	exampleV1, newV1 := schema.GroupVersion{Group: "example.com", Version: "v1"}, schema.GroupVersion{Group: "new.example.com", Version: "v1"}
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	c := &Collector{clock: clk, failureGrace: 10 * time.Second, syncTimeout: time.Minute, requestTimeout: time.Minute, discovery: d}
	c.metrics = newMetrics(prometheus.NewRegistry(), c)
	c.watches = emptyResourceServer(t)
	r := &run{c: c, logger: testLogger(t), events: newEventQueue(), kick: make(chan struct{}, 1)}
	r.monitors = newMonitorSet(t.Context(), r)
	t.Cleanup(r.monitors.stopAll)
	widget := objectID{apiVersion: "example.com/v1", kind: "Widget", namespace: "ns", name: "w"}
	gadget := objectID{apiVersion: "new.example.com/v1", kind: "Gadget", namespace: "ns", name: "g"}

	d.failing(newV1) // never read by this process
	_ = r.syncResources(t.Context())
	d.failing(newV1, exampleV1)
	_ = r.syncResources(t.Context())
	gvr, ns, err := r.location(widget)
	if want := exampleV1.WithResource("widgets"); err != nil || gvr != want || ns != "ns" {
		t.Errorf("a widget while example.com/v1 fails discovery: %v %q %v; want %v in ns (its last read)", gvr, ns, err, want)
	}
	if _, _, err := r.location(gadget); !errors.Is(err, errUnknownKind) {
		t.Errorf("a gadget, new.example.com/v1 never read: %v; want errUnknownKind", err)
	}
	if got := r.monitors.resourceFor(exampleV1.WithResource("widgets")); got == nil {
		t.Error("the widgets monitor was not kept")
	}
	if got := r.monitors.resourceFor(newV1.WithResource("gadgets")); got != nil {
		t.Error("a monitor of gadgets started from nothing read")
	}

	// With aggregated discovery a stale group version is left out of its
	// group's versions (and a group with none left may be left out).
	agg := withLastRead([]*restmapper.APIGroupResources{apiGroup("", "v1", map[string][]metav1.APIResource{"v1": nil})},
		map[schema.GroupVersion][]metav1.APIResource{exampleV1: list("example.com/v1", "widgets", "Widget").APIResources})
	m, err := restmapper.NewDiscoveryRESTMapper(agg).RESTMapping(schema.GroupKind{Group: "example.com", Kind: "Widget"}, "v1")
	if err != nil || m.Resource != exampleV1.WithResource("widgets") {
		t.Errorf("mapping of a widget, example.com absent from discovery, last read kept: %v, %v", m, err)
	}
}
