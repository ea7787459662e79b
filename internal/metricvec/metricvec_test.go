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

// TestOpenAndSingle: the constructors without a value list keep the name
// and Help given, and export nothing until used.
func TestOpenAndSingle(t *testing.T) {
	reg := prometheus.NewRegistry()
	v := CounterOver("nodegc_test_calls_total", "Calls, by method.", "method")
	c := Single("nodegc_test_reconnects_total", "Reconnects.")
	g := SingleGauge("nodegc_test_connected", "1 while connected.")
	reg.MustRegister(v, c, g)
	v.WithLabelValues("Version").Inc()
	g.Set(1)
	want := `
# HELP nodegc_test_calls_total Calls, by method.
# TYPE nodegc_test_calls_total counter
nodegc_test_calls_total{method="Version"} 1
# HELP nodegc_test_connected 1 while connected.
# TYPE nodegc_test_connected gauge
nodegc_test_connected 1
# HELP nodegc_test_reconnects_total Reconnects.
# TYPE nodegc_test_reconnects_total counter
nodegc_test_reconnects_total 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
