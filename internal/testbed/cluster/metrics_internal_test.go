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
apiserver_request_duration_seconds_bucket{verb="POST",resource="configmaps",subresource="",le="0.1"} 3
apiserver_request_duration_seconds_bucket{verb="POST",resource="configmaps",subresource="",le="+Inf"} 4
apiserver_request_duration_seconds_sum{verb="POST",resource="configmaps",subresource=""} 0.5
apiserver_request_duration_seconds_count{verb="POST",resource="configmaps",subresource=""} 4
apiserver_request_duration_seconds_bucket{verb="DELETE",resource="configmaps",subresource="",le="+Inf"} 2
apiserver_request_duration_seconds_sum{verb="DELETE",resource="configmaps",subresource=""} 0.25
apiserver_request_duration_seconds_count{verb="DELETE",resource="configmaps",subresource=""} 2
apiserver_request_duration_seconds_bucket{verb="PATCH",resource="pods",subresource="status",le="+Inf"} 2
apiserver_request_duration_seconds_sum{verb="PATCH",resource="pods",subresource="status"} 0.125
apiserver_request_duration_seconds_count{verb="PATCH",resource="pods",subresource="status"} 2
apiserver_request_duration_seconds_bucket{verb="GET",resource="",subresource="/metrics",le="+Inf"} 9
apiserver_request_duration_seconds_sum{verb="GET",resource="",subresource="/metrics"} 1
apiserver_request_duration_seconds_count{verb="GET",resource="",subresource="/metrics"} 9
# HELP apiserver_request_duration_seconds_other not ours
# TYPE apiserver_request_duration_seconds_other gauge
apiserver_request_duration_seconds_other{verb="POST",resource="configmaps"} 100
`

func TestParseRequestStats(t *testing.T) {
	tests := map[string]struct {
		resource    string
		want        RequestCounts
		wantSeconds RequestSeconds
	}{
		"all resources, no non-resource URLs": {want: RequestCounts{"POST": 4, "PATCH": 2, "LIST": 5},
			wantSeconds: RequestSeconds{"POST": 0.5, "DELETE": 0.25, "PATCH": 0.125}},
		"one resource, any code": {resource: "configmaps", want: RequestCounts{"POST": 4},
			wantSeconds: RequestSeconds{"POST": 0.5, "DELETE": 0.25}},
		"any subresource":  {resource: "pods", want: RequestCounts{"PATCH": 2}, wantSeconds: RequestSeconds{"PATCH": 0.125}},
		"no such resource": {resource: "secrets", want: RequestCounts{}, wantSeconds: RequestSeconds{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, seconds, err := parseRequestStats([]byte(sampleMetrics), tc.resource)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantSeconds, seconds); diff != "" {
				t.Errorf("seconds (-want +got):\n%s", diff)
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
