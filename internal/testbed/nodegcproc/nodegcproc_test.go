package nodegcproc

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestAgentMetric: Agent.Metric reads a sample as the exposition states it:
// a filter names a label exactly (not one whose name ends in it), the value
// is not the timestamp, and a stopped /metrics reads -1.
func TestAgentMetric(t *testing.T) {
	const exposition = `# TYPE nodegc_owner_gc_api_requests_total counter
nodegc_owner_gc_api_requests_total{resource="configmaps",verb="DELETE"} 3
nodegc_owner_gc_api_requests_total{resource="pods",verb="DELETE"} 4
nodegc_owner_gc_api_requests_total{resource="pods",verb="GET",xverb="DELETE"} 100
# TYPE nodegc_owner_gc_leader gauge
nodegc_owner_gc_leader 1 1700000000000
# TYPE nodegc_owner_gc_leader_changes_total counter
nodegc_owner_gc_leader_changes_total 9
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, exposition)
	}))
	defer srv.Close()
	stopped := httptest.NewServer(http.NotFoundHandler())
	stopped.Close()
	for name, tc := range map[string]struct {
		url     string
		metric  string
		filters []string
		want    float64
	}{
		"every series":                  {srv.URL, "nodegc_owner_gc_api_requests_total", nil, 107},
		"a label, not one ending in it": {srv.URL, "nodegc_owner_gc_api_requests_total", []string{"verb=DELETE"}, 7},
		"two labels":                    {srv.URL, "nodegc_owner_gc_api_requests_total", []string{"verb=DELETE", "resource=pods"}, 4},
		"value, not timestamp":          {srv.URL, "nodegc_owner_gc_leader", nil, 1},
		"absent":                        {srv.URL, "nodegc_owner_gc_synced", nil, 0},
		"down":                          {stopped.URL, "nodegc_owner_gc_leader", nil, -1},
	} {
		t.Run(name, func(t *testing.T) {
			a := &Agent{Config: &Config{MetricsURL: tc.url}}
			if got := a.Metric(t.Context(), tc.metric, tc.filters...); got != tc.want {
				t.Errorf("metric(%s, %q) = %v, want %v", tc.metric, tc.filters, got, tc.want)
			}
		})
	}
}
