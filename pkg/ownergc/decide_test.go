package ownergc

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/restmapper"
	testingclock "k8s.io/utils/clock/testing"
)

// TestJudgeRef covers what the graph alone may say about a reference, in
// particular that nothing unobserved is ever taken as absent (safety rule 3).
func TestJudgeRef(t *testing.T) {
	cmOwner := func(ns string) objectID {
		return objectID{uid: "o", apiVersion: "v1", kind: "ConfigMap", namespace: ns, name: "owner"}
	}
	ref := ownerView{uid: "o", apiVersion: "v1", kind: "ConfigMap", name: "owner"}
	with := func(state ownerState, node objectID, waiting bool) ownerView {
		o := ref
		o.state, o.node, o.waiting = state, node, waiting
		return o
	}
	key := func(ns string) *ownerKey {
		return &ownerKey{uid: "o", kind: "ConfigMap", name: "owner", namespace: ns}
	}
	unsure := func(o ownerView) ownerView {
		o.unsure = true
		return o
	}
	renamed := func(id objectID) objectID {
		id.name = "renamed"
		return id
	}
	// thing is a reference to a Thing, a kind discovery does not know, whose
	// node the graph holds in state at namespace ns.
	thing := func(state ownerState, ns string) ownerView {
		return ownerView{uid: "o", apiVersion: "example.com/v1", kind: "Thing", name: "t", state: state,
			node: objectID{uid: "o", apiVersion: "example.com/v1", kind: "Thing", namespace: ns, name: "t"}}
	}
	tests := map[string]struct {
		itemNS  string
		owner   ownerView
		want    verdict
		wantErr error
	}{
		"observed owner: solid": {
			itemNS: "ns", owner: with(ownerObserved, cmOwner("ns"), false),
			want: verdict{class: classSolid, reason: reasonObserved},
		},
		"observed owner deleting its dependents: waiting": {
			itemNS: "ns", owner: with(ownerObserved, cmOwner("ns"), true),
			want: verdict{class: classWaiting, reason: reasonWaiting},
		},
		// An etcd restore may have brought the owner back not being
		// deleted; kube-controller-manager reads every owner. Before, the
		// dependent went as the graph's waiting owner's (review ownergc
		// r10 F1).
		"observed owner deleting its dependents, its monitor not following: a fresh lookup": {
			itemNS: "ns", owner: unsure(with(ownerObserved, cmOwner("ns"), true)),
			want: verdict{lookup: key("ns"), fresh: true},
		},
		"observed owner under another name deleting its dependents, its monitor not following: a fresh lookup": {
			itemNS: "ns", owner: unsure(with(ownerObserved, renamed(cmOwner("ns")), true)),
			want: verdict{lookup: key("ns"), fresh: true},
		},
		"observed deletion: dangling without a lookup": {
			itemNS: "ns", owner: with(ownerDeleted, cmOwner("ns"), false),
			want: verdict{class: classDangling, reason: reasonDeleted},
		},
		// The monitor of the owner's resource does not follow the API
		// server now (its watch broke): an etcd restore may have brought
		// the owner back. Before, the dependent went on the tombstone.
		"observed deletion, the owner's monitor not following: a fresh lookup": {
			itemNS: "ns", owner: unsure(with(ownerDeleted, cmOwner("ns"), false)),
			want: verdict{lookup: key("ns"), fresh: true},
		},
		"found absent at its identity, the owner's monitor not following: a fresh lookup": {
			itemNS: "ns", owner: unsure(with(ownerAbsentAtIdentity, cmOwner("ns"), false)),
			want: verdict{lookup: key("ns"), fresh: true},
		},
		"virtual, the owner's monitor not following: a fresh lookup (no cached absence)": {
			itemNS: "ns", owner: unsure(with(ownerVirtual, cmOwner("ns"), false)),
			want: verdict{lookup: key("ns"), fresh: true},
		},
		// The reference's version is no longer served: the owner is read
		// at the version its deletion was observed at. Before, the
		// dependent waited (unknown kind) while the monitor lagged.
		"observed deletion, the owner's monitor not following, a version no longer served: a fresh lookup at the node's": {
			itemNS: "ns",
			owner: unsure(ownerView{uid: "o", apiVersion: "v1beta1", kind: "ConfigMap", name: "owner", state: ownerDeleted,
				node: cmOwner("ns")}),
			want: verdict{lookup: key("ns"), fresh: true, apiVersion: "v1"},
		},
		"owner UID lives in another namespace: dangling": {
			itemNS: "ns", owner: with(ownerObserved, cmOwner("other"), false),
			want: verdict{class: classDangling, reason: reasonOtherNamespace},
		},
		"virtual owner: only a lookup can tell": {
			itemNS: "ns", owner: with(ownerVirtual, cmOwner("ns"), false),
			want: verdict{lookup: key("ns")},
		},
		"owner not in the graph at all: only a lookup can tell": {
			itemNS: "ns", owner: ref,
			want: verdict{lookup: key("ns")},
		},
		"virtual owner verified absent at these coordinates: dangling": {
			itemNS: "ns", owner: with(ownerAbsentAtIdentity, cmOwner("ns"), false),
			want: verdict{class: classDangling, reason: reasonNotFound},
		},
		"virtual owner verified absent in another namespace: lookup": {
			itemNS: "ns", owner: with(ownerAbsentAtIdentity, cmOwner("other"), false),
			want: verdict{lookup: key("ns")},
		},
		// An owner observed alive with the UID, group and kind, where the
		// item may have an owner, under another name than the reference
		// states (a typo): it exists, so the reference holds (safety rule
		// 4); kube-controller-manager would look the stated name up, find
		// nothing and delete the item.
		"observed owner under another name, in the item's namespace: solid": {
			itemNS: "ns", owner: with(ownerObserved, renamed(cmOwner("ns")), false),
			want: verdict{class: classSolid, reason: reasonMisnamed, misnamed: true},
		},
		"observed owner under another name, deleting its dependents: waiting": {
			itemNS: "ns", owner: with(ownerObserved, renamed(cmOwner("ns")), true),
			want: verdict{class: classWaiting, reason: reasonWaiting, misnamed: true},
		},
		"observed cluster-scoped owner under another name: solid": {
			itemNS: "ns",
			owner: ownerView{uid: "n", apiVersion: "v1", kind: "Node", name: "node1", state: ownerObserved,
				node: objectID{uid: "n", apiVersion: "v1", kind: "Node", name: "node2"}},
			want: verdict{class: classSolid, reason: reasonMisnamed, misnamed: true},
		},
		"cluster-scoped item, observed cluster-scoped owner under another name: solid": {
			itemNS: "",
			owner: ownerView{uid: "n", apiVersion: "v1", kind: "Node", name: "node1", state: ownerObserved,
				node: objectID{uid: "n", apiVersion: "v1", kind: "Node", name: "node2"}},
			want: verdict{class: classSolid, reason: reasonMisnamed, misnamed: true},
		},
		"observed owner under another name and kind: lookup": {
			itemNS: "ns",
			owner:  with(ownerObserved, objectID{uid: "o", apiVersion: "v1", kind: "Secret", namespace: "ns", name: "renamed"}, false),
			want:   verdict{lookup: key("ns")},
		},
		"observed owner under another name in another namespace: lookup": {
			itemNS: "ns", owner: with(ownerObserved, renamed(cmOwner("other")), false),
			want: verdict{lookup: key("ns")},
		},
		"observed owner of a kind discovery no longer knows, under another name: solid": {
			itemNS: "ns",
			owner: ownerView{uid: "o", apiVersion: "example.com/v1", kind: "Thing", name: "t", state: ownerObserved,
				node: objectID{uid: "o", apiVersion: "example.com/v1", kind: "Thing", namespace: "ns", name: "renamed"}},
			want: verdict{class: classSolid, reason: reasonMisnamed, misnamed: true},
		},
		"cluster-scoped owner kind: looked up without namespace": {
			itemNS: "ns",
			owner:  ownerView{uid: "n", apiVersion: "v1", kind: "Node", name: "node1", state: ownerVirtual},
			want:   verdict{lookup: &ownerKey{uid: "n", kind: "Node", name: "node1"}},
		},
		"cluster-scoped item, namespaced owner kind: never collected": {
			itemNS: "", owner: with(ownerDeleted, cmOwner("ns"), false), wantErr: errNamespacedOwner,
		},
		"cluster-scoped item, observed namespaced owner of unknown kind: never collected": {
			itemNS:  "",
			owner:   ownerView{uid: "o", apiVersion: "example.com/v1", kind: "Thing", name: "t", state: ownerObserved, node: objectID{apiVersion: "example.com/v1", kind: "Thing", name: "t", namespace: "ns"}},
			wantErr: errNamespacedOwner,
		},
		"unknown kind: wait for discovery": {
			itemNS:  "ns",
			owner:   ownerView{uid: "o", apiVersion: "example.com/v1", kind: "Thing", name: "t", state: ownerVirtual},
			wantErr: errUnknownKind,
		},
		// The owner's kind left discovery (its CRD was deleted, and with it
		// the owner): what the graph proved about the owner still holds.
		"kind left discovery, namespaced item, owner's deletion observed: dangling": {
			itemNS: "ns", owner: thing(ownerDeleted, "ns"),
			want: verdict{class: classDangling, reason: reasonDeleted},
		},
		"kind left discovery, cluster-scoped item, cluster-scoped owner's deletion observed: dangling": {
			itemNS: "", owner: thing(ownerDeleted, ""),
			want: verdict{class: classDangling, reason: reasonDeleted},
		},
		"kind left discovery, cluster-scoped item, namespaced owner's deletion observed: never collected": {
			itemNS: "", owner: thing(ownerDeleted, "ns"), wantErr: errNamespacedOwner,
		},
		"kind left discovery, cluster-scoped item, deletion observed of the UID as another kind: wait": {
			itemNS: "",
			owner: ownerView{uid: "o", apiVersion: "example.com/v1", kind: "Thing", name: "t", state: ownerDeleted,
				node: objectID{uid: "o", apiVersion: "example.com/v1", kind: "Other", name: "t"}},
			wantErr: errUnknownKind,
		},
		"kind left discovery, namespaced item, owner verified absent in its namespace: dangling": {
			itemNS: "ns", owner: thing(ownerAbsentAtIdentity, "ns"),
			want: verdict{class: classDangling, reason: reasonNotFound},
		},
		"kind left discovery, namespaced item, owner verified absent in another namespace: wait": {
			itemNS: "ns", owner: thing(ownerAbsentAtIdentity, "other"), wantErr: errUnknownKind,
		},
		"kind left discovery, cluster-scoped item, owner verified absent cluster-wide: dangling": {
			itemNS: "", owner: thing(ownerAbsentAtIdentity, ""),
			want: verdict{class: classDangling, reason: reasonNotFound},
		},
		// The virtual node took its namespace from a namespaced dependent:
		// the lookup may have been in that namespace, which proves nothing
		// about a cluster-scoped owner.
		"kind left discovery, cluster-scoped item, owner verified absent in a namespace: wait": {
			itemNS: "", owner: thing(ownerAbsentAtIdentity, "ns"), wantErr: errUnknownKind,
		},
		"kind left discovery, owner verified absent under another name: wait": {
			itemNS: "ns",
			owner: ownerView{uid: "o", apiVersion: "example.com/v1", kind: "Thing", name: "t", state: ownerAbsentAtIdentity,
				node: objectID{uid: "o", apiVersion: "example.com/v1", kind: "Thing", namespace: "ns", name: "renamed"}},
			wantErr: errUnknownKind,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			item := &itemView{id: objectID{uid: "i", apiVersion: "v1", kind: "ConfigMap", namespace: tc.itemNS, name: "item"}}
			got, err := judgeRef(item, &tc.owner, testScope)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error = %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(verdict{}, ownerKey{})); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	ref := func(uid types.UID, index int, class refClass, block bool) classifiedRef {
		return classifiedRef{ownerView: ownerView{uid: uid, index: index, block: block}, class: class}
	}
	refUIDs := func(p plan) []types.UID {
		var out []types.UID
		for _, r := range p.refs {
			out = append(out, r.uid)
		}
		return out
	}
	type want struct {
		action  actionKind
		rule    string
		policy  metav1.DeletionPropagation
		unblock bool
		refs    []types.UID
	}
	tests := map[string]struct {
		item itemView
		refs []classifiedRef
		want want
	}{
		"solid owner only: nothing to do": {
			refs: []classifiedRef{ref("a", 0, classSolid, true)},
			want: want{action: actNone, rule: ruleSolidOwner},
		},
		"solid and dangling: remove the dangling reference": {
			refs: []classifiedRef{ref("a", 0, classSolid, true), ref("b", 1, classDangling, false)},
			want: want{action: actRemoveRefs, rule: ruleRemoveDangling, refs: []types.UID{"b"}},
		},
		"solid and waiting: remove the waiting reference": {
			refs: []classifiedRef{ref("a", 0, classWaiting, true), ref("b", 1, classSolid, false)},
			want: want{action: actRemoveRefs, rule: ruleRemoveDangling, refs: []types.UID{"a"}},
		},
		"all dangling: background delete": {
			refs: []classifiedRef{ref("a", 0, classDangling, true), ref("b", 1, classDangling, false)},
			want: want{action: actDelete, rule: ruleAllOwnersAbsent, policy: metav1.DeletePropagationBackground},
		},
		"all dangling, item has the orphan finalizer: orphan delete": {
			item: itemView{orphanFinalizer: true},
			refs: []classifiedRef{ref("a", 0, classDangling, true)},
			want: want{action: actDelete, rule: ruleAllOwnersAbsent, policy: metav1.DeletePropagationOrphan},
		},
		"all dangling, item has the foregroundDeletion finalizer: foreground delete": {
			item: itemView{foregroundFinalizer: true},
			refs: []classifiedRef{ref("a", 0, classDangling, true)},
			want: want{action: actDelete, rule: ruleAllOwnersAbsent, policy: metav1.DeletePropagationForeground},
		},
		"owner waits, item has no dependents: delete with the item's own policy": {
			refs: []classifiedRef{ref("a", 0, classWaiting, true)},
			want: want{action: actDelete, rule: ruleOwnerForeground, policy: metav1.DeletePropagationBackground},
		},
		"owner waits, item has dependents: foreground delete": {
			item: itemView{hasDependents: true},
			refs: []classifiedRef{ref("a", 0, classWaiting, true)},
			want: want{action: actDelete, rule: ruleOwnerWaitsDependent, policy: metav1.DeletePropagationForeground},
		},
		"owner waits, a dependent waits too: unblock, then foreground delete (cycle)": {
			item: itemView{hasDependents: true, dependentDeletingDependents: true,
				owners: []ownerView{{uid: "a", index: 0, block: true}, {uid: "b", index: 1, block: false}}},
			refs: []classifiedRef{ref("a", 0, classWaiting, true), ref("b", 1, classDangling, false)},
			want: want{action: actDelete, rule: ruleCycle, policy: metav1.DeletePropagationForeground, unblock: true, refs: []types.UID{"a"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := decide(&tc.item, tc.refs)
			got := want{action: p.action, rule: p.rule, policy: p.policy, unblock: p.unblock, refs: refUIDs(p)}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecideDeletingDependents(t *testing.T) {
	tests := map[string]struct {
		item     itemView
		want     actionKind
		wantWake []types.UID
	}{
		"no blocking dependent: remove the finalizer": {
			item: itemView{deletingDependents: true, fgIndex: 1},
			want: actRemoveFinalizer,
		},
		"blocking dependents: wake those not waiting themselves": {
			item: itemView{deletingDependents: true, blocking: []dependentView{
				{id: objectID{uid: "a"}}, {id: objectID{uid: "b"}, deletingDependents: true},
			}},
			want: actWake, wantWake: []types.UID{"a"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := decideDeletingDependents(&tc.item)
			if p.action != tc.want {
				t.Errorf("action = %d, want %d", p.action, tc.want)
			}
			if diff := cmp.Diff(tc.wantWake, p.wake); diff != "" {
				t.Errorf("wake (-want +got):\n%s", diff)
			}
			if p.action == actRemoveFinalizer && (p.finalizer != metav1.FinalizerDeleteDependents || p.index != tc.item.fgIndex) {
				t.Errorf("finalizer %q at %d, want %q at %d", p.finalizer, p.index, metav1.FinalizerDeleteDependents, tc.item.fgIndex)
			}
		})
	}
}

// TestItemView checks what workers copy from the graph.
func TestItemView(t *testing.T) {
	tg := newTestGraph(t)
	tg.apply(
		upsert(resConfigMap, object("ns", "alive", "alive")),
		upsert(resConfigMap, object("ns", "gone", "gone")),
		upsert(resConfigMap, object("ns", "waiting", "waiting", deleting(), withFinalizers("x", metav1.FinalizerDeleteDependents))),
		upsert(resConfigMap, object("ns", "item", "item", withRV("7"), withFinalizers(metav1.FinalizerOrphanDependents),
			ownedBy(resConfigMap, "alive", "alive", false),
			ownedBy(resConfigMap, "gone", "gone", true),
			ownedBy(resConfigMap, "waiting", "waiting", true),
			ownedBy(resConfigMap, "ghost", "ghost", false))),
		upsert(resConfigMap, object("ns", "child", "child", ownedBy(resConfigMap, "item", "item", true))),
		del(resConfigMap, object("ns", "gone", "gone")),
	)
	v, ok := tg.g.itemView("item")
	if !ok {
		t.Fatal("item not in the graph")
	}
	type ownerSummary struct {
		UID     types.UID
		Index   int
		State   ownerState
		Waiting bool
		Block   bool
	}
	var got []ownerSummary
	for _, o := range v.owners {
		got = append(got, ownerSummary{o.uid, o.index, o.state, o.waiting, o.block})
	}
	want := []ownerSummary{
		{"alive", 0, ownerObserved, false, false},
		{"gone", 1, ownerDeleted, false, true},
		{"waiting", 2, ownerObserved, true, true},
		{"ghost", 3, ownerVirtual, false, false},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("owners (-want +got):\n%s", diff)
	}
	if v.rv != "7" || !v.orphanFinalizer || v.orphanIndex != 0 || !v.hasDependents || len(v.blocking) != 1 {
		t.Errorf("view = rv %q orphan %t@%d dependents %t blocking %d; want rv 7, orphan at 0, dependents, 1 blocking",
			v.rv, v.orphanFinalizer, v.orphanIndex, v.hasDependents, len(v.blocking))
	}
	if _, ok := tg.g.itemView("ghost"); ok {
		t.Error("a virtual node has an item view")
	}

	live := object("ns", "item", "item", withRV("9"), ownedBy(resConfigMap, "alive", "alive", true))
	lv := tg.g.liveView(v.id, live)
	if !lv.live || lv.rv != "9" || len(lv.owners) != 1 || lv.owners[0].state != ownerObserved || !lv.hasDependents {
		t.Errorf("live view = %+v; want the live object's fields with the graph's owner and dependents", lv)
	}
}

// TestOwnerAbsenceTrustedWhileItsMonitorFollows: an owner's absence the
// graph or the absent-owner cache knows (its deletion observed, a lookup
// that found nothing) is proof only while the monitor of its resource
// follows the API server. From a failure of its list or watch, once synced
// (an API server restarting, as after an etcd restore), until it has
// relisted, or its resumed watch has caught up, the owner is read again: a
// restore brings the owner back with its UID, and the monitor of a
// dependent's resource may deliver the restored dependent first. Before,
// the dependent was deleted on the tombstone or the cached absence alone.
// An absence of a kind with no monitor (a look-up's 404, a kind that left
// discovery), or whose monitor never synced, stays proof.
func TestOwnerAbsenceTrustedWhileItsMonitorFollows(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	r := absenceRun(t, clk)
	cms := r.monitors.byGR[resConfigMap.gvr.GroupResource()]
	pods := &monitor{started: clk.Now(), res: resPod} // never syncs: failed
	r.monitors.byGR[resPod.gvr.GroupResource()] = pods
	r.monitors.noteError(t.Context(), pods, errors.New("forbidden"))
	clk.Step(time.Minute)
	// Started again (its resource came back to discovery): syncing.
	r.monitors.byGR[resNode.gvr.GroupResource()] = &monitor{started: clk.Now(), res: resNode}

	unsure := func(kind string, state ownerState) bool {
		o := ownerView{uid: "o", apiVersion: "v1", kind: kind, name: "o", state: state}
		if state != ownerUnknown {
			o.node = objectID{uid: "o", apiVersion: "v1", kind: kind, namespace: "ns", name: "o"}
		}
		r.markUnsure(&o)
		return o.unsure
	}
	// An owner observed deleting in the foreground: an etcd restore may
	// bring it back not being deleted (review ownergc r10 F1).
	waitingUnsure := func() bool {
		o := ownerView{uid: "o", apiVersion: "v1", kind: "ConfigMap", name: "o", state: ownerObserved, waiting: true,
			node: objectID{uid: "o", apiVersion: "v1", kind: "ConfigMap", namespace: "ns", name: "o"}}
		r.markUnsure(&o)
		return o.unsure
	}
	steps := []struct {
		name string
		do   func()
		want bool
	}{
		{name: "synced", do: func() {}},
		{name: "its watch fails (kube-apiserver down)", do: func() { r.monitors.noteError(t.Context(), cms, errors.New("connection refused")) }, want: true},
		{name: "its watch resumes, not caught up", do: func() { cms.watching() }, want: true},
		{name: "it relists", do: func() { cms.listing(); cms.listed() }, want: true},
		{name: "the relist is applied", do: cms.recovered},
		{name: "a relist begins with no failure", do: cms.listing, want: true},
		{name: "that relist is applied", do: cms.recovered},
	}
	for _, s := range steps {
		s.do()
		for _, st := range []ownerState{ownerDeleted, ownerAbsentAtIdentity, ownerVirtual, ownerUnknown} {
			if got := unsure("ConfigMap", st); got != s.want {
				t.Errorf("%s: a ConfigMap owner in graph state %d unsure %t, want %t", s.name, st, got, s.want)
			}
			if unsure("Secret", st) {
				t.Errorf("%s: a Secret owner in graph state %d, no Secret monitor, unsure; want its absence proof", s.name, st)
			}
			if unsure("Pod", st) {
				t.Errorf("%s: a Pod owner in graph state %d, its monitor never synced, unsure; want its absence proof", s.name, st)
			}
			if !unsure("Node", st) {
				t.Errorf("%s: a Node owner in graph state %d, its monitor syncing, not unsure", s.name, st)
			}
		}
		if unsure("ConfigMap", ownerObserved) {
			t.Errorf("%s: an observed owner marked unsure", s.name)
		}
		if got := waitingUnsure(); got != s.want {
			t.Errorf("%s: a ConfigMap owner observed deleting in the foreground unsure %t, want %t", s.name, got, s.want)
		}
	}

	// The view was taken while the owner was deleted; its monitor's relist
	// brought it back before the lag was asked: the owner is taken from
	// the graph as it is now. Before, the view's tombstone was trusted.
	o := ownerView{uid: "o", apiVersion: "v1", kind: "ConfigMap", name: "o", state: ownerDeleted,
		node: objectID{uid: "o", apiVersion: "v1", kind: "ConfigMap", namespace: "ns", name: "o"}}
	r.graph.nodes["o"] = &node{uid: "o", kind: r.graph.internKind("v1", "ConfigMap"), namespace: "ns", name: "o", flags: flagObserved}
	r.markUnsure(&o)
	if o.unsure || o.state != ownerObserved {
		t.Errorf("an owner back in the graph after the view: unsure %t, state %d; want observed", o.unsure, o.state)
	}
}

// absenceRun is a run whose discovery maps ConfigMaps, Secrets, Pods and
// Nodes, with a synced ConfigMap monitor.
func absenceRun(tb testing.TB, clk *testingclock.FakeClock) *run {
	all := metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}
	c := &Collector{clock: clk, failureGrace: 10 * time.Second, syncTimeout: time.Minute}
	c.metrics = newMetrics(prometheus.NewRegistry(), c)
	r := &run{c: c, logger: testLogger(tb), graph: newGraph()}
	r.monitors = &monitorSet{r: r, ctx: tb.Context(), byGR: map[schema.GroupResource]*monitor{}}
	r.snapshot.Store(&discoverySnapshot{mapper: restmapper.NewDiscoveryRESTMapper([]*restmapper.APIGroupResources{
		apiGroup("", "v1", map[string][]metav1.APIResource{"v1": {
			{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: all},
			{Name: "secrets", Kind: "Secret", Namespaced: true, Verbs: all},
			{Name: "pods", Kind: "Pod", Namespaced: true, Verbs: all},
			{Name: "nodes", Kind: "Node", Verbs: all},
		}}),
	})})
	cms := &monitor{started: clk.Now(), res: resConfigMap}
	r.monitors.byGR[resConfigMap.gvr.GroupResource()] = cms
	cms.markGraphSynced()
	return r
}

// BenchmarkMarkUnsureAbsence: what the check of an owner's absence costs
// each owner reference of a cascade's dependents (the owner deleted, its
// monitor following), 20 workers at a time as in the collector, while a
// writer applies deletions to the graph.
func BenchmarkMarkUnsureAbsence(b *testing.B) {
	r := absenceRun(b, testingclock.NewFakeClock(time.Unix(1000, 0)))
	owner := objectID{uid: "o", apiVersion: "v1", kind: "ConfigMap", namespace: "ns", name: "o"}
	r.graph.nodes["o"] = &node{uid: "o", kind: r.graph.internKind("v1", "ConfigMap"), namespace: "ns", name: "o", flags: flagDeleted}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			r.graph.mu.Lock()
			r.graph.nodes["o"].flags |= flagDeleted // as a monitor's event would
			r.graph.mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	}()
	b.SetParallelism(10) // 20 goroutines on 2 Ps
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			o := ownerView{uid: "o", apiVersion: "v1", kind: "ConfigMap", name: "o", state: ownerDeleted, node: owner}
			r.markUnsure(&o)
			if o.unsure || o.state != ownerDeleted {
				b.Fatalf("unsure %t, state %d; want a deleted owner, its absence proof", o.unsure, o.state)
			}
		}
	})
}
