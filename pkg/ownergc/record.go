package ownergc

import (
	"fmt"

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

// ownerRecord is one owner reference as the decision saw it.
type ownerRecord struct {
	APIVersion         string    `json:"apiVersion"`
	Kind               string    `json:"kind"`
	Name               string    `json:"name"`
	UID                types.UID `json:"uid"`
	BlockOwnerDeletion bool      `json:"blockOwnerDeletion,omitempty"`
	Class              string    `json:"class"`
	Reason             string    `json:"reason"`
}

func (o ownerRecord) String() string {
	return fmt.Sprintf("%s/%s %s (uid %s): %s, %s", o.APIVersion, o.Kind, o.Name, o.UID, o.Class, o.Reason)
}

func ownerRecords(refs []classifiedRef) []ownerRecord {
	out := make([]ownerRecord, 0, len(refs))
	for _, r := range refs {
		out = append(out, ownerRecord{APIVersion: r.apiVersion, Kind: r.kind, Name: r.name, UID: r.uid,
			BlockOwnerDeletion: r.block, Class: r.class.String(), Reason: r.reason})
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
	kv := []any{"object", klog.KRef(id.namespace, id.name), "apiVersion", id.apiVersion, "kind", id.kind,
		"uid", id.uid, "action", rec.action.String()}
	if rec.policy != "" {
		kv = append(kv, "propagationPolicy", string(rec.policy))
	}
	if rec.finalizer != "" {
		kv = append(kv, "finalizer", rec.finalizer)
	}
	kv = append(kv, "rule", rec.rule, "owners", rec.owners, "dryRun", dryRun)
	r.logger.Info("Owner GC action", kv...)
	if h := r.c.hooks.onRecord; h != nil {
		h(id, rec, dryRun)
	}
}
