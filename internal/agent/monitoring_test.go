package agent_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/teststorage"

	"github.com/nodegc/nodegc/deploy/monitoring"
	"github.com/nodegc/nodegc/internal/agent"
	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/config"
)

// checkMonitoring checks deploy/monitoring's dashboard and alert rules
// against a running agent: scrape is its /metrics, configYAML its
// configuration, node its node name. Every metric they select is one the
// agent exports: a family in the scrape, or one the agent registers (a
// vector without children is absent from a scrape; see
// agent.RegisteredFamilies). Every expression, evaluated once by
// Prometheus's engine over the scrape loaded as series (four samples 15s
// apart, counters growing to their scraped values, so that rate() has
// something to work with), gives no error; the usage and threshold gauges
// the dashboard plots have data, and the alerts whose condition the agent is
// known not to meet (it is connected, leading and synced) select nothing.
func checkMonitoring(t *testing.T, scrape, configYAML, kubeconfig, node string) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(scrape))
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := config.Decode([]byte(configYAML))
	if err != nil {
		t.Fatal(err)
	}
	exported, err := agent.RegisteredFamilies(t.Context(), agent.Options{Config: loaded.Config, Kubeconfig: kubeconfig,
		OwnerGC: agent.OwnerGCAuto, NodeName: node})
	if err != nil {
		t.Fatal(err)
	}
	var unscraped []string // registered, no series yet
	for name := range exported {
		if families[name] == nil && strings.HasPrefix(name, "nodegc_") {
			unscraped = append(unscraped, name)
		}
	}
	for name := range families {
		exported[name] = true
	}
	for name := range monitoring.TargetSeries { // Prometheus's own, loaded below
		exported[name] = true
	}

	rules, err := monitoring.RuleQueries()
	if err != nil {
		t.Fatal(err)
	}
	vars := maps.Clone(monitoring.DashboardVars)
	vars["$node"] = node
	panels, err := monitoring.DashboardQueries(vars)
	if err != nil {
		t.Fatal(err)
	}

	now := time.Unix(1_800_000_000, 0)
	db := teststorage.New(t)
	// The target labels the chart's PodMonitor gives a node agent.
	target := map[string]string{"job": "nodegc", "instance": "127.0.0.1:8080", "namespace": "kube-system", "pod": "nodegc-" + node, "node": node,
		"component": "node"}
	if err := loadScrape(t, db, families, target, now, 4, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	t.Cleanup(func() { engine.Close() })
	eval := func(q monitoring.Query) (promql.Vector, error) {
		query, err := engine.NewInstantQuery(t.Context(), db, nil, q.Expr, now)
		if err != nil {
			return nil, err
		}
		defer query.Close()
		res := query.Exec(t.Context())
		if res.Err != nil {
			return nil, res.Err
		}
		return res.Vector()
	}

	mustHaveData := map[string]bool{
		`panel "Image filesystem usage and thresholds" target A`:        true,
		`panel "Image filesystem usage and thresholds" target B`:        true,
		`panel "Runtime connected and pod view authoritative" target A`: true,
		`panel "Owner GC leader and synced" target C`:                   true,
	}
	mustNotFire := map[string]bool{"rule NodegcRuntimeUnreachable": true, "rule NodegcOwnerGCNoSyncedLeader": true,
		"rule NodegcImageGCFailing": true, "rule NodegcOwnerGCActionErrors": true,
		"rule NodegcNodeAgentDown": true, "rule NodegcNodeAgentsAbsent": true,
		"rule NodegcContainerGCFailing": true, "rule NodegcImageStateSavesFailing": true,
		"rule NodegcNodeAgentOnStandby": true, "rule NodegcOwnerGCMonitorsFailing": true,
		"rule NodegcPodLogsUnseen": true}
	var empty []string
	for _, q := range append(rules, panels...) {
		expr, err := monitoring.PromQL.ParseExpr(q.Expr)
		if err != nil {
			t.Errorf("%s: %v", q.Where, err)
			continue
		}
		for _, name := range monitoring.MetricNames(expr, exported) {
			if !exported[name] {
				t.Errorf("%s selects %s, which the agent does not export", q.Where, name)
			}
		}
		v, err := eval(q)
		switch {
		case err != nil:
			t.Errorf("%s: evaluating %s: %v", q.Where, q.Expr, err)
		case len(v) == 0:
			empty = append(empty, q.Where)
			if mustHaveData[q.Where] {
				t.Errorf("%s: no data from %s", q.Where, q.Expr)
			}
		case mustNotFire[q.Where]:
			t.Errorf("%s fires on a healthy agent: %v", q.Where, v)
		}
	}
	if thresholds := families["nodegc_image_gc_threshold_percent"]; len(thresholds.GetMetric()) != 3 {
		t.Errorf("nodegc_image_gc_threshold_percent has %d series, want high, low and eviction (evictionHard's default)", len(thresholds.GetMetric()))
	}
	slices.Sort(unscraped)
	t.Logf("nodegc families registered but not in the scrape: %s", strings.Join(unscraped, ", "))
	t.Logf("%d rule and %d dashboard expressions evaluated; empty on this agent: %s", len(rules), len(panels), strings.Join(empty, "; "))
}

// loadScrape appends the scraped families to db as series with the target's
// labels, and the target's up at 1 (Prometheus writes it for every scrape):
// n samples step apart ending at end. Gauges (and summaries'
// quantiles) keep their value; counters, histograms and summaries grow
// linearly from 1/n of their value to it. The series are the text format's,
// as testbed.Samples lists them (a histogram's +Inf bucket included).
func loadScrape(t *testing.T, db storage.Appendable, families map[string]*dto.MetricFamily, target map[string]string, end time.Time, n int, step time.Duration) error {
	app := db.Appender(t.Context())
	for i := range n {
		ts := end.Add(-time.Duration(n-1-i) * step).UnixMilli()
		grow := float64(i+1) / float64(n)
		up := labels.NewBuilder(labels.FromMap(target))
		up.Set(model.MetricNameLabel, "up")
		if _, err := app.Append(0, up.Labels(), ts, 1); err != nil {
			return fmt.Errorf("up: %w", err)
		}
		for _, name := range slices.Sorted(maps.Keys(families)) {
			f := families[name]
			switch f.GetType() {
			case dto.MetricType_COUNTER, dto.MetricType_GAUGE, dto.MetricType_UNTYPED, dto.MetricType_HISTOGRAM, dto.MetricType_SUMMARY:
			default:
				return fmt.Errorf("%s: type %s not loaded", name, f.GetType())
			}
			for _, s := range testbed.Samples([]*dto.MetricFamily{f}) {
				v := s.Value
				_, quantile := s.Labels[model.QuantileLabel]
				if typ := f.GetType(); typ != dto.MetricType_GAUGE && typ != dto.MetricType_UNTYPED && !quantile {
					v *= grow
				}
				b := labels.NewBuilder(labels.FromMap(target))
				for k, lv := range s.Labels {
					b.Set(k, lv)
				}
				b.Set(model.MetricNameLabel, s.Name)
				if _, err := app.Append(0, b.Labels(), ts, v); err != nil {
					return fmt.Errorf("%s: %w", s.Name, err)
				}
			}
		}
	}
	return app.Commit()
}
