package deploy

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// nodeRelabeling is the relabeling every scrape object must carry: the
// dashboards group nodegc's series by the node the pod runs on.
var nodeRelabeling = map[string]any{"sourceLabels": []any{"__meta_kubernetes_pod_node_name"}, "targetLabel": "node"}

// checkScrapeEndpoints: the endpoints scrape the metrics port and add the
// node label.
func checkScrapeEndpoints(t *testing.T, o *unstructured.Unstructured, field string) {
	t.Helper()
	eps, _, _ := unstructured.NestedSlice(o.Object, "spec", field)
	if len(eps) != 1 {
		t.Fatalf("%s: %d %s, want 1", o.GetKind(), len(eps), field)
	}
	ep := eps[0].(map[string]any)
	if ep["port"] != "metrics" || ep["path"] != "/metrics" {
		t.Errorf("%s endpoint port %v path %v, want metrics /metrics", o.GetKind(), ep["port"], ep["path"])
	}
	rels, _, _ := unstructured.NestedSlice(ep, "relabelings")
	var found bool
	for _, r := range rels {
		found = found || cmp.Equal(nodeRelabeling, r)
	}
	if !found {
		t.Errorf("%s relabelings %v lack %v", o.GetKind(), rels, nodeRelabeling)
	}
	// Both workloads: the node agents and the owner collector.
	exprs, _, _ := unstructured.NestedSlice(o.Object, "spec", "selector", "matchExpressions")
	want := []any{
		map[string]any{"key": "app.kubernetes.io/name", "operator": "In", "values": []any{"nodegc"}},
		map[string]any{"key": "app.kubernetes.io/component", "operator": "In", "values": []any{"node", "owner"}},
	}
	if diff := cmp.Diff(want, exprs); diff != "" {
		t.Errorf("%s selector (-want +got):\n%s", o.GetKind(), diff)
	}
	if ns, _, _ := unstructured.NestedStringSlice(o.Object, "spec", "namespaceSelector", "matchNames"); !cmp.Equal(ns, []string{"nodegc"}) {
		t.Errorf("%s namespaceSelector %v, want [nodegc]", o.GetKind(), ns)
	}
}

// TestChartScrapeObjects: the PodMonitor and the ServiceMonitor (with its
// headless Services) are rendered only when enabled, scrape both workloads'
// metrics port and label series with the node.
func TestChartScrapeObjects(t *testing.T) {
	for _, o := range render(t, "nodegc") {
		if k := o.GetKind(); k == "PodMonitor" || k == "ServiceMonitor" || k == "Service" {
			t.Errorf("%s %s rendered by default", k, o.GetName())
		}
	}

	objs := render(t, "nodegc", "--set", "metrics.podMonitor.enabled=true", "--set", "metrics.podMonitor.labels.release=prom")
	pm := find(objs, "PodMonitor", "nodegc")
	if pm == nil {
		t.Fatal("no PodMonitor nodegc")
	}
	if pm.GetAPIVersion() != "monitoring.coreos.com/v1" || pm.GetLabels()["release"] != "prom" {
		t.Errorf("PodMonitor %s labels %v; want monitoring.coreos.com/v1 with release: prom", pm.GetAPIVersion(), pm.GetLabels())
	}
	checkScrapeEndpoints(t, pm, "podMetricsEndpoints")

	for mode, services := range map[string][]string{"deployment": {"node", "owner"}, "auto": {"node"}} {
		t.Run("serviceMonitor/"+mode, func(t *testing.T) {
			objs := render(t, "nodegc", "--set", "metrics.serviceMonitor.enabled=true", "--set", "ownerGC.mode="+mode)
			sm := find(objs, "ServiceMonitor", "nodegc")
			if sm == nil {
				t.Fatal("no ServiceMonitor nodegc")
			}
			checkScrapeEndpoints(t, sm, "endpoints")
			var got []string
			for _, o := range objs {
				if o.GetKind() != "Service" {
					continue
				}
				component := o.GetLabels()["app.kubernetes.io/component"]
				got = append(got, component)
				if o.GetName() != "nodegc-"+component+"-metrics" {
					t.Errorf("Service %s, want nodegc-%s-metrics", o.GetName(), component)
				}
				if ip, _, _ := unstructured.NestedString(o.Object, "spec", "clusterIP"); ip != "None" {
					t.Errorf("Service %s clusterIP %q, want None (headless)", o.GetName(), ip)
				}
				sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector")
				if diff := cmp.Diff(map[string]string{"app.kubernetes.io/name": "nodegc", "app.kubernetes.io/component": component}, sel); diff != "" {
					t.Errorf("Service %s selector (-want +got):\n%s", o.GetName(), diff)
				}
				ports, _, _ := unstructured.NestedSlice(o.Object, "spec", "ports")
				if len(ports) != 1 || ports[0].(map[string]any)["name"] != "metrics" || ports[0].(map[string]any)["targetPort"] != "metrics" {
					t.Errorf("Service %s ports %v, want one named metrics to targetPort metrics", o.GetName(), ports)
				}
			}
			if diff := cmp.Diff(services, got); diff != "" {
				t.Errorf("metrics Services by component (-want +got):\n%s", diff)
			}
		})
	}
}
