package ownergc

import (
	"context"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Stuck deletions: an object being deleted with the foregroundDeletion or
// orphan finalizer waits for the owner GC, which waits for its dependents.
// When that makes no progress for longer than stuckDeletionThreshold the
// owner GC says so: one Warning Event DeletionStuck on the object naming
// what blocks it (explain's verdict, the same words), one error log line,
// and nodegc_owner_gc_stuck_deletions counts it by reason until it
// progresses or goes. Progress is a dependent it waits for going (for
// foregroundDeletion the blocking ones, for orphan all of them) or its
// finalizer going. The time counts from the first scan that saw the
// object's deletion in this run.

// Reasons of a stuck deletion (the gauge's label values).
const (
	stuckBlockingDependent   = "blocking-dependent"    // foreground: a dependent with blockOwnerDeletion=true does not go
	stuckDependentsToOrphan  = "dependents-to-orphan"  // orphan: dependents keep their reference
	stuckUnsyncedResource    = "unsynced-resource"     // a resource that could hold dependents cannot be listed
	stuckFinalizerNotRemoved = "finalizer-not-removed" // nothing left to wait for, yet the finalizer stays
)

var stuckReasons = []string{stuckBlockingDependent, stuckDependentsToOrphan, stuckUnsyncedResource, stuckFinalizerNotRemoved}

// stuckReason is the gauge's reason for an explanation's verdict.
func stuckReason(code VerdictCode) string {
	switch code {
	case CodeWaitsForDependents:
		return stuckBlockingDependent
	case CodeOrphaning:
		return stuckDependentsToOrphan
	case CodeWaitsForResource:
		return stuckUnsyncedResource
	default:
		return stuckFinalizerNotRemoved
	}
}

// stuckScanInterval is how often the graph is scanned: a quarter of the
// threshold, at most a minute.
func stuckScanInterval(threshold time.Duration) time.Duration {
	return min(threshold/4, time.Minute)
}

// deletingObject is an object of the graph being deleted with
// foregroundDeletion or orphan, and the dependents it waits for.
type deletingObject struct {
	id        objectID
	finalizer string      // metav1.FinalizerDeleteDependents (if both are set) or FinalizerOrphanDependents
	waitsFor  []types.UID // foreground: the blocking dependents; orphan: every dependent
}

// deletingObjects copies, under the read lock, the objects being deleted
// with foregroundDeletion or orphan.
func (g *graph) deletingObjects() []deletingObject {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var out []deletingObject
	for _, n := range g.nodes {
		var o deletingObject
		switch {
		case n.deletingDependents():
			o.finalizer = metav1.FinalizerDeleteDependents
		case n.orphaning():
			o.finalizer = metav1.FinalizerOrphanDependents
		default:
			continue
		}
		o.id = nodeID(n)
		for dep := range n.dependents {
			if o.finalizer == metav1.FinalizerOrphanDependents || dep.blocksOwner(n) {
				o.waitsFor = append(o.waitsFor, dep.uid)
			}
		}
		out = append(out, o)
	}
	return out
}

// stuckEntry is what the scanner remembers of one deleting object.
type stuckEntry struct {
	obj      deletingObject
	waitsFor map[types.UID]struct{}
	since    time.Time // its last progress (or when first seen)
	stuck    bool      // reported stuck, and counted
	reason   string
}

// stuckTracker follows the deleting objects from scan to scan. Only the
// scanner goroutine uses it.
type stuckTracker struct {
	entries map[types.UID]*stuckEntry
}

// observe takes a scan made at now and returns the objects that have made
// no progress for longer than threshold and are not reported yet. Objects
// not in the scan are forgotten (they went, or their finalizer did).
func (s *stuckTracker) observe(scan []deletingObject, now time.Time, threshold time.Duration) []*stuckEntry {
	seen := make(map[types.UID]*stuckEntry, len(scan))
	var late []*stuckEntry
	for _, o := range scan {
		waitsFor := make(map[types.UID]struct{}, len(o.waitsFor))
		for _, u := range o.waitsFor {
			waitsFor[u] = struct{}{}
		}
		e, ok := s.entries[o.id.uid]
		if !ok || e.obj.finalizer != o.finalizer || !containsAll(waitsFor, e.waitsFor) {
			e = &stuckEntry{since: now}
		}
		e.obj, e.waitsFor = o, waitsFor
		seen[o.id.uid] = e
		if !e.stuck && now.Sub(e.since) > threshold {
			late = append(late, e)
		}
	}
	s.entries = seen
	return late
}

// containsAll reports whether have holds every key of want: no dependent
// went.
func containsAll(have, want map[types.UID]struct{}) bool {
	for u := range want {
		if _, ok := have[u]; !ok {
			return false
		}
	}
	return true
}

// markStuck counts e as stuck for reason until it progresses or goes.
func (s *stuckTracker) markStuck(e *stuckEntry, reason string) {
	e.stuck, e.reason = true, reason
}

// counts are the stuck objects by reason, every reason present.
func (s *stuckTracker) counts() map[string]int {
	out := make(map[string]int, len(stuckReasons))
	for _, r := range stuckReasons {
		out[r] = 0
	}
	for _, e := range s.entries {
		if e.stuck {
			out[e.reason]++
		}
	}
	return out
}

// watchStuck scans the graph for stuck deletions every
// stuckScanInterval while the run is synced, until ctx ends; then nothing
// counts as stuck any more. A threshold of 0 turns it off.
func (r *run) watchStuck(ctx context.Context) {
	threshold := r.c.stuckThreshold
	if threshold <= 0 {
		return
	}
	t := r.c.clock.NewTicker(stuckScanInterval(threshold))
	defer t.Stop()
	defer r.c.metrics.setStuck(nil)
	var s stuckTracker
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if !r.synced() {
			continue
		}
		for _, e := range s.observe(r.graph.deletingObjects(), r.c.clock.Now(), threshold) {
			r.reportStuck(ctx, &s, e)
		}
		r.c.metrics.setStuck(s.counts())
	}
}

// reportStuck explains a late object and, if it still waits for the owner
// GC, reports it stuck: an error log line, a Warning Event (none in
// dry-run) and the gauge. An object explain cannot read is tried again at
// the next scan.
func (r *run) reportStuck(ctx context.Context, s *stuckTracker, e *stuckEntry) {
	id := e.obj.id
	ex, err := r.explain(ctx, id)
	if err != nil {
		if ctx.Err() == nil {
			r.logger.V(2).Info("Cannot explain a deletion without progress; will retry", "object", id, "err", err)
		}
		return
	}
	if !ex.Object.Exists || ex.Object.UID != id.uid || !slices.Contains(ex.Object.Finalizers, e.obj.finalizer) {
		return // it progressed since the scan
	}
	reason := stuckReason(ex.Code)
	s.markStuck(e, reason)
	since := r.c.clock.Since(e.since).Round(time.Second)
	r.logger.Error(nil, "Deletion stuck", "object", id, "finalizer", e.obj.finalizer, "reason", reason,
		"noProgressFor", since, "verdict", ex.Verdict)
	r.warn(id, "DeletionStuck", fmt.Sprintf("Deletion (%s) made no progress for %s: %s", e.obj.finalizer, since, ex.Verdict))
}
