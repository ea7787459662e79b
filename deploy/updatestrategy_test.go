package deploy

import (
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed/cluster"
)

// TestChartUpdateStrategy: node.updateStrategy's rollingUpdate.maxSurge
// other than 0 fails the render, saying why: the node agent holds host
// ports, so a surge pod started beside the old one on its node is never
// scheduled and the rollout stalls on every node (the API server takes
// such a DaemonSet). maxUnavailable 0 (or 0%), which the API server
// refuses without a surge, and over 100% fail the render too, rather than
// the install. (helm lint reports a template's fail only as INFO.) What the chart renders, a real kube-apiserver takes, and
// the rules are the API server's: the rendered DaemonSet with
// maxUnavailable 0 is refused, and a pod made from its template holds both
// ports as host ports.
func TestChartUpdateStrategy(t *testing.T) {
	const ru = "node.updateStrategy.rollingUpdate."
	refused := map[string]struct {
		args []string
		want []string
	}{
		"maxSurge 1":            {[]string{"--set", ru + "maxSurge=1"}, []string{"maxSurge 1", "host ports", "never scheduled", "Leave maxSurge unset"}},
		"maxSurge 1, unavail 0": {[]string{"--set", ru + "maxSurge=1", "--set", ru + "maxUnavailable=0"}, []string{"maxSurge 1", "host ports"}},
		"maxSurge 10%":          {[]string{"--set-string", ru + "maxSurge=10%"}, []string{"maxSurge 10%", "host ports"}},
		"maxUnavailable 0":      {[]string{"--set", ru + "maxUnavailable=0"}, []string{"maxUnavailable 0", "at least 1", "1%"}},
		"maxUnavailable 0%":     {[]string{"--set-string", ru + "maxUnavailable=0%"}, []string{"maxUnavailable 0%", "at least 1"}},
		"maxUnavailable 101%":   {[]string{"--set-string", ru + "maxUnavailable=101%"}, []string{"maxUnavailable 101%", "more than 100%"}},
	}
	for name, tc := range refused {
		t.Run(name, func(t *testing.T) {
			renderRefused(t, tc.args, tc.want...)
			renderRefused(t, append(tc.args, "--skip-schema-validation"), tc.want...)
		})
	}

	accepted := map[string][]string{
		"defaults (10%)":       nil,
		"maxUnavailable 1":     {"--set", ru + "maxUnavailable=1"},
		"maxUnavailable 1%":    {"--set-string", ru + "maxUnavailable=1%"},
		"maxUnavailable 100%":  {"--set-string", ru + "maxUnavailable=100%"},
		"maxSurge 0":           {"--set", ru + "maxSurge=0", "--set", ru + "maxUnavailable=2"},
		"maxUnavailable unset": {"--set", ru + "maxUnavailable=null"},
		"OnDelete":             {"--set", "node.updateStrategy.type=OnDelete", "--set", ru + "maxUnavailable=0"},
	}
	daemonSets := map[string]*appsv1.DaemonSet{}
	for name, args := range accepted {
		ds := find(render(t, "nodegc", args...), "DaemonSet", "nodegc-node")
		if ds == nil {
			t.Fatalf("%s: no DaemonSet nodegc-node", name)
		}
		daemonSets[name] = typedDaemonSet(t, ds)
	}

	c := cluster.Start(t, cluster.Options{})
	ctx := t.Context()
	cs := c.Client()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "nodegc"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	for name, ds := range daemonSets {
		if _, err := cs.AppsV1().DaemonSets("nodegc").Create(ctx, ds, dryRun); err != nil {
			t.Errorf("%s: the API server refuses the rendered DaemonSet: %v", name, err)
		}
	}

	// The API server's own rule, which the chart's maxUnavailable check
	// repeats.
	zero := daemonSets["maxUnavailable 1"].DeepCopy()
	zero.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(0))
	if _, err := cs.AppsV1().DaemonSets("nodegc").Create(ctx, zero, dryRun); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "maxUnavailable") {
		t.Errorf("the API server took maxUnavailable 0 without a surge (%v): the chart refuses what it takes", err)
	}

	// Why maxSurge is refused: the node agent's ports are host ports.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nodegc-node-probe", Namespace: "nodegc"}, Spec: daemonSets["defaults (10%)"].Spec.Template.Spec}
	pod.Spec.NodeName = "node-1"
	got, err := cs.CoreV1().Pods("nodegc").Create(ctx, pod, dryRun)
	if err != nil {
		t.Fatal(err)
	}
	hostPorts := map[string]int32{}
	for _, p := range got.Spec.Containers[0].Ports {
		if p.HostPort == p.ContainerPort {
			hostPorts[p.Name] = p.HostPort
		}
	}
	if len(hostPorts) != 2 {
		t.Errorf("the node agent's pod holds host ports %v, want healthz and metrics: the reason maxSurge is refused would not hold", got.Spec.Containers[0].Ports)
	}
}

// typedDaemonSet converts a rendered DaemonSet to its API type.
func typedDaemonSet(t *testing.T, o *unstructured.Unstructured) *appsv1.DaemonSet {
	t.Helper()
	data, err := o.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := json.Unmarshal(data, &ds); err != nil {
		t.Fatal(err)
	}
	return &ds
}
