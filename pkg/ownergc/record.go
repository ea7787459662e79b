package ownergc

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// decisionRecord is the answer to "why was this deleted?": one per action, logged
// once when the action succeeded (or, in dry-run, when it was decided).
type decisionRecord struct {
	action    actionKind
	policy    metav1.DeletionPropagation // actDelete
	finalizer string                     // actRemoveFinalizer
	rule      string
	owners    []ownerRecord
}

// ownerRecord is one owner reference as the decision saw it. Namespace is
// set only when the graph observed the owner in another namespace than
// the object's (the reference is dangling then).
type ownerRecord struct {
	APIVersion         string    `json:"apiVersion"`
	Kind               string    `json:"kind"`
	Namespace          string    `json:"namespace,omitempty"`
	Name               string    `json:"name"`
	UID                types.UID `json:"uid"`
	BlockOwnerDeletion bool      `json:"blockOwnerDeletion,omitempty"`
	Class              string    `json:"class"`
	Reason             string    `json:"reason"`
}

func (o ownerRecord) String() string {
	return fmt.Sprintf("%s/%s %s (uid %s): %s, %s", o.APIVersion, o.Kind, o.Name, o.UID, o.Class, o.Reason)
}

// ownerRecords records the classified owner references of an object in
// namespace ns.
func ownerRecords(ns string, refs []classifiedRef) []ownerRecord {
	out := make([]ownerRecord, 0, len(refs))
	for _, r := range refs {
		rec := ownerRecord{APIVersion: r.apiVersion, Kind: r.kind, Name: r.name, UID: r.uid,
			BlockOwnerDeletion: r.block, Class: r.class.String(), Reason: r.reason}
		if observed, ok := r.observedNamespace(); ok && observed != "" && observed != ns {
			rec.Namespace = observed
		}
		out = append(out, rec)
	}
	return out
}

// record counts and logs an action that succeeded.
func (r *run) record(id objectID, rec decisionRecord) {
	r.c.metrics.actions.WithLabelValues(rec.action.String(), rec.rule).Inc()
	r.logRecord(id, rec, false)
}

// recordDryRun counts and logs a decided action, once per object, action
// and rule in a run.
func (r *run) recordDryRun(id objectID, rec decisionRecord) {
	key := struct {
		uid    types.UID
		action actionKind
		rule   string
	}{id.uid, rec.action, rec.rule}
	if _, seen := r.recorded.LoadOrStore(key, struct{}{}); seen {
		return
	}
	r.c.metrics.dryRunActions.WithLabelValues(rec.action.String(), rec.rule).Inc()
	r.logRecord(id, rec, true)
}

func (r *run) logRecord(id objectID, rec decisionRecord, dryRun bool) {
	kv := make([]any, 0, 20) // room for every pair: appending never copies
	kv = append(kv, "object", klog.KRef(id.namespace, id.name), "apiVersion", id.apiVersion, "kind", id.kind,
		"uid", id.uid, "action", rec.action.String())
	if rec.policy != "" {
		kv = append(kv, "propagationPolicy", string(rec.policy))
	}
	if rec.finalizer != "" {
		kv = append(kv, "finalizer", rec.finalizer)
	}
	kv = append(kv, "rule", rec.rule, "owners", rec.owners, "dryRun", dryRun)
	r.logger.Info("Owner GC action", kv...)
	r.c.records.add(r.c.clock.Now(), id, rec, dryRun)
	if h := r.c.hooks.onRecord; h != nil {
		h(id, rec, dryRun)
	}
}

// Bounds of the records kept for explain: a record goes once it is
// recordKeepAge old, or when recordKeepCount newer ones are kept (the oldest
// go first). A record takes a few hundred bytes, so the store holds at most
// a few megabytes.
const (
	recordKeepAge   = time.Hour
	recordKeepCount = 10000
)

// keptRecord is a decision record as the store keeps it.
type keptRecord struct {
	seq    uint64
	at     time.Time
	id     objectID
	rec    decisionRecord
	dryRun bool
}

// recordName indexes records by the object's name: group, kind, namespace
// and name (not the version: an object is the same in every version).
type recordName struct{ group, kind, namespace, name string }

func recordNameOf(id objectID) recordName {
	return recordName{group: id.groupKind().Group, kind: id.kind, namespace: id.namespace, name: id.name}
}

// recordStore keeps the recent decision records for explain, by object UID
// and by name (an object deleted and recreated under its name has records
// under both UIDs). It lives on the Collector, so a new Run keeps them. The
// zero value is ready, with the bounds recordKeepAge and recordKeepCount.
// Workers add, explain reads; mu guards the store whole.
type recordStore struct {
	// maxAge and maxCount override the bounds (tests); zero: the defaults.
	maxAge   time.Duration
	maxCount int

	mu      sync.Mutex
	seq     uint64
	records []*keptRecord // oldest first
	byUID   map[types.UID][]*keptRecord
	byName  map[recordName][]*keptRecord
}

func (s *recordStore) bounds() (time.Duration, int) {
	age, count := s.maxAge, s.maxCount
	if age <= 0 {
		age = recordKeepAge
	}
	if count <= 0 {
		count = recordKeepCount
	}
	return age, count
}

// add keeps a record made at now and drops what the bounds exclude.
func (s *recordStore) add(now time.Time, id objectID, rec decisionRecord, dryRun bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byUID == nil {
		s.byUID = map[types.UID][]*keptRecord{}
		s.byName = map[recordName][]*keptRecord{}
	}
	s.seq++
	kr := &keptRecord{seq: s.seq, at: now, id: id, rec: rec, dryRun: dryRun}
	s.records = append(s.records, kr)
	s.byUID[id.uid] = append(s.byUID[id.uid], kr)
	name := recordNameOf(id)
	s.byName[name] = append(s.byName[name], kr)
	s.pruneLocked(now)
}

// pruneLocked drops the records older than the age bound and the oldest
// beyond the count bound. Records are added in time order, so the oldest
// of the store is also the oldest of its UID and of its name.
func (s *recordStore) pruneLocked(now time.Time) {
	maxAge, maxCount := s.bounds()
	for len(s.records) > 0 && (len(s.records) > maxCount || !s.records[0].at.After(now.Add(-maxAge))) {
		kr := s.records[0]
		s.records[0] = nil
		s.records = s.records[1:]
		dropFirst(s.byUID, kr.id.uid, kr)
		dropFirst(s.byName, recordNameOf(kr.id), kr)
	}
	if len(s.records) == 0 {
		s.records = nil // let the backing array go
	}
}

func dropFirst[K comparable](index map[K][]*keptRecord, key K, kr *keptRecord) {
	l := index[key]
	if len(l) == 0 || l[0] != kr {
		return
	}
	if len(l) == 1 {
		delete(index, key)
		return
	}
	l[0] = nil
	index[key] = l[1:]
}

// find returns copies of the records kept about uid or about the object
// named like id (group, kind, namespace, name; id.uid is not used), oldest
// first. An empty uid or name matches nothing.
func (s *recordStore) find(now time.Time, uid types.UID, id objectID) []keptRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneLocked(now)
	var found []*keptRecord
	if uid != "" {
		found = append(found, s.byUID[uid]...)
	}
	if id.name != "" {
		found = append(found, s.byName[recordNameOf(id)]...)
	}
	slices.SortFunc(found, func(a, b *keptRecord) int { return cmp.Compare(a.seq, b.seq) })
	found = slices.Compact(found)
	out := make([]keptRecord, 0, len(found))
	for _, kr := range found {
		out = append(out, *kr)
	}
	return out
}

func (s *recordStore) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}

// warn records a Warning Event on id (not in dry-run: nothing is written).
func (r *run) warn(id objectID, reason, message string) {
	if r.c.dryRun {
		return
	}
	ref := &corev1.ObjectReference{Kind: id.kind, APIVersion: id.apiVersion, Namespace: id.namespace, Name: id.name, UID: id.uid}
	r.recorder.Event(ref, corev1.EventTypeWarning, reason, message)
}
