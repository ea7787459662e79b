package ownergc

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/textlogger"
)

// TestUndecidedItemsCountedAndLogged: an object whose owner reference
// cannot be classified, its owner's kind unknown to discovery (a typo, an
// API removed) or its owner's lookup failing (RBAC, an aggregated API
// down), is neither deleted nor kept for good. It counts in
// nodegc_owner_gc_undecided_items by reason while it waits, and is logged
// once per run at the default verbosity; it leaves the gauge once decided
// or gone. Before, nothing counted it, and only V(2) and V(4) lines said
// so.
func TestUndecidedItemsCountedAndLogged(t *testing.T) {
	s := newRejectServer(t)
	r, tg, reg, _ := rejectRun(t, s)
	logs := &syncBuffer{}
	r.logger = textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(logs), textlogger.Verbosity(0)))
	r.c.current.Store(r) // the gauge reads the current run
	ns := rejectNamespace
	nope := object(ns, "nope", "nope")
	nope.OwnerReferences = []metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "Nope", Name: "n", UID: "n-1"}}
	// unseen's owner was never observed: a GET decides, and the server
	// answers it 400 until it knows the owner.
	unseen := object(ns, "unseen", "unseen", ownedBy(resConfigMap, "owner-unseen", "owner-unseen", false))
	tg.apply(upsert(resConfigMap, nope), upsert(resConfigMap, unseen))
	undecided := func() map[string]float64 {
		return counterByLabel(t, reg, "nodegc_owner_gc_undecided_items", "reason")
	}
	if got := undecided(); len(got) != 2 || got["unknown-kind"] != 0 || got["lookup-error"] != 0 {
		t.Errorf("undecided items before any = %v, want both reasons at 0", got)
	}

	for range 2 {
		if out := processItem(t, r, "nope"); out != done {
			t.Errorf("nope: outcome %+v, want done (parked until discovery knows the kind)", out)
		}
		if out := processItem(t, r, "unseen"); out != retry {
			t.Errorf("unseen: outcome %+v, want a retry with backoff", out)
		}
	}
	if got := undecided(); got["unknown-kind"] != 1 || got["lookup-error"] != 1 {
		t.Errorf("undecided items = %v, want 1 unknown-kind and 1 lookup-error", got)
	}
	for _, want := range []string{"ConfigMap reject/nope (uid nope)", "ConfigMap reject/unseen (uid unseen)"} {
		if n := strings.Count(logs.String(), want); n != 1 {
			t.Errorf("%d lines at the default verbosity about %s after two attempts, want 1:\n%s", n, want, logs.String())
		}
	}

	// unseen's owner is found: kept, decided. nope goes: forgotten.
	s.refuse("owner-unseen", answerPolicyDenied("owner-unseen"), object(ns, "owner-unseen", "owner-unseen"))
	processItem(t, r, "unseen")
	tg.apply(del(resConfigMap, nope))
	r.attemptToDelete(t.Context(), "nope")
	if got := undecided(); got["unknown-kind"] != 0 || got["lookup-error"] != 0 {
		t.Errorf("undecided items once decided or gone = %v, want none", got)
	}
}
