package monitoring

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/promqltest"
)

// TestDashboard: grafana-dashboard.json is a dashboard to import as it is
// (no __inputs; the data source is the variable datasource, the node
// variable comes from the image filesystem gauge); every panel queries
// ${datasource}; every target parses with Prometheus's parser, and selects
// only nodegc metrics that README.md's metrics reference lists (the rules
// also up, which Prometheus writes for every target).
func TestDashboard(t *testing.T) {
	d, err := ParseDashboard()
	if err != nil {
		t.Fatal(err)
	}
	if d.Inputs != nil {
		t.Error("the dashboard has __inputs: it would need an import step")
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 {
		t.Errorf("uid %q, title %q, schemaVersion %d", d.UID, d.Title, d.SchemaVersion)
	}
	if !strings.Contains(d.Description, "__meta_kubernetes_pod_node_name") {
		t.Error("the description does not say where the node label comes from")
	}
	vars := map[string]Variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if ds := vars["datasource"]; ds.Type != "datasource" || string(ds.Query) != `"prometheus"` {
		t.Errorf("variable datasource: type %q query %s, want a prometheus datasource variable", ds.Type, ds.Query)
	}
	if n := vars["node"]; n.Type != "query" || n.Definition != "label_values(nodegc_image_fs_usage_percent, node)" {
		t.Errorf("variable node: type %q definition %q", n.Type, n.Definition)
	}
	var walk func([]Panel)
	walk = func(panels []Panel) {
		for _, p := range panels {
			if p.Type != "row" {
				var ds struct{ Type, UID string }
				if err := json.Unmarshal(p.Datasource, &ds); err != nil || ds.Type != "prometheus" || ds.UID != "${datasource}" {
					t.Errorf("panel %q: datasource %s, want prometheus ${datasource}", p.Title, p.Datasource)
				}
				if len(p.Targets) == 0 {
					t.Errorf("panel %q has no target", p.Title)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)

	queries, err := DashboardQueries(DashboardVars)
	if err != nil {
		t.Fatal(err)
	}
	ruleQueries, err := RuleQueries()
	if err != nil {
		t.Fatal(err)
	}
	documented := readmeMetrics(t)
	for _, q := range append(queries, ruleQueries...) {
		expr, err := PromQL.ParseExpr(q.Expr)
		if err != nil {
			t.Errorf("%s: %v", q.Where, err)
			continue
		}
		for _, name := range MetricNames(expr, documented) {
			if !documented[name] && !TargetSeries[name] {
				t.Errorf("%s selects %s, which README.md's metrics reference does not list", q.Where, name)
			}
		}
	}
}

// readmeMetrics returns the nodegc metric names README.md's metrics
// reference names (`nodegc_...`).
func readmeMetrics(t *testing.T) map[string]bool {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(readme), "\n## Metrics\n")
	table, _, _ = strings.Cut(table, "\n## ")
	names := map[string]bool{}
	for _, m := range regexp.MustCompile("`(nodegc_[a-z_]+)").FindAllStringSubmatch(table, -1) {
		names[m[1]] = true
	}
	return names
}

// TestDashboardRuntimeConnectedIgnoresStandby: the "runtime connected"
// panel shows, per node, the value of the agent that runs node GC there: a
// second agent on standby (nodegc_node_gc_standby 1, which exports
// nodegc_cri_connected 0 as it dials nothing) does not make a node whose
// holder is connected show as disconnected, as NodegcRuntimeUnreachable
// leaves standby agents out; a holder that is not connected still shows 0.
func TestDashboardRuntimeConnectedIgnoresStandby(t *testing.T) {
	queries, err := DashboardQueries(DashboardVars)
	if err != nil {
		t.Fatal(err)
	}
	var expr string
	for _, q := range queries {
		if strings.Contains(q.Expr, "nodegc_cri_connected") {
			expr = q.Expr
		}
	}
	if expr == "" {
		t.Fatal("no panel queries nodegc_cri_connected")
	}
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	for name, tc := range map[string]struct {
		series string
		want   float64
	}{
		"holder connected, a second agent on standby": {series: `nodegc_cri_connected{node="n1",pod="holder"} 1x5
			nodegc_node_gc_standby{node="n1",pod="holder"} 0x5
			nodegc_cri_connected{node="n1",pod="second"} 0x5
			nodegc_node_gc_standby{node="n1",pod="second"} 1x5`, want: 1},
		"holder not connected, a second agent on standby": {series: `nodegc_cri_connected{node="n1",pod="holder"} 0x5
			nodegc_node_gc_standby{node="n1",pod="holder"} 0x5
			nodegc_cri_connected{node="n1",pod="second"} 0x5
			nodegc_node_gc_standby{node="n1",pod="second"} 1x5`, want: 0},
		"one agent, connected": {series: `nodegc_cri_connected{node="n1",pod="holder"} 1x5
			nodegc_node_gc_standby{node="n1",pod="holder"} 0x5`, want: 1},
	} {
		t.Run(name, func(t *testing.T) {
			got := evalAtEnd(t, engine, tc.series, expr)
			if len(got) != 1 || got[0].F != tc.want {
				t.Errorf("%s = %v, want one series at %v", expr, got, tc.want)
			}
		})
	}
}
