package ownergc

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// builder applies events to the graph. It is the graph's only writer: one
// goroutine calls apply, holding graph.mu for writing. It never does I/O; it
// only enqueues work for the workers.
type builder struct {
	g      *graph
	logger klog.Logger
	// enqueueDelete and enqueueOrphan add a UID to the attempt-to-delete
	// and attempt-to-orphan queues. They must not block.
	enqueueDelete func(types.UID)
	enqueueOrphan func(types.UID)
	// endHold, when set, ends the finalizer hold of an owner whose
	// foregroundDeletion or orphan finalizer came or went (run.holds): the
	// deletion it held ended (finished, undone by an etcd restore, the
	// finalizer removed by hand), and a later one is a hold of its own.
	// It must not block.
	endHold func(types.UID)
	// now and lostFor date and bound graph.lostTo (the run's clock and
	// unsyncedResourceHold); nil now: time.Now.
	now     func() time.Time
	lostFor time.Duration
	// initial: the run has not synced yet (until evRunSynced). Its initial
	// lists arrive in any order, so most dependents are inserted before
	// their owners; the checks that a dependent's owners are observed
	// wait for the end of the lists (see runSynced) instead of queueing
	// nearly every dependent while the lists stream in, and again when its
	// owner arrives.
	initial bool
	// outOfIDs: the graph ran out of resource numbers once (logged once).
	outOfIDs bool
}

// apply applies one event. The caller holds b.g.mu for writing.
func (b *builder) apply(ev *event) {
	switch ev.typ {
	case evUpsert:
		b.upsert(ev.obj, ev.res)
		if ev.seq == fromWatch {
			ev.res.advance(ev.obj.ResourceVersion)
		}
	case evDelete:
		b.observeDelete(ev.obj.UID)
		if ev.seq == fromWatch {
			ev.res.advance(ev.obj.ResourceVersion)
		}
	case evProgress:
		ev.res.advance(ev.obj.ResourceVersion)
	case evOwnerAbsent:
		b.ownerAbsent(*ev.owner)
	case evResourceGone:
		b.resourceGone(ev.res)
	case evResourceUnmonitored:
		b.resourceUnmonitored(ev.res)
	case evRefresh:
		b.refresh(ev.obj, ev.owner)
	case evRelisted:
		b.relisted(ev.res, ev.uids)
		if ev.mon != nil {
			ev.mon.recovered()
		}
	case evSynced:
		b.resourceBack(ev.mon.res)
		ev.mon.markGraphSynced()
	case evCaughtUp:
		ev.mon.caughtUp(ev.seq)
	case evRunSynced:
		b.runSynced()
	case evBarrier:
		close(ev.done)
	}
}

// upsert records an observed object: its identity, flags and owner links.
func (b *builder) upsert(obj *metav1.PartialObjectMetadata, res *resource) {
	g := b.g
	kind := g.internKind(res.apiVersion, res.gvk.Kind)
	n, found := g.nodes[obj.UID]
	wasOrphaning, wasDeletingDependents := false, false
	isNew := !found
	switch {
	case !found:
		n = &node{uid: obj.UID, flags: flagObserved}
		n.name, n.namespace, n.kind = obj.Name, g.internNamespace(obj.Namespace), kind
		g.insert(n)
	case !n.observed():
		// A virtual node (or a tombstone) becomes real. References that
		// relied on the node's previous identity keep what they state.
		prev := refCoords{kind: n.kind, name: n.name}
		n.name, n.namespace, n.kind = obj.Name, g.internNamespace(obj.Namespace), kind
		g.setFlags(n, flagObserved)
		for dep := range n.dependents {
			for i := range dep.owners {
				l := &dep.owners[i]
				switch {
				case l.owner != n:
				case l.alt == nil && (prev.kind != kind || prev.name != n.name):
					l.alt = &refCoords{kind: prev.kind, name: prev.name}
				case l.alt != nil && l.alt.kind == kind && l.alt.name == n.name:
					l.alt = nil
				}
			}
		}
		// The owner is known now: let each dependent re-check (most find
		// a solid owner and do nothing).
		if !b.initial {
			b.enqueueDependents(n)
		}
		isNew = true
	default:
		wasOrphaning, wasDeletingDependents = n.orphaning(), n.deletingDependents()
		if n.kind != kind || n.name != obj.Name {
			// Same UID under other coordinates: another resource serving
			// the same objects (events and events.k8s.io events). Keep
			// the first identity; the node belongs to the resource that
			// delivered it last (node.res, below).
			b.logger.V(5).Info("Object observed under another identity", "uid", obj.UID, "kind", kind.kind, "apiVersion", kind.apiVersion)
		}
	}
	n.rv = obj.ResourceVersion
	n.res = g.resourceID(res.gvr.GroupResource())
	if n.res == noResID && !b.outOfIDs {
		b.outOfIDs = true
		b.logger.Error(nil, "More resources monitored than the graph can number; their relists and removals leave their objects observed",
			"resource", res.gvr.String(), "limit", math.MaxUint16)
	}
	b.setObjectFlags(n, obj)

	linksChanged := b.updateOwners(n, obj.OwnerReferences)
	if (isNew || linksChanged) && !b.initial && b.needsAttention(n) {
		b.enqueueDelete(n.uid)
	}
	if n.orphaning() && !wasOrphaning {
		b.enqueueOrphan(n.uid)
	}
	if n.deletingDependents() && !wasDeletingDependents {
		b.enqueueDependents(n)
		b.enqueueDelete(n.uid)
	}
}

func (b *builder) setObjectFlags(n *node, obj *metav1.PartialObjectMetadata) {
	const gcFinalizers = flagForegroundFinalizer | flagOrphanFinalizer
	was := n.flags & gcFinalizers
	defer func() {
		if b.endHold != nil && n.flags&gcFinalizers != was {
			b.endHold(n.uid)
		}
	}()
	// A monitor's delivery (a refresh puts the mark back: see refresh).
	flags := n.flags &^ (flagBeingDeleted | flagForegroundFinalizer | flagOrphanFinalizer | flagUnmonitored)
	if obj.DeletionTimestamp != nil {
		flags |= flagBeingDeleted
	}
	for i, f := range obj.Finalizers {
		if i > maxFinalizerIndex {
			break
		}
		switch f {
		case metav1.FinalizerDeleteDependents:
			if flags&flagForegroundFinalizer == 0 {
				flags |= flagForegroundFinalizer
				n.fgIndex = int16(i)
			}
		case metav1.FinalizerOrphanDependents:
			if flags&flagOrphanFinalizer == 0 {
				flags |= flagOrphanFinalizer
				n.orphanIndex = int16(i)
			}
		}
	}
	b.g.setFlags(n, flags)
}

const maxFinalizerIndex = 1<<15 - 1

// updateOwners replaces n's owner links with refs, keeping the owners'
// dependent sets right. It reports whether anything changed.
func (b *builder) updateOwners(n *node, refs []metav1.OwnerReference) bool {
	g := b.g
	if b.sameOwners(n, refs) {
		return false
	}
	old := n.owners
	var links []ownerLink
	if len(refs) > 0 {
		links = make([]ownerLink, 0, len(refs))
	}
	for i := range refs {
		ref := &refs[i]
		kind := g.internKind(ref.APIVersion, ref.Kind)
		owner, ok := g.nodes[ref.UID]
		if !ok {
			owner = &node{uid: ref.UID, name: ref.Name, kind: kind, namespace: n.namespace}
			g.insert(owner)
			b.logger.V(5).Info("Added virtual owner", "owner", ref.UID, "dependent", n.uid)
		}
		l := ownerLink{owner: owner}
		if ref.BlockOwnerDeletion != nil && *ref.BlockOwnerDeletion {
			l.flags |= refBlockOwnerDeletion
		}
		if ref.Controller != nil && *ref.Controller {
			l.flags |= refController
		}
		if owner.kind != kind || owner.name != ref.Name {
			l.alt = &refCoords{kind: kind, name: ref.Name}
		}
		links = append(links, l)
	}
	n.owners = links
	// Unlink owners no longer referenced; wake owners that waited on a
	// blocking reference that is gone or no longer blocks.
	for i := range old {
		o := old[i].owner
		if n.linkTo(o) == nil {
			delete(o.dependents, n)
			if o.deletingDependents() {
				b.enqueueDelete(o.uid)
			}
			b.dropIfUnreferenced(o)
		} else if old[i].blocks() && !n.blocksOwner(o) && o.deletingDependents() {
			b.enqueueDelete(o.uid)
		}
	}
	for i := range links {
		o := links[i].owner
		if o.dependents == nil {
			o.dependents = map[*node]struct{}{}
		}
		o.dependents[n] = struct{}{}
	}
	return true
}

// sameOwners reports whether refs state exactly n's current links.
func (b *builder) sameOwners(n *node, refs []metav1.OwnerReference) bool {
	if len(refs) != len(n.owners) {
		return false
	}
	for i := range refs {
		ref, l := &refs[i], &n.owners[i]
		if l.owner.uid != ref.UID {
			return false
		}
		c := l.coords()
		if c.name != ref.Name || c.kind.kind != ref.Kind || c.kind.apiVersion != ref.APIVersion {
			return false
		}
		block := ref.BlockOwnerDeletion != nil && *ref.BlockOwnerDeletion
		ctrl := ref.Controller != nil && *ref.Controller
		if block != (l.flags&refBlockOwnerDeletion != 0) || ctrl != (l.flags&refController != 0) {
			return false
		}
	}
	return true
}

// runSynced ends the initial lists: every observed dependent whose owners
// need a worker's look is queued, once.
func (b *builder) runSynced() {
	b.initial = false
	for _, n := range b.g.nodes {
		if n.observed() && len(n.owners) > 0 && b.needsAttention(n) {
			b.enqueueDelete(n.uid)
		}
	}
}

// needsAttention reports whether a worker should look at n: some owner is
// not an observed, matching, live owner.
func (b *builder) needsAttention(n *node) bool {
	for i := range n.owners {
		l := &n.owners[i]
		o := l.owner
		if !o.observed() || o.unmonitored() || l.alt != nil || o.deletingDependents() {
			return true
		}
		if o.namespace != "" && o.namespace != n.namespace {
			return true
		}
	}
	return false
}

// observeDelete turns an observed node into a tombstone (or drops it when
// nothing references it) and wakes its dependents and waiting owners.
func (b *builder) observeDelete(uid types.UID) {
	g := b.g
	n, ok := g.nodes[uid]
	if !ok || !n.observed() {
		return
	}
	b.unlinkOwners(n)
	delete(g.lostTo, uid) // its lost dependents are dangling now, like the others
	n.rv = ""
	g.setFlags(n, flagDeleted)
	if len(n.dependents) == 0 {
		g.remove(n)
		return
	}
	b.enqueueDependents(n)
}

// enqueueDependents queues n's dependents for attempt-to-delete in the
// order the API server stores them: by kind, then namespace and name.
// When an owner goes, its cascade then deletes each object next to the
// one before, and kube-apiserver's watch cache and etcd find each key
// beside the last one they touched. In the order of a Go map (random), a
// cascade of 50,000 cost kube-apiserver 3-34% and etcd 4-52% more CPU
// per object in four runs (docs/ownergc-at-scale.md). Sorting costs the
// builder about 0.3 us per dependent (BenchmarkEnqueueDependents).
func (b *builder) enqueueDependents(n *node) {
	deps := make([]*node, 0, len(n.dependents))
	for dep := range n.dependents {
		deps = append(deps, dep)
	}
	slices.SortFunc(deps, storageOrder)
	for _, dep := range deps {
		b.enqueueDelete(dep.uid)
	}
}

// storageOrder orders nodes as the API server's storage does: by kind
// (group and kind), then namespace and name.
func storageOrder(a, b *node) int {
	if a.kind != b.kind {
		if c := cmp.Compare(a.kind.group, b.kind.group); c != 0 {
			return c
		}
		if c := cmp.Compare(a.kind.kind, b.kind.kind); c != 0 {
			return c
		}
	}
	if c := cmp.Compare(a.namespace, b.namespace); c != 0 {
		return c
	}
	return cmp.Compare(a.name, b.name)
}

// unlinkOwners removes n from its owners' dependents.
func (b *builder) unlinkOwners(n *node) {
	for i := range n.owners {
		o := n.owners[i].owner
		delete(o.dependents, n)
		if o.deletingDependents() {
			b.enqueueDelete(o.uid)
		}
		b.dropIfUnreferenced(o)
	}
	n.owners = nil
}

// dropIfUnreferenced removes a virtual node or tombstone that no dependent
// references any more.
func (b *builder) dropIfUnreferenced(o *node) {
	if !o.observed() && len(o.dependents) == 0 {
		b.g.remove(o)
	}
	if len(o.dependents) == 0 {
		o.dependents = nil
	}
}

// ownerAbsent records a lookup's verdict on a virtual node, or on an
// unmonitored one (gone: no event would tell).
func (b *builder) ownerAbsent(k ownerKey) {
	n, ok := b.g.nodes[k.uid]
	switch {
	case !ok || !identityMatches(n, k):
	case n.virtual():
		b.g.setFlags(n, n.flags|flagAbsentAtIdentity)
	case n.observed() && n.unmonitored():
		b.observeDelete(k.uid)
	}
}

// identityMatches reports whether a lookup key names node n's identity. A
// key with no namespace names a cluster-scoped owner, whatever namespace the
// virtual node took from its first dependent.
func identityMatches(n *node, k ownerKey) bool {
	return n.kind.group == k.group && n.kind.kind == k.kind && n.name == k.name &&
		(k.namespace == "" || n.namespace == k.namespace)
}

// resourceBack forgets that owners lost dependents to res's resource: its
// monitor's first list is in the graph, and with it those dependents. The
// objects of the resource kept while it was not monitored that the list
// did not deliver (still marked unmonitored) are gone.
func (b *builder) resourceBack(res *resource) {
	gr := res.gvr.GroupResource()
	if id, ok := b.g.resIDs[gr]; ok && b.g.unmonitored[id] != nil {
		delete(b.g.unmonitored, id)
		for uid, n := range b.g.nodes {
			if n.observedBy(id) && n.unmonitored() {
				b.observeDelete(uid)
			}
		}
	}
	for uid, lost := range b.g.lostTo {
		delete(lost, gr)
		if len(lost) == 0 {
			delete(b.g.lostTo, uid)
		}
	}
}

// relisted deletes the observed nodes of res that a new list of it does
// not hold: they were deleted while the watch was down. Only the nodes
// res delivered last count (node.observedBy): res's monitor saw each of
// them before this list, so one the list lacks is gone. An object of
// another resource (of the same kind, or serving the same objects) is not
// in res's list, and is not deleted by it.
func (b *builder) relisted(res *resource, listed map[types.UID]struct{}) {
	id, ok := b.g.resIDs[res.gvr.GroupResource()]
	if !ok {
		return // res delivered no object that is still observed
	}
	for uid, n := range b.g.nodes {
		if _, ok := listed[uid]; !ok && n.observedBy(id) {
			b.observeDelete(uid)
		}
	}
}

// resourceGone turns the observed nodes of a resource that left discovery
// (those it delivered last: node.observedBy) back into virtual nodes:
// nothing is known about them any more, so their dependents must verify
// them with lookups, and nothing is assumed deleted.
// Their owners remember that they lost dependents to the resource
// (graph.lostTo): those objects still exist (a version no longer served,
// an aggregated API that stopped listing it), and an owner's orphan or
// foreground deletion must not finish without them.
func (b *builder) resourceGone(res *resource) {
	g := b.g
	gr := res.gvr.GroupResource()
	now := time.Now()
	if b.now != nil {
		now = b.now()
	}
	for uid, lost := range g.lostTo { // past the bound: no owner waits for them
		maps.DeleteFunc(lost, func(_ schema.GroupResource, at time.Time) bool { return now.Sub(at) >= b.lostFor })
		if len(lost) == 0 {
			delete(g.lostTo, uid)
		}
	}
	id, ok := g.resIDs[gr]
	if !ok {
		return // res delivered no object that is still observed
	}
	delete(g.unmonitored, id)
	defer g.releaseResourceID(gr) // no observed node keeps it after the loop
	for _, n := range g.nodes {
		if !n.observedBy(id) {
			continue
		}
		for i := range n.owners {
			uid := n.owners[i].owner.uid
			if g.lostTo[uid] == nil {
				g.lostTo[uid] = map[schema.GroupResource]time.Time{}
			}
			g.lostTo[uid][gr] = now
		}
		b.unlinkOwners(n)
		n.rv = ""
		g.setFlags(n, 0)
		if len(n.dependents) == 0 {
			g.remove(n)
			continue
		}
		b.enqueueDependents(n)
	}
}

// resourceUnmonitored keeps the observed nodes of a resource that
// discovery still lists, but without list, watch or delete (an aggregated
// API's change, a built-in one after an upgrade): its monitor stopped, yet
// its objects can still be read and patched through the REST mapping. As
// kube-controller-manager keeps the nodes of a monitor it stops, they stay
// observed, marked unmonitored: an owner being deleted in the foreground
// or orphaning there is still woken by its dependents and finished by a
// worker, and a dependent there of an owner orphaning is still orphaned,
// not unlinked and later deleted. Unlike kube-controller-manager, nothing
// is decided on their stale copies: workers read them first
// (run.processUnmonitored), their dependents look them up (resolveOwner),
// and those found gone leave the graph. Objects created there from now on
// are not seen, as by kube-controller-manager.
func (b *builder) resourceUnmonitored(res *resource) {
	g := b.g
	id, ok := g.resIDs[res.gvr.GroupResource()]
	if !ok {
		return // res delivered no object that is still observed
	}
	g.unmonitored[id] = res
	var kept []*node
	for _, n := range g.nodes {
		if n.observedBy(id) && !n.unmonitored() {
			g.setFlags(n, n.flags|flagUnmonitored)
			kept = append(kept, n)
		}
	}
	for _, n := range kept {
		// Its monitored dependents look it up from now on (and again
		// while it is there, see run.process); the unmonitored ones,
		// read by a worker only when their owners' or dependents'
		// changes call for it, would only cost reads. An object being
		// deleted is read until it is gone (no event will tell).
		for dep := range n.dependents {
			if !dep.unmonitored() {
				b.enqueueDelete(dep.uid)
			}
		}
		if n.beingDeleted() {
			b.enqueueDelete(n.uid)
		}
		if n.orphaning() {
			b.enqueueOrphan(n.uid)
		}
	}
	b.logger.Info("Resource no longer monitored: discovery lists it without list, watch or delete; its objects stay in the graph, read before the owner GC acts on them",
		"resource", res.gvr.String(), "objects", len(kept))
}

// refresh replaces what the graph keeps of an unmonitored object with obj,
// as a worker read it, or a dependent's lookup at key (nil: a worker's
// read at the node's identity) if key names the node's identity (a read
// older than what the node holds, as far as resource versions tell, is
// dropped). A node no longer unmonitored (its monitor is back) keeps what
// its monitor delivers.
func (b *builder) refresh(obj *metav1.PartialObjectMetadata, key *ownerKey) {
	n, ok := b.g.nodes[obj.UID]
	if !ok || !n.observed() || !n.unmonitored() || olderVersion(obj.ResourceVersion, n.rv) {
		return
	}
	if key != nil && !identityMatches(n, *key) {
		return
	}
	res := b.g.unmonitored[n.res]
	if res == nil {
		return
	}
	b.upsert(obj, res)
	b.g.setFlags(n, n.flags|flagUnmonitored)
}

// olderVersion reports whether resource version rv is older than was,
// when both are numbers (kube-apiserver's are; they are compared only to
// order two reads of one object).
func olderVersion(rv, was string) bool {
	a, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return false
	}
	b, err := strconv.ParseUint(was, 10, 64)
	return err == nil && a < b
}
