package ownergc

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// kindRef is an interned apiVersion/kind pair. Thousands of nodes share a
// handful of kinds, so nodes and owner links hold a pointer instead of two
// strings. Interned values are never mutated.
type kindRef struct {
	apiVersion string
	kind       string
	group      string
	version    string
}

type kindKey struct{ apiVersion, kind string }

// refCoords are the coordinates an owner reference states besides the UID.
type refCoords struct {
	kind *kindRef
	name string
}

// nodeFlags hold a node's state in one byte.
type nodeFlags uint8

const (
	// flagObserved: a monitor delivered the object and no delete since. A
	// node that is neither observed nor deleted is virtual: some dependent
	// references it but it was never seen.
	flagObserved nodeFlags = 1 << iota
	// flagDeleted: a monitor delivered the object's deletion, or a worker
	// found it gone (run.forget). UIDs are never reused, so every reference
	// to this UID is dangling. The node stays as a tombstone while
	// dependents still point at it. An event of the object older than
	// what a worker found (still in its watch's backlog, or from a relist
	// begun before) makes the node observed again until the monitor
	// delivers the deletion: that only delays its dependents, and a
	// tombstone no event can undo would make one wrong answer (a 404 from
	// an aggregated API server, say) final, the owner dead while it lives.
	flagDeleted
	// flagAbsentAtIdentity: virtual, and a live lookup at the node's
	// identity (kind, namespace, name) found no object with its UID.
	flagAbsentAtIdentity
	// flagBeingDeleted: deletionTimestamp is set.
	flagBeingDeleted
	// flagForegroundFinalizer: the foregroundDeletion finalizer is present.
	flagForegroundFinalizer
	// flagOrphanFinalizer: the orphan finalizer is present.
	flagOrphanFinalizer
	// flagUnmonitored: observed, of a resource that discovery still lists
	// but no longer with list, watch and delete (graph.unmonitored): its
	// monitor stopped, and the node keeps what was observed last, which
	// may be stale. Workers read such an object before they decide about
	// it (run.processUnmonitored), and its dependents look it up rather
	// than trust the graph (resolveOwner).
	flagUnmonitored
)

// refFlags are the boolean fields of an owner reference.
type refFlags uint8

const (
	refBlockOwnerDeletion refFlags = 1 << iota
	refController
)

// ownerLink is one owner reference of an observed node. The owner's UID is
// owner.uid (the owner node always exists: observed, virtual or tombstone).
// alt is nil when the reference states the owner node's own kind and name,
// which is the normal case; otherwise it holds what the reference states.
type ownerLink struct {
	owner *node
	alt   *refCoords
	flags refFlags
}

func (l *ownerLink) coords() refCoords {
	if l.alt != nil {
		return *l.alt
	}
	return refCoords{kind: l.owner.kind, name: l.owner.name}
}

func (l *ownerLink) blocks() bool { return l.flags&refBlockOwnerDeletion != 0 }

// node is one object of the graph. Only the graph builder writes nodes
// (holding graph.mu for writing); workers and the debug handler read them
// holding graph.mu for reading. The node is the only copy of the object
// that the collector keeps (see the package doc, # Memory); namespace and
// kind are interned.
type node struct {
	uid       types.UID
	name      string
	namespace string
	kind      *kindRef
	// rv is the resourceVersion last observed (empty unless observed).
	rv string
	// owners are the object's owner references, in the object's order.
	owners []ownerLink
	// dependents are the observed nodes with a reference to this node; nil
	// when there are none (most objects).
	dependents map[*node]struct{}
	flags      nodeFlags
	// res is the resource whose monitor delivered the object last (see
	// graph.resourceID; valid while observed): its relist and removal act
	// on the object, another resource's never do.
	res resID
	// fgIndex and orphanIndex are the positions of the foregroundDeletion
	// and orphan finalizers in metadata.finalizers (valid when the flag is
	// set), used for guarded JSON patches.
	fgIndex, orphanIndex int16
}

func (n *node) observed() bool     { return n.flags&flagObserved != 0 }
func (n *node) deleted() bool      { return n.flags&flagDeleted != 0 }
func (n *node) virtual() bool      { return n.flags&(flagObserved|flagDeleted) == 0 }
func (n *node) beingDeleted() bool { return n.observed() && n.flags&flagBeingDeleted != 0 }
func (n *node) unmonitored() bool  { return n.flags&flagUnmonitored != 0 }

// observedBy reports whether n is an observed object that the resource
// numbered id delivered last. A monitor's relist and removal act on these
// nodes only: another resource of the same group and kind (an aggregated
// API may serve two), or one serving the same objects (events and
// events.k8s.io events), has its own. A resource has one monitor at a time
// (see monitorSet), at one version.
func (n *node) observedBy(id resID) bool {
	return id != noResID && n.observed() && n.res == id
}

// deletingDependents: being deleted in the foreground, waiting for its
// blocking dependents to go.
func (n *node) deletingDependents() bool {
	return n.beingDeleted() && n.flags&flagForegroundFinalizer != 0
}

// orphaning: being deleted with the orphan finalizer, waiting for its
// dependents to lose their references.
func (n *node) orphaning() bool {
	return n.beingDeleted() && n.flags&flagOrphanFinalizer != 0
}

// linkTo returns n's first link to owner, or nil.
func (n *node) linkTo(owner *node) *ownerLink {
	for i := range n.owners {
		if n.owners[i].owner == owner {
			return &n.owners[i]
		}
	}
	return nil
}

// blocksOwner reports whether any of n's references to owner has
// blockOwnerDeletion=true.
func (n *node) blocksOwner(owner *node) bool {
	for i := range n.owners {
		if n.owners[i].owner == owner && n.owners[i].blocks() {
			return true
		}
	}
	return false
}

// graph is the uid → node dependency graph. See the package doc for the
// single-writer rule: only the graph builder goroutine mutates it, holding
// mu for writing; everything else reads under mu.RLock.
type graph struct {
	mu         sync.RWMutex
	nodes      map[types.UID]*node
	kinds      map[kindKey]*kindRef
	namespaces map[string]string
	// lostTo maps an owner's UID to the resources that left discovery
	// while they held dependents of it (builder.resourceGone), and when:
	// those dependents may still exist, unseen, until the resource is back
	// and its monitor synced. The owner's orphan and foregroundDeletion
	// finalizers wait for them (holdFinalizer), for at most
	// unsyncedResourceHold after the loss: a resource that never comes
	// back (its CRD deleted while its objects could not be watched) holds
	// no owner for longer, as any hold.
	lostTo map[types.UID]map[schema.GroupResource]time.Time
	// unmonitored are the resources whose monitors stopped while
	// discovery still listed them, without list, watch or delete
	// (builder.resourceUnmonitored), by number: their observed nodes stay,
	// marked flagUnmonitored, until a live read finds them gone, the
	// resource leaves discovery (resourceGone) or is monitored again
	// (resourceBack).
	unmonitored map[resID]*resource
	// resIDs numbers the resources whose monitors delivered the observed
	// nodes (node.res): two bytes a node instead of a pointer, which would
	// not fit in the node's padding. A number is freed when its resource
	// leaves discovery (resourceGone: no observed node keeps it) and
	// reused. freeIDs are the freed numbers, lastID the highest given.
	resIDs  map[schema.GroupResource]resID
	freeIDs []resID
	lastID  resID

	// Counters for metrics, written by the builder, read lock-free.
	nObserved, nVirtual, nDeleted atomic.Int64
}

func newGraph() *graph {
	return &graph{
		nodes:       map[types.UID]*node{},
		kinds:       map[kindKey]*kindRef{},
		namespaces:  map[string]string{},
		lostTo:      map[types.UID]map[schema.GroupResource]time.Time{},
		unmonitored: map[resID]*resource{},
		resIDs:      map[schema.GroupResource]resID{},
	}
}

// resID numbers a monitored resource in the graph (graph.resIDs).
type resID uint16

// noResID is no resource: a node delivered while every number was taken
// (more than 65,535 resources monitored at once). No relist or removal
// acts on such a node; it stays observed until its deletion is observed.
const noResID resID = 0

// resourceID returns gr's number, giving it one if it has none (noResID
// if none is left). Writer only.
func (g *graph) resourceID(gr schema.GroupResource) resID {
	if id, ok := g.resIDs[gr]; ok {
		return id
	}
	var id resID
	switch {
	case len(g.freeIDs) > 0:
		id = g.freeIDs[len(g.freeIDs)-1]
		g.freeIDs = g.freeIDs[:len(g.freeIDs)-1]
	case g.lastID < math.MaxUint16:
		g.lastID++
		id = g.lastID
	default:
		return noResID
	}
	g.resIDs[gr] = id
	return id
}

// releaseResourceID frees gr's number once no observed node has it.
// Writer only.
func (g *graph) releaseResourceID(gr schema.GroupResource) {
	if id, ok := g.resIDs[gr]; ok {
		delete(g.resIDs, gr)
		g.freeIDs = append(g.freeIDs, id)
	}
}

// lostDependents names the resources that left discovery while they held
// dependents of owner uid (graph.lostTo) less than bound before now,
// sorted.
func (g *graph) lostDependents(uid types.UID, now time.Time, bound time.Duration) []string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var out []string
	for gr, at := range g.lostTo[uid] {
		if now.Sub(at) < bound {
			out = append(out, gr.String())
		}
	}
	slices.Sort(out)
	return out
}

// internKind returns the shared kindRef for apiVersion/kind. Writer only.
func (g *graph) internKind(apiVersion, kind string) *kindRef {
	key := kindKey{apiVersion, kind}
	if k, ok := g.kinds[key]; ok {
		return k
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil { // kept verbatim: a lookup of it fails and the item waits
		gv = schema.GroupVersion{Version: apiVersion}
	}
	k := &kindRef{apiVersion: apiVersion, kind: kind, group: gv.Group, version: gv.Version}
	g.kinds[key] = k
	return k
}

// internNamespace returns the shared copy of ns. Writer only.
func (g *graph) internNamespace(ns string) string {
	if ns == "" {
		return ""
	}
	if s, ok := g.namespaces[ns]; ok {
		return s
	}
	g.namespaces[ns] = ns
	return ns
}

// setFlags changes n's state flags keeping the counters right. Writer only.
func (g *graph) setFlags(n *node, flags nodeFlags) {
	g.count(n, -1)
	n.flags = flags
	g.count(n, 1)
}

func (g *graph) count(n *node, d int64) {
	switch {
	case n.observed():
		g.nObserved.Add(d)
	case n.deleted():
		g.nDeleted.Add(d)
	default:
		g.nVirtual.Add(d)
	}
}

func (g *graph) insert(n *node) {
	g.nodes[n.uid] = n
	g.count(n, 1)
}

func (g *graph) remove(n *node) {
	if g.nodes[n.uid] == n {
		delete(g.nodes, n.uid)
		g.count(n, -1)
	}
}

// size returns the number of nodes by state.
func (g *graph) size() (observed, virtual, deleted int64) {
	return g.nObserved.Load(), g.nVirtual.Load(), g.nDeleted.Load()
}
