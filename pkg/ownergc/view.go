package ownergc

import (
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// The views are plain copies of what the workers need from the graph, taken
// under the read lock, so that deciding and acting never touch live nodes.

// objectID identifies an object for API calls, events and records.
type objectID struct {
	uid        types.UID
	apiVersion string
	kind       string
	namespace  string
	name       string
}

func (id objectID) groupKind() schema.GroupKind {
	gv, _ := schema.ParseGroupVersion(id.apiVersion)
	return schema.GroupKind{Group: gv.Group, Kind: id.kind}
}

func (id objectID) String() string {
	if id.namespace == "" {
		return fmt.Sprintf("%s %s (uid %s)", id.kind, id.name, id.uid)
	}
	return fmt.Sprintf("%s %s/%s (uid %s)", id.kind, id.namespace, id.name, id.uid)
}

// MarshalLog renders id in structured (JSON) logs.
func (id objectID) MarshalLog() any {
	return struct {
		APIVersion string    `json:"apiVersion"`
		Kind       string    `json:"kind"`
		Namespace  string    `json:"namespace,omitempty"`
		Name       string    `json:"name"`
		UID        types.UID `json:"uid"`
	}{id.apiVersion, id.kind, id.namespace, id.name, id.uid}
}

func nodeID(n *node) objectID {
	return objectID{uid: n.uid, apiVersion: n.kind.apiVersion, kind: n.kind.kind, namespace: n.namespace, name: n.name}
}

// ownerState is what the graph knows about an owner reference's UID.
type ownerState uint8

const (
	ownerUnknown          ownerState = iota // no node for the UID
	ownerVirtual                            // referenced, never observed
	ownerAbsentAtIdentity                   // virtual; a lookup at its identity found nothing
	ownerDeleted                            // observed deleted: no object has the UID
	ownerObserved                           // observed and not deleted
)

// ownerView is one owner reference of an item and the graph's knowledge of
// the owner.
type ownerView struct {
	index      int // position in metadata.ownerReferences
	uid        types.UID
	apiVersion string
	kind       string
	name       string
	block      bool
	controller bool

	state ownerState
	// node is the graph node's identity (for a virtual node: the identity
	// its first dependent stated); zero when state is ownerUnknown.
	node objectID
	// waiting: observed, being deleted with the foregroundDeletion finalizer.
	waiting bool
	// unsure: the monitor of the owner's resource synced and does not
	// follow the API server now (run.markUnsure): no absence the graph or
	// the absent-owner cache knows is proof, nor a deletion in the
	// foreground the graph observed (waiting; see judgeRef).
	unsure bool
}

func (o ownerView) group() string {
	gv, _ := schema.ParseGroupVersion(o.apiVersion)
	return gv.Group
}

// observedNamespace returns the namespace the graph observed o's owner in,
// alive or deleted, at the reference's group and kind ("" for a
// cluster-scoped one), and whether it did. The owner may be in another
// namespace than the item (the reference is dangling then).
func (o *ownerView) observedNamespace() (string, bool) {
	if o.state != ownerObserved && o.state != ownerDeleted {
		return "", false
	}
	if o.node.groupKind().Group != o.group() || o.node.kind != o.kind {
		return "", false
	}
	return o.node.namespace, true
}

// dependentView is a dependent of an item.
type dependentView struct {
	id                 objectID
	deletingDependents bool
}

// itemView is an object a worker considers, with its owners.
type itemView struct {
	id   objectID
	rv   string
	live bool // read from the API server rather than the graph
	// unmonitored: of a resource no longer monitored (flagUnmonitored):
	// the graph's copy may be stale.
	unmonitored         bool
	beingDeleted        bool
	deletingDependents  bool
	orphanFinalizer     bool
	foregroundFinalizer bool
	fgIndex             int
	orphanIndex         int
	owners              []ownerView
	// hasDependents, dependentDeletingDependents and blocking describe the
	// item's dependents as the graph knows them.
	hasDependents               bool
	dependentDeletingDependents bool
	blocking                    []dependentView // dependents with a blocking reference to the item
}

// viewOf builds a view of the node uid under the graph's read lock, if the
// graph has observed its object: views copy what they need, and no node is
// read outside the lock.
func viewOf[V any](g *graph, uid types.UID, build func(n *node) V) (V, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	n, ok := g.nodes[uid]
	if !ok || !n.observed() {
		var none V
		return none, false
	}
	return build(n), true
}

// observedOwnerOf reports whether the graph holds an object with o's UID,
// observed and not deleted, where o may name it whatever name o states:
// of o's group and kind, cluster-scoped or in namespace (judgeRef's
// misnamed owner).
func (g *graph) observedOwnerOf(o *ownerView, namespace string) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	n, ok := g.nodes[o.uid]
	return ok && n.observed() && n.kind.group == o.group() && n.kind.kind == o.kind && (n.namespace == "" || n.namespace == namespace)
}

// keptUnmonitored reports whether the graph keeps the owner at key as an
// observed node of a resource no longer monitored (see refreshKept).
func (g *graph) keptUnmonitored(key ownerKey) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	n, ok := g.nodes[key.uid]
	return ok && n.observed() && n.unmonitored() && identityMatches(n, key)
}

// itemView returns the view of the observed node uid.
func (g *graph) itemView(uid types.UID) (itemView, bool) {
	return viewOf(g, uid, g.itemViewLocked)
}

// itemViewLocked copies the view of n; g.mu must be held.
func (g *graph) itemViewLocked(n *node) itemView {
	v := itemView{
		id:                  nodeID(n),
		rv:                  n.rv,
		unmonitored:         n.unmonitored(),
		beingDeleted:        n.beingDeleted(),
		deletingDependents:  n.deletingDependents(),
		orphanFinalizer:     n.flags&flagOrphanFinalizer != 0,
		foregroundFinalizer: n.flags&flagForegroundFinalizer != 0,
		fgIndex:             int(n.fgIndex),
		orphanIndex:         int(n.orphanIndex),
	}
	if len(n.owners) > 0 {
		v.owners = make([]ownerView, 0, len(n.owners))
	}
	for i := range n.owners {
		l := &n.owners[i]
		c := l.coords()
		v.owners = append(v.owners, resolveOwner(ownerView{
			index: i, uid: l.owner.uid, apiVersion: c.kind.apiVersion, kind: c.kind.kind, name: c.name,
			block: l.blocks(), controller: l.flags&refController != 0,
		}, l.owner))
	}
	g.addDependents(&v, n)
	return v
}

// liveView returns the view of obj as read from the API server: its own
// fields from obj, its owners' and dependents' state from the graph.
func (g *graph) liveView(id objectID, obj *metav1.PartialObjectMetadata) itemView {
	id.uid, id.name, id.namespace = obj.UID, obj.Name, obj.Namespace
	v := itemView{id: id, rv: obj.ResourceVersion, live: true, beingDeleted: obj.DeletionTimestamp != nil}
	v.fgIndex, v.orphanIndex = deletionFinalizers(obj.Finalizers)
	v.foregroundFinalizer, v.orphanFinalizer = v.fgIndex >= 0, v.orphanIndex >= 0
	v.deletingDependents = v.beingDeleted && v.foregroundFinalizer
	g.mu.RLock()
	defer g.mu.RUnlock()
	for i := range obj.OwnerReferences {
		v.owners = append(v.owners, resolveOwner(refView(i, &obj.OwnerReferences[i]), g.nodes[obj.OwnerReferences[i].UID]))
	}
	if n, ok := g.nodes[obj.UID]; ok {
		g.addDependents(&v, n)
	}
	return v
}

// deletionFinalizers returns the positions of the first foregroundDeletion
// and orphan finalizers in finalizers (-1: absent).
func deletionFinalizers(finalizers []string) (fg, orphan int) {
	return slices.Index(finalizers, metav1.FinalizerDeleteDependents), slices.Index(finalizers, metav1.FinalizerOrphanDependents)
}

// refView is owner reference ref, at position i, as an ownerView without
// the graph's knowledge of the owner (see resolveOwner).
func refView(i int, ref *metav1.OwnerReference) ownerView {
	return ownerView{index: i, uid: ref.UID, apiVersion: ref.APIVersion, kind: ref.Kind, name: ref.Name,
		block: ptr.Deref(ref.BlockOwnerDeletion, false), controller: ptr.Deref(ref.Controller, false)}
}

// sameRef reports whether o and p state the same owner reference (UID,
// coordinates and flags), whatever the graph knows of the owner.
func (o *ownerView) sameRef(p *ownerView) bool {
	return o.uid == p.uid && o.apiVersion == p.apiVersion && o.kind == p.kind && o.name == p.name &&
		o.block == p.block && o.controller == p.controller
}

// resolveOwner fills in what the graph knows about the owner node o (nil
// if the graph has no node for the UID).
func resolveOwner(v ownerView, o *node) ownerView {
	switch {
	case o == nil:
		v.state = ownerUnknown
		return v
	case o.observed() && o.unmonitored():
		// What the graph keeps may be stale (its resource is no longer
		// monitored): looked up, as a virtual owner is.
		v.state = ownerVirtual
	case o.observed():
		v.state = ownerObserved
		v.waiting = o.deletingDependents()
	case o.deleted():
		v.state = ownerDeleted
	case o.flags&flagAbsentAtIdentity != 0:
		v.state = ownerAbsentAtIdentity
	default:
		v.state = ownerVirtual
	}
	v.node = nodeID(o)
	return v
}

func (g *graph) addDependents(v *itemView, n *node) {
	v.hasDependents = len(n.dependents) > 0
	for dep := range n.dependents {
		if dep.deletingDependents() {
			v.dependentDeletingDependents = true
		}
		if dep.blocksOwner(n) {
			v.blocking = append(v.blocking, dependentView{id: nodeID(dep), deletingDependents: dep.deletingDependents()})
		}
	}
}

// orphanView is an owner being deleted with the orphan finalizer and the
// dependents whose references to it must go.
type orphanView struct {
	id          objectID
	unmonitored bool // see itemView.unmonitored
	orphaning   bool
	orphanIndex int
	dependents  []orphanDependent
}

type orphanDependent struct {
	id      objectID
	indexes []int // positions of the references to the owner
}

func (g *graph) orphanView(uid types.UID) (orphanView, bool) {
	return viewOf(g, uid, orphanViewLocked)
}

// orphanViewLocked copies what orphaning n's dependents needs; the graph's
// lock must be held.
func orphanViewLocked(n *node) orphanView {
	v := orphanView{id: nodeID(n), unmonitored: n.unmonitored(), orphaning: n.orphaning(), orphanIndex: int(n.orphanIndex)}
	for dep := range n.dependents {
		d := orphanDependent{id: nodeID(dep)}
		for i := range dep.owners {
			if dep.owners[i].owner == n {
				d.indexes = append(d.indexes, i)
			}
		}
		v.dependents = append(v.dependents, d)
	}
	return v
}

// hasObserved reports whether the graph holds uid as observed at
// resourceVersion rv (any version if rv is empty).
func (g *graph) hasObserved(uid types.UID, rv string) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	n, ok := g.nodes[uid]
	return ok && n.observed() && (rv == "" || n.rv == rv)
}
