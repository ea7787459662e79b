package ownergc

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestActionErrorsExportedAtZero: the write errors are exported at 0 for
// every write action from the start, and the Help lists those actions, so
// that increase() in NodegcOwnerGCActionErrors sees an action's first
// failure (it does not count a series' first sample).
func TestActionErrorsExportedAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	newMetrics(reg, &Collector{})
	want := `
# HELP nodegc_owner_gc_action_errors_total Writes of the owner GC that failed for another reason than a changed or missing object, by action (delete, remove-owner-references, unblock-owner-references, remove-finalizer, orphan-dependent).
# TYPE nodegc_owner_gc_action_errors_total counter
nodegc_owner_gc_action_errors_total{action="delete"} 0
nodegc_owner_gc_action_errors_total{action="orphan-dependent"} 0
nodegc_owner_gc_action_errors_total{action="remove-finalizer"} 0
nodegc_owner_gc_action_errors_total{action="remove-owner-references"} 0
nodegc_owner_gc_action_errors_total{action="unblock-owner-references"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "nodegc_owner_gc_action_errors_total"); err != nil {
		t.Error(err)
	}
}
