// Package monitoring holds nodegc's Grafana dashboard (grafana-dashboard.json)
// and Prometheus alert rules (prometheus-rules.yaml, and prometheusrule.yaml
// generated from it for the Prometheus Operator), embedded, and reads the
// queries out of them for the tests: this package's, which parse the rules
// with Prometheus's own parser and make each alert fire on synthetic series,
// and internal/agent's, which check the metric names against what a running
// agent exports and evaluate every query against its metrics.
//
// Nothing here runs in the agent; the files are the product, the Go code is
// their test support.
package monitoring
