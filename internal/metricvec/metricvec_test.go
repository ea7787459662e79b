package metricvec

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestOneListMakesHelpAndZeros: every value is in the Help text and
// exported at 0 before anything is counted.
func TestOneListMakesHelpAndZeros(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := Counter("nodegc_test_removed_total", "Things removed,", "reason", []string{"age", "space"})
	g := Gauge("nodegc_test_kept", "Things kept,", "reason", []string{"in_use"})
	reg.MustRegister(c, g)
	c.WithLabelValues("age").Inc()
	want := `
# HELP nodegc_test_kept Things kept, by reason (in_use).
# TYPE nodegc_test_kept gauge
nodegc_test_kept{reason="in_use"} 0
# HELP nodegc_test_removed_total Things removed, by reason (age, space).
# TYPE nodegc_test_removed_total counter
nodegc_test_removed_total{reason="age"} 1
nodegc_test_removed_total{reason="space"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
