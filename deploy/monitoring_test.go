package deploy

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"
	"github.com/prometheus/prometheus/promql/parser"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/nodegc/nodegc/deploy/monitoring"
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
	// Both workloads: the node agents and the owner collector; the
	// ServiceMonitor, of this release's Services (the pods of this release
	// are kept by a relabeling: TestChartSecondReleaseScrapedOnce).
	exprs, _, _ := unstructured.NestedSlice(o.Object, "spec", "selector", "matchExpressions")
	want := []any{
		map[string]any{"key": "app.kubernetes.io/name", "operator": "In", "values": []any{"nodegc"}},
		map[string]any{"key": "app.kubernetes.io/component", "operator": "In", "values": []any{"node", "owner"}},
	}
	if o.GetKind() == "ServiceMonitor" {
		want = append(want, map[string]any{"key": "app.kubernetes.io/instance", "operator": "In", "values": []any{"nodegc"}})
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

// componentRelabeling is the relabeling that names a target's workload:
// component, from the pod's app.kubernetes.io/component label.
var componentRelabeling = map[string]any{"sourceLabels": []any{"__meta_kubernetes_pod_label_app_kubernetes_io_component"}, "targetLabel": "component"}

// TestUpAlertsMatchScrapeLabels: the alerts on the targets' up series (an
// agent not running, or not scraped) select nodegc's targets by labels
// the chart's PodMonitor and ServiceMonitor give them: component, relabeled
// from the pods' app.kubernetes.io/component, with the values the
// DaemonSet's and the Deployment's pods carry, and owner_gc, relabeled from
// nodegc.io/owner-gc, which the DaemonSet's pods carry in ownerGC.mode
// deployment only (NodegcOwnerGCNoSyncedLeader's sign that an owner
// collector must run). Alerts built only on the agent's own series are
// silent when the agent is gone.
func TestUpAlertsMatchScrapeLabels(t *testing.T) {
	// One of the two at a time (TestChartRefusesBothScrapeKinds).
	objs := render(t, "nodegc", "--set", "metrics.podMonitor.enabled=true")
	if sm := find(render(t, "nodegc", "--set", "metrics.serviceMonitor.enabled=true"), "ServiceMonitor", "nodegc"); sm != nil {
		objs = append(objs, sm)
	}
	for kind, field := range map[string]string{"PodMonitor": "podMetricsEndpoints", "ServiceMonitor": "endpoints"} {
		o := find(objs, kind, "nodegc")
		if o == nil {
			t.Fatalf("no %s nodegc", kind)
		}
		eps, _, _ := unstructured.NestedSlice(o.Object, "spec", field)
		for _, ep := range eps {
			rels, _, _ := unstructured.NestedSlice(ep.(map[string]any), "relabelings")
			if !slices.ContainsFunc(rels, func(r any) bool { return cmp.Equal(componentRelabeling, r) }) {
				t.Errorf("%s relabelings %v lack %v", kind, rels, componentRelabeling)
			}
		}
	}
	// owner_gc: the node agents' pod label nodegc.io/owner-gc, in ownerGC.mode deployment (the default).
	ownerGCRelabeling := map[string]any{"sourceLabels": []any{"__meta_kubernetes_pod_label_nodegc_io_owner_gc"}, "targetLabel": "owner_gc"}
	for kind, field := range map[string]string{"PodMonitor": "podMetricsEndpoints", "ServiceMonitor": "endpoints"} {
		eps, _, _ := unstructured.NestedSlice(find(objs, kind, "nodegc").Object, "spec", field)
		for _, ep := range eps {
			rels, _, _ := unstructured.NestedSlice(ep.(map[string]any), "relabelings")
			if !slices.ContainsFunc(rels, func(r any) bool { return cmp.Equal(ownerGCRelabeling, r) }) {
				t.Errorf("%s relabelings %v lack %v", kind, rels, ownerGCRelabeling)
			}
		}
	}
	ds := find(objs, "DaemonSet", "nodegc-node")
	if ds == nil {
		t.Fatal("no DaemonSet nodegc-node")
	}
	ownerGCLabel, _, _ := unstructured.NestedString(ds.Object, "spec", "template", "metadata", "labels", "nodegc.io/owner-gc")
	if ownerGCLabel != "deployment" {
		t.Errorf("ownerGC.mode deployment: the node agents' pod label nodegc.io/owner-gc is %q, want deployment", ownerGCLabel)
	}
	for _, mode := range []string{"auto", "off"} {
		ds := find(render(t, "nodegc", "--set", "ownerGC.mode="+mode), "DaemonSet", "nodegc-node")
		if l, ok, _ := unstructured.NestedString(ds.Object, "spec", "template", "metadata", "labels", "nodegc.io/owner-gc"); ok {
			t.Errorf("ownerGC.mode %s: the node agents' pods carry nodegc.io/owner-gc %q, which says an owner collector must run", mode, l)
		}
	}
	components := map[string]bool{}
	for _, kind := range []string{"DaemonSet", "Deployment"} {
		for _, o := range objs {
			if o.GetKind() == kind {
				c, _, _ := unstructured.NestedString(o.Object, "spec", "template", "metadata", "labels", "app.kubernetes.io/component")
				components[c] = true
			}
		}
	}

	queries, err := monitoring.RuleQueries()
	if err != nil {
		t.Fatal(err)
	}
	selected := map[string]bool{} // components whose up some alert selects
	for _, q := range queries {
		expr, err := monitoring.PromQL.ParseExpr(q.Expr)
		if err != nil {
			t.Fatalf("%s: %v", q.Where, err)
		}
		parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
			vs, ok := node.(*parser.VectorSelector)
			if !ok || vs.Name != "up" {
				return nil
			}
			var component string
			for _, m := range vs.LabelMatchers {
				switch {
				case m.Name == model.MetricNameLabel:
				case m.Name == "component" && m.Type == labels.MatchEqual && components[m.Value]:
					component = m.Value
				case m.Name == "owner_gc" && m.Type == labels.MatchEqual && m.Value == ownerGCLabel:
				default:
					t.Errorf("%s: up selected by %s, which the chart's scrape objects do not set (component: %v)", q.Where, m, components)
				}
			}
			if component == "" {
				t.Errorf("%s: %s selects the up of targets that are not nodegc's: select component (%v)", q.Where, vs, components)
			}
			selected[component] = true
			return nil
		})
	}
	for c := range components {
		if !selected[c] {
			t.Errorf("no alert on up{component=%q}: nothing fires when that workload's agents are not running or not scraped", c)
		}
	}
}

// TestChartPrometheusRule: metrics.prometheusRule renders nodegc's alert
// rules as a PrometheusRule in the release's namespace, with the labels
// given (kube-prometheus-stack's ruleSelector selects release), whose
// groups load with Prometheus's rule loader as those of
// deploy/monitoring/prometheus-rules.yaml, the one source; off by default.
func TestChartPrometheusRule(t *testing.T) {
	if o := find(render(t, "nodegc"), "PrometheusRule", "nodegc"); o != nil {
		t.Errorf("PrometheusRule rendered by default")
	}
	objs := render(t, "gc-system", "--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.prometheusRule.labels.release=kube-prometheus-stack")
	o := find(objs, "PrometheusRule", "nodegc")
	if o == nil {
		t.Fatal("no PrometheusRule nodegc with metrics.prometheusRule.enabled")
	}
	if o.GetNamespace() != "gc-system" || o.GetLabels()["release"] != "kube-prometheus-stack" || o.GetLabels()["app.kubernetes.io/name"] != "nodegc" {
		t.Errorf("PrometheusRule in namespace %q with labels %v; want gc-system, release: kube-prometheus-stack and app.kubernetes.io/name: nodegc", o.GetNamespace(), o.GetLabels())
	}
	spec, _, _ := unstructured.NestedMap(o.Object, "spec")
	data, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	got, err := monitoring.ParseRules(data)
	if err != nil {
		t.Fatalf("the PrometheusRule's spec: %v\n%s", err, data)
	}
	want, err := monitoring.ParseRules(monitoring.RulesFile())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want.Groups, got.Groups); diff != "" {
		t.Errorf("the chart's PrometheusRule groups (-deploy/monitoring/prometheus-rules.yaml +chart):\n%s", diff)
	}
}

// TestChartRefusesBothScrapeKinds: the PodMonitor and the ServiceMonitor
// together would scrape every target twice, under two jobs, and every
// per-node alert would fire twice: the render fails and says so.
func TestChartRefusesBothScrapeKinds(t *testing.T) {
	_, err := helm(t, "template", "nodegc", chart, "--namespace", "nodegc",
		"--set", "metrics.podMonitor.enabled=true", "--set", "metrics.serviceMonitor.enabled=true")
	if err == nil || !strings.Contains(err.Error(), "metrics.podMonitor.enabled and metrics.serviceMonitor.enabled") {
		t.Errorf("both enabled: %v, want the render to fail naming both", err)
	}
}

// selects says whether a selector (matchLabels, matchExpressions with In)
// selects a pod with labels.
func selects(t *testing.T, sel map[string]any, labels map[string]string) bool {
	t.Helper()
	ml, _, _ := unstructured.NestedStringMap(sel, "matchLabels")
	for k, v := range ml {
		if labels[k] != v {
			return false
		}
	}
	exprs, _, _ := unstructured.NestedSlice(sel, "matchExpressions")
	for _, e := range exprs {
		m := e.(map[string]any)
		if m["operator"] != "In" {
			t.Fatalf("selector operator %v: only In is read here", m["operator"])
		}
		v, ok := labels[m["key"].(string)]
		if !ok || !slices.Contains(m["values"].([]any), any(v)) {
			return false
		}
	}
	return true
}

// TestChartSecondReleaseScrapedOnce: two releases in one namespace (a
// canary with ports of its own) scrape their own pods only: the pod
// templates carry app.kubernetes.io/instance, and the PodMonitor's and the
// ServiceMonitor's relabelings keep the pods of their release, so no node
// agent is scraped twice under two jobs (every per-node alert firing
// twice). A pod an earlier chart made, without that label, is still
// scraped: before, the monitors selected by the label, and an upgrade left
// every old pod unscraped (its alerts silent) until the rollout replaced it
// (review diff14 D14-2). The workloads' selectors stay as they were: a
// selector is immutable, and a helm upgrade that changed it would fail.
func TestChartSecondReleaseScrapedOnce(t *testing.T) {
	releaseObjs := func(release string, args ...string) []*unstructured.Unstructured {
		t.Helper()
		out, err := helm(t, append([]string{"template", release, chart, "--namespace", "nodegc"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return decodeObjects(t, out)
	}
	// pods returns the labels of the pods of a release's workloads, as
	// made now and, without the instance label, by an earlier chart.
	pods := func(objs []*unstructured.Unstructured) (now, earlier []map[string]string) {
		for _, o := range objs {
			if k := o.GetKind(); k == "DaemonSet" || k == "Deployment" {
				l, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels")
				if _, ok := l["app.kubernetes.io/instance"]; !ok {
					t.Errorf("%s %s pod labels %v lack app.kubernetes.io/instance", k, o.GetName(), l)
				}
				old := maps.Clone(l)
				delete(old, "app.kubernetes.io/instance")
				now, earlier = append(now, l), append(earlier, old)
				sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
				if _, ok := sel["app.kubernetes.io/instance"]; ok {
					t.Errorf("%s %s selector %v holds app.kubernetes.io/instance: a helm upgrade from an earlier release would fail (immutable)", k, o.GetName(), sel)
				}
			}
		}
		return now, earlier
	}
	for _, kind := range []string{"podMonitor", "serviceMonitor"} {
		t.Run(kind, func(t *testing.T) {
			on := []string{"--set", "metrics." + kind + ".enabled=true"}
			releases := map[string][]*unstructured.Unstructured{
				"nodegc": releaseObjs("nodegc", on...),
				"canary": releaseObjs("canary", append(on, "--set", "ports.healthz=20280", "--set", "ports.metrics=20281")...),
			}
			for release, objs := range releases {
				scrapes := scrapedBy(t, objs)
				for other, otherObjs := range releases {
					now, earlier := pods(otherObjs)
					for _, l := range now {
						if got := scrapes(l); got != (other == release) {
							t.Errorf("release %s's monitor scrapes release %s's pod %v: %t, want %t", release, other, l, got, other == release)
						}
					}
					if other != release {
						continue
					}
					for _, l := range earlier {
						if !scrapes(l) {
							t.Errorf("release %s's monitor does not scrape its pod %v of an earlier chart (no instance label): unscraped until the rollout replaces it", release, l)
						}
					}
				}
			}
		})
	}
}

// scrapedBy returns whether the PodMonitor or ServiceMonitor among a
// release's objects scrapes a pod with the given labels: its selector (of
// pods, or of the release's Services, whose selectors then select the
// pod) selects it and its keep relabelings, evaluated by Prometheus's own
// relabeling, keep it.
func scrapedBy(t *testing.T, objs []*unstructured.Unstructured) func(pod map[string]string) bool {
	t.Helper()
	var monitor *unstructured.Unstructured
	var services []map[string]any
	for _, o := range objs {
		switch o.GetKind() {
		case "PodMonitor", "ServiceMonitor":
			monitor = o
		case "Service":
			sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector")
			m := map[string]any{}
			for k, v := range sel {
				m[k] = v
			}
			services = append(services, map[string]any{"labels": o.GetLabels(), "selector": map[string]any{"matchLabels": m}})
		}
	}
	if monitor == nil {
		t.Fatal("no PodMonitor or ServiceMonitor rendered")
	}
	sel, _, _ := unstructured.NestedMap(monitor.Object, "spec", "selector")
	field := "podMetricsEndpoints"
	if monitor.GetKind() == "ServiceMonitor" {
		field = "endpoints"
	}
	eps, _, _ := unstructured.NestedSlice(monitor.Object, "spec", field)
	if len(eps) != 1 {
		t.Fatalf("%s: %d %s, want 1", monitor.GetKind(), len(eps), field)
	}
	rules, _, _ := unstructured.NestedSlice(eps[0].(map[string]any), "relabelings")
	var keeps []*relabel.Config
	for _, r := range rules {
		r := r.(map[string]any)
		if r["action"] != "keep" {
			continue
		}
		c := &relabel.Config{Action: relabel.Keep, Separator: ";", Regex: relabel.MustNewRegexp(r["regex"].(string))}
		for _, l := range r["sourceLabels"].([]any) {
			c.SourceLabels = append(c.SourceLabels, model.LabelName(l.(string)))
		}
		keeps = append(keeps, c)
	}
	return func(pod map[string]string) bool {
		selected := false
		if monitor.GetKind() == "PodMonitor" {
			selected = selects(t, sel, pod)
		}
		for _, svc := range services {
			l := map[string]string{}
			for k, v := range svc["labels"].(map[string]string) {
				l[k] = v
			}
			selected = selected || monitor.GetKind() == "ServiceMonitor" && selects(t, sel, l) && selects(t, svc["selector"].(map[string]any), pod)
		}
		meta := map[string]string{}
		for k, v := range pod {
			meta["__meta_kubernetes_pod_label_"+strings.NewReplacer(".", "_", "/", "_", "-", "_").Replace(k)] = v
		}
		return selected && relabel.ProcessBuilder(labels.NewBuilder(labels.FromMap(meta)), keeps...)
	}
}
