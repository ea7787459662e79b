package cluster

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

const sampleMetrics = `# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="POST",version="v1"} 3
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="POST",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="apps",resource="deployments",scope="cluster",subresource="",verb="LIST",version="v1"} 5
apiserver_request_total{code="200",component="",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} 9
# HELP apiserver_request_total_other not ours
# TYPE apiserver_request_total_other counter
apiserver_request_total_other{verb="POST",resource="configmaps"} 100
# HELP apiserver_request_duration_seconds whatever
# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{verb="POST",resource="configmaps",le="+Inf"} 4
`

func TestParseRequestCounts(t *testing.T) {
	tests := map[string]struct {
		resource string
		want     RequestCounts
	}{
		"all resources, no non-resource URLs": {want: RequestCounts{"POST": 4, "PATCH": 2, "LIST": 5}},
		"one resource, any code":              {resource: "configmaps", want: RequestCounts{"POST": 4}},
		"any subresource":                     {resource: "pods", want: RequestCounts{"PATCH": 2}},
		"no such resource":                    {resource: "secrets", want: RequestCounts{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseRequestCounts([]byte(sampleMetrics), tc.resource)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestRequestCountsSub(t *testing.T) {
	after := RequestCounts{"GET": 10, "POST": 3, "LIST": 1}
	before := RequestCounts{"GET": 4, "POST": 3, "WATCH": 2}
	want := RequestCounts{"GET": 6, "LIST": 1, "WATCH": -2}
	if diff := cmp.Diff(want, after.Sub(before)); diff != "" {
		t.Errorf("Sub (-want +got):\n%s", diff)
	}
	if got := after.Total(); got != 14 {
		t.Errorf("Total() = %d, want 14", got)
	}
}
