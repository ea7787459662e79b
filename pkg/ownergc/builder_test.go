package ownergc

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
)

// summarize renders each node as "state[,flags] deps=a,b" for comparison.
func summarize(g *graph) map[types.UID]string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	out := map[types.UID]string{}
	for uid, n := range g.nodes {
		s := "virtual"
		switch {
		case n.observed():
			s = "observed"
		case n.deleted():
			s = "deleted"
		}
		if n.flags&flagAbsentAtIdentity != 0 {
			s += ",absent"
		}
		if n.beingDeleted() {
			s += ",beingDeleted"
		}
		if n.deletingDependents() {
			s += ",deletingDependents"
		}
		var deps []string
		for d := range n.dependents {
			deps = append(deps, string(d.uid))
		}
		slices.Sort(deps)
		if len(deps) > 0 {
			s += " deps=" + strings.Join(deps, ",")
		}
		out[uid] = s
	}
	return out
}

func uidSet(uids ...types.UID) map[types.UID]bool {
	m := map[types.UID]bool{}
	for _, u := range uids {
		m[u] = true
	}
	return m
}

func TestBuilder(t *testing.T) {
	owner := object("ns", "owner", "o")
	tests := map[string]struct {
		setup       []event // applied first; what they enqueue is dropped
		events      []event
		wantNodes   map[types.UID]string
		wantDeletes []types.UID
		wantOrphans []types.UID
	}{
		"owner observed first: the dependent needs no attention": {
			events: []event{
				upsert(resConfigMap, owner),
				upsert(resConfigMap, object("ns", "d", "d", ownedBy(resConfigMap, "owner", "o", true))),
			},
			wantNodes: map[types.UID]string{"o": "observed deps=d", "d": "observed"},
		},
		"dependent first: a virtual owner, the dependent is enqueued": {
			events: []event{
				upsert(resConfigMap, object("ns", "d", "d", ownedBy(resConfigMap, "owner", "o", true))),
			},
			wantNodes:   map[types.UID]string{"o": "virtual deps=d", "d": "observed"},
			wantDeletes: []types.UID{"d"},
		},
		"virtual owner observed: its dependents re-check": {
			setup: []event{
				upsert(resConfigMap, object("ns", "d1", "d1", ownedBy(resConfigMap, "owner", "o", true))),
				upsert(resConfigMap, object("ns", "d2", "d2", ownedBy(resConfigMap, "owner", "o", true))),
			},
			events:      []event{upsert(resConfigMap, owner)},
			wantNodes:   map[types.UID]string{"o": "observed deps=d1,d2", "d1": "observed", "d2": "observed"},
			wantDeletes: []types.UID{"d1", "d2"},
		},
		"owner deleted: a tombstone while dependents remain, dependents enqueued": {
			setup: []event{
				upsert(resConfigMap, owner),
				upsert(resConfigMap, object("ns", "d", "d", ownedBy(resConfigMap, "owner", "o", false))),
			},
			events:      []event{del(resConfigMap, owner)},
			wantNodes:   map[types.UID]string{"o": "deleted deps=d", "d": "observed"},
			wantDeletes: []types.UID{"d"},
		},
		"last dependent of a tombstone deleted: the tombstone goes": {
			setup: []event{
				upsert(resConfigMap, owner),
				upsert(resConfigMap, object("ns", "d", "d", ownedBy(resConfigMap, "owner", "o", false))),
				del(resConfigMap, owner),
			},
			events:    []event{del(resConfigMap, object("ns", "d", "d"))},
			wantNodes: map[types.UID]string{},
		},
		"object without dependents deleted: dropped at once": {
			setup:     []event{upsert(resConfigMap, owner)},
			events:    []event{del(resConfigMap, owner)},
			wantNodes: map[types.UID]string{},
		},
		"foreground deletion starts: owner and dependents enqueued": {
			setup: []event{
				upsert(resConfigMap, owner),
				upsert(resConfigMap, object("ns", "d", "d", ownedBy(resConfigMap, "owner", "o", true))),
			},
			events: []event{upsert(resConfigMap, object("ns", "owner", "o", deleting(), withFinalizers(metav1.FinalizerDeleteDependents)))},
			wantNodes: map[types.UID]string{
				"o": "observed,beingDeleted,deletingDependents deps=d", "d": "observed",
			},
			wantDeletes: []types.UID{"o", "d"},
		},
		"orphan deletion starts: owner enqueued for orphaning": {
			setup: []event{
				upsert(resConfigMap, owner),
				upsert(resConfigMap, object("ns", "d", "d", ownedBy(resConfigMap, "owner", "o", true))),
			},
			events:      []event{upsert(resConfigMap, object("ns", "owner", "o", deleting(), withFinalizers(metav1.FinalizerOrphanDependents)))},
			wantNodes:   map[types.UID]string{"o": "observed,beingDeleted deps=d", "d": "observed"},
			wantOrphans: []types.UID{"o"},
		},
		"blocking reference removed: the waiting owner is woken": {
			setup: []event{
				upsert(resConfigMap, object("ns", "owner", "o", deleting(), withFinalizers(metav1.FinalizerDeleteDependents))),
				upsert(resConfigMap, object("ns", "d", "d", ownedBy(resConfigMap, "owner", "o", true))),
			},
			events:      []event{upsert(resConfigMap, object("ns", "d", "d"))},
			wantNodes:   map[types.UID]string{"o": "observed,beingDeleted,deletingDependents", "d": "observed"},
			wantDeletes: []types.UID{"o"},
		},
		"reference stops blocking: the waiting owner is woken": {
			setup: []event{
				upsert(resConfigMap, object("ns", "owner", "o", deleting(), withFinalizers(metav1.FinalizerDeleteDependents))),
				upsert(resConfigMap, object("ns", "d", "d", ownedBy(resConfigMap, "owner", "o", true))),
			},
			events:      []event{upsert(resConfigMap, object("ns", "d", "d", ownedBy(resConfigMap, "owner", "o", false)))},
			wantNodes:   map[types.UID]string{"o": "observed,beingDeleted,deletingDependents deps=d", "d": "observed"},
			wantDeletes: []types.UID{"o", "d"},
		},
		"dependent deleted: the waiting owner is woken": {
			setup: []event{
				upsert(resConfigMap, object("ns", "owner", "o", deleting(), withFinalizers(metav1.FinalizerDeleteDependents))),
				upsert(resConfigMap, object("ns", "d", "d", ownedBy(resConfigMap, "owner", "o", true))),
			},
			events:      []event{del(resConfigMap, object("ns", "d", "d"))},
			wantNodes:   map[types.UID]string{"o": "observed,beingDeleted,deletingDependents"},
			wantDeletes: []types.UID{"o"},
		},
		"unchanged update: nothing enqueued": {
			setup: []event{
				upsert(resConfigMap, object("ns", "d", "d", ownedBy(resConfigMap, "owner", "o", true))),
			},
			events:    []event{upsert(resConfigMap, object("ns", "d", "d", withRV("2"), ownedBy(resConfigMap, "owner", "o", true)))},
			wantNodes: map[types.UID]string{"o": "virtual deps=d", "d": "observed"},
		},
		"reference to another owner: the old virtual owner goes": {
			setup: []event{
				upsert(resConfigMap, object("ns", "d", "d", ownedBy(resConfigMap, "owner", "o", true))),
			},
			events:      []event{upsert(resConfigMap, object("ns", "d", "d", ownedBy(resConfigMap, "other", "x", true)))},
			wantNodes:   map[types.UID]string{"x": "virtual deps=d", "d": "observed"},
			wantDeletes: []types.UID{"d"},
		},
		"lookup found the virtual owner absent at its identity": {
			setup: []event{
				upsert(resConfigMap, object("ns", "d", "d", ownedBy(resConfigMap, "owner", "o", true))),
			},
			events:    []event{{typ: evOwnerAbsent, owner: &ownerKey{uid: "o", kind: "ConfigMap", name: "owner", namespace: "ns"}}},
			wantNodes: map[types.UID]string{"o": "virtual,absent deps=d", "d": "observed"},
		},
		"lookup at other coordinates leaves the virtual owner unverified": {
			setup: []event{
				upsert(resConfigMap, object("ns", "d", "d", ownedBy(resConfigMap, "owner", "o", true))),
			},
			events:    []event{{typ: evOwnerAbsent, owner: &ownerKey{uid: "o", kind: "ConfigMap", name: "owner", namespace: "other"}}},
			wantNodes: map[types.UID]string{"o": "virtual deps=d", "d": "observed"},
		},
		"lookup verdicts never touch an observed owner": {
			setup:     []event{upsert(resConfigMap, owner)},
			events:    []event{{typ: evOwnerAbsent, owner: &ownerKey{uid: "o", kind: "ConfigMap", name: "owner", namespace: "ns"}}},
			wantNodes: map[types.UID]string{"o": "observed"},
		},
		"resource gone: its observed objects become virtual, none is assumed deleted": {
			setup: []event{
				upsert(resReplicaSet, object("ns", "rs", "rs")),
				upsert(resPod, object("ns", "p", "p", ownedBy(resReplicaSet, "rs", "rs", true))),
				upsert(resReplicaSet, object("ns", "lonely", "l")),
			},
			events:      []event{{typ: evResourceGone, res: resReplicaSet}},
			wantNodes:   map[types.UID]string{"rs": "virtual deps=p", "p": "observed"},
			wantDeletes: []types.UID{"p"},
		},
		"relist: observed objects of the resource missing from the list were deleted": {
			setup: []event{
				upsert(resReplicaSet, object("ns", "rs", "rs")),
				upsert(resPod, object("ns", "p", "p", ownedBy(resReplicaSet, "rs", "rs", true))),
				upsert(resReplicaSet, object("ns", "kept", "k")),
				upsert(resPod, object("ns", "other-kind", "x")),
			},
			events: []event{
				upsert(resReplicaSet, object("ns", "kept", "k")),
				upsert(resReplicaSet, object("ns", "rs", "rs2")), // recreated under its name
				{typ: evRelisted, res: resReplicaSet, uids: map[types.UID]struct{}{"k": {}, "rs2": {}}},
			},
			wantNodes: map[types.UID]string{"rs": "deleted deps=p", "p": "observed", "k": "observed",
				"rs2": "observed", "x": "observed"},
			wantDeletes: []types.UID{"p"},
		},
		"relist: a virtual owner of the resource is no observed object and stays": {
			setup: []event{
				upsert(resPod, object("ns", "p", "p", ownedBy(resReplicaSet, "rs", "rs", true))),
			},
			events:    []event{{typ: evRelisted, res: resReplicaSet, uids: map[types.UID]struct{}{}}},
			wantNodes: map[types.UID]string{"rs": "virtual deps=p", "p": "observed"},
		},
		"reference with other coordinates than the observed owner needs attention": {
			setup:       []event{upsert(resConfigMap, owner)},
			events:      []event{upsert(resConfigMap, object("ns", "d", "d", ownedBy(resConfigMap, "renamed", "o", true)))},
			wantNodes:   map[types.UID]string{"o": "observed deps=d", "d": "observed"},
			wantDeletes: []types.UID{"d"},
		},
		"reference to an owner in another namespace needs attention": {
			setup:       []event{upsert(resConfigMap, owner)},
			events:      []event{upsert(resConfigMap, object("elsewhere", "d", "d", ownedBy(resConfigMap, "owner", "o", true)))},
			wantNodes:   map[types.UID]string{"o": "observed deps=d", "d": "observed"},
			wantDeletes: []types.UID{"d"},
		},
		"deleted object observed again (monitor restarted) is observed": {
			setup: []event{
				upsert(resConfigMap, owner),
				upsert(resConfigMap, object("ns", "d", "d", ownedBy(resConfigMap, "owner", "o", true))),
				del(resConfigMap, owner),
			},
			events:      []event{upsert(resConfigMap, owner)},
			wantNodes:   map[types.UID]string{"o": "observed deps=d", "d": "observed"},
			wantDeletes: []types.UID{"d"},
		},
		"ownership cycle": {
			events: []event{
				upsert(resConfigMap, object("ns", "a", "a", ownedBy(resConfigMap, "b", "b", true))),
				upsert(resConfigMap, object("ns", "b", "b", ownedBy(resConfigMap, "a", "a", true))),
			},
			wantNodes: map[types.UID]string{"a": "observed deps=b", "b": "observed deps=a"},
			// a came first with a virtual owner; b's owner a is observed.
			wantDeletes: []types.UID{"a"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tg := newTestGraph(t)
			tg.apply(tc.setup...)
			tg.takeQueues()
			tg.apply(tc.events...)
			if diff := cmp.Diff(tc.wantNodes, summarize(tg.g)); diff != "" {
				t.Errorf("nodes (-want +got):\n%s", diff)
			}
			deletes, orphans := tg.takeQueues()
			if diff := cmp.Diff(uidSet(tc.wantDeletes...), deletes); diff != "" {
				t.Errorf("attempt-to-delete queue (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(uidSet(tc.wantOrphans...), orphans); diff != "" {
				t.Errorf("attempt-to-orphan queue (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBuilderRandomEvents applies long random event sequences and checks
// the invariants after every event.
func TestBuilderRandomEvents(t *testing.T) {
	const objects = 12
	uids := make([]string, objects)
	for i := range uids {
		uids[i] = string(rune('a' + i))
	}
	seed := uint64(1)
	next := func(n int) int { // xorshift: deterministic and dependency-free
		seed ^= seed << 13
		seed ^= seed >> 7
		seed ^= seed << 17
		return int(seed % uint64(n))
	}
	tg := newTestGraph(t)
	for step := range 5000 {
		u := uids[next(objects)]
		ns := []string{"ns", "other", ""}[next(3)%2] // mostly one namespace
		res := []*resource{resConfigMap, resPod, resReplicaSet}[next(3)]
		switch next(10) {
		case 0, 1:
			tg.apply(del(res, object(ns, u, u)))
		case 2:
			tg.apply(event{typ: evOwnerAbsent, owner: &ownerKey{uid: types.UID(uids[next(objects)]), kind: "ConfigMap", name: uids[next(objects)], namespace: ns}})
		case 3:
			tg.apply(event{typ: evResourceGone, res: res})
		default:
			var opts []objOpt
			for range next(3) {
				o := uids[next(objects)]
				opts = append(opts, ownedBy([]*resource{resConfigMap, resReplicaSet}[next(2)], o, o, next(2) == 0))
			}
			if next(4) == 0 {
				opts = append(opts, deleting(), withFinalizers([]string{metav1.FinalizerDeleteDependents, metav1.FinalizerOrphanDependents, "x"}[next(3)]))
			}
			tg.apply(upsert(res, object(ns, u, u, opts...)))
		}
		if t.Failed() {
			t.Fatalf("invariants broken at step %d", step)
		}
	}
	tg.takeQueues()
	// Deleting everything leaves an empty graph.
	for _, u := range uids {
		tg.g.mu.RLock()
		n, ok := tg.g.nodes[types.UID(u)]
		observed := ok && n.observed()
		tg.g.mu.RUnlock()
		if observed {
			tg.apply(del(resConfigMap, object("", u, u)))
		}
	}
	if got := summarize(tg.g); len(got) != 0 {
		t.Errorf("graph not empty after every object was deleted: %v", slices.Sorted(maps.Keys(got)))
	}
}

// TestBuilderInitialLists: while a run's initial lists stream in, a
// dependent inserted before its owner is not queued, nor re-queued when
// the owner arrives; the end of the lists (evRunSynced) queues, once, every
// dependent whose owners still need a look (owner never observed, a
// reference whose coordinates differ from the owner's, an owner in another
// namespace, an owner deleting its dependents) and none whose owners are
// fine. Transitions that need a worker whatever the graph holds
// (an object being deleted in the foreground or orphaning) are queued at
// once. After that, upserts queue at once again.
func TestBuilderInitialLists(t *testing.T) {
	tg := newTestGraph(t)
	tg.b.initial = true
	fgOwner := object("ns", "fg", "fg", deleting(), withFinalizers(metav1.FinalizerDeleteDependents))
	tg.apply(
		upsert(resPod, object("ns", "fine", "fine", ownedBy(resConfigMap, "owner", "o", true))),
		upsert(resPod, object("ns", "missing", "missing", ownedBy(resConfigMap, "gone", "g", true))),
		upsert(resPod, object("ns", "renamed", "renamed", ownedBy(resConfigMap, "old-name", "o2", true))),
		upsert(resPod, object("other", "cross", "cross", ownedBy(resConfigMap, "owner", "o", false))),
		upsert(resPod, object("ns", "under-fg", "under-fg", ownedBy(resConfigMap, "fg", "fg", true))),
		upsert(resConfigMap, object("ns", "owner", "o")),
		upsert(resConfigMap, object("ns", "new-name", "o2")),
		upsert(resConfigMap, object("ns", "orphaning", "orph", deleting(), withFinalizers(metav1.FinalizerOrphanDependents))),
	)
	deletes, orphans := tg.takeQueues()
	if len(deletes) != 0 {
		t.Errorf("queued for deletion checks during the initial lists: %v", slices.Sorted(maps.Keys(deletes)))
	}
	if diff := cmp.Diff(uidSet("orph"), orphans); diff != "" {
		t.Errorf("orphan queue during the initial lists (-want +got):\n%s", diff)
	}
	tg.apply(upsert(resConfigMap, fgOwner))
	deletes, _ = tg.takeQueues()
	if diff := cmp.Diff(uidSet("fg", "under-fg"), deletes); diff != "" {
		t.Errorf("a foreground deletion during the initial lists (-want +got):\n%s", diff)
	}

	tg.apply(event{typ: evRunSynced})
	deletes, orphans = tg.takeQueues()
	if diff := cmp.Diff(uidSet("missing", "renamed", "cross", "under-fg"), deletes); diff != "" {
		t.Errorf("queued at the end of the initial lists (-want +got):\n%s", diff)
	}
	if len(orphans) != 0 {
		t.Errorf("orphan queue at the end of the lists: %v", orphans)
	}

	tg.apply(upsert(resPod, object("ns", "late", "late", ownedBy(resConfigMap, "gone2", "g2", true))))
	if deletes, _ = tg.takeQueues(); !deletes["late"] {
		t.Errorf("an upsert after the initial lists was not queued: %v", deletes)
	}
}

// TestBuilderQueuesDependentsInStorageOrder: when an owner goes, in the
// background or in the foreground, or a virtual owner is observed, its
// dependents are queued in the order the API server stores them (kind,
// namespace, name), whatever order they came in.
func TestBuilderQueuesDependentsInStorageOrder(t *testing.T) {
	node := object("", "owner", "o")
	dependents := []event{ // shuffled on purpose
		upsert(resPod, object("b", "p-2", "pod-b2", ownedBy(resNode, "owner", "o", true))),
		upsert(resConfigMap, object("b", "c-1", "cm-b1", ownedBy(resNode, "owner", "o", true))),
		upsert(resPod, object("a", "p-9", "pod-a9", ownedBy(resNode, "owner", "o", true))),
		upsert(resConfigMap, object("a", "c-2", "cm-a2", ownedBy(resNode, "owner", "o", true))),
		upsert(resPod, object("b", "p-10", "pod-b10", ownedBy(resNode, "owner", "o", true))),
		upsert(resConfigMap, object("a", "c-1", "cm-a1", ownedBy(resNode, "owner", "o", true))),
	}
	// ConfigMap before Pod; in a kind, namespace a before b; in a
	// namespace, by name (as strings: p-10 before p-2).
	want := []types.UID{"cm-a1", "cm-a2", "cm-b1", "pod-a9", "pod-b10", "pod-b2"}
	for name, tc := range map[string]struct {
		setup  []event
		event  event
		extras []types.UID // queued after the dependents
	}{
		"owner deleted": {
			setup: append([]event{upsert(resNode, node)}, dependents...),
			event: del(resNode, node),
		},
		"owner deleted in the foreground": {
			setup:  append([]event{upsert(resNode, node)}, dependents...),
			event:  upsert(resNode, object("", "owner", "o", deleting(), withFinalizers(metav1.FinalizerDeleteDependents))),
			extras: []types.UID{"o"},
		},
		"virtual owner observed": {
			setup: dependents,
			event: upsert(resNode, node),
		},
	} {
		t.Run(name, func(t *testing.T) {
			tg := newTestGraph(t)
			tg.apply(tc.setup...)
			tg.takeQueues()
			tg.apply(tc.event)
			if diff := cmp.Diff(append(slices.Clone(want), tc.extras...), tg.deletes); diff != "" {
				t.Errorf("attempt-to-delete queue, in order (-want +got):\n%s", diff)
			}
		})
	}
}

// BenchmarkEnqueueDependents measures queueing the 50,000 dependents of one
// owner in storage order, as the builder does when the owner goes (it
// holds the graph's lock meanwhile).
func BenchmarkEnqueueDependents(b *testing.B) {
	tg := newTestGraph(b)
	owner := object("ns", "owner", "o")
	evs := []event{upsert(resConfigMap, owner)}
	for i := range 50000 {
		uid := fmt.Sprintf("d-%06d", i)
		evs = append(evs, upsert(resConfigMap, object("ns", fmt.Sprintf("d-%06d", (i*7919)%50000), uid, ownedBy(resConfigMap, "owner", "o", true))))
	}
	tg.g.mu.Lock()
	for i := range evs {
		tg.b.apply(&evs[i])
	}
	n := tg.g.nodes["o"]
	tg.g.mu.Unlock()
	queued := 0
	tg.b.enqueueDelete = func(types.UID) { queued++ }
	b.ReportAllocs()
	for b.Loop() {
		tg.b.enqueueDependents(n)
	}
	if queued != 50000*b.N {
		b.Fatalf("queued %d, want %d", queued, 50000*b.N)
	}
}

// TestLostDependents: an owner remembers the resources that left discovery
// while they held its dependents, until the resource's monitor has synced
// again (its first list is in the graph), the owner's deletion is observed
// (its dependents are dangling then, wherever they are), or the hold bound
// has passed since the loss (a resource that never comes back).
func TestLostDependents(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	const bound = 10 * time.Minute
	tg := newTestGraph(t)
	tg.b.now, tg.b.lostFor = clk.Now, bound
	lost := func(uid types.UID) []string { return tg.g.lostDependents(uid, clk.Now(), bound) }
	owner := object("ns", "o", "o")
	tg.apply(upsert(resConfigMap, owner), upsert(resPod, object("ns", "p", "p", ownedBy(resConfigMap, "o", "o", true))),
		upsert(resReplicaSet, object("ns", "rs", "rs", ownedBy(resConfigMap, "o", "o", false))))
	if got := lost("o"); len(got) != 0 {
		t.Fatalf("lost dependents before any resource left = %q", got)
	}
	tg.apply(event{typ: evResourceGone, res: resPod}, event{typ: evResourceGone, res: resReplicaSet})
	if got := lost("o"); !slices.Equal(got, []string{"pods", "replicasets.apps"}) {
		t.Errorf("after pods and replicasets left discovery: lost dependents %q, want both", got)
	}
	// Pods are back: their monitor's first list is in the graph.
	tg.apply(upsert(resPod, object("ns", "p", "p", ownedBy(resConfigMap, "o", "o", true))), event{typ: evSynced, mon: &monitor{res: resPod}})
	if got := lost("o"); !slices.Equal(got, []string{"replicasets.apps"}) {
		t.Errorf("after pods synced again: lost dependents %q, want replicasets only", got)
	}
	tg.apply(del(resConfigMap, owner))
	if got := lost("o"); len(got) != 0 {
		t.Errorf("after the owner's deletion: lost dependents %q, want none", got)
	}

	// Replicasets never come back: past the bound, no owner waits for
	// them, and the next loss forgets them.
	owner2 := object("ns", "o2", "o2")
	tg.apply(upsert(resConfigMap, owner2), upsert(resReplicaSet, object("ns", "rs2", "rs2", ownedBy(resConfigMap, "o2", "o2", false))),
		event{typ: evResourceGone, res: resReplicaSet})
	clk.Step(bound)
	if got := lost("o2"); len(got) != 0 {
		t.Errorf("the bound after the loss: lost dependents %q, want none", got)
	}
	jobs := newResource(schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}, "Job", true)
	tg.apply(event{typ: evResourceGone, res: jobs}) // holds nothing
	if n := len(tg.g.lostTo); n != 0 {
		t.Errorf("after the bound and another loss: %d owners remembered, want 0", n)
	}
	tg.takeQueues()
}

// TestBuilderActsOnItsResourceOnly: a relist or a removal acts on the
// objects its own resource delivered, not on every object of the
// resource's group and kind. Two resources of one group can serve one kind
// (an aggregated API may serve x.example.com widgets and legacywidgets,
// both Widget); two resources can serve the same objects (events and
// events.k8s.io events, when events are not ignored). Before, the relist
// of widgets deleted legacywidgets' w2 from the graph (and its dependent
// was queued and would have been deleted as dangling, w2 existing), and
// the removal of widgets, or of the core events, turned the other
// resource's objects virtual.
func TestBuilderActsOnItsResourceOnly(t *testing.T) {
	widgets := newResource(schema.GroupVersionResource{Group: "x.example.com", Version: "v1", Resource: "widgets"}, "Widget", true)
	legacy := newResource(schema.GroupVersionResource{Group: "x.example.com", Version: "v1", Resource: "legacywidgets"}, "Widget", true)
	coreEvents := newResource(schema.GroupVersionResource{Version: "v1", Resource: "events"}, "Event", true)
	events := newResource(schema.GroupVersionResource{Group: "events.k8s.io", Version: "v1", Resource: "events"}, "Event", true)
	setup := []event{
		upsert(widgets, object("ns", "w1", "w1")),
		upsert(widgets, object("ns", "w3", "w3")), // deleted while widgets' watch was down
		upsert(legacy, object("ns", "w2", "w2")),
		upsert(resConfigMap, object("ns", "d", "d", ownedBy(legacy, "w2", "w2", false))),
		upsert(resConfigMap, object("ns", "d3", "d3", ownedBy(widgets, "w3", "w3", false))),
		upsert(coreEvents, object("ns", "e", "e")),
		upsert(events, object("ns", "e", "e")), // the same Event, through the other API
		upsert(resConfigMap, object("ns", "de", "de", ownedBy(coreEvents, "e", "e", false))),
	}
	all := map[types.UID]string{"w1": "observed", "w2": "observed deps=d", "w3": "observed deps=d3",
		"d": "observed", "d3": "observed", "e": "observed deps=de", "de": "observed"}
	with := func(changes map[types.UID]string) map[types.UID]string {
		out := maps.Clone(all)
		for uid, s := range changes {
			if s == "" {
				delete(out, uid)
			} else {
				out[uid] = s
			}
		}
		return out
	}
	tests := map[string]struct {
		events      []event
		wantNodes   map[types.UID]string
		wantDeletes []types.UID
	}{
		"widgets relisted without w3: w3 deleted, legacywidgets' w2 untouched": {
			events:      []event{{typ: evRelisted, res: widgets, uids: map[types.UID]struct{}{"w1": {}}}},
			wantNodes:   with(map[types.UID]string{"w3": "deleted deps=d3"}),
			wantDeletes: []types.UID{"d3"},
		},
		"legacywidgets relisted with w2: nothing changes": {
			events:    []event{{typ: evRelisted, res: legacy, uids: map[types.UID]struct{}{"w2": {}}}},
			wantNodes: all,
		},
		"widgets left discovery: its objects virtual, legacywidgets' w2 observed": {
			events:      []event{{typ: evResourceGone, res: widgets}},
			wantNodes:   with(map[types.UID]string{"w1": "", "w3": "virtual deps=d3"}),
			wantDeletes: []types.UID{"d3"},
		},
		"core events left discovery: the Event events.k8s.io delivered last stays observed": {
			events:    []event{{typ: evResourceGone, res: coreEvents}},
			wantNodes: all,
		},
		"events.k8s.io relisted with the Event: nothing changes": {
			events:    []event{{typ: evRelisted, res: events, uids: map[types.UID]struct{}{"e": {}}}},
			wantNodes: all,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tg := newTestGraph(t)
			tg.apply(setup...)
			tg.takeQueues()
			tg.apply(tc.events...)
			if diff := cmp.Diff(tc.wantNodes, summarize(tg.g)); diff != "" {
				t.Errorf("nodes (-want +got):\n%s", diff)
			}
			deletes, _ := tg.takeQueues()
			if diff := cmp.Diff(uidSet(tc.wantDeletes...), deletes); diff != "" {
				t.Errorf("attempt-to-delete queue (-want +got):\n%s", diff)
			}
		})
	}
}
