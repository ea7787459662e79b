// Package metricvec makes Prometheus vectors over one label whose values
// are a closed set, from one list: the Help text names every value and
// every value is exported at 0 from the start (so rates work before the
// first event). A new value is added to the list, nowhere else.
package metricvec

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Counter makes a counter vector named name over label. Its Help is help
// followed by " by <label> (<values>)."; every value starts at 0.
func Counter(name, help, label string, values []string) *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: Help(help, label, values)}, []string{label})
	for _, val := range values {
		v.WithLabelValues(val)
	}
	return v
}

// Gauge makes a gauge vector named name over label, as Counter does.
func Gauge(name, help, label string, values []string) *prometheus.GaugeVec {
	v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: Help(help, label, values)}, []string{label})
	for _, val := range values {
		v.WithLabelValues(val)
	}
	return v
}

// Help returns help followed by " by <label> (<values>).".
func Help(help, label string, values []string) string {
	return help + " by " + label + " (" + strings.Join(values, ", ") + ")."
}

// CounterOver makes a counter vector over labels whose values are open
// (methods, resources, codes): nothing to list or start at 0.
func CounterOver(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// Single makes a counter without labels.
func Single(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

// SingleGauge makes a gauge without labels.
func SingleGauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

// Bool is a gauge's value for b: 1 or 0.
func Bool(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
