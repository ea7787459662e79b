package monitoring

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

var (
	//go:embed prometheus-rules.yaml
	rulesYAML []byte
	//go:embed prometheusrule.yaml
	prometheusRuleYAML []byte
	//go:embed grafana-dashboard.json
	dashboardJSON []byte
)

// RulesFile returns prometheus-rules.yaml, the one source of the alert rules.
func RulesFile() []byte { return bytes.Clone(rulesYAML) }

// PrometheusRuleFile returns prometheusrule.yaml as it is in the repository.
func PrometheusRuleFile() []byte { return bytes.Clone(prometheusRuleYAML) }

// DashboardFile returns grafana-dashboard.json.
func DashboardFile() []byte { return bytes.Clone(dashboardJSON) }

// PromQL is the parser the tests use: Prometheus's, with its defaults (no
// experimental functions).
var PromQL = parser.NewParser(parser.Options{})

// ParseRules parses a rule file with Prometheus's own loader (rulefmt,
// unknown fields rejected, expressions and templates validated).
func ParseRules(content []byte) (*rulefmt.RuleGroups, error) {
	groups, errs := rulefmt.Parse(content, false, model.UTF8Validation, PromQL, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return groups, nil
}

// Query is one PromQL expression of the dashboard or the rules.
type Query struct {
	// Where names it: "rule NodegcRuntimeUnreachable", or "panel <title>
	// target A".
	Where string
	Expr  string
}

// RuleQueries returns the expression of every rule in prometheus-rules.yaml.
func RuleQueries() ([]Query, error) {
	groups, err := ParseRules(rulesYAML)
	if err != nil {
		return nil, err
	}
	var out []Query
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			name := r.Alert
			if name == "" {
				name = r.Record
			}
			out = append(out, Query{Where: "rule " + name, Expr: r.Expr})
		}
	}
	return out, nil
}

// TargetSeries are the series Prometheus writes itself for every scrape
// target, not the agent: the alerts on an agent that is not running or not
// scraped select up. Neither the agent exports them nor README.md's metrics
// reference lists them.
var TargetSeries = map[string]bool{"up": true}

// Dashboard is the part of a Grafana dashboard the tests read.
type Dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Description   string  `json:"description"`
	Panels        []Panel `json:"panels"`
	Templating    struct {
		List []Variable `json:"list"`
	} `json:"templating"`
	Inputs json.RawMessage `json:"__inputs"`
}

// Panel is a dashboard panel; a row holds its panels when collapsed.
type Panel struct {
	Title      string          `json:"title"`
	Type       string          `json:"type"`
	Datasource json.RawMessage `json:"datasource"`
	Targets    []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []Panel `json:"panels"`
}

// Variable is a templating variable.
type Variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Definition string          `json:"definition"`
}

// ParseDashboard decodes grafana-dashboard.json.
func ParseDashboard() (*Dashboard, error) {
	var d Dashboard
	dec := json.NewDecoder(bytes.NewReader(dashboardJSON))
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("grafana-dashboard.json: %w", err)
	}
	return &d, nil
}

// DashboardVars are values for the dashboard's variables that make its
// queries valid PromQL: all nodes, and a rate interval of four 15-second
// scrapes.
var DashboardVars = map[string]string{"$node": ".*", "$__rate_interval": "1m"}

// DashboardQueries returns every panel target's expression (rows' panels
// included), with Grafana's variables replaced by vars (for example
// "$__rate_interval": "1m"); it fails on a variable vars does not name.
func DashboardQueries(vars map[string]string) ([]Query, error) {
	d, err := ParseDashboard()
	if err != nil {
		return nil, err
	}
	// Longest first, so that $node does not replace part of $nodes.
	names := make([]string, 0, len(vars))
	for name := range vars {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int { return len(b) - len(a) })
	var out []Query
	var walk func([]Panel) error
	walk = func(panels []Panel) error {
		for _, p := range panels {
			for _, t := range p.Targets {
				expr := t.Expr
				for _, name := range names {
					expr = strings.ReplaceAll(expr, name, vars[name])
				}
				if strings.Contains(expr, "$") {
					return fmt.Errorf("panel %q target %s: a variable is left in %q", p.Title, t.RefID, expr)
				}
				out = append(out, Query{Where: fmt.Sprintf("panel %q target %s", p.Title, t.RefID), Expr: expr})
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	return out, walk(d.Panels)
}

// MetricNames returns the metric names an expression selects, sorted, each
// once; a histogram's _bucket, _sum and _count series are named by their
// family when families holds it (nil: names as written).
func MetricNames(expr parser.Expr, families map[string]bool) []string {
	var names []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
				names = append(names, Family(m.Value, families))
			}
		}
		return nil
	})
	slices.Sort(names)
	return slices.Compact(names)
}

// Family maps a series name to its family: name itself, or name without
// _bucket, _sum or _count when families holds that.
func Family(name string, families map[string]bool) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && families[base] {
			return base
		}
	}
	return name
}

// prometheusRuleHeader precedes the rule file's groups, indented under spec,
// in prometheusrule.yaml.
const prometheusRuleHeader = `# Generated from prometheus-rules.yaml (the one source; its comments explain the rules) by
#   go test ./deploy/monitoring -run TestPrometheusRule -update
# Do not edit. Add the labels your Prometheus's ruleSelector selects (kube-prometheus-stack: release), and a
# namespace, when applying it (README, Monitoring), or render it with the Helm chart (metrics.prometheusRule).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: nodegc
  labels:
    app.kubernetes.io/name: nodegc
spec:
`

// PrometheusRule renders the Prometheus Operator's PrometheusRule whose spec
// is the rule file's groups: the file from its "groups:" line on, indented
// (comments and all), under a fixed header.
func PrometheusRule(rules []byte) ([]byte, error) {
	i := bytes.Index(rules, []byte("\ngroups:"))
	if i < 0 {
		return nil, errors.New(`rule file: no top-level "groups:" line`)
	}
	var b bytes.Buffer
	b.WriteString(prometheusRuleHeader)
	for line := range strings.Lines(string(rules[i+1:])) {
		if strings.TrimSpace(line) != "" {
			b.WriteString("  ")
		}
		b.WriteString(line)
	}
	return b.Bytes(), nil
}
