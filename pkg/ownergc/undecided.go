package ownergc

import (
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"
)

// Undecided items: an object with an owner reference that cannot be
// classified now is neither deleted nor kept for good; it waits. Either
// the owner's kind is unknown to discovery (a typo, an API removed in an
// upgrade, an aggregated API down since before this process started: the
// item is parked until a discovery round), or the owner's lookup fails
// (RBAC denies get on the owner's kind, throttling, an aggregated API
// down: retried with the item's backoff). Each attempt is logged at V(2)
// or V(4) only, as it may repeat for as long as the cause lasts. So that
// such an object is not left behind in silence, it counts in
// nodegc_owner_gc_undecided_items by reason while it waits, and is logged
// once per run and reason at the default verbosity.

// Reasons of an undecided item (the gauge's label values).
const (
	undecidedUnknownKind = "unknown-kind" // an owner's kind is unknown to discovery
	undecidedLookupError = "lookup-error" // an owner's lookup failed
)

var undecidedReasons = []string{undecidedUnknownKind, undecidedLookupError}

// undecidedSet holds the undecided items of a run and the reasons each was
// logged for.
type undecidedSet struct {
	// marked: an item was marked in this run. Until one is, decided and
	// forget take no lock: they are called for every item a worker
	// decides, and there is normally nothing to drop.
	marked atomic.Bool
	mu     sync.Mutex
	items  map[types.UID]undecidedState
	logged map[undecidedItem]struct{}
}

// undecidedState is why an item is undecided: the reason, and the error
// that says which owner reference and how.
type undecidedState struct {
	reason string
	err    string
}

type undecidedItem struct {
	uid    types.UID
	reason string
}

// mark records uid as undecided for reason, as err says. It reports
// whether uid was not marked for reason before in this run (and so is to
// be logged).
func (s *undecidedSet) mark(uid types.UID, reason string, err error) (first bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.items == nil {
		s.items, s.logged = map[types.UID]undecidedState{}, map[undecidedItem]struct{}{}
		s.marked.Store(true)
	}
	s.items[uid] = undecidedState{reason: reason, err: err.Error()}
	key := undecidedItem{uid, reason}
	if _, seen := s.logged[key]; seen {
		return false
	}
	s.logged[key] = struct{}{}
	return true
}

// decided records that uid is decided, or needs no decision.
func (s *undecidedSet) decided(uid types.UID) {
	if !s.marked.Load() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.items, uid)
}

// forget drops uid, gone from the graph, with what was logged about it.
func (s *undecidedSet) forget(uid types.UID) {
	if !s.marked.Load() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.items, uid)
	for _, reason := range undecidedReasons {
		delete(s.logged, undecidedItem{uid, reason})
	}
}

// counts returns the undecided items by reason.
func (s *undecidedSet) counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(undecidedReasons))
	for _, st := range s.items {
		out[st.reason]++
	}
	return out
}

// lookupError returns the error of uid's owner lookup, if uid is
// undecided because one fails.
func (s *undecidedSet) lookupError(uid types.UID) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.items[uid]
	if !ok || st.reason != undecidedLookupError {
		return "", false
	}
	return st.err, true
}

// noteUndecided marks v's object undecided for reason, logging it the first
// time in this run.
func (r *run) noteUndecided(id objectID, reason string, err error) {
	if !r.undecided.mark(id.uid, reason, err) {
		return
	}
	switch reason {
	case undecidedUnknownKind:
		r.logger.Info("Owner kind unknown to discovery: the object is neither deleted nor kept until a discovery round "+
			"knows it", "object", id, "err", err)
	default:
		r.logger.Info("Cannot look up an owner: the object is neither deleted nor kept until a lookup succeeds; "+
			"retrying with backoff", "object", id, "err", err)
	}
}
