package ownergc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// outcome tells a worker what to do with the item it processed.
type outcome struct {
	retry bool          // requeue with the item's backoff
	after time.Duration // requeue after this delay (if > 0)
}

var (
	done        = outcome{}
	retry       = outcome{retry: true}
	waitForSync = outcome{after: time.Second}
	// fenceRetry: the lease fence refused a write while the run goes on
	// (see fenced). By the time it is tried again the fence has closed,
	// and the run's context ended with it, or a renewal has reopened it.
	fenceRetry = outcome{after: minWriteWindow}
)

func (r *run) deleteWorker(ctx context.Context) {
	r.work(ctx, &r.deletePool, r.attemptToDelete)
}

// work runs process on the items of p's queue until it shuts down. Taking
// an item, finishing it and each request it ends mark p's progress.
func (r *run) work(ctx context.Context, p *pool, process func(context.Context, types.UID) outcome) {
	ctx = context.WithValue(ctx, poolKey{}, p)
	q := p.queue
	for {
		uid, quit := q.Get()
		if quit {
			return
		}
		r.active.Add(1)
		p.busy.Add(1)
		begin := r.c.clock.Now()
		p.mark(begin)
		out := done
		if ctx.Err() == nil {
			out = process(ctx, uid)
		}
		end := r.c.clock.Now()
		p.mark(end)
		r.c.metrics.attemptDuration.WithLabelValues(p.name).Observe(end.Sub(begin).Seconds())
		switch {
		case out.retry:
			q.AddRateLimited(uid)
		case out.after > 0:
			q.Forget(uid)
			q.AddAfter(uid, out.after)
		default:
			q.Forget(uid)
		}
		q.Done(uid)
		p.busy.Add(-1)
		r.active.Add(-1)
	}
}

// attemptToDelete looks at one object of the graph: it deletes it when no
// owner holds it, patches away dangling references when one does, and
// finishes foreground deletions.
func (r *run) attemptToDelete(ctx context.Context, uid types.UID) outcome {
	v, ok := r.graph.itemView(uid)
	if !ok {
		r.recheck.Forget(uid)
		r.polls.Forget(uid)
		r.holds.drop(uid)
		r.undecided.forget(uid)
		return done // gone, or virtual: dependents verify virtual owners themselves
	}
	if v.unmonitored {
		return r.processUnmonitored(ctx, &v)
	}
	return r.process(ctx, &v, true)
}

// processUnmonitored decides about an object of a resource that discovery
// lists without list, watch or delete (builder.resourceUnmonitored). What
// the graph keeps of it may be stale, so it is read first and decided on
// as it is, as kube-controller-manager reads every item; the read
// refreshes the graph's copy, or drops it if the object is gone. No event
// tells when it changes or goes, so it is read again after acting on it,
// and, while it is being deleted, again and again until it is gone: at
// growing intervals (polls) while the collector waits on it (waitedOn),
// every idleUnmonitoredPoll otherwise, to see a GC finalizer a later
// DELETE adds. A read that fails decides nothing: it is tried again at
// the pace of polls.
func (r *run) processUnmonitored(ctx context.Context, v *itemView) outcome {
	live, gone, err := r.getSame(ctx, v.id)
	switch {
	case err != nil:
		r.logger.V(2).Info("Cannot read an object whose resource is not monitored; will retry", "object", v.id, "err", err)
		return outcome{after: r.polls.When(v.id.uid)}
	case gone:
		r.polls.Forget(v.id.uid)
		return done // forgotten
	}
	r.refresh(live)
	lv := r.graph.liveView(v.id, live)
	out := r.process(ctx, &lv, false)
	if out != done {
		return out
	}
	live, gone, err = r.getSame(ctx, v.id)
	switch {
	case err != nil:
		return outcome{after: r.polls.When(v.id.uid)}
	case gone:
		r.polls.Forget(v.id.uid)
		return done
	}
	r.refresh(live)
	if live.DeletionTimestamp == nil {
		r.polls.Forget(v.id.uid)
		return done
	}
	// Still being deleted (someone else's finalizer, or dependents to
	// wait for): read again later, after a delay of its own, growing to
	// maxUnmonitoredPoll if the collector waits on it. Not through the
	// queue's retries: their bucket is shared, and thousands of objects
	// stuck in deletion would delay every other retry by their number.
	// Nobody waits on it: read again in idleUnmonitoredPoll all the same,
	// for a DELETE with propagation Foreground or Orphan adds its
	// finalizer to an object being deleted, and no event would tell.
	if lv := r.graph.liveView(v.id, live); waitedOn(&lv) {
		return outcome{after: r.polls.When(v.id.uid)}
	}
	r.polls.Forget(v.id.uid)
	return outcome{after: idleUnmonitoredPoll}
}

// waitedOn says whether the collector waits on an object being deleted to
// go: it has the foregroundDeletion or orphan finalizer, which a worker
// removes; dependents the graph holds, which go or stay once it is gone;
// or a blocking reference to an owner deleting in the foreground, which
// waits for it.
func waitedOn(v *itemView) bool {
	return v.foregroundFinalizer || v.orphanFinalizer || v.hasDependents ||
		slices.ContainsFunc(v.owners, func(o ownerView) bool { return o.block && o.waiting })
}

// refresh hands the graph an unmonitored object as just read.
func (r *run) refresh(live *metav1.PartialObjectMetadata) {
	r.events.push(event{typ: evRefresh, obj: live})
}

// process decides about v and acts. With mayReread, a write rejected
// because the object changed re-reads it and decides once more.
func (r *run) process(ctx context.Context, v *itemView, mayReread bool) outcome {
	if v.beingDeleted || len(v.owners) == 0 {
		r.undecided.decided(v.id.uid) // no owner reference to classify
	}
	if v.beingDeleted && !v.deletingDependents {
		return done // a one-way trip: its deletion event will wake its dependents
	}
	if v.deletingDependents {
		if !r.synced() {
			return waitForSync // a dependent may still be missing from the graph
		}
		p := decideDeletingDependents(v)
		if p.action != actRemoveFinalizer {
			// It waits for dependents the graph shows, not for a hold:
			// the hold goes on only if a resource lagged all along
			// (liveHold).
			r.holds.pause(v.id.uid)
			return r.execute(ctx, v, p, mayReread)
		}
		if out, held := r.holdFinalizer(v.id, p.finalizer); held {
			return out
		}
		// Decided on the view taken before the hold looked: a resource
		// that recovered meanwhile may have brought a blocking dependent.
		// Decided again on the graph as it is.
		now, ok := r.graph.itemView(v.id.uid)
		if !ok {
			return done
		}
		if decideDeletingDependents(&now).action != actRemoveFinalizer {
			r.holds.pause(v.id.uid)
			return retry
		}
		return r.execute(ctx, v, p, mayReread)
	}
	if len(v.owners) == 0 {
		return done
	}
	refs, unverified, until, err := r.classify(ctx, v)
	switch {
	case errors.Is(err, errNamespacedOwner):
		r.undecided.decided(v.id.uid)
		return done // never deleted; the Event says why
	case errors.Is(err, errOwnerWatchBehind):
		r.logger.V(4).Info("Owner not found by the name its reference states, and its resource's watch is behind the object; looking again", "object", v.id, "err", err)
		return outcome{after: ownerWatchRecheck}
	case errors.Is(err, errUnknownKind):
		r.noteUndecided(v.id, undecidedUnknownKind, err)
		r.logger.V(4).Info("Owner kind unknown to discovery; waiting for the next refresh", "object", v.id, "err", err)
		r.parked.add(v.id.uid)
		return done
	case err != nil:
		r.noteUndecided(v.id, undecidedLookupError, err)
		r.logger.V(2).Info("Cannot classify owner references; will retry", "object", v.id, "err", err)
		return retry
	}
	r.undecided.decided(v.id.uid)
	r.lag.done(v.id.uid)
	p := decide(v, refs)
	if unversioned(v, p) {
		return r.reread(ctx, v)
	}
	out := r.execute(ctx, v, p, mayReread)
	switch {
	case out == done && unverified && !until.IsZero():
		// An owner exists but no monitor has shown it (yet: its event may
		// be on its way; or its resource is not monitored): look again
		// when the owner's verdict ends, when one GET of the owner
		// answers all its dependents (presentCache: a second, doubling up
		// to maxRetryDelay).
		r.recheck.Forget(v.id.uid)
		return outcome{after: max(until.Sub(r.c.clock.Now()), time.Millisecond)}
	case out == done && unverified:
		// An owner deleting in the foreground, whose verdict is not
		// kept: look again later, backing off from a second to
		// maxRetryDelay.
		return outcome{after: r.recheck.When(v.id.uid)}
	}
	r.recheck.Forget(v.id.uid)
	return out
}

// unversioned reports whether plan p would delete v, or patch its owner
// references, on the graph's view of an object its API server gives
// without a resourceVersion (an aggregated API server of its own storage
// may). Such a write can be conditioned on the object's UID only, not on
// the version the decision saw, so a graph that has not seen a new owner
// yet would delete an object that has one: the object is read first, and
// decided on as it is (kube-controller-manager reads every item before it
// decides).
func unversioned(v *itemView, p plan) bool {
	return !v.live && v.rv == "" && (p.action == actDelete || p.action == actRemoveRefs)
}

// classify classifies every owner reference of v, looking owners up where
// the graph cannot tell. unverified reports an owner found by a lookup but
// never observed; until, when not zero, is when the first verdict that
// such an owner is present ends (presentCache).
func (r *run) classify(ctx context.Context, v *itemView) (refs []classifiedRef, unverified bool, until time.Time, err error) {
	refs = make([]classifiedRef, 0, len(v.owners))
	for i := range v.owners {
		o := &v.owners[i]
		r.markUnsure(o)
		vd, err := judgeRef(v, o, r.scope)
		if errors.Is(err, errNamespacedOwner) {
			r.reportInvalidNamespace(v.id, o)
		}
		if err != nil {
			return nil, false, time.Time{}, fmt.Errorf("owner reference to %s %s (uid %s): %w", o.kind, o.name, o.uid, err)
		}
		if vd.lookup != nil {
			res, err := r.lookupOwner(ctx, *vd.lookup, cmp.Or(vd.apiVersion, o.apiVersion), vd.fresh)
			if err != nil {
				return nil, false, time.Time{}, fmt.Errorf("look up owner %s %s (uid %s): %w", o.kind, o.name, o.uid, err)
			}
			vd.class, vd.reason = res.class, res.reason
			unverified = unverified || res.class != classDangling
			if !res.until.IsZero() && (until.IsZero() || res.until.Before(until)) {
				until = res.until
			}
		}
		if vd.class == classDangling && (vd.reason == reasonNotFound || vd.reason == reasonUIDMismatch) && r.ownerWatchBehind(v, o) {
			return nil, false, time.Time{}, fmt.Errorf("owner reference to %s %s (uid %s): %w", o.kind, o.name, o.uid, errOwnerWatchBehind)
		}
		if vd.reason == reasonOtherNamespace {
			r.reportInvalidNamespace(v.id, o)
		}
		if vd.misnamed {
			r.reportMisnamed(v.id, o)
		}
		refs = append(refs, classifiedRef{ownerView: *o, class: vd.class, reason: vd.reason})
	}
	return refs, unverified, until, nil
}

// execute applies plan p to v.
func (r *run) execute(ctx context.Context, v *itemView, p plan, mayReread bool) outcome {
	var err error
	switch p.action {
	case actNone:
		return done
	case actWake:
		for _, uid := range p.wake {
			r.deletes.Add(uid)
		}
		return done
	case actRemoveFinalizer:
		return r.removeFinalizer(ctx, v.id, p.finalizer, p.index, p.rule)
	case actRemoveRefs:
		rec := decisionRecord{action: actRemoveRefs, rule: p.rule, owners: ownerRecords(v.id.namespace, p.owners)}
		_, err = r.patch(ctx, v.id, rec, func() ([]byte, error) { return removeRefsPatch(v.id.uid, v.rv, indexedUIDs(p.refs)) })
	case actDelete:
		err = r.deleteItem(ctx, v, p)
	}
	switch {
	case err == nil || isGone(err) || stopping(ctx):
		return done
	case fenced(err):
		return fenceRetry
	case stale(err) && mayReread:
		return r.reread(ctx, v)
	case stale(err):
		return retry
	default:
		r.logger.Error(err, "Owner GC action failed; will retry", "object", v.id, "action", p.action, "rule", p.rule)
		return retry
	}
}

// deleteItem deletes v with the plan's policy, after making its references
// non-blocking if the plan says so (the cycle rule).
func (r *run) deleteItem(ctx context.Context, v *itemView, p plan) error {
	rv := v.rv
	owners := ownerRecords(v.id.namespace, p.owners)
	if p.unblock {
		rec := decisionRecord{action: actUnblockRefs, rule: p.rule, owners: owners}
		obj, err := r.patch(ctx, v.id, rec, func() ([]byte, error) { return unblockRefsPatch(v.id.uid, v.rv, indexedUIDs(p.refs)) })
		if err != nil {
			return err
		}
		if obj != nil { // nil in dry-run
			rv = obj.ResourceVersion
		}
	}
	rec := decisionRecord{action: actDelete, policy: p.policy, rule: p.rule, owners: owners}
	return r.write(ctx, v.id, rec, func() error {
		err := r.deleteObject(ctx, v.id, rv, p.policy)
		if !apierrors.IsConflict(err) {
			return err
		}
		live, err := r.whyConflict(ctx, v.id, rv, err)
		if !errors.Is(err, errChanged) || p.unblock || !sameDecisionInputs(v, live) {
			return err
		}
		// The object changed since the decision, but not what the
		// decision rests on (owner references, the deletion finalizers,
		// not being deleted): delete with the UID precondition only. An
		// object that changes more often than a round trip would
		// otherwise never be collected.
		err = r.deleteObject(ctx, v.id, "", p.policy)
		if !apierrors.IsConflict(err) {
			return err
		}
		_, err = r.whyConflict(ctx, v.id, "", err)
		return err
	})
}

// errChanged: a DELETE was refused with 409 Conflict because the object
// changed (its preconditions failed), as a GET showed.
var errChanged = errors.New("the object changed since the decision")

// whyConflict tells, with a GET, why a DELETE of id with preconditions UID
// and rv (none if empty) was answered conflict (a 409): errGone when the
// object is gone (its UID precondition failed); errChanged, with the
// object read, when it is at another resourceVersion than rv (its
// resourceVersion precondition failed); else an error, conflict wrapped,
// that is no staleness: the object is as the preconditions state, so none
// of them failed, and the 409 is a denial (an admission webhook may deny
// with code 409, "in use", and kube-apiserver passes it on).
func (r *run) whyConflict(ctx context.Context, id objectID, rv string, conflict error) (*metav1.PartialObjectMetadata, error) {
	live, gone, err := r.getSame(ctx, id)
	switch {
	case gone:
		return nil, errGone
	case err != nil:
		return nil, fmt.Errorf("the delete was answered 409 (%w), and a GET to tell whether the object changed failed: %v", conflict, err)
	case rv != "" && live.ResourceVersion != rv:
		return live, fmt.Errorf("%w (resourceVersion %s, then %s): %w", errChanged, rv, live.ResourceVersion, conflict)
	}
	return live, fmt.Errorf("the delete was answered 409, yet a GET finds the object as its preconditions state "+
		"(it did not change; an admission webhook denying with 409?): %w", conflict)
}

// sameDecisionInputs reports whether live states exactly what view v's
// delete decision rests on: the same owner references in the same order,
// the same orphan and foregroundDeletion finalizers, and no deletion under
// way.
func sameDecisionInputs(v *itemView, live *metav1.PartialObjectMetadata) bool {
	if live.DeletionTimestamp != nil || len(live.OwnerReferences) != len(v.owners) {
		return false
	}
	fg, orphan := deletionFinalizers(live.Finalizers)
	if (orphan >= 0) != v.orphanFinalizer || (fg >= 0) != v.foregroundFinalizer {
		return false
	}
	for i := range live.OwnerReferences {
		if ref := refView(i, &live.OwnerReferences[i]); !ref.sameRef(&v.owners[i]) {
			return false
		}
	}
	return true
}

// patch applies the JSON patch that build returns, as one recorded write.
func (r *run) patch(ctx context.Context, id objectID, rec decisionRecord, build func() ([]byte, error)) (*metav1.PartialObjectMetadata, error) {
	var obj *metav1.PartialObjectMetadata
	err := r.write(ctx, id, rec, func() error {
		patch, err := build()
		if err != nil {
			return err
		}
		obj, err = r.patchObject(ctx, id, patch)
		return err
	})
	return obj, err
}

// stale reports whether a write was refused because the object is not the
// one the decision saw: a DELETE whose preconditions failed (a 409 that a
// GET showed to be one, see whyConflict), or a JSON patch whose test
// operation failed (422, see patchTestFailed). Every other refusal is an
// error, 409 and 422 included: an admission policy or webhook that denies
// the write (a webhook may give any code), a CRD's validation rule. A
// patch's 409 is never stale: the collector's patches state no
// precondition but their tests, and kube-apiserver applies a JSON patch to
// the object as it is, trying again by itself when the object changes
// meanwhile.
func stale(err error) bool {
	return errors.Is(err, errChanged) || patchTestFailed(err)
}

// reread reads v's object from the API server and decides again, once.
func (r *run) reread(ctx context.Context, v *itemView) outcome {
	live, gone, err := r.getSame(ctx, v.id)
	switch {
	case err != nil:
		return retry
	case live == nil:
		return done
	case gone:
		// Recreated under the same name: our object is gone, and the new
		// one will be judged on its own when its monitor delivers it.
		r.logger.V(4).Info("Object was recreated; the decision no longer applies", "object", v.id, "newUID", live.UID)
		return done
	}
	lv := r.graph.liveView(v.id, live)
	return r.process(ctx, &lv, false)
}

// removeFinalizer removes finalizer (expected at index) from id. If the
// object changed, it re-reads it and tries once more at the current index.
//
// Once the finalizer is gone (or the object), so is its hold: nothing
// looks at the owner again when it goes.
func (r *run) removeFinalizer(ctx context.Context, id objectID, finalizer string, index int, rule string) (out outcome) {
	defer func() {
		if out == done {
			r.holds.drop(id.uid)
		}
	}()
	rec := decisionRecord{action: actRemoveFinalizer, finalizer: finalizer, rule: rule}
	patchAt := func(index int) error {
		_, err := r.patch(ctx, id, rec, func() ([]byte, error) { return removeFinalizerPatch(id.uid, "", index, finalizer) })
		return err
	}
	err := patchAt(index)
	if stale(err) {
		var live *metav1.PartialObjectMetadata
		var gone bool
		live, gone, err = r.getSame(ctx, id)
		switch {
		case err != nil:
		case gone:
			return done
		default:
			index = -1
			for i, f := range live.Finalizers {
				if f == finalizer {
					index = i
					break
				}
			}
			if index < 0 {
				return done
			}
			err = patchAt(index)
		}
	}
	switch {
	case err == nil || isGone(err) || stopping(ctx):
		return done
	case fenced(err):
		return fenceRetry
	case stale(err):
		return retry
	default:
		r.logger.Error(err, "Owner GC action failed; will retry", "object", id, "action", actRemoveFinalizer)
		return retry
	}
}

// write performs one write, or in dry-run only records it. It records the
// action once it succeeded.
func (r *run) write(ctx context.Context, id objectID, rec decisionRecord, do func() error) error {
	if r.c.dryRun {
		r.recordDryRun(id, rec)
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if h := r.c.hooks.beforeWrite; h != nil {
		h(ctx, rec.action.String(), id)
	}
	err := do()
	if fenced(err) {
		r.noteFenceRefusal(id, rec.action)
		return err
	}
	r.fenceRefusing.Store(false) // sent: the fence is open
	if err != nil {
		if apierrors.IsNotFound(err) {
			err = r.confirmGone(ctx, id, err)
		}
		if !isGone(err) && !stale(err) && !stopping(ctx) {
			r.c.metrics.actionErrors.WithLabelValues(rec.action.String()).Inc()
		}
		return err
	}
	r.record(id, rec)
	return nil
}

// noteFenceRefusal logs a write the lease fence refused, once until a
// write is sent again: the fence refuses every write of its last second.
func (r *run) noteFenceRefusal(id objectID, action actionKind) {
	if r.fenceRefusing.CompareAndSwap(false, true) {
		r.logger.V(2).Info("Write refused by the lease fence (less than a second of the write window left); "+
			"retrying in a second, unless the lease is lost by then", "object", id, "action", action)
	}
}

// confirmGone checks a write's 404 (notFound) with a GET: errGone when
// id's object is gone (getSame forgets it), else an error that is no
// NotFound, so that the write is retried. A write's 404 is no proof: an
// admission webhook may deny a write with a NotFound of its own, which
// kube-apiserver passes on as the webhook wrote it, details and all; and a
// version no longer served answers 404 whatever the object. A GET goes
// through no admission webhook.
func (r *run) confirmGone(ctx context.Context, id objectID, notFound error) error {
	_, gone, err := r.getSame(ctx, id)
	switch {
	case gone:
		return errGone
	case err != nil:
		return fmt.Errorf("the write was answered 404 (%v), and a GET to tell whether the object is gone failed: %v", notFound, err)
	default:
		return fmt.Errorf("the write was answered 404, yet a GET finds the object (an admission webhook denying with NotFound?): %v", notFound)
	}
}

// stopping reports whether the run is ending: its context ended, and a
// write that failed with it is worth neither a retry nor an error.
func stopping(ctx context.Context) bool {
	return ctx.Err() != nil
}

// fenced reports whether err is, or joins nothing but, the lease fence's
// refusal of a write (ErrLeaseLost). That does not mean the run is ending:
// the fence refuses writes in the last second of its window (see
// minWriteWindow), while the run's context ends only once the window is
// over, and a renewal sent in that second reopens the window without
// ending anything. So the write is tried again a second later
// (fenceRetry), and counts no action error: by then the run's context has
// ended (the fence closed) or the fence is open again.
func fenced(err error) bool {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs := joined.Unwrap()
		for _, e := range errs {
			if !fenced(e) {
				return false
			}
		}
		return len(errs) > 0
	}
	return errors.Is(err, ErrLeaseLost)
}
