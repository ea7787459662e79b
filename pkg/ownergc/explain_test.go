package ownergc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodegc/nodegc/internal/testbed/nodegcproc"
	"github.com/nodegc/nodegc/pkg/config"
)

const exampleHold = "example.com/hold"

// explainCase is one object explained from a graph the builder made,
// without I/O: lookups, the blocking dependents' finalizers, the unsynced
// resources and the records are given.
type explainCase struct {
	graph []event
	res   *resource
	// live is the object as read (nil: not found); id names it then.
	live *metav1.PartialObjectMetadata
	id   objectID
	// lookups answer the GETs of owners the graph has not observed, by UID
	// (absent from the map: not found).
	lookups      map[types.UID]*metav1.PartialObjectMetadata
	lookupErr    error // every look-up fails so
	absentCached bool
	finalizers   map[types.UID][]string // the blocking dependents' finalizers, as read
	lookupErrors map[types.UID]string   // the items whose owner lookups fail, and the error
	unsynced     []string
	records      []Record
	dryRun       bool
	unmonitored  bool
	leaderSince  time.Time // when this instance's Run started
	// watchPending: a worker would wait for the watch of an owner the
	// look-up found absent (ownerWatchPending).
	watchPending bool

	wantCode VerdictCode
	want     string
}

// explainPure is Collector.explain with the I/O replaced by tc's answers.
func explainPure(t *testing.T, tc explainCase) *Explanation {
	t.Helper()
	tg := newTestGraph(t)
	tg.apply(tc.graph...)
	id := tc.id
	if tc.live != nil {
		id = objectID{uid: tc.live.UID, apiVersion: tc.res.apiVersion, kind: tc.res.gvk.Kind, namespace: tc.live.Namespace, name: tc.live.Name}
	}
	e := newExplanation(id, tc.res.gvr.GroupResource().String(), tc.live, tc.dryRun)
	var d decision
	if tc.live != nil {
		v := tg.g.liveView(id, tc.live)
		lookup := func(key ownerKey, _ string, _ bool) (lookupResult, string, error) {
			if tc.lookupErr != nil {
				return lookupResult{}, checkedGet, tc.lookupErr
			}
			if tc.absentCached {
				return lookupResult{class: classDangling, reason: reasonNotFound}, checkedAbsentCache, nil
			}
			obj, ok := tc.lookups[key.uid]
			if !ok {
				obj = nil
			}
			return lookupVerdict(key, obj), checkedGet, nil
		}
		pending := func(*itemView, *ownerView) bool { return tc.watchPending }
		d = explainView(e, tg.g, &v, !tc.unmonitored, testScope, lookup, pending)
		for i := range e.Dependents {
			if f, ok := tc.finalizers[e.Dependents[i].UID]; ok {
				e.Dependents[i].Read, e.Dependents[i].Finalizers, e.Dependents[i].BeingDeleted = true, f, true
			}
		}
		noteLookupErrors(e.Dependents, func(uid types.UID) (string, bool) {
			msg, ok := tc.lookupErrors[uid]
			return msg, ok
		})
		keptByLookups(tg.g, e.Dependents, testScope, nil, lookup, pending)
	}
	e.UnsyncedResources, e.Records, e.LeaderSince = tc.unsynced, tc.records, tc.leaderSince
	if e.Records == nil {
		e.Records = []Record{}
	}
	e.Code, e.Verdict = verdictOf(e, d)
	return e
}

func TestExplainVerdict(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	owner := upsert(resConfigMap, object("ns", "o", "o-1"))
	// gone: owner g observed, then d (with its owners), then g's deletion:
	// the graph keeps g's tombstone.
	gone := func(d *metav1.PartialObjectMetadata, more ...event) []event {
		return append(append([]event{upsert(resConfigMap, object("ns", "g", "g-1"))}, more...),
			upsert(resConfigMap, d), del(resConfigMap, object("ns", "g", "g-1")))
	}
	fgOwner := func(opts ...objOpt) event {
		return upsert(resConfigMap, object("ns", "p", "p-1", append(opts, deleting(), withFinalizers(metav1.FinalizerDeleteDependents))...))
	}
	orphanOwner := upsert(resConfigMap, object("ns", "p", "p-1", deleting(), withFinalizers(metav1.FinalizerOrphanDependents)))
	child := func(opts ...objOpt) *metav1.PartialObjectMetadata {
		return object("ns", "c", "c-1", append([]objOpt{ownedBy(resConfigMap, "p", "p-1", true)}, opts...)...)
	}
	cmID := objectID{apiVersion: "v1", kind: "ConfigMap", namespace: "ns", name: "d"}
	deleteRec := Record{Time: at, APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "d", UID: "d-1",
		Action: "delete", PropagationPolicy: "Background", Rule: ruleAllOwnersAbsent,
		Owners: []RecordOwner{{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "o", UID: "o-1", Class: "dangling", Reason: reasonDeleted}}}

	tests := map[string]explainCase{
		"kept: its owner exists": {
			graph: []event{owner, upsert(resConfigMap, object("ns", "d", "d-1", ownedBy(resConfigMap, "o", "o-1", false)))},
			res:   resConfigMap, live: object("ns", "d", "d-1", ownedBy(resConfigMap, "o", "o-1", false)),
			wantCode: CodeKept, want: "kept: owner ConfigMap ns/o (uid o-1) exists",
		},
		"kept: its owner exists under another name than the reference states": {
			graph: []event{owner, upsert(resConfigMap, object("ns", "d", "d-1", ownedBy(resConfigMap, "typo", "o-1", false)))},
			res:   resConfigMap, live: object("ns", "d", "d-1", ownedBy(resConfigMap, "typo", "o-1", false)),
			wantCode: CodeKept, want: "kept: owner ConfigMap ns/o (uid o-1) exists (the reference names it typo: Warning OwnerRefNameMismatch)",
		},
		"no owners": {
			graph: []event{owner}, res: resConfigMap, live: object("ns", "o", "o-1"),
			wantCode: CodeNoOwners, want: "no owners: the owner GC never deletes it",
		},
		"every owner gone": {
			graph: gone(object("ns", "d", "d-1", ownedBy(resConfigMap, "g", "g-1", false))),
			res:   resConfigMap, live: object("ns", "d", "d-1", ownedBy(resConfigMap, "g", "g-1", false)),
			wantCode: CodeWillBeDeleted,
			want:     "will be deleted with propagation Background: every owner is gone (rule all-owners-absent): owner ConfigMap ns/g (uid g-1) was deleted",
		},
		"one owner gone, one exists": {
			graph: gone(object("ns", "d", "d-1", ownedBy(resConfigMap, "o", "o-1", false), ownedBy(resConfigMap, "g", "g-1", false)), owner),
			res:   resConfigMap, live: object("ns", "d", "d-1", ownedBy(resConfigMap, "o", "o-1", false), ownedBy(resConfigMap, "g", "g-1", false)),
			wantCode: CodeKept,
			want:     "kept: owner ConfigMap ns/o (uid o-1) exists; the owner GC removes its references to gone owners: owner ConfigMap ns/g (uid g-1) was deleted (rule solid-owner-remains-remove-dangling-references)",
		},
		"owner never observed, found by a GET": {
			res: resConfigMap, live: object("ns", "d", "d-1", ownedBy(resConfigMap, "v", "v-1", false)),
			graph:    []event{upsert(resConfigMap, object("ns", "d", "d-1", ownedBy(resConfigMap, "v", "v-1", false)))},
			lookups:  map[types.UID]*metav1.PartialObjectMetadata{"v-1": object("ns", "v", "v-1")},
			wantCode: CodeKept,
			want:     "kept: owner ConfigMap ns/v (uid v-1) exists (read live; the graph has not observed it, so the owner GC checks it again later)",
		},
		"owner never observed, not found": {
			res: resConfigMap, live: object("ns", "d", "d-1", ownedBy(resConfigMap, "v", "v-1", false)),
			graph:    []event{upsert(resConfigMap, object("ns", "d", "d-1", ownedBy(resConfigMap, "v", "v-1", false)))},
			wantCode: CodeWillBeDeleted,
			want:     "will be deleted with propagation Background: every owner is gone (rule all-owners-absent): owner ConfigMap ns/v (uid v-1) does not exist",
		},
		"owner never observed, not found, its watch behind the object's version": {
			res: resConfigMap, live: object("ns", "d", "d-1", ownedBy(resConfigMap, "v", "v-1", false)),
			graph:        []event{upsert(resConfigMap, object("ns", "d", "d-1", ownedBy(resConfigMap, "v", "v-1", false)))},
			watchPending: true, wantCode: CodeUndecided,
			want: "undecided: a look-up of owner ConfigMap ns/v (uid v-1) found nothing with that UID, but the owner GC's ConfigMap " +
				"watch has not reached this object's version yet: the owner may exist under another name; the owner GC decides once " +
				"the watch has, waiting at most 10s",
		},
		"owner known absent from the cache": {
			res: resConfigMap, live: object("ns", "d", "d-1", ownedBy(resConfigMap, "v", "v-1", false)),
			graph:        []event{upsert(resConfigMap, object("ns", "d", "d-1", ownedBy(resConfigMap, "v", "v-1", false)))},
			absentCached: true, wantCode: CodeWillBeDeleted,
			want: "will be deleted with propagation Background: every owner is gone (rule all-owners-absent): owner ConfigMap ns/v (uid v-1) does not exist",
		},
		"owner deletes in the foreground": {
			graph: []event{fgOwner(), upsert(resConfigMap, child())}, res: resConfigMap, live: child(),
			wantCode: CodeWillBeDeleted,
			want:     "will be deleted with propagation Background: owner ConfigMap ns/p (uid p-1) is being deleted in the foreground and waits for it (rule owner-deleting-in-foreground)",
		},
		"foreground: waits for a dependent held by its own finalizer": {
			graph: []event{fgOwner(), upsert(resConfigMap, child(deleting(), withFinalizers(exampleHold)))},
			res:   resConfigMap, live: object("ns", "p", "p-1", deleting(), withFinalizers(metav1.FinalizerDeleteDependents)),
			finalizers: map[types.UID][]string{"c-1": {exampleHold}},
			wantCode:   CodeWaitsForDependents,
			want:       "waits for dependent ConfigMap ns/c (uid c-1) (blockOwnerDeletion) which is held by finalizer example.com/hold",
		},
		"foreground: the held dependent is named before the others": {
			graph: []event{fgOwner(), upsert(resConfigMap, object("ns", "a", "a-1", ownedBy(resConfigMap, "p", "p-1", true))),
				upsert(resConfigMap, child(deleting(), withFinalizers(exampleHold, "other.example/x")))},
			res: resConfigMap, live: object("ns", "p", "p-1", deleting(), withFinalizers(metav1.FinalizerDeleteDependents)),
			finalizers: map[types.UID][]string{"c-1": {exampleHold, "other.example/x"}, "a-1": nil},
			wantCode:   CodeWaitsForDependents,
			want:       "waits for dependent ConfigMap ns/c (uid c-1) (blockOwnerDeletion) which is held by finalizers example.com/hold, other.example/x, and for 1 more blocking dependent(s)",
		},
		"foreground: a blocking dependent not deleted yet": {
			graph: []event{fgOwner(), upsert(resConfigMap, child())},
			res:   resConfigMap, live: object("ns", "p", "p-1", deleting(), withFinalizers(metav1.FinalizerDeleteDependents)),
			wantCode: CodeWaitsForDependents,
			want:     "waits for dependent ConfigMap ns/c (uid c-1) (blockOwnerDeletion) which the owner GC deletes first",
		},
		// A blocking dependent with another owner that exists is kept:
		// the workers remove its reference to the owner being deleted
		// (solid-owner-remains-remove-dangling-references). Before, it was
		// said to be deleted first.
		"foreground: a blocking dependent with another owner": {
			graph: []event{fgOwner(), upsert(resConfigMap, object("ns", "q", "q-1")),
				upsert(resConfigMap, child(ownedBy(resConfigMap, "q", "q-1", false)))},
			res: resConfigMap, live: object("ns", "p", "p-1", deleting(), withFinalizers(metav1.FinalizerDeleteDependents)),
			wantCode: CodeWaitsForDependents,
			want: "waits for dependent ConfigMap ns/c (uid c-1) (blockOwnerDeletion) which the owner GC keeps, removing its " +
				"reference to this object: its owner ConfigMap ns/q (uid q-1) exists",
		},
		// Also when its reference names that owner otherwise (misnamed):
		// the workers judge it by UID, and keep the dependent.
		"foreground: a blocking dependent with another owner, misnamed": {
			graph: []event{fgOwner(), upsert(resConfigMap, object("ns", "q", "q-1")),
				upsert(resConfigMap, child(ownedBy(resConfigMap, "typo", "q-1", false)))},
			res: resConfigMap, live: object("ns", "p", "p-1", deleting(), withFinalizers(metav1.FinalizerDeleteDependents)),
			wantCode: CodeWaitsForDependents,
			want: "waits for dependent ConfigMap ns/c (uid c-1) (blockOwnerDeletion) which the owner GC keeps, removing its " +
				"reference to this object: its owner ConfigMap ns/q (uid q-1) exists",
		},
		// A blocking dependent the workers never delete, or not until
		// they can classify its owner references, is not "deleted first".
		"foreground: waits for a cluster-scoped dependent naming the namespaced owner kind": {
			graph: []event{fgOwner(), upsert(resNode, object("", "n", "n-1", ownedBy(resConfigMap, "p", "p-1", true)))},
			res:   resConfigMap, live: object("ns", "p", "p-1", deleting(), withFinalizers(metav1.FinalizerDeleteDependents)),
			wantCode: CodeWaitsForDependents,
			want: "waits for dependent Node n (uid n-1) (blockOwnerDeletion) which the owner GC never deletes: it is cluster-scoped " +
				"and names the namespaced kind ConfigMap as its owner p (Warning OwnerRefInvalidNamespace)",
		},
		"foreground: waits for a dependent with an owner of a kind unknown to discovery": {
			graph: []event{fgOwner(), upsert(resConfigMap, child(withOwner("example.com/v1", "Widget", "w", "w-1")))},
			res:   resConfigMap, live: object("ns", "p", "p-1", deleting(), withFinalizers(metav1.FinalizerDeleteDependents)),
			wantCode: CodeWaitsForDependents,
			want: "waits for dependent ConfigMap ns/c (uid c-1) (blockOwnerDeletion) which the owner GC does not delete until " +
				"a discovery round knows the kind Widget (example.com/v1) of its owner w",
		},
		"foreground: waits for a dependent whose owner lookup fails": {
			graph: []event{fgOwner(), upsert(resConfigMap, child(ownedBy(resConfigMap, "v", "v-1", false)))},
			res:   resConfigMap, live: object("ns", "p", "p-1", deleting(), withFinalizers(metav1.FinalizerDeleteDependents)),
			lookupErrors: map[types.UID]string{"c-1": `look up owner ConfigMap v (uid v-1): configmaps "v" is forbidden`},
			wantCode:     CodeWaitsForDependents,
			want: "waits for dependent ConfigMap ns/c (uid c-1) (blockOwnerDeletion) which the owner GC cannot decide about " +
				`while it cannot look an owner up (it retries): look up owner ConfigMap v (uid v-1): configmaps "v" is forbidden`,
		},
		"foreground: no blocking dependent, another finalizer": {
			graph: []event{fgOwner(), upsert(resConfigMap, object("ns", "c", "c-1", ownedBy(resConfigMap, "p", "p-1", false)))},
			res:   resConfigMap, live: object("ns", "p", "p-1", deleting(), withFinalizers(metav1.FinalizerDeleteDependents, exampleHold)),
			wantCode: CodeWillBeDeleted,
			want:     "will be deleted: no dependent with blockOwnerDeletion=true remains; the owner GC removes the foregroundDeletion finalizer (rule no-blocking-dependents-remain); then finalizer example.com/hold of another controller must go",
		},
		"foreground: waits for an unsynced resource": {
			graph: []event{fgOwner()}, unsynced: []string{"widgets.example.com (failing)"},
			res: resConfigMap, live: object("ns", "p", "p-1", deleting(), withFinalizers(metav1.FinalizerDeleteDependents)),
			wantCode: CodeWaitsForResource,
			want:     "foreground deletion waits: resource widgets.example.com (failing) cannot be listed, so the graph may miss dependents there (the owner GC waits up to ownerGC.unsyncedResourceHold)",
		},
		"orphan: dependents left": {
			graph: []event{orphanOwner, upsert(resConfigMap, child())},
			res:   resConfigMap, live: object("ns", "p", "p-1", deleting(), withFinalizers(metav1.FinalizerOrphanDependents)),
			wantCode: CodeOrphaning,
			want:     "orphaning: the owner GC removes this object's reference from 1 dependent(s) (ConfigMap ns/c (uid c-1) first), then the orphan finalizer",
		},
		// The worker orphans the dependents it knows first, and holds the
		// finalizer for resources that lag after: with a dependent left
		// (its orphaning patch denied, say), the orphaning is what waits.
		// Before, explain said the resource, for as long as it lagged
		// (review ownergc r12 F3).
		"orphan: a dependent left while a resource lags": {
			graph: []event{orphanOwner, upsert(resConfigMap, child())}, unsynced: []string{"widgets.example.com (failing)"},
			res: resConfigMap, live: object("ns", "p", "p-1", deleting(), withFinalizers(metav1.FinalizerOrphanDependents)),
			wantCode: CodeOrphaning,
			want:     "orphaning: the owner GC removes this object's reference from 1 dependent(s) (ConfigMap ns/c (uid c-1) first), then the orphan finalizer",
		},
		"orphan: waits for an unsynced resource": {
			graph: []event{orphanOwner}, unsynced: []string{"gadgets.example.com (syncing)", "widgets.example.com (failing)"},
			res: resConfigMap, live: object("ns", "p", "p-1", deleting(), withFinalizers(metav1.FinalizerOrphanDependents)),
			wantCode: CodeWaitsForResource,
			want:     "orphaning waits: resources gadgets.example.com (syncing), widgets.example.com (failing) cannot be listed, so the graph may miss dependents there (the owner GC waits up to ownerGC.unsyncedResourceHold)",
		},
		"orphan: nothing left": {
			graph: []event{orphanOwner},
			res:   resConfigMap, live: object("ns", "p", "p-1", deleting(), withFinalizers(metav1.FinalizerOrphanDependents)),
			wantCode: CodeWillBeDeleted,
			want:     "will be deleted: no dependent is left to orphan; the owner GC removes the orphan finalizer (rule dependents-orphaned)",
		},
		"being deleted, held by another controller": {
			graph: []event{upsert(resConfigMap, object("ns", "x", "x-1", deleting(), withFinalizers(exampleHold)))},
			res:   resConfigMap, live: object("ns", "x", "x-1", deleting(), withFinalizers(exampleHold)),
			wantCode: CodeBeingDeleted,
			want:     "being deleted: held by finalizer example.com/hold, which another controller must remove",
		},
		"deleted by the owner GC": {
			res: resConfigMap, id: cmID, records: []Record{deleteRec},
			wantCode: CodeDeleted,
			want:     "deleted at 2025-01-02T03:04:05Z (uid d-1) by rule all-owners-absent because owner ConfigMap ns/o (uid o-1) was deleted (propagation Background)",
		},
		"deleted after the owner GC removed its finalizer": {
			res: resConfigMap, id: cmID, records: []Record{{Time: at, UID: "d-1", Action: "remove-finalizer", Finalizer: metav1.FinalizerDeleteDependents, Rule: ruleNoBlocking}},
			wantCode: CodeDeleted,
			want:     "deleted at 2025-01-02T03:04:05Z (uid d-1): the owner GC removed its foregroundDeletion finalizer by rule no-blocking-dependents-remain, and the API server deleted it",
		},
		"gone, the owner GC only decided in dry-run": {
			res: resConfigMap, id: cmID, records: []Record{func() Record { r := deleteRec; r.DryRun = true; return r }()},
			wantCode: CodeNotFound,
			want:     "not found: the owner GC (dry-run) decided at 2025-01-02T03:04:05Z to delete it (uid d-1) by rule all-owners-absent because owner ConfigMap ns/o (uid o-1) was deleted, but wrote nothing; another client deleted it",
		},
		// The records are in the leader's memory only: one that leads since
		// a moment ago has none of its predecessor's.
		"gone without a record": {
			res: resConfigMap, id: cmID, leaderSince: at.Add(-10 * time.Minute), wantCode: CodeNotFound,
			want: "not found, and the owner GC recorded no deletion of it in the last 1h: another client deleted it, " +
				"or an earlier owner GC leader did (this instance has run the owner GC since 2025-01-02T02:54:05Z), or it was deleted earlier",
		},
		"not in the graph yet": {
			res: resConfigMap, live: object("ns", "d", "d-1", ownedBy(resConfigMap, "o", "o-1", false)), graph: []event{owner},
			wantCode: CodeNotInGraph,
			want:     "not in the graph yet: its monitor has not delivered it; the owner GC decides once it has",
		},
		"resource not watched": {
			res: resConfigMap, live: object("ns", "d", "d-1", ownedBy(resConfigMap, "o", "o-1", false)), unmonitored: true,
			wantCode: CodeNotWatched,
			want:     "not watched: the owner GC has no monitor for configmaps (it is in ownerGC.gcIgnoredResources, or does not support list, watch and delete), so it never deletes it nor waits for it",
		},
		"cluster-scoped object, namespaced owner kind": {
			graph: []event{upsert(resNode, object("", "n", "n-1", ownedBy(resConfigMap, "o", "o-1", false)))},
			res:   resNode, live: object("", "n", "n-1", ownedBy(resConfigMap, "o", "o-1", false)),
			wantCode: CodeNeverDeleted,
			want:     "never deleted: this cluster-scoped object names the namespaced kind ConfigMap as its owner o (Warning OwnerRefInvalidNamespace)",
		},
		"owner kind unknown to discovery": {
			graph: []event{upsert(resConfigMap, object("ns", "d", "d-1", func(o *metav1.PartialObjectMetadata) {
				o.OwnerReferences = []metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "Widget", Name: "w", UID: "w-1"}}
			}))},
			res: resConfigMap, live: object("ns", "d", "d-1", func(o *metav1.PartialObjectMetadata) {
				o.OwnerReferences = []metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "Widget", Name: "w", UID: "w-1"}}
			}),
			wantCode: CodeUndecided,
			want:     "undecided: the owner kind Widget (example.com/v1) is unknown to discovery; the owner GC decides after a discovery refresh finds it",
		},
		"dry-run says so": {
			graph: gone(object("ns", "d", "d-1", ownedBy(resConfigMap, "g", "g-1", false))),
			res:   resConfigMap, live: object("ns", "d", "d-1", ownedBy(resConfigMap, "g", "g-1", false)), dryRun: true,
			wantCode: CodeWillBeDeleted,
			want:     "will be deleted with propagation Background: every owner is gone (rule all-owners-absent): owner ConfigMap ns/g (uid g-1) was deleted (dry-run: the owner GC decides but writes nothing)",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := explainPure(t, tc)
			if e.Code != tc.wantCode || e.Verdict != tc.want {
				t.Errorf("verdict:\n got %s: %s\nwant %s: %s", e.Code, e.Verdict, tc.wantCode, tc.want)
			}
		})
	}
}

// The explanation lists owners, dependents and finalizers as the graph and
// the workers' functions see them.
func TestExplainDetails(t *testing.T) {
	e := explainPure(t, explainCase{
		graph: []event{
			upsert(resConfigMap, object("ns", "o", "o-1")),
			upsert(resConfigMap, object("ns", "g", "g-1")),
			upsert(resConfigMap, object("ns", "d", "d-1", withRV("5"), deleting(), withFinalizers(metav1.FinalizerDeleteDependents, exampleHold),
				ownedBy(resConfigMap, "o", "o-1", true), ownedBy(resConfigMap, "g", "g-1", false))),
			del(resConfigMap, object("ns", "g", "g-1")),
			upsert(resConfigMap, object("ns", "b", "b-1", ownedBy(resConfigMap, "d", "d-1", true))),
			upsert(resPod, object("ns", "a", "a-1", ownedBy(resConfigMap, "d", "d-1", false))),
		},
		res: resConfigMap,
		live: object("ns", "d", "d-1", withRV("6"), deleting(), withFinalizers(metav1.FinalizerDeleteDependents, exampleHold),
			ownedBy(resConfigMap, "o", "o-1", true), ownedBy(resConfigMap, "g", "g-1", false), ownedBy(resConfigMap, "v", "v-1", false)),
		finalizers: map[types.UID][]string{"b-1": {exampleHold}},
	})
	if !e.InGraph || e.GraphResourceVersion != "5" || e.Object.ResourceVersion != "6" || !e.Object.Exists {
		t.Errorf("inGraph %t at %q, live at %q, exists %t; want in the graph at 5, live at 6",
			e.InGraph, e.GraphResourceVersion, e.Object.ResourceVersion, e.Object.Exists)
	}
	wantOwners := []OwnerState{
		{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "o", UID: "o-1", BlockOwnerDeletion: true,
			Class: "solid", Reason: reasonObserved, Graph: "observed", Checked: checkedGraph},
		{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "g", UID: "g-1",
			Class: "dangling", Reason: reasonDeleted, Graph: "deleted", Checked: checkedGraph},
		{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "v", UID: "v-1",
			Class: "dangling", Reason: reasonNotFound, Graph: "none", Checked: checkedGet},
	}
	if diff := cmp.Diff(wantOwners, e.Owners); diff != "" {
		t.Errorf("owners (-want +got):\n%s", diff)
	}
	wantDeps := []DependentState{
		{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "b", UID: "b-1", BlockOwnerDeletion: true,
			BeingDeleted: true, Finalizers: []string{exampleHold}, Read: true},
		{APIVersion: "v1", Kind: "Pod", Namespace: "ns", Name: "a", UID: "a-1"},
	}
	if diff := cmp.Diff(wantDeps, e.Dependents); diff != "" {
		t.Errorf("dependents (-want +got):\n%s", diff)
	}
	if e.DependentsTotal != 2 || e.BlockingTotal != 1 {
		t.Errorf("%d dependents, %d blocking; want 2, 1", e.DependentsTotal, e.BlockingTotal)
	}
	wantFin := []FinalizerState{
		{Name: metav1.FinalizerDeleteDependents, RemovedBy: "owner GC", Condition: "once no dependent with blockOwnerDeletion=true remains (1 remain)"},
		{Name: exampleHold, RemovedBy: "another controller"},
	}
	if diff := cmp.Diff(wantFin, e.Finalizers); diff != "" {
		t.Errorf("finalizers (-want +got):\n%s", diff)
	}
}

// At most maxExplainDependents dependents are listed, the blocking ones
// first; the totals count them all.
func TestExplainDependentsBound(t *testing.T) {
	evs := []event{upsert(resConfigMap, object("ns", "o", "o-1"))}
	for i := range maxExplainDependents + 5 {
		name := string(rune('a'+i%26)) + string(rune('a'+i/26))
		evs = append(evs, upsert(resConfigMap, object("ns", name, "u-"+name, ownedBy(resConfigMap, "o", "o-1", i%40 == 7))))
	}
	e := explainPure(t, explainCase{graph: evs, res: resConfigMap, live: object("ns", "o", "o-1")})
	if len(e.Dependents) != maxExplainDependents || e.DependentsTotal != maxExplainDependents+5 || e.BlockingTotal != 3 {
		t.Fatalf("%d listed of %d, %d blocking; want %d of %d, 3 blocking", len(e.Dependents), e.DependentsTotal, e.BlockingTotal,
			maxExplainDependents, maxExplainDependents+5)
	}
	for i, d := range e.Dependents {
		if d.BlockOwnerDeletion != (i < 3) {
			t.Errorf("dependent %d (%s): blockOwnerDeletion %t; blocking ones come first", i, d.Name, d.BlockOwnerDeletion)
		}
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{time.Hour: "1h", 2 * time.Hour: "2h", 15 * time.Minute: "15m",
		90 * time.Second: "1m30s", 0: "0s"} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

// A collector that does not run answers 503 with JSON saying it is not the
// leader, and with the leader's identity when the caller knows it.
func TestExplainHandlerNotRunning(t *testing.T) {
	tests := map[string]struct {
		handler  http.Handler
		wantBody ExplainError
	}{
		"debug handler": {handler: (&Collector{}).DebugHandler(),
			wantBody: ExplainError{Leader: false, Message: "this instance is not running the owner GC (it is not the leader)"}},
		"with the leader's identity": {handler: (&Collector{}).ExplainHandler(func() (string, bool) { return "nodegc-owner-7d9f_1234", false }),
			wantBody: ExplainError{Leader: false, LeaderIdentity: "nodegc-owner-7d9f_1234",
				Message: "this instance is not running the owner GC (it is not the leader); the leader is nodegc-owner-7d9f_1234"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			tc.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, ExplainPath+"?resource=cm&namespace=ns&name=x", nil))
			if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("status %d, content type %q; want 503 and JSON", rec.Code, rec.Header().Get("Content-Type"))
			}
			var got ExplainError
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatalf("body %q: %v", rec.Body, err)
			}
			if diff := cmp.Diff(tc.wantBody, got); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := (&Collector{}).Explain(t.Context(), ExplainQuery{Resource: "cm", Namespace: "ns", Name: "x"}); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Explain on a collector that does not run: %v, want ErrNotRunning", err)
	}
}

// TestExplainOnAPIServer explains objects of a real API server: gone ones
// from their decision records, kept ones, ones without owners, and the
// errors of a bad query.
func TestExplainOnAPIServer(t *testing.T) {
	env := newEnv(t)
	gc := env.startCollector(t, testConfig())
	ns := env.namespace(t, "explain")
	explain := func(t *testing.T, resource, namespace, name string) *Explanation {
		t.Helper()
		e, err := gc.Explain(t.Context(), ExplainQuery{Resource: resource, Namespace: namespace, Name: name})
		if err != nil {
			t.Fatalf("Explain %s %s/%s: %v", resource, namespace, name, err)
		}
		return e
	}

	t.Run("deleted object: its rule and owner", func(t *testing.T) {
		o := env.configMap(t, ns, "o", nil)
		d := env.configMap(t, ns, "d", []metav1.OwnerReference{cmRef(o, false)})
		gc.waitObserved(t, d.UID, d.ResourceVersion)
		env.deleteCM(t, ns, "o", metav1.DeletePropagationBackground)
		eventually(t, 30*time.Second, "the dependent to be collected", env.cmGone(ns, "d"))
		gc.settledRecords(t, d.UID)

		e := explain(t, "configmap", ns, "d")
		if len(e.Records) == 0 {
			t.Fatalf("no decision record in the explanation: %+v", e)
		}
		rec := e.Records[len(e.Records)-1]
		want := fmt.Sprintf("deleted at %s (uid %s) by rule all-owners-absent because owner ConfigMap %s/o (uid %s) was deleted (propagation Background)",
			rec.Time.UTC().Format(time.RFC3339), d.UID, ns, o.UID)
		if e.Code != CodeDeleted || e.Verdict != want {
			t.Errorf("verdict:\n got %s: %s\nwant %s: %s", e.Code, e.Verdict, CodeDeleted, want)
		}
		if e.Object.Exists || e.Object.UID != d.UID || rec.Action != "delete" || rec.UID != d.UID {
			t.Errorf("object %+v, last record %+v; want d (uid %s) gone and its delete record", e.Object, rec, d.UID)
		}
		logExplanation(t, e)
		if out := cliExplain(t, gc, "configmap/d", "-n", ns); !strings.HasPrefix(out, "Verdict: "+want+"\n") {
			t.Errorf("nodegc explain does not begin with the verdict:\n%s", out)
		}
	})

	t.Run("kept object, by every name of its kind", func(t *testing.T) {
		o := env.configMap(t, ns, "owner-2", nil)
		k := env.configMap(t, ns, "kept", []metav1.OwnerReference{cmRef(o, true)})
		gc.waitObserved(t, k.UID, k.ResourceVersion)
		want := fmt.Sprintf("kept: owner ConfigMap %s/owner-2 (uid %s) exists", ns, o.UID)
		for _, resource := range []string{"cm", "configmap", "configmaps", "ConfigMap", "configmaps.v1."} {
			e := explain(t, resource, ns, "kept")
			if e.Code != CodeKept || e.Verdict != want {
				t.Errorf("%s: verdict:\n got %s: %s\nwant %s: %s", resource, e.Code, e.Verdict, CodeKept, want)
			}
			if !e.InGraph || len(e.Owners) != 1 || e.Owners[0].Class != "solid" || e.Owners[0].UID != o.UID {
				t.Errorf("%s: inGraph %t, owners %+v; want the observed owner, solid", resource, e.InGraph, e.Owners)
			}
		}
		e := explain(t, "cm", ns, "owner-2")
		if e.Code != CodeNoOwners || len(e.Dependents) != 1 || e.Dependents[0].UID != k.UID || !e.Dependents[0].BlockOwnerDeletion {
			t.Errorf("the owner: %s (%s), dependents %+v; want no owners and one blocking dependent", e.Code, e.Verdict, e.Dependents)
		}
	})

	t.Run("objects of a named group", func(t *testing.T) {
		fns := env.namespace(t, "explain-apps")
		f := env.deploymentFamily(t, fns, 0)
		gc.waitObserved(t, f.rs.UID, f.rs.ResourceVersion)
		for _, resource := range []string{"deployment", "deployments.apps", "Deployment", "deploy", "deployments.v1.apps"} {
			e := explain(t, resource, fns, "d1")
			if e.Code != CodeNoOwners || e.Object.APIVersion != "apps/v1" || e.Object.Resource != "deployments.apps" ||
				e.DependentsTotal != 1 || e.Dependents[0].UID != f.rs.UID {
				t.Errorf("%s: %s (%s) for %+v with dependents %+v", resource, e.Code, e.Verdict, e.Object, e.Dependents)
			}
		}
		e := explain(t, "rs", fns, "r1")
		want := fmt.Sprintf("kept: owner Deployment %s/d1 (uid %s) exists", fns, f.d.UID)
		if e.Code != CodeKept || e.Verdict != want || !e.Owners[0].Controller {
			t.Errorf("ReplicaSet: verdict:\n got %s: %s\nwant %s: %s; owners %+v", e.Code, e.Verdict, CodeKept, want, e.Owners)
		}
	})

	t.Run("errors", func(t *testing.T) {
		_, err := gc.Explain(t.Context(), ExplainQuery{Resource: "nosuchthing", Namespace: ns, Name: "x"})
		if !errors.Is(err, ErrUnknownResource) || !strings.Contains(err.Error(), `"nosuchthing"`) {
			t.Errorf("unknown resource: %v; want ErrUnknownResource naming it", err)
		}
		if _, err := gc.Explain(t.Context(), ExplainQuery{Resource: "cm", Name: "x"}); !errors.Is(err, ErrInvalidQuery) {
			t.Errorf("namespaced resource without a namespace: %v; want ErrInvalidQuery", err)
		}
		e := explain(t, "cm", ns, "never-was")
		if e.Code != CodeNotFound || e.Object.Exists {
			t.Errorf("an object that never existed: %s (%s)", e.Code, e.Verdict)
		}
		// The verdict says since when this instance runs the owner GC: an
		// earlier leader's deletions are in no record here.
		since := e.LeaderSince.UTC().Format(time.RFC3339)
		if e.LeaderSince.IsZero() || e.LeaderSince.After(time.Now()) ||
			!strings.Contains(e.Verdict, "an earlier owner GC leader did (this instance has run the owner GC since "+since+")") {
			t.Errorf("an object that never existed: leaderSince %s, verdict %q; want the run's start in the verdict", e.LeaderSince, e.Verdict)
		}
	})

	t.Run("HTTP", func(t *testing.T) {
		h := gc.ExplainHandler(func() (string, bool) { return "me", false })
		get := func(query string) *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, ExplainPath+"?"+query, nil).WithContext(t.Context()))
			return rec
		}
		rec := get("resource=cm&namespace=" + ns + "&name=kept")
		var e Explanation
		if err := json.Unmarshal(rec.Body.Bytes(), &e); rec.Code != http.StatusOK || err != nil || e.Code != CodeKept {
			t.Errorf("explain over HTTP: status %d, %v, code %q; body %s", rec.Code, err, e.Code, rec.Body)
		}
		for query, want := range map[string]int{
			"resource=nosuchthing&namespace=" + ns + "&name=x": http.StatusNotFound,
			"resource=cm&name=x": http.StatusBadRequest,
			"namespace=x":        http.StatusBadRequest,
		} {
			rec := get(query)
			var body ExplainError
			if err := json.Unmarshal(rec.Body.Bytes(), &body); rec.Code != want || err != nil || !body.Leader || body.Message == "" {
				t.Errorf("%s: status %d, %v, body %s; want %d with a message", query, rec.Code, err, rec.Body, want)
			}
		}
	})
}

// logExplanation logs e as JSON (shown with -v and on failure).
func logExplanation(t *testing.T, e *Explanation) {
	t.Helper()
	b, _ := json.MarshalIndent(e, "", "  ")
	t.Logf("explanation:\n%s", b)
}

// cliExplain runs the nodegc binary's explain command against gc's explain
// handler and returns what it printed; its first line is the verdict.
func cliExplain(t *testing.T, gc *testCollector, args ...string) string {
	t.Helper()
	bin, err := nodegcproc.Build()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gc.ExplainHandler(nil))
	defer srv.Close()
	cmd := exec.CommandContext(t.Context(), bin, append(append([]string{"explain"}, args...), "--server", srv.URL)...)
	cmd.Env = nodegcproc.Environ() // with -race: a data race fails the command
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("nodegc explain %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	t.Logf("$ nodegc explain %s\n%s", strings.Join(args, " "), out)
	return string(out)
}

// TestExplainWhatTheHoldWaitsFor: explain (and with it the stuck scanner,
// which words and counts a stuck deletion from explain's verdict) names
// what the finalizer hold waits for as holdFinalizer decides it: also a
// resource that left discovery while it held dependents of the owner, and
// nothing once the owner's hold has lasted ownerGC.unsyncedResourceHold.
// Before, explain looked only at the monitors and failed discovery: a
// foreground owner whose blocking dependent's resource had left discovery
// "will be deleted" (counted stuck as finalizer-not-removed) while the
// worker held its finalizer, and an owner whose hold had expired still
// "waits".
func TestExplainWhatTheHoldWaitsFor(t *testing.T) {
	s := newRejectServer(t)
	r, tg, _, _ := rejectRun(t, s)
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	const bound = 10 * time.Minute
	r.c.clock, r.c.unsyncedHold, r.c.failureGrace, r.c.syncTimeout = clk, bound, 10*time.Second, time.Minute
	tg.b.now, tg.b.lostFor = clk.Now, bound
	r.recorder = record.NewFakeRecorder(10)
	r.roundsStarted.Add(1)
	r.roundDone.Store(1)
	ns := rejectNamespace
	fg := object(ns, "fg", "fg", deleting(), withFinalizers(metav1.FinalizerDeleteDependents))
	orphaning := object(ns, "orphaning", "orphaning", deleting(), withFinalizers(metav1.FinalizerOrphanDependents))
	s.refuse("fg", metav1.Status{}, fg)
	s.refuse("orphaning", metav1.Status{}, orphaning)
	explain := func(o *metav1.PartialObjectMetadata) *Explanation {
		t.Helper()
		e, err := r.explain(t.Context(), objectID{uid: o.UID, apiVersion: "v1", kind: "ConfigMap", namespace: ns, name: o.Name})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}

	// Pods leave discovery while fg's blocking dependent p is one.
	tg.apply(upsert(resConfigMap, fg), upsert(resConfigMap, orphaning),
		upsert(resPod, object(ns, "p", "p", ownedBy(resConfigMap, "fg", "fg", true))),
		event{typ: evResourceGone, res: resPod})
	if _, held := r.holdFinalizer(objectID{uid: "fg", apiVersion: "v1", kind: "ConfigMap", namespace: ns, name: "fg"},
		metav1.FinalizerDeleteDependents); !held {
		t.Fatal("the worker does not hold fg's finalizer; the test needs it held")
	}
	if e := explain(fg); e.Code != CodeWaitsForResource || !strings.Contains(e.Verdict, "pods") {
		t.Errorf("fg, whose blocking dependent's resource left discovery: %s %q; want %s naming pods", e.Code, e.Verdict, CodeWaitsForResource)
	}

	// Replicasets fail: the orphaning owner is held, up to the bound.
	rs := &monitor{started: clk.Now(), res: resReplicaSet}
	rs.markGraphSynced()
	r.monitors.byGR[resReplicaSet.gvr.GroupResource()] = rs
	r.monitors.noteError(t.Context(), rs, errors.New("connection refused"))
	orphaningID := objectID{uid: "orphaning", apiVersion: "v1", kind: "ConfigMap", namespace: ns, name: "orphaning"}
	if _, held := r.holdFinalizer(orphaningID, metav1.FinalizerOrphanDependents); !held {
		t.Fatal("the worker does not hold the orphaning owner's finalizer; the test needs it held")
	}
	if e := explain(orphaning); e.Code != CodeWaitsForResource || !strings.Contains(e.Verdict, "replicasets") {
		t.Errorf("orphaning owner while replicasets fail: %s %q; want %s naming replicasets", e.Code, e.Verdict, CodeWaitsForResource)
	}
	clk.Step(bound)
	if e := explain(orphaning); e.Code != CodeWillBeDeleted {
		t.Errorf("orphaning owner once its hold lasted the bound: %s %q; want %s (the worker's next look removes the finalizer)", e.Code, e.Verdict, CodeWillBeDeleted)
	}
	if _, held := r.holdFinalizer(orphaningID, metav1.FinalizerOrphanDependents); held {
		t.Error("the worker still holds the finalizer after the bound")
	}
}

// TestExplainOwnerInAnotherNamespace: an owner the graph observed in
// another namespace than the dependent's is shown in its own namespace, in
// the owners explain classifies live and in the decision records, alive or
// deleted. Before, every owner of a namespaced kind was shown in the
// dependent's namespace: "owner ConfigMap ns2/o is in another namespace".
func TestExplainOwnerInAnotherNamespace(t *testing.T) {
	d := func(ns string) *metav1.PartialObjectMetadata {
		return object(ns, "d", "d-1", ownedBy(resConfigMap, "o", "o-1", false))
	}
	for name, tc := range map[string]struct {
		graph []event
		want  string
	}{
		"alive": {
			graph: []event{upsert(resConfigMap, object("ns1", "o", "o-1")), upsert(resConfigMap, d("ns2"))},
			want:  "will be deleted with propagation Background: every owner is gone (rule all-owners-absent): owner ConfigMap ns1/o (uid o-1) is in another namespace",
		},
		"deleted": {
			graph: []event{upsert(resConfigMap, object("ns1", "o", "o-1")), upsert(resConfigMap, d("ns2")),
				del(resConfigMap, object("ns1", "o", "o-1"))},
			want: "will be deleted with propagation Background: every owner is gone (rule all-owners-absent): owner ConfigMap ns1/o (uid o-1) was deleted",
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := explainPure(t, explainCase{graph: tc.graph, res: resConfigMap, live: d("ns2")})
			if e.Verdict != tc.want || e.Owners[0].Namespace != "ns1" {
				t.Errorf("verdict %q, owner in namespace %q; want %q, ns1", e.Verdict, e.Owners[0].Namespace, tc.want)
			}
		})
	}

	// The record of d's deletion, by a worker.
	s := newRejectServer(t)
	r, tg, _, _ := rejectRun(t, s)
	r.recorder = record.NewFakeRecorder(10)
	dep := object(rejectNamespace, "d", "d", ownedBy(resConfigMap, "o", "o-1", false))
	tg.apply(upsert(resConfigMap, object("elsewhere", "o", "o-1")), upsert(resConfigMap, dep))
	s.refuse("d", answerPolicyDenied("d"), dep)
	s.accept("d")
	if out := processItem(t, r, "d"); out != done || s.count(http.MethodDelete, "d") != 1 {
		t.Fatalf("d: outcome %+v, %d DELETEs; want it deleted", out, s.count(http.MethodDelete, "d"))
	}
	recs := r.explainRecords(objectID{uid: "d", apiVersion: "v1", kind: "ConfigMap", namespace: rejectNamespace, name: "d"}, false)
	if len(recs) != 1 || len(recs[0].Owners) != 1 || recs[0].Owners[0].Namespace != "elsewhere" {
		t.Errorf("records of d = %+v; want one, with its owner in namespace elsewhere", recs)
	}
}

// TestExplainBlockerKeptByAnOwnerTheGraphDoesNotObserve: p is deleted in
// the foreground; its blocking dependent c has a second owner q that exists
// but that the graph never observed (its resource is not watched, or its
// watch event is late). c's worker looks q up, finds it, and only removes
// c's reference to p (solid-owner-remains-remove-dangling-references);
// explain of c says it is kept. Explain of p must say the same of c, from a
// look-up of q as the worker makes. Before, it said c was "deleted first"
// (review ownergc r9 F1), as it only knew owners the graph observes.
func TestExplainBlockerKeptByAnOwnerTheGraphDoesNotObserve(t *testing.T) {
	p := object("ns", "p", "p-1", deleting(), withFinalizers(metav1.FinalizerDeleteDependents))
	c := object("ns", "c", "c-1", ownedBy(resConfigMap, "p", "p-1", true), ownedBy(resConfigMap, "q", "q-1", false))
	graph := []event{upsert(resConfigMap, p), upsert(resConfigMap, c)}
	found := map[types.UID]*metav1.PartialObjectMetadata{"q-1": object("ns", "q", "q-1")} // never delivered to the graph

	ofC := explainPure(t, explainCase{graph: graph, res: resConfigMap, live: c, lookups: found})
	if ofC.Code != CodeKept {
		t.Fatalf("explain c: %s: %s; want %s (the test needs the worker to keep c)", ofC.Code, ofC.Verdict, CodeKept)
	}
	for name, tc := range map[string]struct {
		lookups      map[types.UID]*metav1.PartialObjectMetadata
		watchPending bool
		lookupErr    error
		wantCode     VerdictCode
		want         string
	}{
		"q exists": {lookups: found, wantCode: CodeWaitsForDependents,
			want: "waits for dependent ConfigMap ns/c (uid c-1) (blockOwnerDeletion) which the owner GC keeps, removing its " +
				"reference to this object: its owner ConfigMap ns/q (uid q-1) exists (read live; the graph has not observed it)"},
		// Without q, c goes first indeed.
		"q does not exist": {wantCode: CodeWaitsForDependents,
			want: "waits for dependent ConfigMap ns/c (uid c-1) (blockOwnerDeletion) which the owner GC deletes first"},
		// The worker waits for q's watch before it takes q for absent
		// (explain of c: undecided).
		"q not found, its watch behind c's version": {watchPending: true, wantCode: CodeWaitsForDependents,
			want: "waits for dependent ConfigMap ns/c (uid c-1) (blockOwnerDeletion) which the owner GC decides about once its " +
				"ConfigMap watch has reached the dependent's version: a look-up of its owner ConfigMap ns/q (uid q-1) found nothing " +
				"with that UID (it waits at most 10s)"},
		"q's look-up fails": {lookupErr: errors.New(`configmaps "q" is forbidden`), wantCode: CodeWaitsForDependents,
			want: "waits for dependent ConfigMap ns/c (uid c-1) (blockOwnerDeletion) which the owner GC cannot decide about while it " +
				`cannot look an owner up (it retries): look up owner ConfigMap q (uid q-1): configmaps "q" is forbidden`},
	} {
		t.Run(name, func(t *testing.T) {
			e := explainPure(t, explainCase{graph: graph, res: resConfigMap, live: p, lookups: tc.lookups, watchPending: tc.watchPending,
				lookupErr: tc.lookupErr})
			if e.Code != tc.wantCode || e.Verdict != tc.want {
				t.Errorf("explain p: verdict:\n got %s: %s\nwant %s: %s", e.Code, e.Verdict, tc.wantCode, tc.want)
			}
		})
	}
}

// TestExplainWhatTheCollectorDoesNotWatch explains, on a real API server
// with secrets in gcIgnoredResources (as events are by default), objects
// the owner GC sees only through look-ups:
//   - a blocking dependent of a foreground deletion whose other owner is
//     an ignored Secret: its worker looks the Secret up, finds it, and
//     only removes its reference (dry-run keeps the owner waiting so that
//     explain can be asked). Before, explain of the owner said the
//     dependent was "deleted first" (review ownergc r9 F1).
//   - an ignored Secret deleted with propagation Foreground: nothing
//     removes its foregroundDeletion finalizer; explain says so and gives
//     the patch that removes it by hand, which works. Before, its
//     finalizer table said the owner GC removes it once no blocking
//     dependent remains, beside a verdict saying the owner GC never deals
//     with it (r9 F2).
func TestExplainWhatTheCollectorDoesNotWatch(t *testing.T) {
	env := newEnv(t)
	cfg := testConfig()
	cfg.DryRun = true
	cfg.GCIgnoredResources = append(cfg.GCIgnoredResources, config.GroupResource{Resource: "secrets"})
	gc := env.startCollector(t, cfg)
	ns := env.namespace(t, "unwatched")
	unfinalize := func(t *testing.T, name string, secret bool) {
		p := []byte(`{"metadata":{"finalizers":null}}`)
		var err error
		if secret {
			_, err = env.cs.CoreV1().Secrets(ns).Patch(context.Background(), name, types.MergePatchType, p, metav1.PatchOptions{})
		} else {
			_, err = env.cs.CoreV1().ConfigMaps(ns).Patch(context.Background(), name, types.MergePatchType, p, metav1.PatchOptions{})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			t.Logf("cleanup of %s: %v", name, err)
		}
	}

	t.Run("blocking dependent kept by an ignored owner", func(t *testing.T) {
		q, err := env.cs.CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "q"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p := env.configMap(t, ns, "p", nil)
		c := env.configMap(t, ns, "c", []metav1.OwnerReference{cmRef(p, true), ref("v1", "Secret", q, false)})
		gc.waitObserved(t, c.UID, c.ResourceVersion)
		env.deleteCM(t, ns, "p", metav1.DeletePropagationForeground)
		defer unfinalize(t, "p", false)
		recs := gc.settledRecords(t, c.UID)[c.UID]
		if len(recs) == 0 || recs[len(recs)-1].rec.action != actRemoveRefs {
			t.Fatalf("decisions about c: %+v; want the last to remove its reference to p", recs)
		}
		e, err := gc.Explain(t.Context(), ExplainQuery{Resource: "cm", Namespace: ns, Name: "p"})
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("waits for dependent ConfigMap %s/c (uid %s) (blockOwnerDeletion) which the owner GC keeps, removing its "+
			"reference to this object: its owner Secret %s/q (uid %s) exists (read live; the graph has not observed it) "+
			"(dry-run: the owner GC decides but writes nothing)", ns, c.UID, ns, q.UID)
		if e.Code != CodeWaitsForDependents || e.Verdict != want {
			t.Errorf("explain p: verdict:\n got %s: %s\nwant %s: %s", e.Code, e.Verdict, CodeWaitsForDependents, want)
		}
	})

	t.Run("ignored object deleted in the foreground", func(t *testing.T) {
		s, err := env.cs.CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		fg := metav1.DeletePropagationForeground
		if err := env.cs.CoreV1().Secrets(ns).Delete(t.Context(), "s", metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
			t.Fatal(err)
		}
		defer unfinalize(t, "s", true)
		time.Sleep(3 * time.Second) // what nothing removes stays
		e, err := gc.Explain(t.Context(), ExplainQuery{Resource: "secret", Namespace: ns, Name: "s"})
		if err != nil {
			t.Fatal(err)
		}
		patch := `[{"op":"test","path":"/metadata/finalizers/0","value":"foregroundDeletion"},{"op":"remove","path":"/metadata/finalizers/0"}]`
		want := "not watched: the owner GC has no monitor for secrets (it is in ownerGC.gcIgnoredResources, or does not support list, " +
			"watch and delete), so it never deletes it nor waits for it; nor does it remove its foregroundDeletion finalizer, which " +
			"stays until removed by hand: kubectl patch secrets s -n " + ns + " --type=json -p '" + patch + "'" +
			" (dry-run: the owner GC decides but writes nothing)"
		if e.Code != CodeNotWatched || e.Verdict != want {
			t.Errorf("explain s: verdict:\n got %s: %s\nwant %s: %s", e.Code, e.Verdict, CodeNotWatched, want)
		}
		wantFin := []FinalizerState{{Name: metav1.FinalizerDeleteDependents, RemovedBy: "nobody",
			Condition: "the owner GC does not watch secrets: remove it by hand (the verdict gives the command)"}}
		if diff := cmp.Diff(wantFin, e.Finalizers); diff != "" {
			t.Errorf("explain s: finalizers (-want +got):\n%s", diff)
		}
		// The patch the verdict gives ends the deletion.
		if _, err := env.cs.CoreV1().Secrets(ns).Patch(t.Context(), "s", types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatalf("the verdict's patch: %v", err)
		}
		if got, err := env.cs.CoreV1().Secrets(ns).Get(t.Context(), "s", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("after the verdict's patch: %v, %v; want secret s (uid %s) gone", got, err, s.UID)
		}
	})
}

// TestExplainNotWatchedFinalizers: an object of a resource the owner GC
// does not watch (gcIgnoredResources, or no list or watch) that carries
// the foregroundDeletion or orphan finalizer (kube-apiserver adds it at a
// --cascade=foreground or orphan delete) keeps it for good: no worker ever
// looks at the object. Explain says nothing removes it, and gives the
// patch that does, testing each finalizer before it removes it. Before,
// its finalizer table said the owner GC removes it once no blocking
// dependent remains ("0 remain"), beside a verdict saying the owner GC
// never deletes the object nor waits for it (review ownergc r9 F2).
func TestExplainNotWatchedFinalizers(t *testing.T) {
	const notWatched = "not watched: the owner GC has no monitor for configmaps (it is in ownerGC.gcIgnoredResources, or does not " +
		"support list, watch and delete), so it never deletes it nor waits for it"
	nobody := func(f string) FinalizerState {
		return FinalizerState{Name: f, RemovedBy: "nobody", Condition: "the owner GC does not watch configmaps: remove it by hand (the verdict gives the command)"}
	}
	for name, tc := range map[string]struct {
		finalizers []string
		res        *resource
		want       string
		wantFin    []FinalizerState
	}{
		"foregroundDeletion": {finalizers: []string{metav1.FinalizerDeleteDependents}, res: resConfigMap,
			want: notWatched + "; nor does it remove its foregroundDeletion finalizer, which stays until removed by hand: kubectl patch " +
				`configmaps e -n ns --type=json -p '[{"op":"test","path":"/metadata/finalizers/0","value":"foregroundDeletion"},` +
				`{"op":"remove","path":"/metadata/finalizers/0"}]'`,
			wantFin: []FinalizerState{nobody(metav1.FinalizerDeleteDependents)}},
		"orphan": {finalizers: []string{metav1.FinalizerOrphanDependents}, res: resConfigMap,
			want: notWatched + "; nor does it remove its orphan finalizer, which stays until removed by hand: kubectl patch " +
				`configmaps e -n ns --type=json -p '[{"op":"test","path":"/metadata/finalizers/0","value":"orphan"},` +
				`{"op":"remove","path":"/metadata/finalizers/0"}]'`,
			wantFin: []FinalizerState{nobody(metav1.FinalizerOrphanDependents)}},
		// The last goes first, so that the indexes of the others hold;
		// another controller's finalizer stays.
		"both, and another controller's": {finalizers: []string{metav1.FinalizerOrphanDependents, exampleHold, metav1.FinalizerDeleteDependents},
			res: resConfigMap,
			want: notWatched + "; nor does it remove its orphan and foregroundDeletion finalizers, which stay until removed by hand: " +
				`kubectl patch configmaps e -n ns --type=json -p '[{"op":"test","path":"/metadata/finalizers/2","value":"foregroundDeletion"},` +
				`{"op":"remove","path":"/metadata/finalizers/2"},{"op":"test","path":"/metadata/finalizers/0","value":"orphan"},` +
				`{"op":"remove","path":"/metadata/finalizers/0"}]'`,
			wantFin: []FinalizerState{nobody(metav1.FinalizerOrphanDependents), {Name: exampleHold, RemovedBy: "another controller"},
				nobody(metav1.FinalizerDeleteDependents)}},
		"cluster-scoped": {finalizers: []string{metav1.FinalizerDeleteDependents}, res: resNode,
			want: strings.Replace(notWatched, "configmaps", "nodes", 1) + "; nor does it remove its foregroundDeletion finalizer, which " +
				`stays until removed by hand: kubectl patch nodes e --type=json -p '[{"op":"test","path":"/metadata/finalizers/0",` +
				`"value":"foregroundDeletion"},{"op":"remove","path":"/metadata/finalizers/0"}]'`,
			wantFin: []FinalizerState{{Name: metav1.FinalizerDeleteDependents, RemovedBy: "nobody",
				Condition: "the owner GC does not watch nodes: remove it by hand (the verdict gives the command)"}}},
	} {
		t.Run(name, func(t *testing.T) {
			ns := "ns"
			if tc.res == resNode {
				ns = ""
			}
			live := object(ns, "e", "e-1", deleting(), withFinalizers(tc.finalizers...))
			e := explainPure(t, explainCase{res: tc.res, live: live, unmonitored: true})
			if e.Code != CodeNotWatched || e.Verdict != tc.want {
				t.Errorf("verdict:\n got %s: %s\nwant %s: %s", e.Code, e.Verdict, CodeNotWatched, tc.want)
			}
			if diff := cmp.Diff(tc.wantFin, e.Finalizers); diff != "" {
				t.Errorf("finalizers (-want +got):\n%s", diff)
			}
		})
	}
}
