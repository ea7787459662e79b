package ownergc

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// verdictOf is the plain answer of an explanation: pure, from what explain
// gathered and what the workers' functions decided. The stuck-deletion
// check reports the same words.
func verdictOf(e *Explanation, d decision) (VerdictCode, string) {
	code, text := verdictText(e, d)
	if e.Unmonitored && e.Object.Exists {
		text += fmt.Sprintf(" (%s is no longer monitored: discovery lists it without list, watch or delete; "+
			"the owner GC reads the object before it acts on it, and sees no object of it created since)", e.Object.Resource)
	}
	if e.DryRun && e.Object.Exists {
		text += " (dry-run: the owner GC decides but writes nothing)"
	}
	return code, text
}

func verdictText(e *Explanation, d decision) (VerdictCode, string) {
	o := &e.Object
	switch {
	case !o.Exists:
		return goneVerdict(e)
	case o.DeletionTimestamp == nil && len(e.Owners) == 0:
		return CodeNoOwners, "no owners: the owner GC never deletes it"
	case !e.InGraph && !d.monitored:
		return CodeNotWatched, fmt.Sprintf("not watched: the owner GC has no monitor for %s (it is in ownerGC.gcIgnoredResources, "+
			"or does not support list, watch and delete), so it never deletes it nor waits for it", o.Resource) + unwatchedFinalizerWords(o)
	case !e.InGraph:
		return CodeNotInGraph, "not in the graph yet: its monitor has not delivered it; the owner GC decides once it has"
	case o.DeletionTimestamp != nil:
		return deletingVerdict(e)
	case d.err != nil:
		return undecidedVerdict(e, d.err)
	case d.plan == nil:
		return CodeUndecided, "undecided"
	}
	p := d.plan
	switch p.action {
	case actNone:
		return CodeKept, "kept: " + solidOwners(e.Owners)
	case actRemoveRefs:
		return CodeKept, fmt.Sprintf("kept: %s; the owner GC removes its references to gone owners: %s (rule %s)",
			solidOwners(e.Owners), goneOwners(e.Owners), p.rule)
	case actDelete:
		var why string
		switch p.rule {
		case ruleAllOwnersAbsent:
			why = "every owner is gone (rule " + p.rule + "): " + goneOwners(e.Owners)
		case ruleOwnerForeground:
			why = waitingOwners(e.Owners) + " in the foreground and waits for it (rule " + p.rule + ")"
		default: // ruleOwnerWaitsDependent, ruleCycle
			why = waitingOwners(e.Owners) + " in the foreground and waits for it; its own dependents go first (rule " + p.rule + ")"
		}
		return CodeWillBeDeleted, fmt.Sprintf("will be deleted with propagation %s: %s", p.policy, why)
	}
	return CodeUndecided, "undecided: " + p.action.String() + " (rule " + p.rule + ")"
}

// unwatchedFinalizerWords says, of an object the owner GC does not watch,
// that nothing removes the foregroundDeletion or orphan finalizer it
// carries (kube-apiserver adds them at a delete with propagation
// Foreground or Orphan), and gives the command that removes them by hand:
// a JSON patch that tests each before it removes it, the last first so
// that the others' indexes hold. "" without such a finalizer.
func unwatchedFinalizerWords(o *ObjectInfo) string {
	var names, ops []string
	for i := len(o.Finalizers) - 1; i >= 0; i-- {
		f := o.Finalizers[i]
		if f != metav1.FinalizerDeleteDependents && f != metav1.FinalizerOrphanDependents {
			continue
		}
		names = append([]string{f}, names...)
		ops = append(ops, fmt.Sprintf(`{"op":"test","path":"/metadata/finalizers/%d","value":%s},{"op":"remove","path":"/metadata/finalizers/%d"}`,
			i, strconv.Quote(f), i))
	}
	if len(names) == 0 {
		return ""
	}
	cmd := "kubectl patch " + o.Resource + " " + o.Name
	if o.Namespace != "" {
		cmd += " -n " + o.Namespace
	}
	cmd += " --type=json -p '[" + strings.Join(ops, ",") + "]'"
	if len(names) == 1 {
		return "; nor does it remove its " + names[0] + " finalizer, which stays until removed by hand: " + cmd
	}
	return "; nor does it remove its " + strings.Join(names, " and ") + " finalizers, which stay until removed by hand: " + cmd
}

// deletingVerdict explains an object whose deletion is under way.
func deletingVerdict(e *Explanation) (VerdictCode, string) {
	fin := e.Object.Finalizers
	others := foreignFinalizers(fin)
	then := ""
	if len(others) > 0 {
		then = "; then " + finalizerWords(others) + " of another controller must go"
	}
	switch {
	case slices.Contains(fin, metav1.FinalizerDeleteDependents):
		if e.BlockingTotal > 0 {
			return CodeWaitsForDependents, blockingVerdict(e)
		}
		if len(e.UnsyncedResources) > 0 {
			return CodeWaitsForResource, "foreground deletion waits: " + unsyncedWords(e.UnsyncedResources)
		}
		return CodeWillBeDeleted, "will be deleted: no dependent with blockOwnerDeletion=true remains; the owner GC removes " +
			"the foregroundDeletion finalizer (rule " + ruleNoBlocking + ")" + then
	case slices.Contains(fin, metav1.FinalizerOrphanDependents):
		// In the worker's order: the dependents are orphaned first, the
		// finalizer held for resources that lag after.
		if e.DependentsTotal > 0 {
			return CodeOrphaning, fmt.Sprintf("orphaning: the owner GC removes this object's reference from %d dependent(s) "+
				"(%s first), then the orphan finalizer", e.DependentsTotal, depName(&e.Dependents[0]))
		}
		if len(e.UnsyncedResources) > 0 {
			return CodeWaitsForResource, "orphaning waits: " + unsyncedWords(e.UnsyncedResources)
		}
		return CodeWillBeDeleted, "will be deleted: no dependent is left to orphan; the owner GC removes the orphan finalizer " +
			"(rule " + ruleDependentsOrphaned + ")" + then
	case len(others) > 0:
		return CodeBeingDeleted, "being deleted: held by " + finalizerWords(others) + ", which another controller must remove"
	default:
		return CodeBeingDeleted, "being deleted: no finalizer holds it; the API server removes it"
	}
}

// blockingVerdict names the dependent a foreground deletion waits for: one
// held by another controller's finalizer if there is one, else one the
// owner GC does not delete now, else the first.
func blockingVerdict(e *Explanation) string {
	var blocker *DependentState
	for i := range e.Dependents {
		d := &e.Dependents[i]
		if !d.BlockOwnerDeletion {
			break
		}
		if blocker == nil || blockerRank(d) > blockerRank(blocker) {
			blocker = d
		}
	}
	if blocker == nil { // more blocking dependents than listed: cannot happen, they come first
		return fmt.Sprintf("waits for %d dependent(s) with blockOwnerDeletion=true", e.BlockingTotal)
	}
	var state string
	foreign := foreignFinalizers(blocker.Finalizers)
	switch {
	case blocker.Gone:
		state = "which is gone; the graph has not seen its deletion yet"
	case len(foreign) > 0:
		state = "which is held by " + finalizerWords(foreign)
	case blocker.DeletingDependents:
		state = "which itself waits for its own blocking dependents (foreground)"
	case blocker.BeingDeleted:
		state = "which is being deleted"
	case blocker.Undecided != nil:
		state = undecidedBlockerWords(blocker.Undecided)
	case blocker.KeptBy != nil:
		o := blocker.KeptBy
		state = "which the owner GC keeps, removing its reference to this object: its owner " + describe(o.Kind, o.Namespace, o.Name, o.UID) + " exists"
		if o.Class == classUnverified {
			state += " (read live; the graph has not observed it)"
		}
	default:
		state = "which the owner GC deletes first"
	}
	text := fmt.Sprintf("waits for dependent %s (blockOwnerDeletion) %s", depName(blocker), state)
	if more := e.BlockingTotal - 1; more > 0 {
		text += fmt.Sprintf(", and for %d more blocking dependent(s)", more)
	}
	return text
}

// blockerRank orders the blocking dependents by what the verdict names
// first: one held by another controller's finalizer (2), one the owner GC
// does not delete now (1), any other (0).
func blockerRank(d *DependentState) int {
	switch {
	case len(foreignFinalizers(d.Finalizers)) > 0:
		return 2
	case d.Undecided != nil && !d.Gone && !d.BeingDeleted:
		return 1
	}
	return 0
}

// undecidedBlockerWords says why the owner GC does not delete a blocking
// dependent now: owner reference u cannot be classified.
func undecidedBlockerWords(u *OwnerState) string {
	switch u.Reason {
	case reasonNamespacedOwner:
		return fmt.Sprintf("which the owner GC never deletes: it is cluster-scoped and names the namespaced kind %s as its owner %s "+
			"(Warning OwnerRefInvalidNamespace)", u.Kind, u.Name)
	case reasonUnknownKind:
		return fmt.Sprintf("which the owner GC does not delete until a discovery round knows the kind %s (%s) of its owner %s",
			u.Kind, u.APIVersion, u.Name)
	case reasonOwnerWatchBehind:
		return fmt.Sprintf("which the owner GC decides about once its %s watch has reached the dependent's version: a look-up of its "+
			"owner %s found nothing with that UID (it waits at most %s)", u.Kind, describe(u.Kind, u.Namespace, u.Name, u.UID),
			shortDuration(ownerWatchLagBound))
	default:
		return "which the owner GC cannot decide about while it cannot look an owner up (it retries): " + u.Error
	}
}

// goneVerdict explains an object that no longer exists, from the newest
// decision record that deleted it (or let the API server delete it), or,
// without one, says who else may have: another client, an earlier leader
// (since e.LeaderSince this instance leads), or anyone before the records'
// hour.
func goneVerdict(e *Explanation) (VerdictCode, string) {
	for i := len(e.Records) - 1; i >= 0; i-- {
		rec := &e.Records[i]
		at := rec.Time.UTC().Format(time.RFC3339)
		switch {
		// The UID says which object of that name the record is about: a
		// name may have been taken again since, by an object another
		// client deleted.
		case rec.Action == actDelete.String() && rec.DryRun:
			return CodeNotFound, fmt.Sprintf("not found: the owner GC (dry-run) decided at %s to delete it (uid %s) by rule %s because %s, "+
				"but wrote nothing; another client deleted it", at, rec.UID, rec.Rule, recordBecause(rec))
		case rec.Action == actDelete.String():
			return CodeDeleted, fmt.Sprintf("deleted at %s (uid %s) by rule %s because %s (propagation %s)", at, rec.UID, rec.Rule,
				recordBecause(rec), rec.PropagationPolicy)
		case rec.Action == actRemoveFinalizer.String() && !rec.DryRun:
			return CodeDeleted, fmt.Sprintf("deleted at %s (uid %s): the owner GC removed its %s finalizer by rule %s, "+
				"and the API server deleted it", at, rec.UID, rec.Finalizer, rec.Rule)
		}
	}
	// The records are this process's memory: an earlier leader's
	// deletions are in none of them.
	earlier := "an earlier owner GC leader did"
	if !e.LeaderSince.IsZero() {
		earlier += " (this instance has run the owner GC since " + e.LeaderSince.UTC().Format(time.RFC3339) + ")"
	}
	return CodeNotFound, fmt.Sprintf("not found, and the owner GC recorded no deletion of it in the last %s: "+
		"another client deleted it, or %s, or it was deleted earlier", shortDuration(recordKeepAge), earlier)
}

// recordBecause says why a recorded delete happened: its owners that were
// gone or waiting.
func recordBecause(rec *Record) string {
	var parts []string
	for _, o := range rec.Owners {
		if o.Class == classSolid.String() {
			continue
		}
		parts = append(parts, "owner "+describe(o.Kind, o.Namespace, o.Name, o.UID)+" "+reasonWords(o.Reason))
	}
	if len(parts) == 0 {
		return "no owner held it"
	}
	return strings.Join(parts, " and ")
}

// reasonWords turns a classification reason into words.
func reasonWords(reason string) string {
	switch reason {
	case reasonDeleted:
		return "was deleted"
	case reasonNotFound:
		return "does not exist"
	case reasonUIDMismatch:
		return "was replaced by another object of that name"
	case reasonOtherNamespace:
		return "is in another namespace"
	case reasonWaiting:
		return "is being deleted in the foreground"
	default:
		return "(" + reason + ")"
	}
}

// undecidedVerdict explains why the owners cannot be classified now.
func undecidedVerdict(e *Explanation, err error) (VerdictCode, string) {
	for _, o := range e.Owners {
		if o.Class != classUnknown {
			continue
		}
		switch o.Reason {
		case reasonNamespacedOwner:
			return CodeNeverDeleted, fmt.Sprintf("never deleted: this cluster-scoped object names the namespaced kind %s as its owner "+
				"%s (Warning OwnerRefInvalidNamespace)", o.Kind, o.Name)
		case reasonOwnerWatchBehind:
			return CodeUndecided, fmt.Sprintf("undecided: a look-up of owner %s found nothing with that UID, but the owner GC's %s "+
				"watch has not reached this object's version yet: the owner may exist under another name; the owner GC decides once "+
				"the watch has, waiting at most %s", describe(o.Kind, o.Namespace, o.Name, o.UID), o.Kind, shortDuration(ownerWatchLagBound))
		case reasonUnknownKind:
			return CodeUndecided, fmt.Sprintf("undecided: the owner kind %s (%s) is unknown to discovery; the owner GC decides "+
				"after a discovery refresh finds it", o.Kind, o.APIVersion)
		}
	}
	return CodeUndecided, "undecided: " + err.Error()
}

// solidOwners names the owners that hold the object.
func solidOwners(owners []OwnerState) string {
	var held []string
	for _, o := range owners {
		switch {
		case o.Class == classSolid.String() && o.ObservedName != "":
			held = append(held, "owner "+describe(o.Kind, o.Namespace, o.ObservedName, o.UID)+" exists (the reference names it "+
				o.Name+": Warning OwnerRefNameMismatch)")
		case o.Class == classSolid.String():
			held = append(held, "owner "+describe(o.Kind, o.Namespace, o.Name, o.UID)+" exists")
		case o.Class == classUnverified:
			held = append(held, "owner "+describe(o.Kind, o.Namespace, o.Name, o.UID)+
				" exists (read live; the graph has not observed it, so the owner GC checks it again later)")
		}
	}
	return strings.Join(held, " and ")
}

// goneOwners names the owners whose references go: dangling or waiting.
func goneOwners(owners []OwnerState) string {
	var gone []string
	for _, o := range owners {
		if o.Class == classDangling.String() || o.Class == classWaiting.String() {
			gone = append(gone, "owner "+describe(o.Kind, o.Namespace, o.Name, o.UID)+" "+reasonWords(o.Reason))
		}
	}
	return strings.Join(gone, " and ")
}

// waitingOwners names the owners deleting their dependents in the
// foreground: "owner X is being deleted" (or "owners X and Y are").
func waitingOwners(owners []OwnerState) string {
	var names []string
	for _, o := range owners {
		if o.Class == classWaiting.String() {
			names = append(names, describe(o.Kind, o.Namespace, o.Name, o.UID))
		}
	}
	if len(names) == 1 {
		return "owner " + names[0] + " is being deleted"
	}
	return "owners " + strings.Join(names, " and ") + " are being deleted"
}

func depName(d *DependentState) string { return describe(d.Kind, d.Namespace, d.Name, d.UID) }

// describe names an object as the records and events do: "Kind ns/name
// (uid …)".
func describe(kind, namespace, name string, uid types.UID) string {
	return objectID{uid: uid, kind: kind, namespace: namespace, name: name}.String()
}

// foreignFinalizers are the finalizers another controller removes.
func foreignFinalizers(fin []string) []string {
	var out []string
	for _, f := range fin {
		if f != metav1.FinalizerDeleteDependents && f != metav1.FinalizerOrphanDependents {
			out = append(out, f)
		}
	}
	return out
}

func finalizerWords(fin []string) string {
	if len(fin) == 1 {
		return "finalizer " + fin[0]
	}
	return "finalizers " + strings.Join(fin, ", ")
}

// unsyncedWords names the resources a finalizer is held for (hold.go).
func unsyncedWords(res []string) string {
	list := strings.Join(res, ", ")
	if len(res) == 1 {
		return "resource " + list + " cannot be listed, so the graph may miss dependents there " +
			"(the owner GC waits up to ownerGC.unsyncedResourceHold)"
	}
	return "resources " + list + " cannot be listed, so the graph may miss dependents there " +
		"(the owner GC waits up to ownerGC.unsyncedResourceHold)"
}

// shortDuration prints whole hours and minutes without the zero parts (1h,
// not 1h0m0s).
func shortDuration(d time.Duration) string {
	switch {
	case d > 0 && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d > 0 && d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}
