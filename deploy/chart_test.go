package deploy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/config"
)

// chart is the Helm chart deploy/daemonset.yaml is generated from.
const chart = "helm/nodegc"

// presets are the chart's distribution values files (presets/NAME.yaml).
var presets = []string{"k3s", "rke2", "crio", "kind", "containerd-custom-root"}

// ownerGCModes are the values of ownerGC.mode.
var ownerGCModes = []string{"deployment", "auto", "off"}

// helm runs the helm binary the test bed built (make tools) with args and
// returns its stdout; stderr is in the error.
func helm(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), testbed.Binary(t, "helm"), args...)
	cmd.Env = helmEnv(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// helmEnv is the environment of a helm command: no user or repository
// configuration, helm's caches in the test's own directory.
func helmEnv(t *testing.T) []string {
	home := t.TempDir()
	return append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
}

// render runs helm template for release nodegc in namespace ns with the
// given extra arguments (-f, --set) and returns the objects.
func render(t *testing.T, ns string, args ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := helm(t, append([]string{"template", "nodegc", chart, "--namespace", ns}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return decodeObjects(t, out)
}

func presetFile(name string) string { return filepath.Join(chart, "presets", name+".yaml") }

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// renderedConfig decodes and validates the ConfigMap's config.yaml.
func renderedConfig(t *testing.T, objs []*unstructured.Unstructured) *config.NodeGCConfiguration {
	t.Helper()
	cm := find(objs, "ConfigMap", "nodegc-config")
	if cm == nil {
		t.Fatal("no ConfigMap nodegc-config")
	}
	data, _, _ := unstructured.NestedString(cm.Object, "data", "config.yaml")
	loaded, err := config.Decode([]byte(data))
	if err != nil {
		t.Fatalf("ConfigMap nodegc-config: %v\n%s", err, data)
	}
	if errs := config.Validate(loaded.Config); len(errs) > 0 {
		t.Fatalf("ConfigMap nodegc-config: %v\n%s", errs, data)
	}
	return loaded.Config
}

func subjects(o *unstructured.Unstructured) []string {
	var out []string
	subs, _, _ := unstructured.NestedSlice(o.Object, "subjects")
	for _, s := range subs {
		m := s.(map[string]any)
		out = append(out, fmt.Sprintf("%s/%s/%s", m["kind"], m["namespace"], m["name"]))
	}
	return out
}

func containerArgs(t *testing.T, o *unstructured.Unstructured) []string {
	t.Helper()
	ctrs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	if len(ctrs) != 1 {
		t.Fatalf("%s %s: %d containers, want 1", o.GetKind(), o.GetName(), len(ctrs))
	}
	args, _, _ := unstructured.NestedStringSlice(ctrs[0].(map[string]any), "args")
	return args
}

// TestChartLint: helm lint --strict passes with the defaults, every preset,
// every owner GC mode and the scrape objects enabled.
func TestChartLint(t *testing.T) {
	cases := map[string][]string{"defaults": nil, "namespace.create": {"--set", "namespace.create=true"}}
	for _, p := range presets {
		cases["preset "+p] = []string{"-f", presetFile(p)}
	}
	for _, m := range ownerGCModes {
		// One scrape kind at a time: the render refuses both (TestChartRefusesBothScrapeKinds).
		for _, scrape := range []string{"podMonitor", "serviceMonitor"} {
			cases["ownerGC.mode "+m+", "+scrape] = []string{"--set", "ownerGC.mode=" + m,
				"--set", "metrics." + scrape + ".enabled=true", "--set", "metrics.prometheusRule.enabled=true"}
		}
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := helm(t, append([]string{"lint", "--strict", chart, "--namespace", "nodegc"}, args...)...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestChartOwnerGCModes: what each ownerGC.mode renders: where the owner GC
// runs (the Deployment or the node agents' --owner-gc=auto) and who holds
// its rights.
func TestChartOwnerGCModes(t *testing.T) {
	const ns = "gc-system"
	type want struct {
		deployment bool
		nodeArg    string
		ownerSA    bool
		// Subjects of the owner ClusterRoleBinding and of the leader-election
		// RoleBinding; nil: no owner RBAC at all.
		ownerSubjects []string
	}
	cases := map[string]want{
		"deployment": {deployment: true, nodeArg: "--owner-gc=off", ownerSA: true, ownerSubjects: []string{"ServiceAccount/" + ns + "/nodegc-owner"}},
		"auto":       {nodeArg: "--owner-gc=auto", ownerSubjects: []string{"ServiceAccount/" + ns + "/nodegc-node"}},
		"off":        {nodeArg: "--owner-gc=off"},
	}
	for mode, w := range cases {
		t.Run(mode, func(t *testing.T) {
			objs := render(t, ns, "--set", "ownerGC.mode="+mode)
			ds := find(objs, "DaemonSet", "nodegc-node")
			if ds == nil {
				t.Fatal("no DaemonSet nodegc-node")
			}
			if args := containerArgs(t, ds); !cmp.Equal(args[len(args)-1], w.nodeArg) {
				t.Errorf("DaemonSet args %v, want the last %s", args, w.nodeArg)
			}
			dep := find(objs, "Deployment", "nodegc-owner")
			if (dep != nil) != w.deployment {
				t.Errorf("Deployment nodegc-owner rendered: %v, want %v", dep != nil, w.deployment)
			}
			if dep != nil {
				if args := containerArgs(t, dep); args[len(args)-1] != "--owner-gc=only" {
					t.Errorf("Deployment args %v, want the last --owner-gc=only", args)
				}
				if r, _, _ := unstructured.NestedFieldNoCopy(dep.Object, "spec", "replicas"); toInt64(r) != 2 {
					t.Errorf("Deployment replicas %d, want 2", r)
				}
			}
			if sa := find(objs, "ServiceAccount", "nodegc-owner"); (sa != nil) != w.ownerSA {
				t.Errorf("ServiceAccount nodegc-owner rendered: %v, want %v", sa != nil, w.ownerSA)
			}
			for _, kind := range []string{"ClusterRole", "Role"} {
				name := map[string]string{"ClusterRole": "nodegc-owner", "Role": "nodegc-owner-leader-election"}[kind]
				if r := find(objs, kind, name); (r != nil) != (w.ownerSubjects != nil) {
					t.Errorf("%s %s rendered: %v, want %v", kind, name, r != nil, w.ownerSubjects != nil)
				}
				b := find(objs, kind+"Binding", name)
				if (b != nil) != (w.ownerSubjects != nil) {
					t.Errorf("%sBinding %s rendered: %v, want %v", kind, name, b != nil, w.ownerSubjects != nil)
					continue
				}
				if b != nil {
					if diff := cmp.Diff(w.ownerSubjects, subjects(b)); diff != "" {
						t.Errorf("%sBinding %s subjects (-want +got):\n%s", kind, name, diff)
					}
				}
			}
			// The node agent's own rights are there in every mode.
			for _, kn := range [][2]string{{"ClusterRoleBinding", "nodegc-node"}, {"RoleBinding", "nodegc-node-events"}, {"RoleBinding", "nodegc-node-lease"}} {
				kind, name := kn[0], kn[1]
				if b := find(objs, kind, name); b == nil {
					t.Errorf("no %s %s", kind, name)
				} else if diff := cmp.Diff([]string{"ServiceAccount/" + ns + "/nodegc-node"}, subjects(b)); diff != "" {
					t.Errorf("%s %s subjects (-want +got):\n%s", kind, name, diff)
				}
			}
			if cfg := renderedConfig(t, objs); cfg.LeaderElection.ResourceNamespace != ns {
				t.Errorf("leaderElection.resourceNamespace %q, want the release's namespace %q", cfg.LeaderElection.ResourceNamespace, ns)
			}
			for _, o := range objs {
				if o.GetKind() == "Namespace" {
					t.Errorf("Namespace %s rendered without namespace.create", o.GetName())
				}
				want := ns
				switch o.GetName() {
				case "nodegc-node-events": // the Node's Events are in default
					want = "default"
				case "nodegc-node-lease": // the kubelets' node leases
					want = "kube-node-lease"
				}
				if n := o.GetNamespace(); n != "" && n != want {
					t.Errorf("%s %s in namespace %q, want %q", o.GetKind(), o.GetName(), n, want)
				}
			}
		})
	}
}

// TestChartInvalidOwnerGCMode: an unknown ownerGC.mode fails the render and
// says which value and which choices: the values' schema does, and the
// templates do where it is skipped (helm template --skip-schema-validation).
func TestChartInvalidOwnerGCMode(t *testing.T) {
	for _, args := range [][]string{nil, {"--skip-schema-validation"}} {
		_, err := helm(t, append([]string{"template", "nodegc", chart, "--set", "ownerGC.mode=leader"}, args...)...)
		want := `at '/ownerGC/mode': value must be one of 'deployment', 'auto', 'off'`
		if len(args) > 0 {
			want = `ownerGC.mode "leader" is not one of deployment, auto, off`
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("helm template with ownerGC.mode=leader %v: %v; want an error saying %s", args, err, want)
		}
	}
}

// TestChartConfigValid: the ConfigMap's configuration decodes strictly and
// validates with every preset in every owner GC mode.
func TestChartConfigValid(t *testing.T) {
	for _, p := range append([]string{""}, presets...) {
		for _, m := range ownerGCModes {
			name := p + "/" + m
			if p == "" {
				name = "defaults/" + m
			}
			t.Run(name, func(t *testing.T) {
				args := []string{"--set", "ownerGC.mode=" + m}
				if p != "" {
					args = append(args, "-f", presetFile(p))
				}
				renderedConfig(t, render(t, "nodegc", args...))
			})
		}
	}
}

// TestChartPresetPaths: each preset's node paths land, identical, in the
// agent's hostPath volumes, its volume mounts and the configuration (CRI
// reports host paths), and the socket's directory is what is mounted.
func TestChartPresetPaths(t *testing.T) {
	type paths struct{ socket, root, podLogs, containerLogs, state string }
	std := paths{"/run/containerd/containerd.sock", "/var/lib/containerd", "/var/log/pods", "/var/log/containers", "/var/lib/nodegc"}
	cases := map[string]paths{
		"":                       std,
		"kind":                   std,
		"k3s":                    {"/run/k3s/containerd/containerd.sock", "/var/lib/rancher/k3s/agent/containerd", "/var/log/pods", "/var/log/containers", "/var/lib/nodegc"},
		"rke2":                   {"/run/k3s/containerd/containerd.sock", "/var/lib/rancher/rke2/agent/containerd", "/var/log/pods", "/var/log/containers", "/var/lib/nodegc"},
		"crio":                   {"/var/run/crio/crio.sock", "/var/lib/containers/storage", "/var/log/pods", "/var/log/containers", "/var/lib/nodegc"},
		"containerd-custom-root": {"/data/containerd/run/containerd.sock", "/data/containerd", "/data/kubelet/pod-logs", "/var/log/containers", "/data/nodegc"},
	}
	if len(cases) != len(presets)+1 {
		t.Fatalf("the test covers %d presets, the chart has %d (%v)", len(cases)-1, len(presets), presets)
	}
	for p, want := range cases {
		name := p
		if p == "" {
			name = "defaults"
		}
		t.Run(name, func(t *testing.T) {
			var args []string
			if p != "" {
				args = []string{"-f", presetFile(p)}
			}
			objs := render(t, "nodegc", args...)
			cfg := renderedConfig(t, objs)
			gotCfg := paths{cfg.ContainerRuntimeEndpoint, "", cfg.ContainerGC.PodLogsDirectory, cfg.ContainerGC.ContainerLogsDirectory, cfg.StateDirectory}
			wantCfg := want
			wantCfg.socket, wantCfg.root = "unix://"+want.socket, ""
			if diff := cmp.Diff(wantCfg, gotCfg, cmp.AllowUnexported(paths{})); diff != "" {
				t.Errorf("configuration paths (-want +got):\n%s", diff)
			}
			ds := find(objs, "DaemonSet", "nodegc-node")
			if ds == nil {
				t.Fatal("no DaemonSet nodegc-node")
			}
			spec, _, _ := unstructured.NestedMap(ds.Object, "spec", "template", "spec")
			hostPaths := hostPathsOf(spec)
			mounts := map[string]string{}
			ctrs, _, _ := unstructured.NestedSlice(spec, "containers")
			ms, _, _ := unstructured.NestedSlice(ctrs[0].(map[string]any), "volumeMounts")
			for _, m := range ms {
				mm := m.(map[string]any)
				mounts[mm["name"].(string)] = mm["mountPath"].(string)
			}
			wantVols := map[string]string{
				"runtime-dir":     filepath.Dir(want.socket),
				"containerd-root": want.root,
				"pod-logs":        want.podLogs,
				"container-logs":  want.containerLogs,
				"state":           want.state,
			}
			if diff := cmp.Diff(wantVols, hostPaths); diff != "" {
				t.Errorf("hostPath volumes (-want +got):\n%s", diff)
			}
			wantVols["config"] = "/etc/nodegc"
			if diff := cmp.Diff(wantVols, mounts); diff != "" {
				t.Errorf("volume mounts (-want +got):\n%s", diff)
			}
		})
	}
}

// TestChartPresetEvictionThresholds: each preset gives nodegc the disk
// eviction thresholds its distribution's kubelet runs with, which the
// critical NodegcImageFSAtEvictionThreshold, the dashboard, the early start
// and the start-up warnings take as where the kubelet evicts: k3s and RKE2
// (k3s's agent code) set their kubelets' evictionHard to 5% of imagefs and
// nodefs, kind turns disk eviction off. Before, the k3s and RKE2 presets
// kept the upstream 15% and 10%, and the critical alert paged between 85%
// and 95% of the image filesystem, where no pod is evicted (review config
// r10 F4).
func TestChartPresetEvictionThresholds(t *testing.T) {
	upstream := config.DefaultEvictionHard()
	cases := map[string]map[string]string{
		"":                       upstream,
		"k3s":                    {"imagefs.available": "5%", "nodefs.available": "5%"},
		"rke2":                   {"imagefs.available": "5%", "nodefs.available": "5%"},
		"kind":                   {"imagefs.available": "0%", "nodefs.available": "0%"},
		"crio":                   upstream,
		"containerd-custom-root": upstream,
	}
	if len(cases) != len(presets)+1 {
		t.Fatalf("the test covers %d presets, the chart has %d (%v)", len(cases)-1, len(presets), presets)
	}
	for p, want := range cases {
		var args []string
		if p != "" {
			args = []string{"-f", presetFile(p)}
		}
		cfg := renderedConfig(t, render(t, "nodegc", args...))
		if diff := cmp.Diff(want, cfg.ImageGC.EvictionHard); diff != "" {
			t.Errorf("preset %q: imageGC.evictionHard (-want +got):\n%s", p, diff)
		}
	}
}

// TestChartPorts: ports.healthz and ports.metrics are the containers' ports
// and the configuration's bind addresses.
func TestChartPorts(t *testing.T) {
	objs := render(t, "nodegc", "--set", "ports.healthz=19280", "--set", "ports.metrics=19281")
	cfg := renderedConfig(t, objs)
	if cfg.HealthzBindAddress != ":19280" || cfg.MetricsBindAddress != ":19281" {
		t.Errorf("bind addresses healthz %q, metrics %q; want :19280, :19281", cfg.HealthzBindAddress, cfg.MetricsBindAddress)
	}
	for _, o := range []*unstructured.Unstructured{find(objs, "DaemonSet", "nodegc-node"), find(objs, "Deployment", "nodegc-owner")} {
		ctrs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		ports, _, _ := unstructured.NestedSlice(ctrs[0].(map[string]any), "ports")
		got := map[string]int64{}
		for _, p := range ports {
			pm := p.(map[string]any)
			got[pm["name"].(string)] = toInt64(pm["containerPort"])
		}
		if diff := cmp.Diff(map[string]int64{"healthz": 19280, "metrics": 19281}, got); diff != "" {
			t.Errorf("%s %s ports (-want +got):\n%s", o.GetKind(), o.GetName(), diff)
		}
	}
}

// toInt64 reads a number of a decoded manifest (YAML numbers decode as
// float64); -1 if it is none.
func toInt64(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case float64:
		return int64(n)
	}
	return -1
}

// TestChartLabels: Helm's labels are on the objects of a helm install but
// never in selectors, which stay those of deploy/daemonset.yaml.
func TestChartLabels(t *testing.T) {
	objs := render(t, "nodegc")
	for _, o := range objs {
		if o.GetLabels()["app.kubernetes.io/managed-by"] != "Helm" || o.GetLabels()["app.kubernetes.io/name"] != "nodegc" {
			t.Errorf("%s %s labels %v: want app.kubernetes.io/name: nodegc and Helm's", o.GetKind(), o.GetName(), o.GetLabels())
		}
	}
	for kind, component := range map[string]string{"DaemonSet": "node", "Deployment": "owner"} {
		o := find(objs, kind, "nodegc-"+component)
		sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
		want := map[string]string{"app.kubernetes.io/name": "nodegc", "app.kubernetes.io/component": component}
		if diff := cmp.Diff(want, sel); diff != "" {
			t.Errorf("%s selector (-want +got):\n%s", kind, diff)
		}
		pod, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels")
		// The scrape objects select this release's pods by it (TestChartSecondReleaseScrapedOnce).
		want["app.kubernetes.io/instance"] = "nodegc"
		if kind == "DaemonSet" {
			// ownerGC.mode deployment (the default): the monitors relabel it
			// into owner_gc, NodegcOwnerGCNoSyncedLeader's sign
			// (TestUpAlertsMatchScrapeLabels).
			want["nodegc.io/owner-gc"] = "deployment"
		}
		if diff := cmp.Diff(want, pod); diff != "" {
			t.Errorf("%s pod labels (-want +got):\n%s", kind, diff)
		}
	}
}

// podSpec returns a workload's pod template spec.
func podSpec(t *testing.T, o *unstructured.Unstructured) map[string]any {
	t.Helper()
	spec, ok, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec")
	if !ok {
		t.Fatalf("%s %s has no pod template spec", o.GetKind(), o.GetName())
	}
	return spec
}

// hostPathsOf maps each hostPath volume of a pod spec, by name, to its
// path.
func hostPathsOf(spec map[string]any) map[string]string {
	out := map[string]string{}
	vols, _, _ := unstructured.NestedSlice(spec, "volumes")
	for _, v := range vols {
		vm := v.(map[string]any)
		if p, ok, _ := unstructured.NestedString(vm, "hostPath", "path"); ok {
			out[vm["name"].(string)] = p
		}
	}
	return out
}

// TestChartPriorityClass: with the defaults and every preset, the node agent
// runs as system-node-critical and the owner collector as
// system-cluster-critical. Under DiskPressure the kubelet admits only
// critical pods, so a replaced agent (new image, new configuration) could
// not start on the node that needs it, and a non-critical agent may be
// evicted there. An empty value drops the field (for providers whose
// ResourceQuota keeps critical classes to kube-system). The presets are
// rendered in ownerGC.mode deployment (the kind preset's is off).
func TestChartPriorityClass(t *testing.T) {
	want := map[string]string{"DaemonSet/nodegc-node": "system-node-critical", "Deployment/nodegc-owner": "system-cluster-critical"}
	for _, p := range append([]string{""}, presets...) {
		name, args := p, []string{"-f", presetFile(p), "--set", "ownerGC.mode=deployment"}
		if p == "" {
			name, args = "defaults", nil
		}
		t.Run(name, func(t *testing.T) {
			objs := render(t, "nodegc", args...)
			for ref, class := range want {
				kind, objName, _ := strings.Cut(ref, "/")
				o := find(objs, kind, objName)
				if o == nil {
					t.Fatalf("no %s", ref)
				}
				if got := podSpec(t, o)["priorityClassName"]; got != class {
					t.Errorf("%s priorityClassName %v, want %s", ref, got, class)
				}
			}
		})
	}
	t.Run("empty", func(t *testing.T) {
		objs := render(t, "nodegc", "--set", "node.priorityClassName=", "--set", "owner.priorityClassName=")
		for ref := range want {
			kind, objName, _ := strings.Cut(ref, "/")
			if got, ok := podSpec(t, find(objs, kind, objName))["priorityClassName"]; ok {
				t.Errorf("%s priorityClassName %v with the value set empty, want none", ref, got)
			}
		}
	})
}

// TestChartConfigChecksum: both workloads' pod templates carry
// checksum/config, the digest of the rendered ConfigMap, so that a helm
// upgrade that changes the configuration rolls the pods (the agent reads
// its configuration once, at start); the same values give the same digest,
// and podAnnotations are kept beside it.
func TestChartConfigChecksum(t *testing.T) {
	checksums := func(args ...string) map[string]string {
		t.Helper()
		out := map[string]string{}
		for ref, ann := range workloadPodAnnotations(t, append([]string{"--set", "podAnnotations.team=storage"}, args...)...) {
			if ann["team"] != "storage" {
				t.Errorf("%s pod annotations %v lack podAnnotations' team: storage", ref, ann)
			}
			out[ref] = ann["checksum/config"]
		}
		return out
	}
	base := checksums()
	if again := checksums(); !cmp.Equal(base, again) {
		t.Errorf("the same values give other checksums: %v, then %v", base, again)
	}
	// The owner collector's digest is of what it reads (TestChartOwnerChecksumFollowsWhatItReads).
	for set, ownerReads := range map[string]bool{"config.imageGC.highThresholdPercent=90": false, "ports.metrics=19281": true, "stateDirectory=/data/nodegc": false} {
		changed := checksums("--set", set)
		for ref, sum := range changed {
			if sum == base[ref] && (ownerReads || ref == "DaemonSet/nodegc-node") {
				t.Errorf("--set %s: %s checksum/config unchanged (%s): a helm upgrade would leave the pods on the old configuration", set, ref, sum)
			}
		}
	}
}

// TestChartOwnerChecksumFollowsWhatItReads: the owner collector's
// checksum/config digests only the sections --owner-gc=only reads (ownerGC,
// leaderElection, clientConnection, the bind addresses,
// enableProfilingHandler), so that a node-only change (an image exclusion,
// a container GC setting) does not roll the owner pods (a Lease handover and
// a relist of the whole cluster for nothing it reads); the DaemonSet's
// digests the whole configuration. A change of what the owner reads rolls
// both.
func TestChartOwnerChecksumFollowsWhatItReads(t *testing.T) {
	checksums := func(args ...string) map[string]string {
		t.Helper()
		out := map[string]string{}
		for ref, ann := range workloadPodAnnotations(t, args...) {
			out[ref] = ann["checksum/config"]
		}
		return out
	}
	base := checksums("--set", "config.imageGC.exclude={registry.example.com/a}")
	for _, set := range []string{"config.imageGC.exclude={registry.example.com/b}", "config.containerGC.maxContainers=50",
		"config.imageGC.highThresholdPercent=90", "config.runtimeRequestTimeout=3m", "podLogsDirectory=/data/pods"} {
		got := checksums("--set", "config.imageGC.exclude={registry.example.com/a}", "--set", set)
		if got["Deployment/nodegc-owner"] != base["Deployment/nodegc-owner"] {
			t.Errorf("--set %s: the owner collector's checksum/config changed (%s -> %s): its pods would roll for a setting it does not read",
				set, base["Deployment/nodegc-owner"], got["Deployment/nodegc-owner"])
		}
		if got["DaemonSet/nodegc-node"] == base["DaemonSet/nodegc-node"] {
			t.Errorf("--set %s: the DaemonSet's checksum/config unchanged: the node agents would stay on the old configuration", set)
		}
	}
	for _, set := range []string{"config.ownerGC.concurrentGCSyncs=5", "config.leaderElection.leaseDuration=30s",
		"config.clientConnection.qps=20", "ports.metrics=19281", "ports.healthz=19280", "config.enableProfilingHandler=false"} {
		got := checksums("--set", "config.imageGC.exclude={registry.example.com/a}", "--set", set)
		for ref, sum := range got {
			if sum == base[ref] {
				t.Errorf("--set %s: %s checksum/config unchanged: a helm upgrade would leave its pods on the old configuration", set, ref)
			}
		}
	}
	// Another namespace is another leaderElection.resourceNamespace.
	other := render(t, "other", "--set", "config.imageGC.exclude={registry.example.com/a}")
	ann, _, _ := unstructured.NestedStringMap(find(other, "Deployment", "nodegc-owner").Object, "spec", "template", "metadata", "annotations")
	if ann["checksum/config"] == base["Deployment/nodegc-owner"] {
		t.Errorf("namespace other: the owner collector's checksum/config is namespace nodegc's")
	}
}

// workloadPodAnnotations renders the chart with args and returns the pod
// template annotations of the DaemonSet and the owner Deployment, by
// "Kind/name"; each must carry a checksum/config.
func workloadPodAnnotations(t *testing.T, args ...string) map[string]map[string]string {
	t.Helper()
	objs := render(t, "nodegc", args...)
	out := map[string]map[string]string{}
	for _, ref := range []string{"DaemonSet/nodegc-node", "Deployment/nodegc-owner"} {
		kind, name, _ := strings.Cut(ref, "/")
		o := find(objs, kind, name)
		if o == nil {
			t.Fatalf("no %s", ref)
		}
		ann, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "annotations")
		if ann["checksum/config"] == "" {
			t.Fatalf("%s: no checksum/config in %v", ref, ann)
		}
		out[ref] = ann
	}
	return out
}

// renderError runs helm template with args, which must fail, and returns
// its error text.
func renderError(t *testing.T, args ...string) string {
	t.Helper()
	out, err := helm(t, append([]string{"template", "nodegc", chart, "--namespace", "nodegc"}, args...)...)
	if err == nil {
		t.Fatalf("helm template %s rendered, want a failure:\n%s", strings.Join(args, " "), out)
	}
	return err.Error()
}

// renderRefused renders with args and wants the render refused with an
// error that says each of want.
func renderRefused(t *testing.T, args []string, want ...string) {
	t.Helper()
	msg := renderError(t, args...)
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not say %q", msg, w)
		}
	}
}

// TestChartAutoNeedsLeaderElection: ownerGC.mode auto without leader
// election fails the render, naming both values and what to do: every node
// agent would refuse --owner-gc=auto and crash-loop on every node. With the
// owner GC disabled in the configuration the agents would accept it, but
// the chart refuses that for another reason (TestChartOwnerGCDisabled).
func TestChartAutoNeedsLeaderElection(t *testing.T) {
	msg := renderError(t, "--set", "ownerGC.mode=auto", "--set", "config.leaderElection.leaderElect=false")
	for _, want := range []string{"ownerGC.mode auto", "config.leaderElection.leaderElect false", "set config.leaderElection.leaderElect true", "ownerGC.mode deployment"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
}

// TestChartOwnerGCDisabled: config.ownerGC.enableGarbageCollector false
// with ownerGC.mode deployment (the default) fails the render, naming
// ownerGC.mode off: the owner collectors would run with the owner GC off,
// exporting no nodegc_owner_gc_synced, and NodegcOwnerGCNoSyncedLeader,
// which expects an owner GC where owner collectors are scraped, would fire
// for as long as they run. With ownerGC.mode auto it fails too: every node
// agent would hold the owner GC's cluster-wide rights, unused. With
// ownerGC.mode off there is no owner collector to scrape, its monitor
// included, nor rights for it.
func TestChartOwnerGCDisabled(t *testing.T) {
	off := []string{"--set", "config.ownerGC.enableGarbageCollector=false"}
	renderRefused(t, off, "config.ownerGC.enableGarbageCollector false", "ownerGC.mode deployment", "NodegcOwnerGCNoSyncedLeader", "set ownerGC.mode off")
	renderRefused(t, append([]string{"--set", "ownerGC.mode=deployment"}, off...), "set ownerGC.mode off")
	// auto: every node agent would hold the owner GC's rights unused.
	renderRefused(t, append([]string{"--set", "ownerGC.mode=auto"}, off...), "ownerGC.mode auto", "cluster-wide rights", "set ownerGC.mode off")
	renderRefused(t, append([]string{"--set", "ownerGC.mode=auto", "--set", "config.leaderElection.leaderElect=false"}, off...), "set ownerGC.mode off")
	// One scrape kind at a time: the render refuses both (TestChartRefusesBothScrapeKinds).
	objs := render(t, "nodegc", append([]string{"--set", "ownerGC.mode=off", "--set", "metrics.podMonitor.enabled=true"}, off...)...)
	withServiceMonitor := render(t, "nodegc", append([]string{"--set", "ownerGC.mode=off", "--set", "metrics.serviceMonitor.enabled=true"}, off...)...)
	for _, o := range append(append([]*unstructured.Unstructured{}, objs...), withServiceMonitor...) {
		if strings.Contains(o.GetName(), "owner") {
			t.Errorf("%s %s rendered with the owner GC off", o.GetKind(), o.GetName())
		}
		if l := o.GetLabels()["app.kubernetes.io/component"]; l == "owner" {
			t.Errorf("%s %s has component owner with the owner GC off", o.GetKind(), o.GetName())
		}
	}
	if ds := find(objs, "DaemonSet", "nodegc-node"); ds == nil {
		t.Fatal("no DaemonSet nodegc-node")
	} else if args := containerArgs(t, ds); args[len(args)-1] != "--owner-gc=off" {
		t.Errorf("DaemonSet args %v, want the last --owner-gc=off", args)
	}
	if cfg := renderedConfig(t, objs); *cfg.OwnerGC.EnableGarbageCollector {
		t.Error("the ConfigMap's ownerGC.enableGarbageCollector is not false")
	}
}

// TestChartOwnerReplicas: without leader election only one owner collector
// may run, also during a rollout: more than one replica fails the render,
// naming both values, and one replica is replaced with strategy Recreate
// (a RollingUpdate would start the new pod beside the old one). With leader
// election the replicas stand by and roll as usual. No replica at all is
// refused too: ownerGC.mode off says that.
func TestChartOwnerReplicas(t *testing.T) {
	noLE := []string{"--set", "config.leaderElection.leaderElect=false"}
	msg := renderError(t, noLE...)
	for _, want := range []string{"ownerGC.replicas 2", "config.leaderElection.leaderElect false", "ownerGC.replicas 1"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	msg = renderError(t, "--set", "ownerGC.replicas=0")
	for _, want := range []string{"ownerGC.replicas 0", "ownerGC.mode off"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	strategy := func(args ...string) (int64, string) {
		t.Helper()
		dep := find(render(t, "nodegc", args...), "Deployment", "nodegc-owner")
		if dep == nil {
			t.Fatal("no Deployment nodegc-owner")
		}
		r, _, _ := unstructured.NestedFieldNoCopy(dep.Object, "spec", "replicas")
		s, _, _ := unstructured.NestedString(dep.Object, "spec", "strategy", "type")
		return toInt64(r), s
	}
	if r, s := strategy(append(noLE, "--set", "ownerGC.replicas=1")...); r != 1 || s != "Recreate" {
		t.Errorf("without leader election, ownerGC.replicas 1: replicas %d, strategy %q; want 1, Recreate", r, s)
	}
	if r, s := strategy(); r != 2 || s == "Recreate" {
		t.Errorf("defaults: replicas %d, strategy %q; want 2, rolling", r, s)
	}
	// ownerGC.mode off or auto: no Deployment, so nothing to refuse.
	render(t, "nodegc", append(noLE, "--set", "ownerGC.mode=off")...)
}

// TestChartLinuxNodes: both workloads run on Linux amd64 nodes only (make
// image builds for amd64 alone), beside any nodeSelector of the values. The
// node agent tolerates every taint, so without the selector it would land
// on Windows, arm64 and virtual nodes, where it never runs (exec format
// error on arm64), and helm install --wait would never complete. The
// values' own kubernetes.io/arch wins, and "" leaves the architecture out
// (an image built for others, or for several).
func TestChartLinuxNodes(t *testing.T) {
	linuxAMD64 := map[string]string{"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
	cases := map[string]struct {
		args []string
		want map[string]map[string]string // kind/name: nodeSelector
	}{
		"defaults": {want: map[string]map[string]string{
			"DaemonSet/nodegc-node":   linuxAMD64,
			"Deployment/nodegc-owner": linuxAMD64,
		}},
		"with the values' nodeSelector": {
			args: []string{"--set", "node.nodeSelector.pool=gc", "--set", "owner.nodeSelector.node-role\\.kubernetes\\.io/infra="},
			want: map[string]map[string]string{
				"DaemonSet/nodegc-node":   {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "pool": "gc"},
				"Deployment/nodegc-owner": {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "node-role.kubernetes.io/infra": ""},
			},
		},
		"another architecture": {
			args: []string{"--set", "node.nodeSelector.kubernetes\\.io/arch=arm64", "--set", "owner.nodeSelector.kubernetes\\.io/arch=arm64"},
			want: map[string]map[string]string{
				"DaemonSet/nodegc-node":   {"kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64"},
				"Deployment/nodegc-owner": {"kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64"},
			},
		},
		"any architecture": {
			args: []string{"--set", "node.nodeSelector.kubernetes\\.io/arch=", "--set", "owner.nodeSelector.kubernetes\\.io/arch="},
			want: map[string]map[string]string{
				"DaemonSet/nodegc-node":   {"kubernetes.io/os": "linux"},
				"Deployment/nodegc-owner": {"kubernetes.io/os": "linux"},
			},
		},
	}
	for _, p := range presets {
		cases["preset "+p] = struct {
			args []string
			want map[string]map[string]string
		}{[]string{"-f", presetFile(p), "--set", "ownerGC.mode=deployment"}, cases["defaults"].want}
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			objs := render(t, "nodegc", tc.args...)
			for ref, want := range tc.want {
				kind, objName, _ := strings.Cut(ref, "/")
				o := find(objs, kind, objName)
				if o == nil {
					t.Fatalf("no %s", ref)
				}
				got, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "spec", "nodeSelector")
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s nodeSelector (-want +got):\n%s", ref, diff)
				}
			}
		})
	}
}

// TestChartLeavesVirtualNodesOut: the node agent's pods require a node that
// is not virtual (EKS Fargate, virtual-kubelet), where a DaemonSet pod never
// runs: one made there stays Pending and counts against the rollout's
// maxUnavailable, which can stop a helm upgrade's rollout before it reaches
// the real nodes. Before, nothing left them out. Another affinity given in
// the values replaces it; null removes it.
func TestChartLeavesVirtualNodesOut(t *testing.T) {
	affinity := func(args ...string) *corev1.Affinity {
		t.Helper()
		o := find(render(t, "nodegc", args...), "DaemonSet", "nodegc-node")
		if o == nil {
			t.Fatal("no DaemonSet nodegc-node")
		}
		raw, found, err := unstructured.NestedMap(o.Object, "spec", "template", "spec", "affinity")
		if err != nil || !found {
			return nil
		}
		var a corev1.Affinity
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &a); err != nil {
			t.Fatal(err)
		}
		return &a
	}
	want := []corev1.NodeSelectorRequirement{
		{Key: "eks.amazonaws.com/compute-type", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"fargate"}},
		{Key: "type", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"virtual-kubelet"}},
	}
	for _, args := range [][]string{nil, {"-f", presetFile(presets[0]), "--set", "ownerGC.mode=deployment"}} {
		a := affinity(args...)
		if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil ||
			len(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) != 1 {
			t.Fatalf("%q: node agent affinity %+v; want one required node selector term", args, a)
		}
		if diff := cmp.Diff(want, a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions); diff != "" {
			t.Errorf("%q: node agent's required node affinity (-want +got):\n%s", args, diff)
		}
	}
	if a := affinity("--set", "node.affinity=null"); a != nil {
		t.Errorf("node.affinity=null: affinity %+v, want none", a)
	}
}

// TestChartRefusesNodeName: config.nodeName fails the render, saying that
// NODE_NAME names each node: the one ConfigMap is every node's, so any
// name in it is wrong on every node but one.
func TestChartRefusesNodeName(t *testing.T) {
	msg := renderError(t, "--set", "config.nodeName=worker-1")
	for _, want := range []string{"config.nodeName", `"worker-1"`, "NODE_NAME"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	// Empty is unset.
	renderedConfig(t, render(t, "nodegc", "--set", "config.nodeName="))
}

// TestChartMountPathsDistinct: node paths that coincide (a runtime socket
// in the containerd root, whose directory is then mounted twice; a state
// directory that is the pod logs directory) fail the render, naming both
// values: the API server refuses a pod with two volume mounts at one path.
// State and log directories that nest fail it too, as the agent refuses
// them (before, the chart rendered them and every agent crash-looped).
func TestChartMountPathsDistinct(t *testing.T) {
	cases := map[string]struct {
		args []string
		want []string
	}{
		"socket in the containerd root": {
			args: []string{"--set", "runtime.socket=/var/lib/containerd/containerd.sock"},
			want: []string{"runtime.socket", "runtime.containerdRoot", "/var/lib/containerd"},
		},
		"state in the pod logs": {
			args: []string{"--set", "stateDirectory=/var/log/pods/"},
			want: []string{"stateDirectory", "podLogsDirectory", "/var/log/pods"},
		},
		"pod logs at the configuration's mount": {
			args: []string{"--set", "podLogsDirectory=/etc/nodegc"},
			want: []string{"podLogsDirectory", "/etc/nodegc"},
		},
		// The agent refuses nested state and log directories: the chart
		// refuses them too, or every agent would crash-loop.
		"state under the pod logs": {
			args: []string{"--set", "stateDirectory=/var/log/pods/nodegc"},
			want: []string{"stateDirectory", `"/var/log/pods/nodegc"`, "lies in podLogsDirectory", "the agent refuses it"},
		},
		"container logs under the state": {
			args: []string{"--set", "containerLogsDirectory=/var/lib/nodegc/links"},
			want: []string{"containerLogsDirectory", "lies in stateDirectory"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			renderRefused(t, tc.args, tc.want...)
		})
	}
	// Nested paths are distinct mounts, which the API server takes.
	render(t, "nodegc", "--set", "runtime.socket=/var/lib/containerd/run/containerd.sock")
}

// TestChartConfigNull: config null (or empty) renders the agent's defaults
// beside the fields the chart owns, NOTES.txt included (it names the
// election's Lease).
func TestChartConfigNull(t *testing.T) {
	for _, set := range []string{"config=null", "config=", "config.leaderElection=null"} {
		t.Run(set, func(t *testing.T) {
			objs := render(t, "nodegc", "--set", set)
			cfg := renderedConfig(t, objs)
			if cfg.LeaderElection.ResourceNamespace != "nodegc" || cfg.StateDirectory != "/var/lib/nodegc" {
				t.Errorf("leaderElection.resourceNamespace %q, stateDirectory %q: want nodegc, /var/lib/nodegc",
					cfg.LeaderElection.ResourceNamespace, cfg.StateDirectory)
			}
		})
	}
}

// TestChartRefusesOwnedConfigFields: a config field the chart sets from a
// chart value (a node path, a port, the election's namespace) fails the
// render when given another value, naming the chart value to set instead:
// the chart would otherwise override it without a word (on k3s, a
// config.containerRuntimeEndpoint would leave the agent on the default
// socket's directory, which does not exist there). The chart's own value
// is accepted (a config copied from `nodegc config defaults`).
func TestChartRefusesOwnedConfigFields(t *testing.T) {
	cases := map[string][]string{
		"config.stateDirectory=/data/x":                                              {"config.stateDirectory", `"/data/x"`, "chart value stateDirectory"},
		"config.containerRuntimeEndpoint=unix:///run/k3s/containerd/containerd.sock": {"config.containerRuntimeEndpoint", "chart value runtime.socket"},
		"config.metricsBindAddress=127.0.0.1:10281":                                  {"config.metricsBindAddress", "chart value ports.metrics"},
		"config.healthzBindAddress=:9999":                                            {"config.healthzBindAddress", "chart value ports.healthz"},
		"config.containerGC.podLogsDirectory=/data/pods":                             {"config.containerGC.podLogsDirectory", "chart value podLogsDirectory"},
		"config.containerGC.containerLogsDirectory=/data/containers":                 {"config.containerGC.containerLogsDirectory", "chart value containerLogsDirectory"},
		"config.leaderElection.resourceNamespace=kube-system":                        {"config.leaderElection.resourceNamespace", "release's namespace"},
		// Neither workload mounts a kubeconfig: every pod of both would exit at start.
		"config.clientConnection.kubeconfig=/etc/kubernetes/kubelet.conf": {"config.clientConnection.kubeconfig", `"/etc/kubernetes/kubelet.conf"`, "ServiceAccount token", "not supported by this chart"},
		"config.clientConnection.kubeconfig=kubeconfig":                   {"config.clientConnection.kubeconfig", "ServiceAccount token"},
	}
	for set, want := range cases {
		t.Run(set, func(t *testing.T) {
			renderRefused(t, []string{"--set", set}, want...)
		})
	}
	// The values the chart would set anyway, and empty (unset), render.
	renderedConfig(t, render(t, "nodegc",
		"--set", "config.stateDirectory=/var/lib/nodegc",
		"--set", "config.containerRuntimeEndpoint=unix:///run/containerd/containerd.sock",
		"--set", "config.metricsBindAddress=:10281",
		"--set", "config.healthzBindAddress=",
		"--set", "config.containerGC.podLogsDirectory=/var/log/pods",
		"--set", "config.leaderElection.resourceNamespace=nodegc"))
}

// TestChartPathValues: node paths holding characters YAML reads as syntax
// (" #", ": ", a leading "{") render, and reach the hostPath, the mount and
// the configuration as given; a relative path, or one that is the host's
// root, fails the render naming the value: the agent would refuse a
// relative one at start, in a crash loop on every node, and / would mount
// the whole host.
func TestChartPathValues(t *testing.T) {
	odd := map[string]string{
		"stateDirectory":         "/data/a #1",
		"podLogsDirectory":       "/data/x: y",
		"containerLogsDirectory": "/data/{logs}",
		"runtime.containerdRoot": "/data/'root'",
		"runtime.socket":         `/data/"run"/c.sock`,
	}
	var args []string
	for k, v := range odd {
		args = append(args, "--set-string", k+"="+v)
	}
	objs := render(t, "nodegc", args...)
	cfg := renderedConfig(t, objs)
	if cfg.StateDirectory != odd["stateDirectory"] || cfg.ContainerGC.PodLogsDirectory != odd["podLogsDirectory"] ||
		cfg.ContainerGC.ContainerLogsDirectory != odd["containerLogsDirectory"] || cfg.ContainerRuntimeEndpoint != "unix://"+odd["runtime.socket"] {
		t.Errorf("configuration paths: state %q, pod logs %q, container logs %q, runtime %q; want %v",
			cfg.StateDirectory, cfg.ContainerGC.PodLogsDirectory, cfg.ContainerGC.ContainerLogsDirectory, cfg.ContainerRuntimeEndpoint, odd)
	}
	hostPaths := hostPathsOf(podSpec(t, find(objs, "DaemonSet", "nodegc-node")))
	want := map[string]string{
		"runtime-dir":     filepath.Dir(odd["runtime.socket"]),
		"containerd-root": odd["runtime.containerdRoot"],
		"state":           odd["stateDirectory"],
		"pod-logs":        odd["podLogsDirectory"],
		"container-logs":  odd["containerLogsDirectory"],
	}
	if diff := cmp.Diff(want, hostPaths); diff != "" {
		t.Errorf("hostPath volumes (-want +got):\n%s", diff)
	}

	for value, path := range map[string]string{
		"stateDirectory":         "relative",
		"podLogsDirectory":       "var/log/pods",
		"containerLogsDirectory": "./logs",
		"runtime.containerdRoot": "",
		"runtime.socket":         "containerd.sock",
	} {
		t.Run(value+"="+path, func(t *testing.T) {
			renderRefused(t, []string{"--set-string", value + "=" + path}, value, fmt.Sprintf("%q", path), "not an absolute path")
		})
	}
	for _, value := range []string{"stateDirectory", "podLogsDirectory", "runtime.containerdRoot"} {
		t.Run(value+" in /", func(t *testing.T) {
			renderRefused(t, []string{"--set-string", value + "=/var/.."}, value, "whole host")
		})
	}
}

// TestChartPortsRefused: a port of 0 (the configuration's "off") fails the
// render, saying the chart cannot turn that server off and why (the probes
// and the scrape objects use it), rather than rendering a containerPort 0,
// which the API server refuses at install; so does a value that is not a
// port number, and one port for both servers, as hack/render-deploy.sh
// refuses it: the DaemonSet's pods would hold one host port twice, which
// the API server refuses at every pod create, never at the install.
func TestChartPortsRefused(t *testing.T) {
	cases := map[string][]string{
		"ports.metrics=10280": {"ports.healthz and ports.metrics are both 10280", "host port", "own port"},
		"ports.healthz=10281": {"ports.healthz and ports.metrics are both 10281"},
		"ports.metrics=0":     {"ports.metrics 0", "cannot turn the metrics server off", "PodMonitor", "1 to 65535"},
		"ports.healthz=0":     {"ports.healthz 0", "cannot turn the healthz server off", "probes", "1 to 65535"},
		"ports.metrics=null":  {"ports.metrics is empty"},
		// The values' schema refuses these, and the templates where it
		// is skipped.
		"ports.metrics=65536": {"at '/ports/metrics': maximum: got 65,536, want 65,535"},
		"ports.healthz=-1":    {"at '/ports/healthz': minimum: got -1"},
		"ports.metrics=1.5":   {"at '/ports/metrics': got string, want integer"},
	}
	skipped := map[string][]string{
		"ports.metrics=65536": {"ports.metrics 65536", "not a port number"},
		"ports.healthz=-1":    {"ports.healthz -1", "not a port number"},
		"ports.metrics=1.5":   {"ports.metrics", "1.5", "not a port number"},
	}
	check := func(t *testing.T, msg string, want []string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Errorf("error %q does not say %q", msg, w)
			}
		}
	}
	for set, want := range cases {
		t.Run(set, func(t *testing.T) {
			check(t, renderError(t, "--set", set), want)
			if w, ok := skipped[set]; ok {
				check(t, renderError(t, "--set", set, "--skip-schema-validation"), w)
			}
		})
	}
	render(t, "nodegc", "--set", "ports.metrics=1", "--set", "ports.healthz=65535")
}

// TestChartRuntimeRootMayBeAbsent: the runtime's root (runtime.containerdRoot)
// is mounted with hostPath type DirectoryOrCreate, with every preset: on a
// node without it (CRI-O with the containerd default, a mistyped root) the
// kubelet's type check would otherwise keep the pod in ContainerCreating;
// made empty, the agent starts, runs the container GC and reports the
// image filesystem it cannot read. The socket's directory stays type
// Directory: without the runtime's socket the agent can do nothing.
func TestChartRuntimeRootMayBeAbsent(t *testing.T) {
	for _, p := range append([]string{""}, presets...) {
		name, args := p, []string{"-f", presetFile(p)}
		if p == "" {
			name, args = "defaults", nil
		}
		t.Run(name, func(t *testing.T) {
			spec := podSpec(t, find(render(t, "nodegc", args...), "DaemonSet", "nodegc-node"))
			types := map[string]string{}
			vols, _, _ := unstructured.NestedSlice(spec, "volumes")
			for _, v := range vols {
				vm := v.(map[string]any)
				if typ, ok, _ := unstructured.NestedString(vm, "hostPath", "type"); ok {
					types[vm["name"].(string)] = typ
				}
			}
			if types["containerd-root"] != "DirectoryOrCreate" || types["runtime-dir"] != "Directory" {
				t.Errorf("hostPath types %v: want containerd-root DirectoryOrCreate, runtime-dir Directory", types)
			}
		})
	}
}

// TestChartRuntimeRootSeesLaterMounts: the runtime's root, which holds the
// image filesystem, is mounted without propagation by default, with every
// preset (each changes only its path): every host accepts that, where
// HostToContainer makes the runtime refuse the container on a host whose /
// is a private mount. runtime.containerdRootPropagation HostToContainer
// turns it on, so that a filesystem mounted at or under the root on the
// host after the agent started is the one the agent reads; no other mount
// propagates.
func TestChartRuntimeRootSeesLaterMounts(t *testing.T) {
	propagation := func(t *testing.T, args ...string) map[string]string {
		spec := podSpec(t, find(render(t, "nodegc", args...), "DaemonSet", "nodegc-node"))
		ctrs, _, _ := unstructured.NestedSlice(spec, "containers")
		ms, _, _ := unstructured.NestedSlice(ctrs[0].(map[string]any), "volumeMounts")
		got := map[string]string{}
		for _, m := range ms {
			mm := m.(map[string]any)
			if p, ok := mm["mountPropagation"].(string); ok {
				got[mm["name"].(string)] = p
			}
		}
		return got
	}
	for _, p := range append([]string{""}, presets...) {
		name, args := p, []string{"-f", presetFile(p)}
		if p == "" {
			name, args = "defaults", nil
		}
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(map[string]string{"containerd-root": "None"}, propagation(t, args...)); diff != "" {
				t.Errorf("mount propagation by mount (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("HostToContainer", func(t *testing.T) {
		if diff := cmp.Diff(map[string]string{"containerd-root": "HostToContainer"}, propagation(t, "--set", "runtime.containerdRootPropagation=HostToContainer")); diff != "" {
			t.Errorf("mount propagation by mount (-want +got):\n%s", diff)
		}
	})
}

// TestChartOwnerPrefersControlPlane: the owner collector, whose rights are
// kube-controller-manager's collector's (get on pods/exec and nodes/proxy
// among them), prefers control-plane nodes and tolerates their NoSchedule
// taint, as kube-controller-manager runs there, by default: preferred, so
// that a cluster without a visible control-plane node (managed) or with
// one node still runs it. The values' tolerations are kept beside it, the
// control-plane one not repeated; owner.preferControlPlane false renders
// neither.
func TestChartOwnerPrefersControlPlane(t *testing.T) {
	cp := map[string]any{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}
	infra := map[string]any{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}
	preference := []any{map[string]any{"weight": int64(100), "preference": map[string]any{"matchExpressions": []any{
		map[string]any{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}}}}}
	cases := map[string]struct {
		args        []string
		tolerations []any
		preferred   []any
	}{
		"defaults":        {nil, []any{cp}, preference},
		"kind preset":     {[]string{"-f", presetFile("kind"), "--set", "ownerGC.mode=deployment"}, []any{cp}, preference},
		"off":             {[]string{"--set", "owner.preferControlPlane=false"}, nil, nil},
		"own tolerations": {[]string{"-f", "testdata/owner-tolerations.yaml"}, []any{infra, cp}, preference},
		"own tolerations with the control-plane one": {
			[]string{"-f", "testdata/owner-tolerations.yaml", "--set", "owner.tolerations[1].key=node-role.kubernetes.io/control-plane",
				"--set", "owner.tolerations[1].operator=Exists", "--set", "owner.tolerations[1].effect=NoSchedule"},
			[]any{infra, cp}, preference},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			spec := podSpec(t, find(render(t, "nodegc", tc.args...), "Deployment", "nodegc-owner"))
			tolerations, _, _ := unstructured.NestedSlice(spec, "tolerations")
			if diff := cmp.Diff(tc.tolerations, tolerations, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("tolerations (-want +got):\n%s", diff)
			}
			preferred, _, _ := unstructured.NestedSlice(spec, "affinity", "nodeAffinity", "preferredDuringSchedulingIgnoredDuringExecution")
			if diff := cmp.Diff(tc.preferred, normalizeNumbers(preferred), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("preferred node affinity (-want +got):\n%s", diff)
			}
			if _, ok, _ := unstructured.NestedSlice(spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"); ok {
				t.Errorf("a required node affinity: a cluster without a control-plane node to be seen would not run the owner collector")
			}
		})
	}
}

// normalizeNumbers returns v with every float64 (YAML numbers decode as
// float64) that is a whole number as an int64, through maps and lists.
func normalizeNumbers(v any) any {
	switch x := v.(type) {
	case float64:
		if x == float64(int64(x)) {
			return int64(x)
		}
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalizeNumbers(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = normalizeNumbers(e)
		}
		return out
	}
	return v
}

// TestChartConfigMapMerge: what values.yaml and README say of config's
// maps, which Helm merges into the chart's: a {} keeps the chart's keys
// (config: {} its thresholds, evictionHard: {} both signals), null removes
// one (each eviction signal null: evictionHard {}, the kubelet does not
// evict on disk) or all (config: null: the agent's own defaults).
func TestChartConfigMapMerge(t *testing.T) {
	chartEviction := map[string]string{"imagefs.available": "15%", "nodefs.available": "10%"}
	cases := map[string]struct {
		args      []string
		high, low int32
		eviction  map[string]string
	}{
		"config {}":                 {[]string{"-f", "testdata/config-empty.yaml"}, 80, 75, chartEviction},
		"config null":               {[]string{"--set", "config=null"}, config.DefaultImageGCHighThresholdPercent, config.DefaultImageGCLowThresholdPercent, config.DefaultEvictionHard()},
		"evictionHard {}":           {[]string{"-f", "testdata/eviction-empty.yaml"}, 80, 75, chartEviction},
		"each eviction signal null": {[]string{"-f", "testdata/eviction-none.yaml"}, 80, 75, map[string]string{}},
		"one eviction signal null": {[]string{"--set", "config.imageGC.evictionHard.nodefs\\.available=null"}, 80, 75,
			map[string]string{"imagefs.available": "15%"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ig := renderedConfig(t, render(t, "nodegc", tc.args...)).ImageGC
			if *ig.HighThresholdPercent != tc.high || *ig.LowThresholdPercent != tc.low {
				t.Errorf("thresholds %d/%d, want %d/%d", *ig.HighThresholdPercent, *ig.LowThresholdPercent, tc.high, tc.low)
			}
			if ig.EvictionHard == nil || !cmp.Equal(tc.eviction, ig.EvictionHard) {
				t.Errorf("evictionHard %#v, want %v", ig.EvictionHard, tc.eviction)
			}
		})
	}
}

// TestChartOperatorSettings: imagePullSecrets reach both pods; image.digest
// pins both images (<repository>@<digest>, a malformed one fails the
// render); node.updateStrategy is the DaemonSet's (rollingUpdate left out
// for OnDelete); the securityContexts are the chart's by default, and the
// keys given in node/owner.securityContext are merged into them
// (seLinuxOptions for SELinux-enforcing nodes), the pod's from
// podSecurityContext.
func TestChartOperatorSettings(t *testing.T) {
	workloads := []string{"DaemonSet/nodegc-node", "Deployment/nodegc-owner"}
	get := func(objs []*unstructured.Unstructured, ref string) map[string]any {
		t.Helper()
		kind, name, _ := strings.Cut(ref, "/")
		o := find(objs, kind, name)
		if o == nil {
			t.Fatalf("no %s", ref)
		}
		return o.Object
	}
	container := func(obj map[string]any) map[string]any {
		ctrs, _, _ := unstructured.NestedSlice(obj, "spec", "template", "spec", "containers")
		return ctrs[0].(map[string]any)
	}

	t.Run("defaults", func(t *testing.T) {
		objs := render(t, "nodegc")
		wantSC := map[string]map[string]any{
			"DaemonSet/nodegc-node": {"runAsUser": int64(0), "runAsNonRoot": false, "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
				"capabilities": map[string]any{"drop": []any{"ALL"}}, "seccompProfile": map[string]any{"type": "RuntimeDefault"}},
			"Deployment/nodegc-owner": {"runAsUser": int64(65532), "runAsGroup": int64(65532), "runAsNonRoot": true, "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
				"capabilities": map[string]any{"drop": []any{"ALL"}}, "seccompProfile": map[string]any{"type": "RuntimeDefault"}},
		}
		for _, ref := range workloads {
			obj := get(objs, ref)
			if diff := cmp.Diff(wantSC[ref], normalizeNumbers(container(obj)["securityContext"])); diff != "" {
				t.Errorf("%s securityContext (-want +got):\n%s", ref, diff)
			}
			for _, field := range []string{"imagePullSecrets", "securityContext"} {
				if v, ok, _ := unstructured.NestedFieldNoCopy(obj, "spec", "template", "spec", field); ok {
					t.Errorf("%s pod %s %v, want none by default", ref, field, v)
				}
			}
			if img := container(obj)["image"]; img != "ghcr.io/nodegc/nodegc:latest" {
				t.Errorf("%s image %v, want ghcr.io/nodegc/nodegc:latest (hack/render-deploy.sh replaces that)", ref, img)
			}
		}
		strategy, _, _ := unstructured.NestedMap(get(objs, "DaemonSet/nodegc-node"), "spec", "updateStrategy")
		if diff := cmp.Diff(map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxUnavailable": "10%"}}, strategy); diff != "" {
			t.Errorf("DaemonSet updateStrategy (-want +got):\n%s", diff)
		}
	})

	t.Run("set", func(t *testing.T) {
		digest := "sha256:" + strings.Repeat("ab", 32)
		objs := render(t, "nodegc",
			"--set", "imagePullSecrets[0].name=regcred",
			"--set", "image.repository=registry.example/nodegc", "--set", "image.digest="+digest,
			"--set", "node.securityContext.seLinuxOptions.type=spc_t",
			"--set", "owner.securityContext.seLinuxOptions.level=s0:c1",
			"--set", "node.podSecurityContext.supplementalGroups[0]=4",
			"--set", "owner.podSecurityContext.fsGroup=65532",
			"--set", "node.updateStrategy.rollingUpdate.maxUnavailable=1")
		for _, ref := range workloads {
			obj := get(objs, ref)
			if img := container(obj)["image"]; img != "registry.example/nodegc@"+digest {
				t.Errorf("%s image %v, want registry.example/nodegc@%s", ref, img, digest)
			}
			secrets, _, _ := unstructured.NestedSlice(obj, "spec", "template", "spec", "imagePullSecrets")
			if diff := cmp.Diff([]any{map[string]any{"name": "regcred"}}, secrets); diff != "" {
				t.Errorf("%s imagePullSecrets (-want +got):\n%s", ref, diff)
			}
			sc := container(obj)["securityContext"].(map[string]any)
			if sc["readOnlyRootFilesystem"] != true || sc["seLinuxOptions"] == nil {
				t.Errorf("%s securityContext %v: want the chart's, with seLinuxOptions merged in", ref, sc)
			}
			if pod, _, _ := unstructured.NestedMap(obj, "spec", "template", "spec", "securityContext"); len(pod) != 1 {
				t.Errorf("%s pod securityContext %v, want podSecurityContext's", ref, pod)
			}
		}
		strategy, _, _ := unstructured.NestedMap(get(objs, "DaemonSet/nodegc-node"), "spec", "updateStrategy")
		if diff := cmp.Diff(map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxUnavailable": int64(1)}}, normalizeNumbers(strategy)); diff != "" {
			t.Errorf("DaemonSet updateStrategy (-want +got):\n%s", diff)
		}
	})

	t.Run("OnDelete", func(t *testing.T) {
		strategy, _, _ := unstructured.NestedMap(get(render(t, "nodegc", "--set", "node.updateStrategy.type=OnDelete"), "DaemonSet/nodegc-node"), "spec", "updateStrategy")
		if diff := cmp.Diff(map[string]any{"type": "OnDelete"}, strategy); diff != "" {
			t.Errorf("DaemonSet updateStrategy (-want +got):\n%s", diff)
		}
	})

	t.Run("bad digest", func(t *testing.T) {
		// The schema refuses it first (TestChartImageReference); the template too.
		msg := renderError(t, "--skip-schema-validation", "--set", "image.digest=latest")
		for _, want := range []string{`image.digest "latest"`, "sha256:"} {
			if !strings.Contains(msg, want) {
				t.Errorf("error %q does not say %q", msg, want)
			}
		}
	})
}

// TestChartRefusesChartFlagsInExtraArgs: node.extraArgs and owner.extraArgs
// that carry a flag the chart sets itself (--config, -c, --owner-gc, the
// bind addresses) or --kubeconfig (no file of the node's is mounted) fail
// the render, with "=" or as a separate argument, naming the chart value to
// set instead: the agent takes the last occurrence, so an extra argument
// would win over the chart's without a word (a metrics port the scrape
// objects do not scrape, probes on a port nothing serves). Other flags
// render, appended.
func TestChartRefusesChartFlagsInExtraArgs(t *testing.T) {
	cases := map[string][]string{
		"--metrics-bind-address=:9100":   {"ports.metrics"},
		"--metrics-bind-address":         {"ports.metrics"},
		"--healthz-bind-address=:9101":   {"ports.healthz"},
		"--owner-gc=auto":                {"ownerGC.mode"},
		"--owner-gc":                     {"ownerGC.mode"},
		"--config=/etc/other.yaml":       {"config"},
		"-c":                             {"config"},
		"-c=/etc/other.yaml":             {"config"},
		"-c/etc/other.yaml":              {"config"},
		"--kubeconfig=/etc/kubelet.conf": {"ServiceAccount"},
		"--kubeconfig":                   {"ServiceAccount"},
	}
	for _, workload := range []string{"node", "owner"} {
		for arg, want := range cases {
			t.Run(workload+" "+arg, func(t *testing.T) {
				// --set-json: a value holding "=" or "," as it is.
				renderRefused(t, []string{"--set-json", fmt.Sprintf(`%s.extraArgs=["--v=2",%q,"x"]`, workload, arg)},
					append([]string{workload + ".extraArgs[1]", fmt.Sprintf("%q", arg)}, want...)...)
			})
		}
	}
	objs := render(t, "nodegc", "--set-json", `node.extraArgs=["--v=4"]`, "--set-json", `owner.extraArgs=["--v=4","--vmodule=owner*=5"]`)
	for ref, want := range map[string][]string{
		"DaemonSet/nodegc-node":   {"run", "--config=/etc/nodegc/config.yaml", "--owner-gc=off", "--v=4"},
		"Deployment/nodegc-owner": {"run", "--config=/etc/nodegc/config.yaml", "--owner-gc=only", "--v=4", "--vmodule=owner*=5"},
	} {
		kind, name, _ := strings.Cut(ref, "/")
		o := find(objs, kind, name)
		if o == nil {
			t.Fatalf("no %s", ref)
		}
		if got := containerArgs(t, o); !cmp.Equal(got, want) {
			t.Errorf("%s args %q, want %q", ref, got, want)
		}
	}
}
