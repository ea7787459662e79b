package ownergc

import (
	"context"
	"errors"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func (r *run) orphanWorker(ctx context.Context) {
	r.work(ctx, &r.orphanPool, r.attemptToOrphan)
}

// attemptToOrphan handles an owner deleted with the orphan finalizer: it
// removes the owner's reference from every dependent, then the finalizer.
//
// While the monitor of the owner's resource lags (monitorSet.lags: failing,
// catching up or relisting, as after every kube-apiserver restarted), the
// owner is read before its dependents are patched: an etcd restored from a
// backup taken before the delete brings the owner back not being deleted,
// and its restored dependents would lose their references to an owner that
// stays (kube-controller-manager orphans them from its graph).
func (r *run) attemptToOrphan(ctx context.Context, uid types.UID) outcome {
	if !r.synced() {
		return waitForSync // a dependent missing from the graph would be collected, not orphaned
	}
	v, ok := r.graph.orphanView(uid)
	if !ok || !v.orphaning {
		r.holds.drop(uid)
		return done
	}
	if v.unmonitored {
		// What the graph keeps of it may be stale: read it first (see
		// processUnmonitored), and once done let the delete worker read
		// it until it is gone.
		defer r.deletes.Add(uid)
		live, gone, err := r.getSame(ctx, v.id)
		switch {
		case err != nil:
			r.logger.V(2).Info("Cannot read an owner whose resource is not monitored; will retry", "owner", v.id, "err", err)
			return retry
		case gone:
			r.holds.drop(uid)
			return done
		}
		r.refresh(live)
		_, v.orphanIndex = deletionFinalizers(live.Finalizers)
		if live.DeletionTimestamp == nil || v.orphanIndex < 0 {
			r.holds.drop(uid)
			return done
		}
	} else if r.resourceLags(v.id) {
		live, gone, err := r.getSame(ctx, v.id)
		switch {
		case err != nil:
			r.logger.V(2).Info("Cannot read an owner whose resource's monitor lags; will retry", "owner", v.id, "err", err)
			return retry
		case gone:
			r.holds.drop(uid)
			return done
		}
		if _, i := deletionFinalizers(live.Finalizers); live.DeletionTimestamp == nil || i < 0 {
			// Not orphaning now. Looked at again once the monitor may
			// have caught up: the graph then says whether it orphans
			// (deleted with orphan again meanwhile, its update may bring
			// no change to the graph's flags, nor a new attempt).
			r.logger.V(2).Info("Owner not orphaning its dependents as read while its resource's monitor lags (an etcd restore?); leaving them", "owner", v.id)
			return outcome{after: holdRecheck}
		}
	}
	if err := r.orphanDependents(ctx, v); err != nil {
		// It waits for a write, not for a hold: the hold goes on only if
		// a resource lagged all along (liveHold).
		r.holds.pause(uid)
		switch {
		case stopping(ctx):
			return done
		case fenced(err):
			return fenceRetry
		}
		r.logger.Error(err, "Cannot orphan every dependent; will retry", "owner", v.id, "dependents", len(v.dependents))
		return retry
	}
	if out, held := r.holdFinalizer(v.id, metav1.FinalizerOrphanDependents); held {
		return out // the dependents it may not know of yet are orphaned when it looks again
	}
	// The view was taken before the dependents were patched and the hold
	// looked: a resource that recovered meanwhile may have brought
	// dependents it lacks. They are orphaned first, in another attempt
	// (with the backoff: a controller that keeps creating dependents must
	// not make it a hot loop).
	if now, ok := r.graph.orphanView(uid); ok && hasNewDependents(now, v) {
		r.holds.pause(uid)
		return retry
	}
	return r.removeFinalizer(ctx, v.id, metav1.FinalizerOrphanDependents, v.orphanIndex, ruleDependentsOrphaned)
}

// hasNewDependents reports whether now lists a dependent that was does
// not.
func hasNewDependents(now, was orphanView) bool {
	seen := make(map[types.UID]bool, len(was.dependents))
	for _, d := range was.dependents {
		seen[d.id.uid] = true
	}
	for _, d := range now.dependents {
		if !seen[d.id.uid] {
			return true
		}
	}
	return false
}

// orphanDependents patches the dependents in parallel (at most as many at a
// time as there are workers) and joins the failures.
func (r *run) orphanDependents(ctx context.Context, v orphanView) error {
	sem := make(chan struct{}, r.c.workers)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, d := range v.dependents {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := r.orphanDependent(ctx, v.id, d); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// orphanDependent removes owner's references from dependent d. If the
// dependent changed, it re-reads it and tries once more.
func (r *run) orphanDependent(ctx context.Context, owner objectID, d orphanDependent) error {
	rec := decisionRecord{action: actOrphanDependent, rule: ruleOrphanDependents, owners: []ownerRecord{{
		APIVersion: owner.apiVersion, Kind: owner.kind, Name: owner.name, UID: owner.uid,
		Class: "orphaned", Reason: "owner-deleted-with-orphan",
	}}}
	patchAt := func(indexes []int) error {
		refs := make([]indexedUID, 0, len(indexes))
		for _, i := range indexes {
			refs = append(refs, indexedUID{index: i, uid: owner.uid})
		}
		_, err := r.patch(ctx, d.id, rec, func() ([]byte, error) { return removeRefsPatch(d.id.uid, "", refs) })
		return err
	}
	err := patchAt(d.indexes)
	if stale(err) {
		live, gone, gerr := r.getSame(ctx, d.id)
		if gone || gerr != nil {
			return gerr
		}
		var indexes []int
		for i, ref := range live.OwnerReferences {
			if ref.UID == owner.uid {
				indexes = append(indexes, i)
			}
		}
		if len(indexes) == 0 {
			return nil
		}
		err = patchAt(indexes)
	}
	if isGone(err) {
		return nil
	}
	return err
}
