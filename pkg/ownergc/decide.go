package ownergc

import (
	"errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Deciding is pure: judgeRef and decide take views (plus lookup results)
// and return verdicts and plans; the workers apply the plans.

// refClass is the classification of an owner reference (upstream's names).
type refClass uint8

const (
	classSolid    refClass = iota // the owner exists and does not wait for its dependents
	classDangling                 // no object with the UID exists at the stated coordinates
	classWaiting                  // waitingForDependentsDeletion: the owner is being deleted in the foreground
)

func (c refClass) String() string {
	switch c {
	case classSolid:
		return "solid"
	case classDangling:
		return "dangling"
	default:
		return "waitingForDependentsDeletion"
	}
}

// Reasons of a classification (why a reference is what it is).
const (
	reasonObserved       = "owner-observed"           // the graph holds the owner alive
	reasonDeleted        = "owner-deleted"            // the graph saw the owner's deletion
	reasonNotFound       = "owner-not-found"          // lookup: no object at the coordinates
	reasonUIDMismatch    = "owner-uid-mismatch"       // lookup: the object there has another UID
	reasonOtherNamespace = "owner-in-other-namespace" // the UID belongs to an object in another namespace
	reasonPresent        = "owner-present"            // lookup: the owner exists
	reasonWaiting        = "owner-deleting-dependents"
	// reasonMisnamed: the graph holds the owner alive at the stated UID,
	// group and kind, where the item may have an owner, under another name.
	reasonMisnamed = "owner-observed-under-another-name"
)

// Errors that stop the processing of an item.
var (
	// errNamespacedOwner: a cluster-scoped object references a namespaced
	// kind. Retrying cannot help; the object is never deleted.
	errNamespacedOwner = errors.New("cluster-scoped object references a namespaced owner kind")
	// errUnknownKind: the referenced kind is not in discovery (yet). The
	// item waits for the next discovery refresh.
	errUnknownKind = errors.New("owner kind unknown to discovery")
	// errOwnerWatchBehind: the owner's look-up found nothing at the
	// stated name, and its resource's watch has not reached the item's
	// version yet: the owner may exist under another name (see
	// ownerWatchBehind).
	errOwnerWatchBehind = errors.New("the owner's resource's watch has not reached the object's version")
)

// verdict is what the graph alone says about a reference. When lookup is
// set, only a live lookup of that key can classify it.
type verdict struct {
	class  refClass
	reason string
	lookup *ownerKey
	// misnamed: the owner was observed alive under another name than the
	// reference states (see judgeRef).
	misnamed bool
	// fresh: the lookup must read the owner, not take a cached verdict:
	// the owner's absence is unsure (ownerView.unsure).
	fresh bool
	// apiVersion is the version to read the owner at, when not the
	// reference's (one no longer served; see judgeRef).
	apiVersion string
}

// scopeFunc reports whether apiVersion/kind is namespaced, and whether
// discovery knows it at all.
type scopeFunc func(apiVersion, kind string) (namespaced, known bool)

// judgeRef classifies owner reference o of item from the graph. It trusts
// the graph only where the graph is certain: an observed owner at the stated
// coordinates, or an observed deletion (UIDs are never reused). Anything
// not observed needs a lookup: absence from a cache is never proof.
//
// An owner observed alive with the stated UID, group and kind, in the
// item's namespace or cluster-scoped, holds the item whatever name the
// reference states (misnamed): an object with the UID exists where the
// item may have an owner, and safety rule 4 never deletes an object whose
// owner exists. kube-controller-manager looks the stated name up instead,
// finds nothing there (or another UID), and deletes the item.
//
// What the graph proved holds whether or not discovery knows the owner's
// kind: a kind that left discovery (a CRD deleted, and its objects with it)
// still classifies an owner whose deletion was observed, or that a lookup
// found absent, as dangling. Only what needs the kind's scope, and the
// graph cannot tell, waits for discovery.
//
// An owner's absence the graph or the absent-owner cache knows (its
// deletion observed, a lookup that found nothing at its identity) is proof
// while the monitor of the owner's resource follows the API server. From a
// failure of that monitor, once synced, until it has relisted or its
// resumed watch has caught up, it is not: an etcd restored from a backup
// brings deleted objects back with their UIDs, and the monitor of a
// dependent's resource may deliver a restored dependent before the
// owner's has. Such an owner is read with a GET that no cache answers
// (o.unsure), at the version the graph knows its kind by if the
// reference's is no longer served. So is an owner the graph observed
// deleting in the foreground (the restore brings it back not being
// deleted): kube-controller-manager reads every owner before it decides,
// and would keep the dependent. Where the reference misnames that owner,
// the read at the stated name finds nothing, and the dependent waits for
// the owner's monitor (ownerWatchBehind: the graph holds the owner).
func judgeRef(item *itemView, o *ownerView, scope scopeFunc) (verdict, error) {
	sameKind := o.state != ownerUnknown && o.node.groupKind().Group == o.group() && o.node.kind == o.kind
	observed := o.state == ownerObserved && sameKind
	matches := observed && o.node.name == o.name
	misnamed := observed && o.node.name != o.name && (o.node.namespace == "" || o.node.namespace == item.id.namespace)
	// absentHere: a lookup at the stated kind and name found no object
	// with the UID, cluster-wide or in the item's namespace (ownerAbsent
	// marks a virtual node only after a lookup that was cluster-wide or in
	// the node's namespace), which proves the owner absent for the item
	// whatever its kind's scope.
	absentHere := o.state == ownerAbsentAtIdentity && sameKind && o.node.name == o.name && o.node.namespace == item.id.namespace
	if item.id.namespace == "" {
		namespaced, known := scope(o.apiVersion, o.kind)
		if !known {
			// The owner's scope as the graph saw it: the namespace it was
			// observed in, alive or deleted, at the stated kind; none when
			// a lookup found it absent cluster-wide (only a cluster-scoped
			// kind is looked up without a namespace).
			switch {
			case observed || (o.state == ownerDeleted && sameKind):
				namespaced, known = o.node.namespace != "", true
			case absentHere:
				namespaced, known = false, true
			}
		}
		if !known {
			return verdict{}, errUnknownKind
		}
		if namespaced {
			return verdict{}, errNamespacedOwner
		}
	}
	switch {
	case matches && o.node.namespace != "" && o.node.namespace != item.id.namespace:
		return verdict{class: classDangling, reason: reasonOtherNamespace}, nil
	case (matches || misnamed) && o.waiting && o.unsure:
		// Read below.
	case matches && o.waiting:
		return verdict{class: classWaiting, reason: reasonWaiting}, nil
	case matches:
		return verdict{class: classSolid, reason: reasonObserved}, nil
	case misnamed && o.waiting:
		return verdict{class: classWaiting, reason: reasonWaiting, misnamed: true}, nil
	case misnamed:
		return verdict{class: classSolid, reason: reasonMisnamed, misnamed: true}, nil
	case o.state == ownerDeleted && !o.unsure:
		return verdict{class: classDangling, reason: reasonDeleted}, nil
	case absentHere && !o.unsure:
		return verdict{class: classDangling, reason: reasonNotFound}, nil
	}
	var version string // the reference's
	namespaced, known := scope(o.apiVersion, o.kind)
	if !known && o.unsure && sameKind {
		// A version no longer served: what the graph knew the owner's
		// kind by is.
		version = o.node.apiVersion
		namespaced, known = scope(version, o.kind)
	}
	if !known {
		return verdict{}, errUnknownKind
	}
	key := ownerKey{uid: o.uid, group: o.group(), kind: o.kind, name: o.name}
	if namespaced {
		key.namespace = item.id.namespace
	}
	if o.state == ownerAbsentAtIdentity && !o.unsure && sameKind && o.node.name == key.name && key.namespace == "" {
		// Found absent at a cluster-scoped kind, wherever the virtual node
		// took its namespace from.
		return verdict{class: classDangling, reason: reasonNotFound}, nil
	}
	return verdict{lookup: &key, fresh: o.unsure, apiVersion: version}, nil
}

// classifiedRef is an owner reference with its class.
type classifiedRef struct {
	ownerView
	class  refClass
	reason string
}

// actionKind is what the owner GC does to an object: what a plan decides
// and, for the writes, what a decision record, its log line and the metric
// label "action" say (String).
type actionKind uint8

const (
	actNone            actionKind = iota
	actWake                       // enqueue plan.wake (blocking dependents); no write
	actDelete                     // delete the item with plan.policy (after unblocking if plan.unblock)
	actRemoveRefs                 // patch away plan.refs
	actUnblockRefs                // set blockOwnerDeletion=false on plan.refs (before a foreground delete)
	actRemoveFinalizer            // remove plan.finalizer from the item
	actOrphanDependent            // remove the owner's references from a dependent (orphan propagation)
	numActions
)

// actionNames are the names of the actions; those of the writes are metric
// label values.
var actionNames = [numActions]string{
	actNone:            "none",
	actWake:            "wake",
	actDelete:          "delete",
	actRemoveRefs:      "remove-owner-references",
	actUnblockRefs:     "unblock-owner-references",
	actRemoveFinalizer: "remove-finalizer",
	actOrphanDependent: "orphan-dependent",
}

func (a actionKind) String() string {
	if a < numActions {
		return actionNames[a]
	}
	return "unknown"
}

// writeActions are the actions that write to the API server.
func writeActions() []actionKind {
	return []actionKind{actDelete, actRemoveRefs, actUnblockRefs, actRemoveFinalizer, actOrphanDependent}
}

// Rules: why a plan does what it does.
const (
	ruleSolidOwner          = "solid-owner-remains" // nothing to do
	ruleRemoveDangling      = "solid-owner-remains-remove-dangling-references"
	ruleAllOwnersAbsent     = "all-owners-absent"            // every reference dangling
	ruleOwnerForeground     = "owner-deleting-in-foreground" // owners dangling or waiting, item has no dependents
	ruleOwnerWaitsDependent = "owner-waits-item-has-dependents"
	ruleCycle               = "ownership-cycle" // as above, and a dependent waits too: unblock first
	ruleNoBlocking          = "no-blocking-dependents-remain"
	ruleWaitBlocking        = "waiting-for-blocking-dependents"
	ruleOrphanDependents    = "owner-orphans-dependents"
	ruleDependentsOrphaned  = "dependents-orphaned"
)

// plan is the decision about one item.
type plan struct {
	action    actionKind
	rule      string
	policy    metav1.DeletionPropagation
	unblock   bool        // actDelete: first set blockOwnerDeletion=false on refs
	refs      []ownerView // actRemoveRefs: the references to remove; actDelete+unblock: to unblock
	finalizer string      // actRemoveFinalizer
	index     int         // actRemoveFinalizer: position of the finalizer
	wake      []types.UID // actWake
	owners    []classifiedRef
}

// decideDeletingDependents decides for an item being deleted in the
// foreground: remove its foregroundDeletion finalizer once no dependent with
// blockOwnerDeletion=true remains, else wake the blocking dependents.
func decideDeletingDependents(item *itemView) plan {
	if len(item.blocking) == 0 {
		return plan{action: actRemoveFinalizer, rule: ruleNoBlocking, finalizer: metav1.FinalizerDeleteDependents, index: item.fgIndex}
	}
	p := plan{action: actWake, rule: ruleWaitBlocking}
	for _, d := range item.blocking {
		if !d.deletingDependents {
			p.wake = append(p.wake, d.id.uid)
		}
	}
	return p
}

// decide decides for an item with classified owner references (upstream's
// attemptToDeleteItem rules).
func decide(item *itemView, refs []classifiedRef) plan {
	var solid, waiting, remove []ownerView
	for _, r := range refs {
		switch r.class {
		case classSolid:
			solid = append(solid, r.ownerView)
		case classWaiting:
			waiting = append(waiting, r.ownerView)
			remove = append(remove, r.ownerView)
		default:
			remove = append(remove, r.ownerView)
		}
	}
	switch {
	case len(solid) > 0 && len(remove) == 0:
		return plan{action: actNone, rule: ruleSolidOwner, owners: refs}
	case len(solid) > 0:
		// The dangling references go; so do the waiting ones, or their
		// owners would wait for this item forever.
		return plan{action: actRemoveRefs, rule: ruleRemoveDangling, refs: remove, owners: refs}
	case len(waiting) > 0 && item.hasDependents:
		// Delete in the foreground so that the item's own dependents go
		// first. If one of them waits for its dependents too, this may be a
		// cycle: make the item's references non-blocking first.
		p := plan{action: actDelete, rule: ruleOwnerWaitsDependent, policy: metav1.DeletePropagationForeground, owners: refs}
		if item.dependentDeletingDependents {
			for _, o := range item.owners {
				if o.block {
					p.refs = append(p.refs, o)
				}
			}
			if len(p.refs) > 0 {
				p.unblock, p.rule = true, ruleCycle
			}
		}
		return p
	default:
		rule := ruleAllOwnersAbsent
		if len(waiting) > 0 {
			rule = ruleOwnerForeground
		}
		return plan{action: actDelete, rule: rule, policy: policyFor(item), owners: refs}
	}
}

// policyFor returns the propagation an item's own finalizers ask for.
func policyFor(item *itemView) metav1.DeletionPropagation {
	switch {
	case item.orphanFinalizer:
		return metav1.DeletePropagationOrphan
	case item.foregroundFinalizer:
		return metav1.DeletePropagationForeground
	default:
		return metav1.DeletePropagationBackground
	}
}
