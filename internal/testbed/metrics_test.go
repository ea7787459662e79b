package testbed_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nodegc/nodegc/internal/testbed"
)

// exposition holds the cases the hand-written parsers got wrong or did not
// meet: label values with commas, spaces, braces and escaped quotes, a label
// name that ends another one, a metric name that begins another one,
// untyped samples, histograms and summaries.
const exposition = `# HELP nodegc_owner_gc_api_requests_total API requests.
# TYPE nodegc_owner_gc_api_requests_total counter
nodegc_owner_gc_api_requests_total{resource="configmaps",verb="DELETE"} 3
nodegc_owner_gc_api_requests_total{resource="pods",verb="DELETE"} 4
nodegc_owner_gc_api_requests_total{resource="pods",verb="PATCH"} 2
nodegc_owner_gc_api_requests_total{resource="pods",xverb="DELETE",verb="GET"} 100
# TYPE nodegc_owner_gc_leader gauge
nodegc_owner_gc_leader 1
# TYPE nodegc_owner_gc_leader_changes_total counter
nodegc_owner_gc_leader_changes_total 9
# TYPE test_reasons_total counter
test_reasons_total{reason="a,b",detail="x y} z"} 5
test_reasons_total{reason="quote \"q\"",detail="a"} 7
test_untyped 42 1700000000000
# TYPE test_duration_seconds histogram
test_duration_seconds_bucket{op="list",le="0.1"} 1
test_duration_seconds_bucket{op="list",le="+Inf"} 3
test_duration_seconds_sum{op="list"} 2.5
test_duration_seconds_count{op="list"} 3
test_duration_seconds_bucket{op="get",le="0.1"} 2
test_duration_seconds_bucket{op="get",le="+Inf"} 2
test_duration_seconds_sum{op="get"} 0.1
test_duration_seconds_count{op="get"} 2
# TYPE test_latency summary
test_latency{quantile="0.5"} 0.2
test_latency{quantile="0.9"} 0.7
test_latency_sum 1.5
test_latency_count 4
`

// TestMetricSum reads the exposition above and, beside it, the families
// of an in-process registry: a registry's Gather gives what ParseMetrics
// gives for its scrape (but for the +Inf bucket, which the text format
// adds), so tests read both the same way.
func TestMetricSum(t *testing.T) {
	parsed, err := testbed.ParseMetrics(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "reg_total", Help: "h"}, []string{"verb"})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "reg_seconds", Help: "h", Buckets: []float64{1}})
	reg.MustRegister(c, h)
	c.WithLabelValues("GET").Add(2)
	c.WithLabelValues("DELETE").Add(3)
	h.Observe(0.5)
	h.Observe(5)
	gathered, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	families := append(parsed, gathered...)
	type want struct {
		Sum float64
		OK  bool
	}
	for name, tc := range map[string]struct {
		metric  string
		filters []string
		want    want
	}{
		"counter, every series":                   {"nodegc_owner_gc_api_requests_total", nil, want{109, true}},
		"one label, not one ending in it":         {"nodegc_owner_gc_api_requests_total", []string{"verb=DELETE"}, want{7, true}},
		"two labels":                              {"nodegc_owner_gc_api_requests_total", []string{"verb=DELETE", "resource=pods"}, want{4, true}},
		"no series matches":                       {"nodegc_owner_gc_api_requests_total", []string{"verb=POST"}, want{0, false}},
		"gauge, not the longer name":              {"nodegc_owner_gc_leader", nil, want{1, true}},
		"the longer name":                         {"nodegc_owner_gc_leader_changes_total", nil, want{9, true}},
		"label value with a comma":                {"test_reasons_total", []string{"reason=a,b"}, want{5, true}},
		"label value with space and brace":        {"test_reasons_total", []string{"detail=x y} z"}, want{5, true}},
		"label value with quotes":                 {"test_reasons_total", []string{`reason=quote "q"`}, want{7, true}},
		"value equal, not a prefix":               {"test_reasons_total", []string{"reason=a"}, want{0, false}},
		"untyped, timestamp not a value":          {"test_untyped", nil, want{42, true}},
		"histogram count":                         {"test_duration_seconds_count", nil, want{5, true}},
		"histogram count of one series":           {"test_duration_seconds_count", []string{"op=list"}, want{3, true}},
		"histogram sum":                           {"test_duration_seconds_sum", []string{"op=get"}, want{0.1, true}},
		"histogram bucket":                        {"test_duration_seconds_bucket", []string{"le=0.1"}, want{3, true}},
		"histogram +Inf bucket":                   {"test_duration_seconds_bucket", []string{"op=list", "le=+Inf"}, want{3, true}},
		"histogram has no sample of its own name": {"test_duration_seconds", nil, want{0, false}},
		"summary quantile":                        {"test_latency", []string{"quantile=0.9"}, want{0.7, true}},
		"summary count":                           {"test_latency_count", nil, want{4, true}},
		"summary sum":                             {"test_latency_sum", nil, want{1.5, true}},
		"missing metric":                          {"nodegc_nothing_total", nil, want{0, false}},
		"registry: counter":                       {"reg_total", nil, want{5, true}},
		"registry: counter, labeled":              {"reg_total", []string{"verb=DELETE"}, want{3, true}},
		"registry: histogram count":               {"reg_seconds_count", nil, want{2, true}},
		"registry: first bucket":                  {"reg_seconds_bucket", []string{"le=1"}, want{1, true}},
		"registry: +Inf bucket":                   {"reg_seconds_bucket", []string{"le=+Inf"}, want{2, true}},
	} {
		t.Run(name, func(t *testing.T) {
			sum, ok := testbed.MetricSum(families, tc.metric, tc.filters...)
			if diff := cmp.Diff(tc.want, want{sum, ok}); diff != "" {
				t.Errorf("MetricSum(%s, %q) (-want +got):\n%s", tc.metric, tc.filters, diff)
			}
		})
	}
}

// TestParseMetricsRejectsMalformed: a broken scrape is an error, not a
// silently smaller sum.
func TestParseMetricsRejectsMalformed(t *testing.T) {
	for name, text := range map[string]string{
		"value not a number": "nodegc_owner_gc_leader yes\n",
		"unterminated label": "nodegc_owner_gc_leader{a=\"b} 1\n",
		"no value":           "nodegc_owner_gc_leader\n",
	} {
		t.Run(name, func(t *testing.T) {
			if families, err := testbed.ParseMetrics(strings.NewReader(text)); err == nil {
				t.Errorf("ParseMetrics(%q) = %v, want an error", text, families)
			}
		})
	}
}

// TestSamplesAsExposed: Samples lists what the text format exposes, in its
// order (families by name; a histogram's buckets, then _sum and _count), and
// String prints each as a line of that format.
func TestSamplesAsExposed(t *testing.T) {
	text := `# TYPE b_total counter
b_total{reason="space"} 3
b_total{reason="age"} 0
# TYPE a_seconds histogram
a_seconds_bucket{le="1"} 1
a_seconds_bucket{le="+Inf"} 2
a_seconds_sum 12345678
a_seconds_count 2
`
	families, err := testbed.ParseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range testbed.Samples(families) {
		got = append(got, s.String())
	}
	want := []string{
		`a_seconds_bucket{le="1"} 1`,
		`a_seconds_bucket{le="+Inf"} 2`,
		`a_seconds_sum 1.2345678e+07`,
		`a_seconds_count 2`,
		`b_total{reason="space"} 3`,
		`b_total{reason="age"} 0`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Samples (-want +got):\n%s", diff)
	}
}

func TestScrapeMetrics(t *testing.T) {
	for name, tc := range map[string]struct {
		status  int
		body    string
		wantErr string // "": no error, and nodegc_owner_gc_leader reads 1
	}{
		"exposition":  {http.StatusOK, "# TYPE nodegc_owner_gc_leader gauge\nnodegc_owner_gc_leader 1\n", ""},
		"not 200":     {http.StatusServiceUnavailable, "not ready\n", "503 Service Unavailable: not ready"},
		"not metrics": {http.StatusOK, "<html>\n", "parse metrics"},
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			families, err := testbed.ScrapeMetrics(t.Context(), srv.URL+"/metrics")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("ScrapeMetrics = %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if v, ok := testbed.MetricSum(families, "nodegc_owner_gc_leader"); v != 1 || !ok {
				t.Errorf("nodegc_owner_gc_leader = %v (found %t), want 1", v, ok)
			}
		})
	}
}

// TestScrapeMetricsOfExporter: what client_golang's handler answers (as
// nodegc's /metrics does, Go runtime collectors included) reads back as
// the registry holds it.
func TestScrapeMetricsOfExporter(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "test_removed_total", Help: "h"}, []string{"reason"})
	reg.MustRegister(c, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	c.WithLabelValues("space").Add(3)
	c.WithLabelValues("age").Add(4)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	families, err := testbed.ScrapeMetrics(t.Context(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := testbed.MetricSum(families, "test_removed_total", "reason=age"); v != 4 || !ok {
		t.Errorf("test_removed_total{reason=age} = %v (found %t), want 4", v, ok)
	}
	if _, ok := testbed.MetricSum(families, "go_goroutines"); !ok {
		t.Errorf("no go_goroutines in the scrape")
	}
}
