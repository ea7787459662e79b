package ownergc

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Finishing an orphaning or a foreground deletion (removing the orphan or
// foregroundDeletion finalizer) is the one decision that needs every
// dependent of the owner in the graph: a dependent the graph misses is
// neither orphaned (it would be deleted later, though the user asked to
// keep it) nor waited for (it would outlive its owner). kube-controller-
// manager finishes as soon as its own monitors have synced once, failing
// ones included. nodegc holds the finalizer while the graph may miss a
// dependent, up to ownerGC.unsyncedResourceHold:
//
//   - discovery must have run since the hold began, so that a resource
//     created just before (a new CRD) has a monitor (while the round is
//     under way the hold is silent and looked at every 100 ms; once a
//     round begun since has failed whole, it is a hold like the others:
//     warned about, looked at every holdRecheck, bounded);
//   - no monitor of a resource that could hold the owner's dependents may be
//     syncing, failed or failing (see monitorSet.unsyncedFor), and no group
//     version may fail discovery that served a resource the collector
//     monitors when this process last read it, or that it never read
//     (groupVersions.learn);
//   - no resource may have left discovery while it held dependents of the
//     owner (graph.lostDependents).
//
// The hold is measured from the first time this run held the owner in
// this episode. When the owner waits for something else, dependents the
// graph shows (a foreground owner's blockers, new dependents to orphan) or
// a write that failed (an orphaning patch), the hold pauses: it goes on
// from where it was if a monitor that could hold the owner's dependents
// lagged all along since it last held the owner (run.liveHold: that
// resource has lagged for as long as the hold counts, and a controller
// that keeps making blockers, or a webhook that keeps refusing, does not
// stretch the bound), and the next wait is a hold of its own otherwise.
// It ends when its finalizer is removed, and when the graph sees the
// owner's foregroundDeletion or orphan finalizer come or go
// (builder.endHold: the deletion ended otherwise, undone by an etcd
// restore or the finalizer removed by hand, or a new one began). While
// held, the owner gets one Warning Event (DependentsUnknown) naming the
// resources; when the bound expires the collector finishes as
// kube-controller-manager would, with a Warning (UnsyncedResourceHoldExpired)
// and an error log.

// holdRecheck is how often a held finalizer is looked at again.
const holdRecheck = 5 * time.Second

// undiscoveredSinceHold is what a hold waits for when every discovery
// round begun since it began failed whole.
const undiscoveredSinceHold = "API discovery (no round has completed since the hold began)"

// holdSet tracks the owners whose finalizer is held.
type holdSet struct {
	mu sync.Mutex
	m  map[types.UID]*hold
}

type hold struct {
	since time.Time
	// last is when the hold last held the owner (get); paused: the owner
	// waits for something else since (pause).
	last   time.Time
	paused bool
	round  uint64 // discovery rounds started when the hold began
	these  string // the resources last reported, to warn again when they change
	// expired: the hold lasted the bound; it does not begin again while
	// the finalizer stays (its removal failed and is tried again).
	expired bool
}

// get returns uid's hold, beginning it now (after round) if there is none.
func (s *holdSet) get(uid types.UID, now time.Time, round uint64) hold {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[types.UID]*hold{}
	}
	h, ok := s.m[uid]
	if !ok {
		h = &hold{since: now, round: round}
		s.m[uid] = h
	}
	h.last, h.paused = now, false
	return *h
}

// pause records that uid's owner waits for something other than a hold
// now (dependents the graph shows, a write): its hold goes on from where
// it was if a resource that could hold its dependents lagged all along
// (run.liveHold), and begins afresh otherwise.
func (s *holdSet) pause(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.m[uid]; ok {
		h.paused = true
	}
}

// peek returns uid's hold, if there is one.
func (s *holdSet) peek(uid types.UID) (hold, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.m[uid]
	if !ok {
		return hold{}, false
	}
	return *h, true
}

// report records what uid's hold is waiting for and reports whether that
// changed since the last report.
func (s *holdSet) report(uid types.UID, these string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.m[uid]
	if !ok || h.these == these {
		return false
	}
	h.these = these
	return true
}

// expire records that uid's hold lasted the bound.
func (s *holdSet) expire(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.m[uid]; ok {
		h.expired = true
	}
}

func (s *holdSet) drop(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, uid)
}

// liveHold returns owner id's hold, if there is one that goes on: a
// paused one (holdSet.pause) only while a monitor that could hold its
// dependents has lagged since it last held the owner, without a break
// (monitorSet.untrustedThrough). Discovery that fails, or a resource that
// left it holding dependents, tells no such continuity: a new hold begins
// then.
func (r *run) liveHold(id objectID) (hold, bool) {
	h, ok := r.holds.peek(id.uid)
	if ok && h.paused && !r.monitors.untrustedThrough(id.namespace, h.last) {
		return hold{}, false
	}
	return h, ok
}

// dropStaleHold drops owner id's paused hold if it does not go on
// (liveHold): the next hold is counted afresh. explain reads liveHold, and
// drops nothing.
func (r *run) dropStaleHold(id objectID) {
	if _, ok := r.liveHold(id); !ok {
		r.holds.drop(id.uid)
	}
}

// unsyncedFor names what could hold dependents of an owner in namespace ns
// ("" for a cluster-scoped owner) and cannot be trusted now: monitors that
// are syncing, failed or failing, and group versions discovery could not
// read that may serve dependents (groupVersions.learn).
func (r *run) unsyncedFor(ns string) []string {
	out := r.monitors.unsyncedFor(r.c.clock.Now(), ns)
	if gvs := r.undiscovered.Load(); gvs != nil {
		for _, gv := range *gvs {
			out = append(out, gv+" (discovery failed)")
		}
	}
	return out
}

// waitsFor names what a hold of owner id's finalizer waits for now, past
// the discovery round it waits for first: unsyncedFor, and the resources
// that left discovery while they held dependents of it.
func (r *run) waitsFor(id objectID, now time.Time, bound time.Duration) []string {
	out := r.unsyncedFor(id.namespace)
	for _, gr := range r.graph.lostDependents(id.uid, now, bound) {
		out = append(out, gr+" (left discovery holding dependents of it)")
	}
	return out
}

// holding names what holds owner id's finalizer now, as holdFinalizer
// decides it, without beginning a hold, asking for discovery or warning:
// what explain (and through it the stuck scanner) reports. Nothing once
// the owner's hold has lasted the bound (the worker's next look removes
// the finalizer). The discovery round a new hold waits for first counts
// only once a round has failed whole: it normally takes a second.
func (r *run) holding(id objectID) []string {
	bound := r.c.unsyncedHold
	if bound <= 0 {
		return nil
	}
	now := r.c.clock.Now()
	h, ok := r.liveHold(id)
	if !ok {
		return r.waitsFor(id, now, bound)
	}
	if now.Sub(h.since) >= bound {
		return nil
	}
	if names, underWay := r.awaits(id, h, now, bound); !underWay {
		return names
	}
	return r.waitsFor(id, now, bound)
}

// awaits names what hold h of owner id waits for at now: what waitsFor
// names once a discovery round begun after the hold completed; the
// discovery itself once such a round failed whole, or the bound came
// first; nothing, with underWay, while the round is under way (it takes
// about a second).
func (r *run) awaits(id objectID, h hold, now time.Time, bound time.Duration) (names []string, underWay bool) {
	if r.roundDone.Load() > h.round {
		return r.waitsFor(id, now, bound), false
	}
	if r.roundFailed.Load() <= h.round && now.Sub(h.since) < bound {
		return nil, true
	}
	return []string{undiscoveredSinceHold}, false
}

// holdFinalizer reports whether owner id's finalizer (orphan or
// foregroundDeletion) must stay for now and, if so, when to look again.
func (r *run) holdFinalizer(id objectID, finalizer string) (outcome, bool) {
	bound := r.c.unsyncedHold
	if bound <= 0 {
		return done, false
	}
	now := r.c.clock.Now()
	r.dropStaleHold(id)
	h := r.holds.get(id.uid, now, r.roundsStarted.Load())
	if h.expired {
		return done, false
	}
	held := now.Sub(h.since)
	if r.roundDone.Load() <= h.round {
		// Not yet a discovery round that began after the hold did.
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
	// Once a round begun after the hold failed whole (or the bound is
	// reached before one completed), the discovery is what the hold waits
	// for, as for any other: warned about, rechecked every holdRecheck and
	// bounded.
	unsynced, underWay := r.awaits(id, h, now, bound)
	if underWay {
		return outcome{after: min(100*time.Millisecond, bound-held)}, true
	}
	if len(unsynced) == 0 {
		r.holds.drop(id.uid)
		return done, false
	}
	list := strings.Join(unsynced, ", ")
	if held >= bound {
		r.holds.expire(id.uid) // dropped once the finalizer is gone
		// Said before the caller decides again: a dependent that came
		// meanwhile keeps the finalizer, and begins a new hold.
		r.logger.Error(nil, "The hold expired: the deletion goes on although the graph may miss dependents",
			"object", id, "finalizer", finalizer, "resources", unsynced, "held", held.Round(time.Second))
		r.warn(id, "UnsyncedResourceHoldExpired", fmt.Sprintf("no longer holding finalizer %s after %s although the owner GC cannot "+
			"see every possible dependent (%s): it goes once no dependent the owner GC sees keeps it; objects there that still "+
			"reference this owner were not seen", finalizer, bound, list))
		return done, false
	}
	if r.holds.report(id.uid, list) {
		r.logger.Info("Keeping the finalizer while the graph may miss dependents", "object", id, "finalizer", finalizer,
			"resources", unsynced, "holdLeft", (bound - held).Round(time.Second))
		r.warn(id, "DependentsUnknown", fmt.Sprintf("keeping finalizer %s: the owner GC cannot see every possible dependent "+
			"(resources that cannot be listed, watched or discovered now, or not synced yet: %s); it waits for them up to %s", finalizer, list, bound))
	}
	return outcome{after: min(holdRecheck, bound-held)}, true
}
