package ownergc

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
)

// unmonitoredFixture is a run whose discovery serves configmaps and
// widgets, and a graph that the run's events (the monitors' and
// discovery's) are applied to.
type unmonitoredFixture struct {
	t       *testing.T
	r       *run
	tg      *testGraph
	static  *staticDiscovery
	widgets *resource
}

var allVerbs = metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}

func newUnmonitoredFixture(t *testing.T) *unmonitoredFixture {
	f := &unmonitoredFixture{t: t, static: &staticDiscovery{}, tg: newTestGraph(t),
		widgets: newResource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}, "Widget", true)}
	f.serve(allVerbs)
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	c := &Collector{clock: clk, failureGrace: 10 * time.Second, syncTimeout: time.Minute, requestTimeout: time.Minute,
		unsyncedHold: 10 * time.Minute, discovery: f.static}
	c.metrics = newMetrics(prometheus.NewRegistry(), c)
	c.watches = emptyResourceServer(t)
	f.r = &run{c: c, logger: testLogger(t), events: newEventQueue(), kick: make(chan struct{}, 1), graph: f.tg.g}
	f.r.monitors = newMonitorSet(t.Context(), f.r)
	t.Cleanup(f.r.monitors.stopAll)
	f.tg.b.now, f.tg.b.lostFor = clk.Now, c.unsyncedHold
	f.round()
	return f
}

// serve makes discovery list widgets with verbs (not at all if none).
func (f *unmonitoredFixture) serve(widgetVerbs metav1.Verbs) {
	groups := []*metav1.APIGroup{
		{Name: "", Versions: []metav1.GroupVersionForDiscovery{{GroupVersion: "v1", Version: "v1"}},
			PreferredVersion: metav1.GroupVersionForDiscovery{GroupVersion: "v1", Version: "v1"}},
	}
	resources := []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: allVerbs}}}}
	if widgetVerbs != nil {
		groups = append(groups, &metav1.APIGroup{Name: "example.com",
			Versions:         []metav1.GroupVersionForDiscovery{{GroupVersion: "example.com/v1", Version: "v1"}},
			PreferredVersion: metav1.GroupVersionForDiscovery{GroupVersion: "example.com/v1", Version: "v1"}})
		resources = append(resources, &metav1.APIResourceList{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{
			{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: widgetVerbs}}})
	}
	f.static.set(groups, resources)
}

// round runs a discovery round and applies the events queued so far
// (the monitors' of an empty API server, and what discovery pushed).
func (f *unmonitoredFixture) round() {
	f.t.Helper()
	_ = f.r.syncResources(f.t.Context())
	f.drain()
}

func (f *unmonitoredFixture) drain() {
	f.t.Helper()
	applyRunEvents(f.r, f.tg)
}

// applyRunEvents applies to tg the events r's workers pushed.
func applyRunEvents(r *run, tg *testGraph) {
	if n := r.events.len(); n > 0 {
		evs, _ := r.events.pop(nil, n)
		tg.apply(evs...)
	}
}

// TestForegroundOwnerWhoseResourceLeftMonitoringFinishes: a widget being
// deleted in the foreground waits for a blocking ConfigMap; discovery then
// lists widgets without watch (an aggregated API's change). The widget
// stays in the graph, so the ConfigMap's deletion queues it and a worker
// decides to remove its foregroundDeletion finalizer. Before, the widget
// turned virtual: nothing queued it, no worker could decide about it, and
// it kept the finalizer for good.
func TestForegroundOwnerWhoseResourceLeftMonitoringFinishes(t *testing.T) {
	f := newUnmonitoredFixture(t)
	owner := object("ns", "o", "o", deleting(), withFinalizers(metav1.FinalizerDeleteDependents))
	dep := object("ns", "d", "d", ownedBy(f.widgets, "o", "o", true), deleting(), withFinalizers("example.com/hold"))
	f.tg.apply(upsert(f.widgets, owner), upsert(resConfigMap, dep))
	f.tg.takeQueues()

	f.serve(metav1.Verbs{"get", "patch", "delete", "list"}) // no watch
	f.round()
	if f.r.monitors.get(f.widgets.gvr.GroupResource()) != nil {
		t.Fatal("widgets without watch still have a monitor")
	}
	f.tg.apply(del(resConfigMap, dep))
	deletes, _ := f.tg.takeQueues()
	v, ok := f.tg.g.itemView("o")
	t.Logf("after the blocking dependent's deletion: owner queued %v, owner has an item view %v", deletes["o"], ok)
	if !deletes["o"] || !ok {
		t.Fatal("the foreground owner whose resource left monitoring is not queued, or has no view: no worker removes its finalizer")
	}
	if p := decideDeletingDependents(&v); p.action != actRemoveFinalizer {
		t.Errorf("owner's plan = %s, want %s", p.action, actRemoveFinalizer)
	}
}

// TestOrphaningOwnerWhoseResourceLeftMonitoringFinishes: a widget being
// deleted with the orphan finalizer, with a ConfigMap dependent, whose
// resource discovery then lists without watch. The orphan worker still
// finds it orphaning, with its dependent to orphan. Before, it turned
// virtual: the worker found nothing to do, the dependent kept its
// reference and the widget its orphan finalizer for good.
func TestOrphaningOwnerWhoseResourceLeftMonitoringFinishes(t *testing.T) {
	f := newUnmonitoredFixture(t)
	owner := object("ns", "o", "o", deleting(), withFinalizers(metav1.FinalizerOrphanDependents))
	f.tg.apply(upsert(f.widgets, owner), upsert(resConfigMap, object("ns", "d", "d", ownedBy(f.widgets, "o", "o", false))))
	f.serve(metav1.Verbs{"get", "patch", "delete", "watch"}) // no list
	f.round()
	v, ok := f.tg.g.orphanView("o")
	t.Logf("orphan view of the owner after its resource left monitoring: ok %v, orphaning %v, dependents %d", ok, v.orphaning, len(v.dependents))
	if !ok || !v.orphaning || len(v.dependents) != 1 || v.dependents[0].id.uid != "d" {
		t.Fatal("the orphan worker finds no orphaning owner with its dependent: the dependent keeps its reference, the owner its finalizer")
	}
}

// TestDependentWhoseResourceLeftMonitoringIsOrphaned: a ConfigMap being
// deleted with the orphan finalizer, with a widget dependent whose
// resource discovery lists without delete. The orphan worker still sees
// the widget, to remove its reference, and no hold waits for widgets.
// Before, the widget left the graph: past the hold, the finalizer went
// without orphaning it, and once widgets were monitored again the widget,
// its reference dangling, would have been deleted. When widgets leave
// discovery, their objects turn virtual and the owner waits for them
// (bounded), as before; when they are monitored again, the objects their
// first list lacks are gone (TestUnmonitoredObjectsMonitoredAgain).
func TestDependentWhoseResourceLeftMonitoringIsOrphaned(t *testing.T) {
	f := newUnmonitoredFixture(t)
	f.tg.apply(upsert(resConfigMap, object("ns", "o", "o", deleting(), withFinalizers(metav1.FinalizerOrphanDependents))),
		upsert(f.widgets, object("ns", "d", "d", ownedBy(resConfigMap, "o", "o", false))))
	f.serve(metav1.Verbs{"get", "patch", "list", "watch"}) // no delete
	f.round()
	v, ok := f.tg.g.orphanView("o")
	lost := f.tg.g.lostDependents("o", f.r.c.clock.Now(), f.r.c.unsyncedHold)
	t.Logf("after widgets left monitoring: the owner's dependents to orphan %d, waits for lost resources %q", len(v.dependents), lost)
	if !ok || len(v.dependents) != 1 || v.dependents[0].id.uid != "d" {
		t.Error("the orphan worker does not see the widget dependent: it would not be orphaned")
	}
	if len(lost) != 0 {
		t.Errorf("the owner waits for %q, whose dependent is in the graph", lost)
	}

	f.serve(nil) // widgets leave discovery: as before, virtual, and waited for
	f.round()
	if n := f.tg.g.nodes["d"]; n != nil && n.observed() {
		t.Error("a widget of a resource that left discovery is still observed")
	}
	if lost := f.tg.g.lostDependents("o", f.r.c.clock.Now(), f.r.c.unsyncedHold); !slices.Equal(lost, []string{"widgets.example.com"}) {
		t.Errorf("after widgets left discovery the owner waits for %q, want widgets", lost)
	}
}

// verbsDiscovery is a discovery client that lists one resource without
// some of its verbs, as an aggregated API server may come to.
type verbsDiscovery struct {
	discovery.DiscoveryInterfaceWithContext
	gr    schema.GroupResource
	mu    sync.Mutex
	strip []string
}

// without makes discovery list the resource without verbs from now on
// (none: as served).
func (d *verbsDiscovery) without(verbs ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.strip = verbs
}

func (d *verbsDiscovery) ServerGroupsAndResourcesWithContext(ctx context.Context) ([]*metav1.APIGroup, []*metav1.APIResourceList, error) {
	groups, lists, err := d.DiscoveryInterfaceWithContext.ServerGroupsAndResourcesWithContext(ctx)
	d.mu.Lock()
	strip := d.strip
	d.mu.Unlock()
	if len(strip) == 0 {
		return groups, lists, err
	}
	out := make([]*metav1.APIResourceList, 0, len(lists))
	for _, l := range lists {
		gv, _ := schema.ParseGroupVersion(l.GroupVersion)
		if gv.Group != d.gr.Group {
			out = append(out, l)
			continue
		}
		c := l.DeepCopy()
		for i := range c.APIResources {
			if c.APIResources[i].Name == d.gr.Resource {
				c.APIResources[i].Verbs = slices.DeleteFunc(c.APIResources[i].Verbs, func(v string) bool { return slices.Contains(strip, v) })
			}
		}
		out = append(out, c)
	}
	return groups, out, err
}

// testResourceLeftMonitoring: discovery lists a CRD's resource without
// watch (an aggregated API's change) while objects of it are mid-deletion.
// A widget deleted in the foreground, whose blocking ConfigMap goes after
// the change, and one deleted with orphan, finish: the collector reads and
// patches them through the REST mapping. So do two widgets deleted after
// the change, in the foreground and with orphan, which their ConfigMap
// dependents' lookups find being deleted. A widget that depends on a
// ConfigMap deleted with orphan after the change is orphaned, and stays
// once widgets are monitored again. Before, the two owners kept their
// finalizers for good, and the dependent kept its reference (past the
// hold, the orphan finalizer went without it) and was deleted once its
// resource was monitored again; then the two widgets deleted after the
// change kept their finalizers for good (no event told the graph, and a
// lookup did not update its copy).
func testResourceLeftMonitoring(t *testing.T, env *itEnv) {
	ctx := t.Context()
	ns := env.namespace(t, "unmonitored")
	group := "ownergc-" + utilrand.String(5) + ".test.nodegc.io"
	env.createCRD(t, group, "widgets", "Widget", []any{crdVersion("v1", true)}, nil)
	crd := "widgets." + group
	t.Cleanup(func() { _ = env.dyn.Resource(crdGVR).Delete(context.Background(), crd, metav1.DeleteOptions{}) })
	widgets := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "widgets"}
	wref := func(w metav1.Object, block bool) metav1.OwnerReference {
		return ref(group+"/v1", "Widget", w, block)
	}
	widgetGone := func(name string) func(context.Context) (bool, error) {
		return gone(func(ctx context.Context) error {
			_, err := env.dyn.Resource(widgets).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
			return err
		})
	}
	deleteWidget := func(name string, policy metav1.DeletionPropagation) {
		t.Helper()
		if err := env.dyn.Resource(widgets).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
			t.Fatalf("delete Widget %s (%s): %v", name, policy, err)
		}
	}

	fgOwner := env.createCR(t, widgets, "Widget", ns, "fg-owner", nil)
	env.configMap(t, ns, "fg-dep", []metav1.OwnerReference{wref(fgOwner, true)}, "example.com/hold")
	orphanOwner := env.createCR(t, widgets, "Widget", ns, "orphan-owner", nil)
	env.configMap(t, ns, "orphan-dep", []metav1.OwnerReference{wref(orphanOwner, true)})
	lateFg := env.createCR(t, widgets, "Widget", ns, "late-fg-owner", nil)
	env.configMap(t, ns, "late-fg-dep", []metav1.OwnerReference{wref(lateFg, true)})
	lateOrphan := env.createCR(t, widgets, "Widget", ns, "late-orphan-owner", nil)
	env.configMap(t, ns, "late-orphan-dep", []metav1.OwnerReference{wref(lateOrphan, true)})
	cmOwner := env.configMap(t, ns, "cm-owner", nil)
	w := env.createCR(t, widgets, "Widget", ns, "w", []metav1.OwnerReference{cmRef(cmOwner, true)})

	cfg := testConfig()
	cfg.UnsyncedResourceHold = &metav1.Duration{Duration: 5 * time.Second}
	var d *verbsDiscovery
	gc := env.startCollector(t, cfg, func(c *Collector) {
		d = &verbsDiscovery{DiscoveryInterfaceWithContext: c.discovery, gr: widgets.GroupResource()}
		c.discovery = d
	})
	gc.waitObserved(t, w.GetUID(), "")
	gc.waitObserved(t, fgOwner.GetUID(), "")
	gc.waitObserved(t, lateFg.GetUID(), "")
	gc.waitObserved(t, lateOrphan.GetUID(), "")

	// The foreground owner waits for its dependent, which its own
	// finalizer keeps.
	deleteWidget("fg-owner", metav1.DeletePropagationForeground)
	eventually(t, 30*time.Second, "the foreground owner's dependent to be deleted", func(ctx context.Context) (bool, error) {
		cm, err := env.cs.CoreV1().ConfigMaps(ns).Get(ctx, "fg-dep", metav1.GetOptions{})
		return err == nil && cm.DeletionTimestamp != nil, err
	})
	// Right after a discovery round, widgets lose watch and the orphan
	// owner is deleted: its orphan finalizer is held until a round begun
	// after it, which no longer monitors widgets.
	r := gc.current.Load()
	last := r.roundDone.Load()
	eventually(t, 30*time.Second, "a discovery round to end", func(context.Context) (bool, error) { return r.roundDone.Load() > last, nil })
	d.without("watch")
	deleteWidget("orphan-owner", metav1.DeletePropagationOrphan)
	eventually(t, 30*time.Second, "widgets to lose their monitor", func(context.Context) (bool, error) { return !gc.hasMonitor(widgets), nil })

	env.removeFinalizers(t, ns, "fg-dep")
	// within reports a wait that times out as an error and goes on: each
	// of the three cases tells its own.
	within := func(what string, cond func(context.Context) (bool, error)) bool {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if ok, _ := cond(ctx); ok {
				return true
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("timed out after 30s waiting for %s", what)
		return false
	}
	within("the foreground owner to lose its finalizer and go", widgetGone("fg-owner"))
	if within("the orphan owner to lose its finalizer and go", widgetGone("orphan-owner")) {
		if refs := env.getCM(t, ns, "orphan-dep").OwnerReferences; len(refs) != 0 {
			t.Errorf("the orphan owner's dependent references %v; want it orphaned", refs)
		}
	}

	// Owners whose deletion begins after widgets lost their monitor: their
	// ConfigMap dependents' lookups (at least every maxRetryDelay; within
	// seconds here, so soon after the loss) find them being deleted.
	deleteWidget("late-fg-owner", metav1.DeletePropagationForeground)
	deleteWidget("late-orphan-owner", metav1.DeletePropagationOrphan)
	if within("the widget deleted in the foreground after the loss to go, and its dependent", widgetGone("late-fg-owner")) {
		within("the dependent of the widget deleted in the foreground after the loss to go", env.cmGone(ns, "late-fg-dep"))
	}
	if within("the widget deleted with orphan after the loss to go", widgetGone("late-orphan-owner")) {
		if refs := env.getCM(t, ns, "late-orphan-dep").OwnerReferences; len(refs) != 0 {
			t.Errorf("the dependent of the widget deleted with orphan after the loss references %v; want it orphaned", refs)
		}
	}

	// A dependent in the resource no longer monitored, of an owner
	// deleted with orphan.
	env.deleteCM(t, ns, "cm-owner", metav1.DeletePropagationOrphan)
	within("the ConfigMap deleted with orphan to go", env.cmGone(ns, "cm-owner"))
	orphaned := func(ctx context.Context) (bool, error) {
		got, err := env.dyn.Resource(widgets).Namespace(ns).Get(ctx, "w", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return got.GetUID() == w.GetUID() && len(got.GetOwnerReferences()) == 0, nil
	}
	if ok, err := orphaned(ctx); !ok {
		t.Errorf("the widget of the ConfigMap deleted with orphan is not orphaned (%v)", err)
	}
	d.without()
	eventually(t, 30*time.Second, "widgets to be monitored again", func(context.Context) (bool, error) { return gc.hasMonitor(widgets), nil })
	gc.waitIdle(t)
	if ok, err := orphaned(ctx); !ok {
		t.Errorf("once widgets are monitored again, the widget of the ConfigMap deleted with orphan is not there, orphaned (%v)", err)
	}
}

// TestUnmonitoredObjectsMonitoredAgain: once a resource whose objects the
// graph kept unmonitored is monitored again, its first list replaces them:
// the objects it lacks went meanwhile (their dependents are dangling), the
// others are monitored again. A live read that finds one gone drops it
// too, as a lookup at its identity that finds no object with its UID.
func TestUnmonitoredObjectsMonitoredAgain(t *testing.T) {
	f := newUnmonitoredFixture(t)
	f.tg.apply(upsert(f.widgets, object("ns", "w", "w")), upsert(f.widgets, object("ns", "w2", "w2")),
		upsert(resConfigMap, object("ns", "d", "d", ownedBy(f.widgets, "w", "w", false))),
		upsert(resConfigMap, object("ns", "d2", "d2", ownedBy(f.widgets, "w2", "w2", false))))
	f.serve(metav1.Verbs{"get", "list", "watch"}) // no delete
	f.round()
	if n := f.tg.g.nodes["w"]; n == nil || !n.observed() || !n.unmonitored() {
		t.Fatal("a widget is not kept, marked unmonitored, once widgets are listed without delete")
	}
	deletes, _ := f.tg.takeQueues()
	if !deletes["d"] {
		t.Error("the dependent of an unmonitored widget is not queued to look it up")
	}
	if v, _ := f.tg.g.itemView("d"); v.owners[0].state != ownerVirtual {
		t.Errorf("owner state of the unmonitored widget = %d, want ownerVirtual (looked up)", v.owners[0].state)
	}
	// A lookup of w2 at its identity finds no object with its UID.
	f.tg.apply(event{typ: evOwnerAbsent, owner: &ownerKey{uid: "w2", group: "example.com", kind: "Widget", namespace: "ns", name: "w2"}})
	if n := f.tg.g.nodes["w2"]; n == nil || !n.deleted() {
		t.Error("an unmonitored widget that a lookup found gone is not deleted in the graph")
	}
	// A refresh (a worker's read) updates what the graph keeps.
	f.tg.apply(event{typ: evRefresh, obj: object("ns", "w", "w", withRV("5"), deleting(), withFinalizers(metav1.FinalizerOrphanDependents))})
	if v, ok := f.tg.g.orphanView("w"); !ok || !v.orphaning || !v.unmonitored {
		t.Errorf("after a read of an orphaning unmonitored widget: orphan view %+v, %v; want orphaning, unmonitored", v, ok)
	}
	f.tg.apply(event{typ: evRefresh, obj: object("ns", "w", "w", withRV("4"))}) // older than what the graph holds
	if v, _ := f.tg.g.orphanView("w"); !v.orphaning {
		t.Error("an older read replaced a newer one")
	}
	// A lookup's read counts only at the node's identity.
	other := &ownerKey{uid: "w", group: "other.example.com", kind: "Widget", namespace: "ns", name: "w"}
	f.tg.apply(event{typ: evRefresh, obj: object("ns", "w", "w", withRV("6")), owner: other})
	if v, _ := f.tg.g.orphanView("w"); !v.orphaning {
		t.Error("a lookup's read at another identity replaced what the graph keeps")
	}
	if f.tg.g.keptUnmonitored(*other) {
		t.Error("keptUnmonitored at another identity")
	}
	at := &ownerKey{uid: "w", group: "example.com", kind: "Widget", namespace: "ns", name: "w"}
	if !f.tg.g.keptUnmonitored(*at) {
		t.Error("keptUnmonitored is false at the kept widget's identity")
	}
	f.tg.apply(event{typ: evRefresh, obj: object("ns", "w", "w", withRV("6"), deleting(), withFinalizers(metav1.FinalizerDeleteDependents)), owner: at})
	if v, _ := f.tg.g.itemView("w"); !v.deletingDependents || !v.unmonitored {
		t.Errorf("after a lookup's read of the widget, deleting in the foreground: %+v; want deletingDependents, unmonitored", v)
	}

	f.serve(allVerbs)
	f.round()
	deadline := time.Now().Add(30 * time.Second)
	for f.tg.g.nodes["w"] != nil && f.tg.g.nodes["w"].observed() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		f.drain()
	}
	if n := f.tg.g.nodes["w"]; n != nil && n.observed() {
		t.Error("a widget that the first list after widgets are monitored again lacks is still observed")
	}
	if len(f.tg.g.unmonitored) != 0 {
		t.Errorf("resources kept unmonitored after they are monitored again: %d", len(f.tg.g.unmonitored))
	}
}

// TestUnmonitoredOwnerIsExplainedAndFinished: a ConfigMap being deleted in
// the foreground, kept in the graph after discovery listed configmaps
// without watch, is seen by explain (its verdict says that its resource is
// no longer monitored) and by the stuck-deletion scan; once its blocking
// dependent goes, a worker reads it, removes its finalizer, and reads it
// again, to follow it until it is gone. Before, it left the graph:
// explain said "not watched", the scan never saw it, and no worker acted.
func TestUnmonitoredOwnerIsExplainedAndFinished(t *testing.T) {
	s := newRejectServer(t)
	r, tg := syncedRejectRun(t, s)
	ns := rejectNamespace
	fg := object(ns, "fg", "fg", deleting(), withFinalizers(metav1.FinalizerDeleteDependents))
	p := object(ns, "p", "p", ownedBy(resConfigMap, "fg", "fg", true))
	s.refuse("fg", metav1.Status{}, fg)
	s.accept("fg")
	tg.apply(upsert(resConfigMap, fg), upsert(resPod, p))
	tg.apply(event{typ: evResourceUnmonitored, res: resConfigMap})
	id := objectID{uid: "fg", apiVersion: "v1", kind: "ConfigMap", namespace: ns, name: "fg"}

	e, err := r.explain(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("explain: %s %q", e.Code, e.Verdict)
	if e.Code != CodeWaitsForDependents || !e.Unmonitored || !strings.Contains(e.Verdict, "no longer monitored") {
		t.Errorf("explain of the unmonitored foreground owner: %s %q (unmonitored %v); want %s saying its resource is no longer monitored",
			e.Code, e.Verdict, e.Unmonitored, CodeWaitsForDependents)
	}
	if !slices.ContainsFunc(r.graph.deletingObjects(), func(o deletingObject) bool { return o.id.uid == "fg" }) {
		t.Error("the stuck-deletion scan does not see the unmonitored foreground owner")
	}

	tg.apply(del(resPod, p))
	out := r.attemptToDelete(t.Context(), "fg")
	// Still being deleted with its finalizer as this server answers, it is
	// read again after a delay of its own (not a retry of the queue's
	// shared bucket: TestUnmonitoredTerminatingIsPolledOnlyWhenWaitedOn).
	if out.retry || out.after <= 0 || s.count(http.MethodPatch, "fg") != 1 || s.count(http.MethodGet, "fg") < 2 {
		t.Errorf("worker on the unmonitored owner: outcome %+v, %d PATCH, %d GET; want the finalizer patched once, read before and after, and read again later (still being deleted)",
			out, s.count(http.MethodPatch, "fg"), s.count(http.MethodGet, "fg"))
	}
}

// TestUnmonitoredResourceThatCannotBeReadIsGone: a resource whose objects
// the graph keeps unmonitored is forgotten, as one that left discovery,
// once discovery lists it without get too: its objects cannot be read,
// and they turn virtual (their owners wait for them, bounded, as for a
// resource that left discovery). A resource listed without get from the
// start of its loss is forgotten at once.
func TestUnmonitoredResourceThatCannotBeReadIsGone(t *testing.T) {
	for name, steps := range map[string][]metav1.Verbs{
		"listed without watch, then without get": {{"get", "list", "delete"}, {"list", "delete"}},
		"listed without watch nor get":           {{"list", "delete"}},
	} {
		t.Run(name, func(t *testing.T) {
			f := newUnmonitoredFixture(t)
			f.tg.apply(upsert(resConfigMap, object("ns", "o", "o")), upsert(f.widgets, object("ns", "w", "w", ownedBy(resConfigMap, "o", "o", false))))
			for _, verbs := range steps {
				f.serve(verbs)
				f.round()
			}
			if n := f.tg.g.nodes["w"]; n != nil && n.observed() {
				t.Error("a widget of a resource listed without get is still observed")
			}
			if lost := f.tg.g.lostDependents("o", f.r.c.clock.Now(), f.r.c.unsyncedHold); !slices.Equal(lost, []string{"widgets.example.com"}) {
				t.Errorf("the widget's owner waits for %q, want widgets", lost)
			}
			if len(f.tg.g.unmonitored) != 0 {
				t.Errorf("resources kept unmonitored: %d, want none", len(f.tg.g.unmonitored))
			}
		})
	}
}

// TestOwnerDeletedAfterItsResourceLeftMonitoringIsSeenByALookup: a
// ConfigMap kept in the graph after discovery listed configmaps without
// watch is then deleted in the foreground, or with orphan: no event tells
// the graph. Its Pod dependent looks it up (one GET), and what the lookup
// read refreshes the graph's copy: the owner is queued (to the delete or
// the orphan worker), the stuck-deletion scan sees it, and a worker
// finishes it. Before, the lookup only classified the owner: nothing
// queued it, the scan read the stale copy, and its finalizer stayed for
// good.
func TestOwnerDeletedAfterItsResourceLeftMonitoringIsSeenByALookup(t *testing.T) {
	for name, finalizer := range map[string]string{
		"foreground": metav1.FinalizerDeleteDependents,
		"orphan":     metav1.FinalizerOrphanDependents,
	} {
		t.Run(name, func(t *testing.T) {
			s := newRejectServer(t)
			r, tg := syncedRejectRun(t, s)
			ns := rejectNamespace
			p := object(ns, "p", "p", ownedBy(resConfigMap, "o", "o", true))
			tg.apply(upsert(resConfigMap, object(ns, "o", "o")), upsert(resPod, p))
			tg.apply(event{typ: evResourceUnmonitored, res: resConfigMap})
			tg.takeQueues()

			// The owner's deletion begins: only the API server knows.
			s.refuse("o", metav1.Status{}, object(ns, "o", "o", withRV("2"), deleting(), withFinalizers(finalizer)))
			s.accept("o")
			s.refuse("p", metav1.Status{}, p)
			s.accept("p")
			drain := func() { applyRunEvents(r, tg) }
			r.attemptToDelete(t.Context(), "p") // the dependent's lookup
			drain()
			deletes, orphans := tg.takeQueues()
			queued := deletes["o"]
			if finalizer == metav1.FinalizerOrphanDependents {
				queued = orphans["o"]
			}
			scanned := slices.ContainsFunc(r.graph.deletingObjects(), func(o deletingObject) bool { return o.id.uid == "o" })
			t.Logf("after the dependent's lookup (%d GET): owner queued %v, stuck scan sees it %v", s.count(http.MethodGet, "o"), queued, scanned)
			if s.count(http.MethodGet, "o") != 1 {
				t.Errorf("the dependent read its owner %d times, want once", s.count(http.MethodGet, "o"))
			}
			if !queued || !scanned {
				t.Fatal("the owner whose deletion began after its resource left monitoring is not queued, or not seen by the stuck scan: it keeps its finalizer for good")
			}

			if finalizer == metav1.FinalizerDeleteDependents {
				if s.count(http.MethodDelete, "p") != 1 {
					t.Errorf("the blocking dependent of the foreground owner: %d DELETE, want 1", s.count(http.MethodDelete, "p"))
				}
				tg.apply(del(resPod, p))
				r.attemptToDelete(t.Context(), "o")
			} else {
				r.attemptToOrphan(t.Context(), "o")
				if s.count(http.MethodPatch, "p") != 1 {
					t.Errorf("the orphaning owner's dependent: %d PATCH, want 1 (orphaned)", s.count(http.MethodPatch, "p"))
				}
			}
			if s.count(http.MethodPatch, "o") != 1 {
				t.Errorf("the owner: %d PATCH, want its finalizer removed once", s.count(http.MethodPatch, "o"))
			}
		})
	}
}

// syncedRejectRun is rejectRun on s, with a discovery round done, pods
// monitored and synced (so is the run), and Events recorded.
func syncedRejectRun(t *testing.T, s *rejectServer) (*run, *testGraph) {
	t.Helper()
	r, tg, _, _ := rejectRun(t, s)
	r.recorder = record.NewFakeRecorder(10)
	r.roundsStarted.Add(1)
	r.roundDone.Store(1)
	r.discovered.Store(true)
	pods := &monitor{started: r.c.clock.Now(), res: resPod}
	pods.markGraphSynced()
	r.monitors.byGR[resPod.gvr.GroupResource()] = pods
	return r, tg
}

// TestUnmonitoredTerminatingPollPace: an object kept unmonitored that
// stays in deletion (someone else's finalizer) is read again, since no
// event would tell when it goes or changes, after a delay of its own
// (outcome.after), not through the delete queue's retries, whose shared
// bucket (10 a second) thousands of such objects held for every other
// retry. Where the collector waits on it (its own foregroundDeletion or
// orphan finalizer, dependents to collect once it goes, a blocking
// reference to an owner deleting in the foreground), from a second
// growing to maxUnmonitoredPoll; otherwise every idleUnmonitoredPoll.
// Before, every one was retried through the shared bucket for good; then,
// for a while, one nobody waited on was not read again at all
// (TestUnmonitoredRedeleteIsSeen).
func TestUnmonitoredTerminatingPollPace(t *testing.T) {
	ns := rejectNamespace
	for name, tc := range map[string]struct {
		obj    *metav1.PartialObjectMetadata
		others []event // applied before the object's resource is unmonitored
		polled bool    // waited on: at the pace of polls
	}{
		"someone else's finalizer": {obj: object(ns, "t", "t", deleting(), withFinalizers("example.com/hold"))},
		"its own foreground finalizer": {obj: object(ns, "t", "t", deleting(), withFinalizers(metav1.FinalizerDeleteDependents, "example.com/hold")),
			others: []event{upsert(resPod, object(ns, "p", "p", ownedBy(resConfigMap, "t", "t", true)))}, polled: true},
		"dependents to collect": {obj: object(ns, "t", "t", deleting(), withFinalizers("example.com/hold")),
			others: []event{upsert(resPod, object(ns, "p", "p", ownedBy(resConfigMap, "t", "t", false)))}, polled: true},
		"blocking a foreground owner": {obj: object(ns, "t", "t", ownedBy(resPod, "o", "o", true), deleting(), withFinalizers("example.com/hold")),
			others: []event{upsert(resPod, object(ns, "o", "o", deleting(), withFinalizers(metav1.FinalizerDeleteDependents)))}, polled: true},
	} {
		t.Run(name, func(t *testing.T) {
			s := newRejectServer(t)
			r, tg := syncedRejectRun(t, s)
			tg.apply(append(tc.others, upsert(resConfigMap, tc.obj))...)
			tg.apply(event{typ: evResourceUnmonitored, res: resConfigMap})
			tg.takeQueues()
			s.refuse("t", metav1.Status{}, tc.obj) // what a GET reads
			for i := range 3 {
				out := r.attemptToDelete(t.Context(), "t")
				t.Logf("attempt %d: outcome %+v after %d GET", i, out, s.count(http.MethodGet, "t"))
				if out.retry {
					t.Fatal("retried through the delete queue's shared bucket")
				}
				if want := time.Second << i; tc.polled && out.after != want {
					t.Errorf("attempt %d: read again after %v; want %v (polls)", i, out.after, want)
				}
				if !tc.polled && out.after != idleUnmonitoredPoll {
					t.Errorf("attempt %d: read again after %v; want %v", i, out.after, idleUnmonitoredPoll)
				}
			}
		})
	}
}

// TestUnmonitoredRedeleteIsSeen: an object kept unmonitored, stuck in
// deletion on someone else's finalizer with nothing of the collector's
// waiting on it, is deleted again with propagation Foreground
// (kube-apiserver adds foregroundDeletion to an object being deleted);
// then the other finalizer goes. No event tells the collector, and no
// dependent looks it up. Before, it was read once and never again, so
// it kept foregroundDeletion for good, unseen by the stuck scan, while
// explain promised its removal. Now the next read, due
// idleUnmonitoredPoll later, sees the finalizer, and the collector
// removes it (no dependents).
func TestUnmonitoredRedeleteIsSeen(t *testing.T) {
	ns := rejectNamespace
	s := newRejectServer(t)
	r, tg := syncedRejectRun(t, s)
	stuck := object(ns, "t", "t", deleting(), withFinalizers("example.com/hold"), withRV("10"))
	tg.apply(upsert(resConfigMap, stuck))
	tg.apply(event{typ: evResourceUnmonitored, res: resConfigMap})
	tg.takeQueues()
	s.refuse("t", metav1.Status{}, stuck)
	if out := r.attemptToDelete(t.Context(), "t"); out.after != idleUnmonitoredPoll {
		t.Fatalf("stuck on someone else's finalizer: outcome %+v; want read again after %v", out, idleUnmonitoredPoll)
	}
	applyRunEvents(r, tg)
	s.refuse("t", metav1.Status{}, object(ns, "t", "t", deleting(), withFinalizers(metav1.FinalizerDeleteDependents), withRV("12")))
	s.accept("t")
	out := r.attemptToDelete(t.Context(), "t") // idleUnmonitoredPoll later
	if got := s.count(http.MethodPatch, "t"); got != 1 {
		t.Errorf("the read after the re-delete: %d PATCH of t, outcome %+v; want the foregroundDeletion finalizer removed", got, out)
	}
}

// TestUnmonitoredReadErrorIsPolled: an object kept unmonitored whose read
// fails (its API's backend down, a 403) is tried again at the pace of its
// own polls, not through the delete queue's retries, whose shared bucket
// thousands of such objects would hold for every other retry while the
// failure lasts. Before, each failed read was a retry.
func TestUnmonitoredReadErrorIsPolled(t *testing.T) {
	ns := rejectNamespace
	s := newRejectServer(t)
	r, tg := syncedRejectRun(t, s)
	tg.apply(upsert(resPod, object(ns, "p", "p", ownedBy(resConfigMap, "t", "t", false))),
		upsert(resConfigMap, object(ns, "t", "t", deleting(), withFinalizers("example.com/hold"))))
	tg.apply(event{typ: evResourceUnmonitored, res: resConfigMap})
	tg.takeQueues()
	s.refuse("t", metav1.Status{}, nil) // no object: every GET of t fails (400)
	for i := range 3 {
		out := r.attemptToDelete(t.Context(), "t")
		if want := (outcome{after: time.Second << i}); out != want || s.count(http.MethodGet, "t") != i+1 {
			t.Errorf("attempt %d: outcome %+v after %d GETs; want %+v after %d", i, out, s.count(http.MethodGet, "t"), want, i+1)
		}
	}
}
