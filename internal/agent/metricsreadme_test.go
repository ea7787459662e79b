package agent_test

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/nodegc/nodegc/deploy/monitoring"
	"github.com/nodegc/nodegc/internal/agent"
	"github.com/nodegc/nodegc/internal/testbed"
)

// readmeFamily is a family as a row of README.md's metrics reference
// gives it: its type (counter, gauge, histogram) and label names, sorted.
type readmeFamily struct {
	typ    string
	labels []string
}

// readmeMetrics reads README.md's metrics reference: the rows whose first
// cell names metrics (`name` or `name{label,label}`, several separated by
// commas) and whose second gives their type, one for all or one each.
func readmeMetrics(t *testing.T, readme string) map[string]readmeFamily {
	documented := map[string]readmeFamily{}
	for _, row := range strings.Split(readme, "\n") {
		if !strings.HasPrefix(row, "| `nodegc_") {
			continue
		}
		cells := strings.Split(row, "|")
		if len(cells) < 4 {
			t.Errorf("README.md's metrics reference: row %q has no type", row)
			continue
		}
		names := readmeMetric.FindAllStringSubmatch(cells[1], -1)
		types := strings.Split(strings.TrimSpace(cells[2]), ", ")
		if len(types) != 1 && len(types) != len(names) {
			t.Errorf("README.md's metrics reference: row %q gives %d types for %d metrics", row, len(types), len(names))
			continue
		}
		for i, m := range names {
			var labels []string
			if m[2] != "" {
				labels = strings.Split(m[2], ",")
			}
			slices.Sort(labels)
			typ := types[0]
			if len(types) > 1 {
				typ = types[i]
			}
			documented[m[1]] = readmeFamily{typ: typ, labels: labels}
		}
	}
	return documented
}

// readmeText returns README.md.
func readmeText(t *testing.T) string {
	root, err := testbed.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(readme)
}

// labelValues returns the values the agent can give label of f: those its
// Help lists ("by reason (a, b, c)", "and result (a, b)") and those of its
// series right after registration. Nil for an open label (methods, codes,
// resources), which neither lists.
func labelValues(f *agent.Family, label string) map[string]bool {
	values := map[string]bool{}
	for _, m := range regexp.MustCompile(`\b`+regexp.QuoteMeta(label)+` \(([^)]*)\)`).FindAllStringSubmatch(f.Help, -1) {
		for _, v := range strings.Split(m[1], ", ") {
			values[strings.TrimSpace(v)] = true
		}
	}
	for _, s := range f.Series {
		for _, l := range s.GetLabel() {
			if l.GetName() == label {
				values[l.GetValue()] = true
			}
		}
	}
	if len(values) == 0 {
		return nil
	}
	return values
}

// checkMetricsReference checks README.md's metrics reference against every
// family the agent registers (registered: agent.RegisteredMetrics), not
// only those a scrape happens to show: each nodegc family has a row and
// each row names a registered family, with the family's type and label
// names. scrape, a running agent's, gives the type of a family that has no
// series at registration and whose collector does not tell it. And every
// label value the alert rules and the dashboard select (= or =~ over
// literal alternatives) on a nodegc family is one the agent can set: one
// its Help lists or a series it starts with, so that renaming a value in
// the code fails here rather than leave an alert that selects nothing.
func checkMetricsReference(t *testing.T, registered map[string]*agent.Family, scrape map[string]*dto.MetricFamily) {
	documented := readmeMetrics(t, readmeText(t))
	if len(documented) == 0 {
		t.Fatal("README.md has no metrics reference rows")
	}
	for _, name := range slices.Sorted(maps.Keys(registered)) {
		f := registered[name]
		if !strings.HasPrefix(name, "nodegc_") {
			continue
		}
		row, ok := documented[name]
		if !ok {
			t.Errorf("README.md's metrics reference has no row for %s", name)
			continue
		}
		typ := f.Type
		if typ == nil && scrape[name] != nil {
			typ = scrape[name].Type
		}
		switch {
		case typ == nil:
			t.Errorf("%s: type unknown, neither registered with a series or as a vector nor in the scrape", name)
		case strings.ToLower(typ.String()) != row.typ:
			t.Errorf("README.md's metrics reference gives %s the type %s; it is a %s", name, row.typ, strings.ToLower(typ.String()))
		}
		if !slices.Equal(row.labels, f.Labels) {
			t.Errorf("README.md's metrics reference gives %s the labels %v; it has %v", name, row.labels, f.Labels)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(documented)) {
		if registered[name] == nil {
			t.Errorf("README.md's metrics reference has a row for %s, which the agent does not register", name)
		}
	}

	rules, err := monitoring.RuleQueries()
	if err != nil {
		t.Fatal(err)
	}
	panels, err := monitoring.DashboardQueries(monitoring.DashboardVars)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for name := range registered {
		names[name] = true
	}
	literal := regexp.MustCompile(`^[A-Za-z0-9_.:-]+(\|[A-Za-z0-9_.:-]+)*$`)
	selected := 0
	for _, q := range append(rules, panels...) {
		expr, err := monitoring.PromQL.ParseExpr(q.Expr)
		if err != nil {
			t.Errorf("%s: %v", q.Where, err)
			continue
		}
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			vs, ok := n.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			f := registered[monitoring.Family(vs.Name, names)]
			if f == nil || !strings.HasPrefix(f.Name, "nodegc_") {
				return nil // not nodegc's (checkMonitoring checks that it exists)
			}
			for _, m := range vs.LabelMatchers {
				if m.Name == model.MetricNameLabel || !slices.Contains(f.Labels, m.Name) {
					continue // a target label (node, component, ...)
				}
				var want []string
				switch {
				case m.Type == labels.MatchEqual:
					want = []string{m.Value}
				case m.Type == labels.MatchRegexp && literal.MatchString(m.Value):
					want = strings.Split(m.Value, "|")
				default:
					continue
				}
				values := labelValues(f, m.Name)
				if values == nil {
					continue // an open label
				}
				for _, v := range want {
					selected++
					if !values[v] {
						t.Errorf("%s selects %s{%s=%q}, a value the agent does not set (it sets %v)", q.Where, f.Name, m.Name, v, slices.Sorted(maps.Keys(values)))
					}
				}
			}
			return nil
		})
	}
	t.Logf("%d families registered, %d README rows; %d label values selected by %d rule and %d dashboard expressions checked",
		len(registered), len(documented), selected, len(rules), len(panels))
}

// checkExportedAtZero checks the families README.md's Metrics section
// says are exported at 0 for every label value from the start (the
// backquoted names before its reference table): each has, right after
// registration and before any run, a series at 0 for every combination of
// the values its Help lists, and for none its Help does not; a run's
// trigger "manual" is no loop's and starts with no series, as the README
// says.
func checkExportedAtZero(t *testing.T, registered map[string]*agent.Family) {
	readme := readmeText(t)
	start := strings.Index(readme, "\n## Metrics\n")
	end := strings.Index(readme, "\n| Metric | Type | Meaning |")
	if start < 0 || end < start {
		t.Fatal("README.md has no Metrics section with a reference table")
	}
	var listed []string
	for _, m := range regexp.MustCompile("`(nodegc_[a-z_]+)`").FindAllStringSubmatch(readme[start:end], -1) {
		listed = append(listed, m[1])
	}
	if len(listed) == 0 {
		t.Fatal("README.md's Metrics section lists no families exported at 0")
	}
	for _, name := range listed {
		f := registered[name]
		if f == nil {
			t.Errorf("README.md says %s is exported at 0; the agent does not register it", name)
			continue
		}
		// want holds the series as label pairs, "a=x,b=y" in f.Labels'
		// order: every combination of the listed values.
		want := []string{""}
		for _, label := range f.Labels {
			var values []string
			for _, m := range regexp.MustCompile(`\b`+regexp.QuoteMeta(label)+` \(([^)]*)\)`).FindAllStringSubmatch(f.Help, -1) {
				values = append(values, strings.Split(m[1], ", ")...)
			}
			if label == "trigger" {
				values = slices.DeleteFunc(values, func(v string) bool { return v == "manual" })
			}
			if len(values) == 0 {
				t.Errorf("%s: its Help lists no values of %s: %q", name, label, f.Help)
			}
			var next []string
			for _, w := range want {
				for _, v := range values {
					next = append(next, strings.TrimPrefix(w+","+label+"="+v, ","))
				}
			}
			want = next
		}
		got := map[string]float64{}
		for _, s := range f.Series {
			var pairs []string
			for _, l := range s.GetLabel() {
				pairs = append(pairs, l.GetName()+"="+l.GetValue())
			}
			got[strings.Join(pairs, ",")] = s.GetCounter().GetValue() + s.GetGauge().GetValue()
		}
		for _, w := range want {
			switch v, ok := got[w]; {
			case !ok:
				t.Errorf("%s{%s}: no series before any run, though README.md says it is exported at 0", name, w)
			case v != 0:
				t.Errorf("%s{%s} is %v before any run, want 0", name, w, v)
			}
		}
		for series := range got {
			if !slices.Contains(want, series) {
				t.Errorf("%s{%s}: a series before any run with a value its Help does not list", name, series)
			}
		}
	}
	t.Logf("%d families exported at 0 checked", len(listed))
}
