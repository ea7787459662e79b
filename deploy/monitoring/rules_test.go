package monitoring

import (
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/template"
	"go.yaml.in/yaml/v3"

	"github.com/nodegc/nodegc/pkg/containers"
)

var update = flag.Bool("update", false, "write prometheusrule.yaml, and the Helm chart's copy of the rules, from prometheus-rules.yaml")

// chartRules is the Helm chart's copy of prometheus-rules.yaml, which its
// PrometheusRule (metrics.prometheusRule.enabled) is rendered from: a chart
// reads no file outside its directory.
const chartRules = "../helm/nodegc/files/prometheus-rules.yaml"

// TestRulesParse: prometheus-rules.yaml loads with Prometheus's own rule
// loader, and every alert has a for duration, a severity, and summary,
// description and runbook annotations: the description names a metric its
// expression selects, the runbook a section of README.md.
func TestRulesParse(t *testing.T) {
	groups, readme := rulesAndReadme(t)
	anchors := readmeAnchors(readme)
	alerts := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			t.Run(r.Alert, func(t *testing.T) {
				if r.For == 0 {
					t.Error("no for: a single bad evaluation would page")
				}
				if s := r.Labels["severity"]; s != "warning" && s != "critical" {
					t.Errorf("severity %q, want warning or critical", s)
				}
				for _, a := range []string{"summary", "description", "runbook"} {
					if r.Annotations[a] == "" {
						t.Errorf("no %s annotation", a)
					}
				}
				expr, err := PromQL.ParseExpr(r.Expr)
				if err != nil {
					t.Fatal(err)
				}
				names := MetricNames(expr, nil)
				if !slices.ContainsFunc(names, func(n string) bool { return strings.Contains(r.Annotations["description"], n) }) {
					t.Errorf("description names none of the metrics %v", names)
				}
				for _, m := range regexp.MustCompile(`README\.md#([a-z0-9-]+)`).FindAllStringSubmatch(r.Annotations["runbook"], -1) {
					if !anchors[m[1]] {
						t.Errorf("runbook points to README.md#%s, which has no such section", m[1])
					}
				}
				if !strings.Contains(r.Annotations["runbook"], "README.md#") {
					t.Errorf("runbook %q points to no README.md section", r.Annotations["runbook"])
				}
			})
		}
	}
	if alerts == 0 {
		t.Fatal("no alerts")
	}
	var inRules []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				inRules = append(inRules, r.Alert)
			}
		}
	}
	var inTable []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(Nodegc[A-Za-z]+)` \\|").FindAllStringSubmatch(string(readme), -1) {
		inTable = append(inTable, m[1])
	}
	slices.Sort(inRules)
	slices.Sort(inTable)
	if !slices.Equal(inRules, inTable) {
		t.Errorf("README.md's alert table lists %v, the rules have %v", inTable, inRules)
	}
}

// readmeAnchors returns the anchors of README.md's headings, made as GitHub
// makes them.
func readmeAnchors(readme string) map[string]bool {
	anchors := map[string]bool{}
	for line := range strings.Lines(readme) {
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(title)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9'):
				b.WriteRune(r)
			}
		}
		anchors[b.String()] = true
	}
	return anchors
}

// TestPrometheusRule: prometheusrule.yaml is what PrometheusRule renders
// from prometheus-rules.yaml, and the Helm chart's files/prometheus-rules.yaml
// is a copy of it (-update writes both); prometheusrule.yaml's spec loads
// with Prometheus's rule loader as the same groups.
func TestPrometheusRule(t *testing.T) {
	want, err := PrometheusRule(RulesFile())
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("prometheusrule.yaml", want, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(chartRules, RulesFile(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if diff := cmp.Diff(string(want), string(PrometheusRuleFile())); diff != "" {
		t.Fatalf("prometheusrule.yaml is not generated from prometheus-rules.yaml; run\n"+
			"  go test ./deploy/monitoring -run TestPrometheusRule -update\n(-want +got):\n%s", diff)
	}
	if copied, err := os.ReadFile(chartRules); err != nil {
		t.Fatal(err)
	} else if diff := cmp.Diff(string(RulesFile()), string(copied)); diff != "" {
		t.Fatalf("%s is not a copy of prometheus-rules.yaml; run\n"+
			"  go test ./deploy/monitoring -run TestPrometheusRule -update\n(-want +got):\n%s", chartRules, diff)
	}
	var obj struct {
		APIVersion string    `yaml:"apiVersion"`
		Kind       string    `yaml:"kind"`
		Spec       yaml.Node `yaml:"spec"`
	}
	if err := yaml.Unmarshal(PrometheusRuleFile(), &obj); err != nil {
		t.Fatal(err)
	}
	if obj.APIVersion != "monitoring.coreos.com/v1" || obj.Kind != "PrometheusRule" {
		t.Errorf("apiVersion %q kind %q, want monitoring.coreos.com/v1 PrometheusRule", obj.APIVersion, obj.Kind)
	}
	spec, err := yaml.Marshal(&obj.Spec)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseRules(spec)
	if err != nil {
		t.Fatalf("spec: %v", err)
	}
	source, err := ParseRules(RulesFile())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(source.Groups, got.Groups); diff != "" {
		t.Errorf("PrometheusRule spec groups (-prometheus-rules.yaml +prometheusrule.yaml):\n%s", diff)
	}
}

// TestPodViewAlertNamesEveryReason: NodegcPodViewNotAuthoritative's
// description names every reason the container GC's pod view is not
// authoritative for (what `nodegc plan` prints), so that whoever it pages
// can tell an API outage from a misconfiguration: a wrong node name that
// another machine registered (node_other_boot), or one on a busy node
// (disagrees_with_runtime), or a runtime endpoint that is not the
// kubelet's runtime (runtime_lacks_view_pods, node_other_runtime).
func TestPodViewAlertNamesEveryReason(t *testing.T) {
	groups, err := ParseRules(RulesFile())
	if err != nil {
		t.Fatal(err)
	}
	description := ""
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "NodegcPodViewNotAuthoritative" {
				description = r.Annotations["description"]
			}
		}
	}
	if description == "" {
		t.Fatal("no NodegcPodViewNotAuthoritative alert with a description")
	}
	for _, reason := range []string{containers.ViewNotSynced, containers.ViewUnreachable, containers.ViewNodeNotFound,
		containers.ViewNodeOtherBoot, containers.ViewDisagrees, containers.ViewRuntimeLacksPods, containers.ViewNodeOtherRuntime, containers.ViewNodeOnly} {
		if !strings.Contains(description, reason) {
			t.Errorf("the description does not name %s", reason)
		}
	}
}

// scrapeLabels are the target labels every alert's text may name: the two
// README's Monitoring section asks a scrape for, and the two Prometheus
// gives every target.
var scrapeLabels = []string{"node", "component", "instance", "job"}

// TestAlertTextWithoutOptionalLabels: the summary and description of every
// alert read well with only the labels README's Monitoring section asks a
// scrape for (a hand-written scrape config) and those its expression
// selects on and keeps (alertLabels): a label beyond those (pod, which the
// chart's PodMonitor and ServiceMonitor add; state, which "sum without
// (state)" drops) is named only where the series has it, so no text shows
// an empty "(pod )".
func TestAlertTextWithoutOptionalLabels(t *testing.T) {
	groups, readme := rulesAndReadme(t)
	metricLabels := readmeMetricLabels(readme)
	if len(metricLabels["nodegc_owner_gc_stuck_deletions"]) == 0 {
		t.Fatal("README's metrics reference gives nodegc_owner_gc_stuck_deletions no label")
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			expr, err := PromQL.ParseExpr(r.Expr)
			if err != nil {
				t.Fatal(err)
			}
			labels := map[string]string{}
			for l := range alertLabels(expr, metricLabels) {
				labels[l] = "L-" + l
			}
			for _, a := range []string{"summary", "description"} {
				text := r.Annotations[a]
				data := template.AlertTemplateData(labels, nil, "", promql.Sample{F: 1})
				out, err := template.NewTemplateExpander(t.Context(), "{{$labels := .Labels}}{{$value := .Value}}"+text,
					r.Alert, data, 0, nil, nil, nil).Expand()
				if err != nil {
					t.Errorf("%s %s: %v", r.Alert, a, err)
					continue
				}
				if m := regexp.MustCompile(`  |\( |\(\w+ \)| \)|\(\)`).FindString(out); m != "" {
					t.Errorf("%s %s without labels beyond %v reads %q (at %q)", r.Alert, a, scrapeLabels, out, m)
				}
			}
		}
	}
}

// alertLabels returns the labels every sample of expr carries, beyond its
// metric name, when its series have the scrape's labels, their metric's
// own (metricLabels, by name) and those its selectors match on: an aggregation keeps its by labels, or drops its
// without ones; each side of an "or" may give the sample, so only the
// labels of both count; the other binary operations keep their vector
// side's (the left one's when both are vectors); a function its first
// vector argument's. Before, a label a selector matched on counted as
// there even where an aggregation dropped it.
func alertLabels(n parser.Node, metricLabels map[string][]string) map[string]bool {
	switch n := n.(type) {
	case *parser.VectorSelector:
		out := map[string]bool{}
		for _, l := range scrapeLabels {
			out[l] = true
		}
		for _, l := range metricLabels[n.Name] {
			out[l] = true
		}
		for _, m := range n.LabelMatchers {
			if m.Name != "__name__" {
				out[m.Name] = true
			}
		}
		return out
	case *parser.MatrixSelector:
		return alertLabels(n.VectorSelector, metricLabels)
	case *parser.ParenExpr:
		return alertLabels(n.Expr, metricLabels)
	case *parser.SubqueryExpr:
		return alertLabels(n.Expr, metricLabels)
	case *parser.StepInvariantExpr:
		return alertLabels(n.Expr, metricLabels)
	case *parser.AggregateExpr:
		inner := alertLabels(n.Expr, metricLabels)
		out := map[string]bool{}
		if n.Without {
			for l := range inner {
				if !slices.Contains(n.Grouping, l) {
					out[l] = true
				}
			}
			return out
		}
		for _, l := range n.Grouping {
			if inner[l] {
				out[l] = true
			}
		}
		return out
	case *parser.BinaryExpr:
		lhs, rhs := alertLabels(n.LHS, metricLabels), alertLabels(n.RHS, metricLabels)
		switch {
		case lhs == nil:
			return rhs
		case rhs == nil || n.Op != parser.LOR:
			return lhs
		}
		out := map[string]bool{}
		for l := range lhs {
			if rhs[l] {
				out[l] = true
			}
		}
		return out
	case *parser.Call:
		if n.Func.Name == "absent" || n.Func.Name == "absent_over_time" {
			// Its sample has the equality matchers of a plain selector.
			out := map[string]bool{}
			var vs *parser.VectorSelector
			switch a := n.Args[0].(type) {
			case *parser.VectorSelector:
				vs = a
			case *parser.MatrixSelector:
				vs, _ = a.VectorSelector.(*parser.VectorSelector)
			}
			if vs != nil {
				for _, m := range vs.LabelMatchers {
					if m.Type == labels.MatchEqual && m.Name != "__name__" {
						out[m.Name] = true
					}
				}
			}
			return out
		}
		for _, a := range n.Args {
			if ls := alertLabels(a, metricLabels); ls != nil {
				return ls
			}
		}
	}
	return nil // a scalar
}

// readmeMetricLabels reads the label names of each metric README's metrics
// reference writes as `name{a,b}` (the agent's tests check them against
// what it registers).
func readmeMetricLabels(readme string) map[string][]string {
	out := map[string][]string{}
	for _, m := range regexp.MustCompile("`(nodegc_[a-z0-9_]+)\\{([a-z0-9_,]+)\\}`").FindAllStringSubmatch(readme, -1) {
		out[m[1]] = strings.Split(m[2], ",")
	}
	return out
}

// rulesAndReadme parses prometheus-rules.yaml and reads README.md.
func rulesAndReadme(t *testing.T) (*rulefmt.RuleGroups, string) {
	t.Helper()
	groups, err := ParseRules(RulesFile())
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	return groups, string(readme)
}
