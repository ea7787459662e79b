package ownergc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/restmapper"
)

// Explain answers "why is this object still here?" (or "why is it gone?")
// from what the owner GC knows: the object read live, its owners classified
// with the workers' own functions (judgeRef on the same views), its
// dependents from the graph, its finalizers, the decision records kept
// about it, and one plain verdict. It only reads: the requests it makes are
// GETs (the object, an owner the graph never observed, the blocking
// dependents' finalizers, and their owners the graph never observed), and
// nothing goes back into the graph or the absent-owner cache.

// ExplainQuery names the object to explain.
type ExplainQuery struct {
	// Resource is the object's type as kubectl takes it: plural, singular,
	// Kind or short name, optionally with its group or version and group
	// ("deployment", "deployments.apps", "Deployment", "cm", "configmap").
	Resource string
	// Namespace of a namespaced object; ignored for a cluster-scoped one.
	Namespace string
	Name      string
}

// Errors of Explain; classify them with errors.Is.
var (
	// ErrNotRunning: this instance does not run the owner GC (it is not the
	// leader, or its collector is starting or stopping), so it has no
	// graph to explain from.
	ErrNotRunning = errors.New("this instance is not running the owner GC")
	// ErrNotSynced: the owner GC runs here but its graph does not hold the
	// initial state of every resource yet.
	ErrNotSynced = errors.New("the owner GC has not synced its graph yet")
	// ErrInvalidQuery: a query without a resource or name, or a namespaced
	// resource without a namespace.
	ErrInvalidQuery = errors.New("invalid explain query")
	// ErrUnknownResource: discovery knows no resource of that name.
	ErrUnknownResource = errors.New("unknown resource type")
)

// VerdictCode classifies a verdict; the Verdict text says the same in words.
type VerdictCode string

// The verdict codes (docs/explain.md says what each means).
const (
	CodeKept               VerdictCode = "kept"                 // an owner exists
	CodeWillBeDeleted      VerdictCode = "will-be-deleted"      // the owner GC deletes it, or lets its deletion finish
	CodeWaitsForDependents VerdictCode = "waits-for-dependents" // foreground deletion waits for a blocking dependent
	CodeOrphaning          VerdictCode = "orphaning"            // orphan deletion: references still to remove
	CodeWaitsForResource   VerdictCode = "waits-for-resource"   // foreground or orphan finish waits for a resource that cannot be listed
	CodeBeingDeleted       VerdictCode = "being-deleted"        // deletion under way, no finalizer of the owner GC
	CodeDeleted            VerdictCode = "deleted"              // gone; a decision record says why
	CodeNotFound           VerdictCode = "not-found"            // gone; no decision record of the owner GC
	CodeNoOwners           VerdictCode = "no-owners"            // no owner references: never deleted by the owner GC
	CodeNotInGraph         VerdictCode = "not-in-graph"         // exists, but no monitor has delivered it yet
	CodeNotWatched         VerdictCode = "not-watched"          // its resource has no monitor (ignored, or no list/watch/delete)
	CodeNeverDeleted       VerdictCode = "never-deleted"        // a cluster-scoped object names a namespaced owner kind
	CodeUndecided          VerdictCode = "undecided"            // an owner cannot be classified now
)

// Owner classes besides the workers' (solid, dangling,
// waitingForDependentsDeletion).
const (
	// classUnverified: the graph never observed the owner and a GET found
	// it; a worker treats it as solid and checks again later.
	classUnverified = "unverified"
	// classUnknown: the reference cannot be classified now.
	classUnknown = "unknown"
)

// Bounds of one explanation.
const (
	maxExplainDependents = 100 // dependents listed (blocking ones first); DependentsTotal counts all
	maxExplainReads      = 20  // blocking dependents whose finalizers are read
	maxExplainRecords    = 20  // newest decision records listed
)

// Explanation is what the owner GC knows and decided about one object; it
// is also the JSON answer of ExplainPath.
type Explanation struct {
	// Verdict is the plain answer; Code classifies it.
	Verdict string      `json:"verdict"`
	Code    VerdictCode `json:"code"`
	Object  ObjectInfo  `json:"object"`
	// InGraph: the graph has observed the object (at GraphResourceVersion).
	InGraph              bool   `json:"inGraph"`
	GraphResourceVersion string `json:"graphResourceVersion,omitempty"`
	// Unmonitored: in the graph, of a resource that discovery lists
	// without list, watch or delete: its monitor stopped, and the owner GC
	// reads the object before it acts on it.
	Unmonitored bool `json:"unmonitored,omitempty"`
	// DryRun: the owner GC decides and records but writes nothing.
	DryRun bool `json:"dryRun,omitempty"`
	// LeaderSince is when this instance's current Run of the owner GC
	// started (it took the lease). The decision records are kept in this
	// process's memory only: what an earlier leader decided before then is
	// in none of them.
	LeaderSince time.Time    `json:"leaderSince,omitzero"`
	Owners      []OwnerState `json:"owners"`
	// Dependents are the graph's dependents of the object, blocking ones
	// first, at most 100; DependentsTotal and BlockingTotal count them all.
	Dependents      []DependentState `json:"dependents"`
	DependentsTotal int              `json:"dependentsTotal"`
	BlockingTotal   int              `json:"blockingTotal"`
	Finalizers      []FinalizerState `json:"finalizers"`
	// UnsyncedResources is what the finalizer hold waits for now (hold.go):
	// resources that could hold dependents of the object and cannot be
	// trusted (list/watch failing, or not synced), group versions failing
	// discovery that may serve them, resources that left discovery while
	// they held its dependents. Empty once the hold has lasted
	// ownerGC.unsyncedResourceHold.
	UnsyncedResources []string `json:"unsyncedResources,omitempty"`
	// Records are the newest decision records about the object (by UID,
	// and by name for an object already deleted), oldest first.
	Records []Record `json:"records"`
}

// ObjectInfo is the object as read live (one GET).
type ObjectInfo struct {
	APIVersion        string       `json:"apiVersion"`
	Kind              string       `json:"kind"`
	Resource          string       `json:"resource"`
	Namespace         string       `json:"namespace,omitempty"`
	Name              string       `json:"name"`
	UID               types.UID    `json:"uid,omitempty"`
	Exists            bool         `json:"exists"`
	ResourceVersion   string       `json:"resourceVersion,omitempty"`
	DeletionTimestamp *metav1.Time `json:"deletionTimestamp,omitempty"`
	Finalizers        []string     `json:"finalizers,omitempty"`
}

// OwnerState is one owner reference and its class.
type OwnerState struct {
	APIVersion         string    `json:"apiVersion"`
	Kind               string    `json:"kind"`
	Namespace          string    `json:"namespace,omitempty"`
	Name               string    `json:"name"`
	UID                types.UID `json:"uid"`
	Controller         bool      `json:"controller,omitempty"`
	BlockOwnerDeletion bool      `json:"blockOwnerDeletion,omitempty"`
	// Class: solid, dangling, waitingForDependentsDeletion, unverified
	// (found by a GET, never observed) or unknown; Reason says why.
	Class  string `json:"class"`
	Reason string `json:"reason"`
	// ObservedName is the owner's name as the graph observed it, when the
	// reference states another (the owner holds the object all the same:
	// same UID, group and kind, where the object may have an owner).
	ObservedName string `json:"observedName,omitempty"`
	// Graph is what the graph holds for the owner's UID: observed,
	// virtual (referenced, never observed), virtual-absent (a lookup found
	// nothing), deleted, or none.
	Graph string `json:"graph"`
	// Checked says how the class was found: graph, absent-owner-cache, or
	// get (a read by explain, as a worker's lookup would).
	Checked string `json:"checked"`
	Error   string `json:"error,omitempty"`
}

// DependentState is one dependent of the object in the graph.
type DependentState struct {
	APIVersion         string    `json:"apiVersion"`
	Kind               string    `json:"kind"`
	Namespace          string    `json:"namespace,omitempty"`
	Name               string    `json:"name"`
	UID                types.UID `json:"uid"`
	BlockOwnerDeletion bool      `json:"blockOwnerDeletion"`
	BeingDeleted       bool      `json:"beingDeleted,omitempty"`
	DeletingDependents bool      `json:"deletingDependents,omitempty"`
	// Finalizers of a blocking dependent, read live; Read says they were
	// (the first 20 blocking dependents are read), Gone that the read found
	// no such object any more.
	Finalizers []string `json:"finalizers,omitempty"`
	Read       bool     `json:"read,omitempty"`
	Gone       bool     `json:"gone,omitempty"`
	Error      string   `json:"error,omitempty"`
	// Undecided is, for a blocking dependent not being deleted, an owner
	// reference of its that the workers cannot classify (class unknown),
	// so that they do not delete it: never (a cluster-scoped dependent
	// naming a namespaced kind), or not until discovery knows the owner's
	// kind, or while the owner's lookup fails (Error says how; the owner
	// is not named otherwise).
	Undecided *OwnerState `json:"undecided,omitempty"`
	// KeptBy is, for a blocking dependent not being deleted whose owners
	// can all be classified, an owner of its that exists and does not
	// wait for its dependents: one the graph observes alive (class
	// solid), or, for one of the first 20 blocking dependents, one the
	// graph never observed that a look-up found, as the dependent's
	// worker looks it up (class unverified, checked get). The workers keep
	// the dependent, and remove its reference to the owner being deleted
	// (solid-owner-remains-remove-dangling-references).
	KeptBy *OwnerState `json:"keptBy,omitempty"`
}

// FinalizerState is one finalizer of the object and who removes it.
type FinalizerState struct {
	Name string `json:"name"`
	// RemovedBy is "owner GC", "another controller", or "nobody": the
	// owner GC's foregroundDeletion or orphan finalizer on an object of a
	// resource it does not watch (Code not-watched), which stays until
	// removed by hand.
	RemovedBy string `json:"removedBy"`
	Condition string `json:"condition,omitempty"`
}

// removedByNobody: FinalizerState.RemovedBy of a finalizer nothing removes.
const removedByNobody = "nobody"

// Record is a decision record of the owner GC, as kept for explain.
type Record struct {
	Time              time.Time     `json:"time"`
	APIVersion        string        `json:"apiVersion"`
	Kind              string        `json:"kind"`
	Namespace         string        `json:"namespace,omitempty"`
	Name              string        `json:"name"`
	UID               types.UID     `json:"uid"`
	Action            string        `json:"action"`
	PropagationPolicy string        `json:"propagationPolicy,omitempty"`
	Finalizer         string        `json:"finalizer,omitempty"`
	Rule              string        `json:"rule"`
	Owners            []RecordOwner `json:"owners,omitempty"`
	DryRun            bool          `json:"dryRun,omitempty"`
}

// RecordOwner is an owner reference as a decision saw it.
type RecordOwner struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Namespace  string    `json:"namespace,omitempty"`
	Name       string    `json:"name"`
	UID        types.UID `json:"uid"`
	Class      string    `json:"class"`
	Reason     string    `json:"reason"`
}

// Explain explains one object. It needs this instance to run the owner GC
// with a synced graph (else ErrNotRunning or ErrNotSynced).
func (c *Collector) Explain(ctx context.Context, q ExplainQuery) (*Explanation, error) {
	r := c.current.Load()
	if r == nil {
		return nil, ErrNotRunning
	}
	if !r.synced() {
		return nil, ErrNotSynced
	}
	if q.Resource == "" || q.Name == "" {
		return nil, fmt.Errorf("%w: resource and name are required", ErrInvalidQuery)
	}
	m, err := r.resolveResource(ctx, q.Resource)
	if err != nil {
		return nil, err
	}
	gvk := m.GroupVersionKind
	id := objectID{apiVersion: gvk.GroupVersion().String(), kind: gvk.Kind, name: q.Name}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		if q.Namespace == "" {
			return nil, fmt.Errorf("%w: %s is namespaced: give a namespace", ErrInvalidQuery, m.Resource.GroupResource())
		}
		id.namespace = q.Namespace
	}
	return r.explain(ctx, id)
}

// resolveResource maps what a user calls a resource to its REST mapping
// with the run's discovery snapshot, expanding short names as kubectl does
// (a discovery of every group version per try, uncached: explain is rare).
func (r *run) resolveResource(ctx context.Context, resource string) (*meta.RESTMapping, error) {
	snap := r.snapshot.Load()
	if snap == nil {
		return nil, ErrNotSynced
	}
	ctx, cancel := context.WithTimeout(ctx, r.c.requestTimeout)
	defer cancel()
	expander := restmapper.NewShortcutExpanderWithContext(meta.ToRESTMapperWithContext(snap.mapper), r.c.discovery, nil)
	full, partial := schema.ParseResourceArg(strings.ToLower(resource))
	var (
		gvr schema.GroupVersionResource
		err error
	)
	if full != nil {
		gvr, err = expander.ResourceForWithContext(ctx, *full)
	}
	if full == nil || err != nil {
		gvr, err = expander.ResourceForWithContext(ctx, partial.WithVersion(""))
	}
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrUnknownResource, resource, err)
	}
	gvk, err := snap.mapper.KindFor(gvr)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrUnknownResource, resource, err)
	}
	m, err := snap.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrUnknownResource, resource, err)
	}
	return m, nil
}

// explain builds the explanation of the object at id (its UID, when set,
// finds records of an object already gone).
func (r *run) explain(ctx context.Context, id objectID) (*Explanation, error) {
	m, err := r.mapping(id.apiVersion, id.kind)
	if err != nil {
		return nil, err
	}
	live, err := r.getObject(ctx, id)
	switch {
	case objectNotFound(err, id.name):
		live = nil
	case err != nil:
		return nil, fmt.Errorf("read %s %s/%s: %w", id.kind, id.namespace, id.name, err)
	}
	e := newExplanation(id, m.Resource.GroupResource().String(), live, r.c.dryRun)
	e.LeaderSince = r.started
	var d decision
	if live != nil {
		id.uid = live.UID
		v := r.graph.liveView(id, live)
		for i := range v.owners {
			r.markUnsure(&v.owners[i])
		}
		lookup := func(key ownerKey, apiVersion string, fresh bool) (lookupResult, string, error) {
			return r.explainLookup(ctx, key, apiVersion, fresh)
		}
		d = explainView(e, r.graph, &v, r.monitored(m.Resource.GroupResource()), r.scope, lookup, r.ownerWatchPending)
		r.readBlocking(ctx, e.Dependents)
		keptByLookups(r.graph, e.Dependents, r.scope, r.markUnsure, lookup, r.ownerWatchPending)
		if v.beingDeleted && (v.foregroundFinalizer || v.orphanFinalizer) {
			e.UnsyncedResources = r.holding(id) // what holds the finalizer (hold.go)
		}
	}
	e.Records = r.explainRecords(id, live == nil)
	if !e.Object.Exists && e.Object.UID == "" && len(e.Records) > 0 {
		e.Object.UID = e.Records[len(e.Records)-1].UID
	}
	e.Code, e.Verdict = verdictOf(e, d)
	return e, nil
}

// newExplanation starts the explanation of the object at id, as read live
// (nil: not found).
func newExplanation(id objectID, resource string, live *metav1.PartialObjectMetadata, dryRun bool) *Explanation {
	e := &Explanation{
		Object: ObjectInfo{APIVersion: id.apiVersion, Kind: id.kind, Resource: resource, Namespace: id.namespace,
			Name: id.name, UID: id.uid},
		DryRun: dryRun, Owners: []OwnerState{}, Dependents: []DependentState{}, Finalizers: []FinalizerState{},
		Records: []Record{},
	}
	if live != nil {
		e.Object.UID, e.Object.Exists, e.Object.ResourceVersion = live.UID, true, live.ResourceVersion
		e.Object.DeletionTimestamp, e.Object.Finalizers = live.DeletionTimestamp, live.Finalizers
	}
	return e
}

// decision is what the workers' functions say about a live object, beside
// what the Explanation shows.
type decision struct {
	monitored bool  // a monitor watches the object's resource
	plan      *plan // nil without owner references, or when one cannot be classified
	err       error // why an owner reference cannot be classified
}

// ownerLookup classifies an owner that only a live lookup can tell, and
// says how (checked).
type ownerLookup func(key ownerKey, apiVersion string, fresh bool) (res lookupResult, checked string, err error)

// watchPending says whether a worker would wait for the watch of owner o
// of v before taking a look-up that found nothing for its absence
// (ownerWatchPending).
type watchPending func(v *itemView, o *ownerView) bool

// explainView fills in what the graph knows about the live object v (its
// presence, owners, dependents, finalizers) and decides as a worker would:
// judgeRef for each owner reference, then decide (or
// decideDeletingDependents). monitored says whether a monitor watches v's
// resource; lookup stands in for the worker's lookups, pending for its
// wait for an owner's watch.
func explainView(e *Explanation, g *graph, v *itemView, monitored bool, scope scopeFunc, lookup ownerLookup, pending watchPending) decision {
	d := decision{monitored: monitored}
	g.mu.RLock()
	if n, ok := g.nodes[v.id.uid]; ok {
		e.InGraph = n.observed()
		if e.InGraph {
			e.GraphResourceVersion = n.rv
			e.Unmonitored = n.unmonitored()
		}
		e.Dependents, e.DependentsTotal, e.BlockingTotal = dependentStatesLocked(n)
		undecidedBlockersLocked(g, e.Dependents, scope)
	}
	g.mu.RUnlock()
	unwatched := ""
	if !e.InGraph && !monitored {
		unwatched = e.Object.Resource
	}
	e.Finalizers = finalizerStates(e.Object.Finalizers, e.BlockingTotal, e.DependentsTotal, unwatched)

	refs := make([]classifiedRef, 0, len(v.owners))
	for i := range v.owners {
		o := &v.owners[i]
		st, class, err := explainOwner(v, o, scope, lookup, pending)
		e.Owners = append(e.Owners, st)
		if err != nil && d.err == nil {
			d.err = err
		}
		refs = append(refs, classifiedRef{ownerView: *o, class: class, reason: st.Reason})
	}
	switch {
	case v.deletingDependents:
		p := decideDeletingDependents(v)
		d.plan = &p
	case len(v.owners) > 0 && d.err == nil:
		p := decide(v, refs)
		d.plan = &p
	}
	return d
}

// monitored reports whether a monitor watches the resource gr.
func (r *run) monitored(gr schema.GroupResource) bool {
	r.monitors.mu.Lock()
	defer r.monitors.mu.Unlock()
	_, ok := r.monitors.byGR[gr]
	return ok
}

// explainOwner classifies owner reference o of v as a worker does:
// judgeRef on the graph and, where only a lookup can tell, lookup; an
// owner found absent while its watch is pending is not classified yet.
func explainOwner(v *itemView, o *ownerView, scope scopeFunc, lookup ownerLookup, pending watchPending) (OwnerState, refClass, error) {
	st := OwnerState{APIVersion: o.apiVersion, Kind: o.kind, Name: o.name, UID: o.uid, Controller: o.controller,
		BlockOwnerDeletion: o.block, Graph: graphState(o), Checked: checkedGraph}
	if ns, ok := o.observedNamespace(); ok {
		st.Namespace = ns
	} else if namespaced, known := scope(o.apiVersion, o.kind); known && namespaced {
		st.Namespace = v.id.namespace
	}
	vd, err := judgeRef(v, o, scope)
	switch {
	case errors.Is(err, errNamespacedOwner):
		st.Class, st.Reason = classUnknown, reasonNamespacedOwner
		return st, 0, err
	case errors.Is(err, errUnknownKind):
		st.Class, st.Reason = classUnknown, reasonUnknownKind
		return st, 0, err
	case err != nil:
		st.Class, st.Reason, st.Error = classUnknown, reasonLookupFailed, err.Error()
		return st, 0, err
	case vd.lookup == nil:
		if vd.misnamed {
			st.ObservedName = o.node.name
		}
	default:
		st.Namespace = vd.lookup.namespace
		res, checked, err := lookup(*vd.lookup, cmp.Or(vd.apiVersion, o.apiVersion), vd.fresh)
		st.Checked = checked
		if err != nil {
			st.Class, st.Reason, st.Error = classUnknown, reasonLookupFailed, err.Error()
			return st, 0, fmt.Errorf("read owner %s %s: %w", o.kind, o.name, err)
		}
		vd.class, vd.reason = res.class, res.reason
	}
	if vd.class == classDangling && (vd.reason == reasonNotFound || vd.reason == reasonUIDMismatch) && pending != nil && pending(v, o) {
		st.Class, st.Reason = classUnknown, reasonOwnerWatchBehind
		return st, 0, errOwnerWatchBehind
	}
	st.Class, st.Reason = vd.class.String(), vd.reason
	if vd.lookup != nil && vd.class == classSolid {
		st.Class = classUnverified
	}
	return st, vd.class, nil
}

// Reasons of an owner that cannot be classified (class unknown).
const (
	reasonNamespacedOwner = "namespaced-owner-of-cluster-scoped-object"
	reasonUnknownKind     = "owner-kind-unknown-to-discovery"
	reasonLookupFailed    = "lookup-failed"
	// reasonOwnerWatchBehind: a look-up found nothing at the stated name,
	// and the owner's watch has not reached the object's version: the
	// owner may exist under another name (ownerWatchBehind).
	reasonOwnerWatchBehind = "owner-watch-behind"
)

// explainLookup looks an owner up for explain: in the absent-owner cache,
// else with one GET, which is neither shared with the workers' lookups nor
// written back.
func (r *run) explainLookup(ctx context.Context, key ownerKey, apiVersion string, fresh bool) (lookupResult, string, error) {
	if r.absent.has(key) && !fresh {
		return lookupResult{class: classDangling, reason: reasonNotFound}, checkedAbsentCache, nil
	}
	res, _, err := r.readOwner(ctx, key, apiVersion)
	return res, checkedGet, err
}

// How an owner's class was found (OwnerState.Checked).
const (
	checkedGraph       = "graph"
	checkedAbsentCache = "absent-owner-cache"
	checkedGet         = "get"
)

// graphState names what the graph holds for an owner's UID.
func graphState(o *ownerView) string {
	switch o.state {
	case ownerObserved:
		return "observed"
	case ownerDeleted:
		return "deleted"
	case ownerAbsentAtIdentity:
		return "virtual-absent"
	case ownerVirtual:
		return "virtual"
	default:
		return "none"
	}
}

// dependentStatesLocked copies n's dependents, blocking ones first, then
// by kind, namespace and name; at most maxExplainDependents. The graph's
// lock must be held.
func dependentStatesLocked(n *node) (deps []DependentState, total, blocking int) {
	deps = make([]DependentState, 0, len(n.dependents))
	for dep := range n.dependents {
		id := nodeID(dep)
		ds := DependentState{APIVersion: id.apiVersion, Kind: id.kind, Namespace: id.namespace, Name: id.name, UID: id.uid,
			BlockOwnerDeletion: dep.blocksOwner(n), BeingDeleted: dep.beingDeleted(), DeletingDependents: dep.deletingDependents()}
		if ds.BlockOwnerDeletion {
			blocking++
		}
		deps = append(deps, ds)
	}
	slices.SortFunc(deps, func(a, b DependentState) int {
		if a.BlockOwnerDeletion != b.BlockOwnerDeletion {
			if a.BlockOwnerDeletion {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name),
			cmp.Compare(a.UID, b.UID))
	})
	total = len(deps)
	if len(deps) > maxExplainDependents {
		deps = deps[:maxExplainDependents]
	}
	return deps, total, blocking
}

// undecidedBlockersLocked judges, as a worker would but without lookups,
// the owner references of the listed blocking dependents that are not
// being deleted, and records in each the first that cannot be classified
// (Undecided): a foreground deletion waiting for such a dependent waits
// for something the owner GC does not do. Failing that, it records the
// first owner the graph observes alive and not waiting (KeptBy): the
// workers keep such a dependent and only remove its reference (owners only
// a look-up can tell are keptByLookups'). The graph's lock must be held.
func undecidedBlockersLocked(g *graph, deps []DependentState, scope scopeFunc) {
	for i := range deps {
		d := &deps[i]
		if !d.BlockOwnerDeletion {
			break
		}
		n, ok := g.nodes[d.UID]
		if d.BeingDeleted || !ok || !n.observed() {
			continue
		}
		v := g.itemViewLocked(n)
		var kept *OwnerState
		for j := range v.owners {
			o := &v.owners[j]
			vd, err := judgeRef(&v, o, scope)
			var reason string
			switch {
			case errors.Is(err, errNamespacedOwner):
				reason = reasonNamespacedOwner
			case errors.Is(err, errUnknownKind):
				reason = reasonUnknownKind
			case err == nil && kept == nil && vd.class == classSolid && vd.lookup == nil:
				// The owner as observed: under another name than the
				// reference states, if misnamed (the workers keep the
				// dependent all the same).
				kept = &OwnerState{APIVersion: o.apiVersion, Kind: o.kind, Namespace: o.node.namespace, Name: o.node.name, UID: o.uid,
					Controller: o.controller, BlockOwnerDeletion: o.block, Class: classSolid.String(), Reason: vd.reason, Graph: graphState(o),
					Checked: checkedGraph}
				continue
			default:
				continue
			}
			d.Undecided = &OwnerState{APIVersion: o.apiVersion, Kind: o.kind, Name: o.name, UID: o.uid, Controller: o.controller,
				BlockOwnerDeletion: o.block, Class: classUnknown, Reason: reason, Graph: graphState(o), Checked: checkedGraph}
			break
		}
		if d.Undecided == nil {
			d.KeptBy = kept
		}
	}
}

// keptByLookups classifies, as their workers would, the owners of the
// first maxExplainReads listed blocking dependents that are not being
// deleted and that the graph alone did not settle (neither Undecided nor
// KeptBy): with unsure (run.markUnsure, nil: none) and judgeRef on
// the graph's view of each, and lookup where only a look-up can tell (an
// owner the graph never observed: of a resource not watched, or whose
// watch event is late). A dependent that its worker keeps, as decide says
// with those classes (an owner found to exist: unverified), gets KeptBy;
// one with an owner that cannot be classified now (the look-up fails, or
// found nothing while the owner's watch is behind: pending) gets
// Undecided. Explain of the dependent itself says the same. At most
// maxExplainReads owners are looked up, each once.
func keptByLookups(g *graph, deps []DependentState, scope scopeFunc, unsure func(*ownerView), lookup ownerLookup, pending watchPending) {
	type lookupKey struct {
		key        ownerKey
		apiVersion string
		fresh      bool
	}
	type answer struct {
		res     lookupResult
		checked string
		err     error
	}
	looked := map[lookupKey]answer{}
	budgetSpent := false
	memo := func(key ownerKey, apiVersion string, fresh bool) (lookupResult, string, error) {
		k := lookupKey{key, apiVersion, fresh}
		if a, ok := looked[k]; ok {
			return a.res, a.checked, a.err
		}
		if len(looked) == maxExplainReads {
			budgetSpent = true
			return lookupResult{}, "", errLookupBudget
		}
		var a answer
		a.res, a.checked, a.err = lookup(key, apiVersion, fresh)
		looked[k] = a
		return a.res, a.checked, a.err
	}
	for i := range deps {
		d := &deps[i]
		if !d.BlockOwnerDeletion || i == maxExplainReads || budgetSpent {
			break
		}
		if d.BeingDeleted || d.Gone || d.Undecided != nil || d.KeptBy != nil {
			continue
		}
		v, ok := g.itemView(d.UID)
		if !ok || v.beingDeleted {
			continue
		}
		refs := make([]classifiedRef, 0, len(v.owners))
		var kept, undecided *OwnerState
		for j := range v.owners {
			o := &v.owners[j]
			if unsure != nil {
				unsure(o)
			}
			st, class, err := explainOwner(&v, o, scope, memo, pending)
			if errors.Is(err, errLookupBudget) {
				return
			}
			if err != nil {
				if st.Reason == reasonLookupFailed {
					st.Error = fmt.Sprintf("look up owner %s %s (uid %s): %s", o.kind, o.name, o.uid, st.Error)
				}
				undecided = &st
				break
			}
			if kept == nil && (st.Class == classSolid.String() || st.Class == classUnverified) {
				kept = &st
			}
			refs = append(refs, classifiedRef{ownerView: *o, class: class, reason: st.Reason})
		}
		switch {
		case undecided != nil:
			d.Undecided = undecided
		case kept != nil:
			if p := decide(&v, refs); p.action == actNone || p.action == actRemoveRefs {
				d.KeptBy = kept
			}
		}
	}
}

// errLookupBudget: keptByLookups has made its maxExplainReads look-ups.
var errLookupBudget = errors.New("explain's look-ups of the blocking dependents' owners are spent")

// noteLookupErrors records in the blocking dependents that are not being
// deleted, and have no undecided owner yet, that a worker cannot look one
// of their owners up (lookupError: the error, if it cannot now).
func noteLookupErrors(deps []DependentState, lookupError func(types.UID) (string, bool)) {
	for i := range deps {
		d := &deps[i]
		if !d.BlockOwnerDeletion {
			break
		}
		if d.BeingDeleted || d.Gone || d.Undecided != nil {
			continue
		}
		if msg, ok := lookupError(d.UID); ok {
			d.Undecided = &OwnerState{Class: classUnknown, Reason: reasonLookupFailed, Error: msg}
		}
	}
}

// readBlocking reads the finalizers of the first maxExplainReads blocking
// dependents (one GET each), and notes those whose owners the workers
// cannot look up now.
func (r *run) readBlocking(ctx context.Context, deps []DependentState) {
	defer noteLookupErrors(deps, r.undecided.lookupError)
	reads := 0
	for i := range deps {
		d := &deps[i]
		if !d.BlockOwnerDeletion || reads == maxExplainReads {
			break
		}
		reads++
		obj, err := r.getObject(ctx, objectID{uid: d.UID, apiVersion: d.APIVersion, kind: d.Kind, namespace: d.Namespace, name: d.Name})
		switch {
		case objectNotFound(err, d.Name) || (err == nil && obj.UID != d.UID):
			d.Read, d.Gone = true, true
		case err != nil:
			d.Error = err.Error()
		default:
			d.Read, d.Finalizers, d.BeingDeleted = true, obj.Finalizers, obj.DeletionTimestamp != nil
		}
	}
}

// finalizerStates says who removes each finalizer, and when. unwatched
// names the object's resource if the owner GC does not watch it (not in
// the graph, no monitor): nothing removes the owner GC's finalizers then.
func finalizerStates(finalizers []string, blocking, dependents int, unwatched string) []FinalizerState {
	out := make([]FinalizerState, 0, len(finalizers))
	for _, f := range finalizers {
		switch f {
		case metav1.FinalizerDeleteDependents, metav1.FinalizerOrphanDependents:
			if unwatched != "" {
				out = append(out, FinalizerState{Name: f, RemovedBy: removedByNobody,
					Condition: "the owner GC does not watch " + unwatched + ": remove it by hand (the verdict gives the command)"})
				continue
			}
		}
		switch f {
		case metav1.FinalizerDeleteDependents:
			out = append(out, FinalizerState{Name: f, RemovedBy: "owner GC",
				Condition: fmt.Sprintf("once no dependent with blockOwnerDeletion=true remains (%d remain)", blocking)})
		case metav1.FinalizerOrphanDependents:
			out = append(out, FinalizerState{Name: f, RemovedBy: "owner GC",
				Condition: fmt.Sprintf("once its owner reference is removed from every dependent (%d left)", dependents)})
		default:
			out = append(out, FinalizerState{Name: f, RemovedBy: "another controller"})
		}
	}
	return out
}

// explainRecords returns the newest records kept about id's UID and, with
// byName, about every object of its name (for an object already gone, whose
// UID explain may not know), with the owners' namespaces resolved: where the
// decision saw the owner, if not in the object's namespace, else the
// object's for a namespaced kind.
func (r *run) explainRecords(id objectID, byName bool) []Record {
	named := objectID{}
	if byName {
		named = id
	}
	kept := r.c.records.find(r.c.clock.Now(), id.uid, named)
	if len(kept) > maxExplainRecords {
		kept = kept[len(kept)-maxExplainRecords:]
	}
	out := make([]Record, 0, len(kept))
	for _, k := range kept {
		rec := Record{Time: k.at, APIVersion: k.id.apiVersion, Kind: k.id.kind, Namespace: k.id.namespace, Name: k.id.name,
			UID: k.id.uid, Action: k.rec.action.String(), PropagationPolicy: string(k.rec.policy), Finalizer: k.rec.finalizer,
			Rule: k.rec.rule, DryRun: k.dryRun}
		for _, o := range k.rec.owners {
			ro := RecordOwner{APIVersion: o.APIVersion, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, UID: o.UID,
				Class: o.Class, Reason: o.Reason}
			if namespaced, known := r.scope(o.APIVersion, o.Kind); ro.Namespace == "" && known && namespaced {
				ro.Namespace = k.id.namespace
			}
			rec.Owners = append(rec.Owners, ro)
		}
		out = append(out, rec)
	}
	return out
}
