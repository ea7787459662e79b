// Package deploy holds nodegc's Kubernetes manifests; its tests check them
// against a real kube-apiserver.
package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/nodegc/nodegc/internal/agent"
	"github.com/nodegc/nodegc/internal/endpoint"
	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/cluster"
	"github.com/nodegc/nodegc/internal/testbed/nodegcproc"
	"github.com/nodegc/nodegc/pkg/config"
)

const manifest = "daemonset.yaml"

func readObjects(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	return decodeObjects(t, data)
}

// decodeObjects splits a multi-document manifest into its objects, skipping
// empty documents.
func decodeObjects(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []*unstructured.Unstructured
	for {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatal(err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// TestConfigMapHoldsValidConfig: the configuration shipped in the ConfigMap
// decodes strictly and validates.
func TestConfigMapHoldsValidConfig(t *testing.T) {
	var found bool
	for _, o := range readObjects(t) {
		if o.GetKind() != "ConfigMap" {
			continue
		}
		data, _, _ := unstructured.NestedString(o.Object, "data", "config.yaml")
		loaded, err := config.Decode([]byte(data))
		if err != nil {
			t.Fatalf("ConfigMap %s: %v", o.GetName(), err)
		}
		if errs := config.Validate(loaded.Config); len(errs) > 0 {
			t.Fatalf("ConfigMap %s: %v", o.GetName(), errs)
		}
		found = true
	}
	if !found {
		t.Fatal("no ConfigMap with config.yaml in " + manifest)
	}
}

// nodeAgent returns the node agent's configuration (from the ConfigMap) and
// its DaemonSet's pod spec.
func nodeAgent(t *testing.T) (*config.NodeGCConfiguration, map[string]any) {
	t.Helper()
	var (
		cfg  *config.NodeGCConfiguration
		spec map[string]any
	)
	for _, o := range readObjects(t) {
		switch {
		case o.GetKind() == "ConfigMap" && o.GetName() == "nodegc-config":
			data, _, _ := unstructured.NestedString(o.Object, "data", "config.yaml")
			loaded, err := config.Decode([]byte(data))
			if err != nil {
				t.Fatal(err)
			}
			cfg = loaded.Config
		case o.GetKind() == "DaemonSet" && o.GetName() == "nodegc-node":
			spec, _, _ = unstructured.NestedMap(o.Object, "spec", "template", "spec")
		}
	}
	if cfg == nil || spec == nil {
		t.Fatalf("%s lacks the ConfigMap nodegc-config or the DaemonSet nodegc-node", manifest)
	}
	return cfg, spec
}

// TestNodeAgentMountsRuntimeSocketDirectory: the node agent mounts the
// directory that holds the runtime socket (and the image service socket,
// when the configuration names one), at the same path, never the socket
// file itself. A restarted containerd makes a new socket file: a container
// that mounted the old file keeps its dead inode and never reaches the
// runtime again, while a directory mount shows the new file and gRPC
// redials it.
func TestNodeAgentMountsRuntimeSocketDirectory(t *testing.T) {
	cfg, spec := nodeAgent(t)
	sockets := map[string]string{"containerRuntimeEndpoint": cfg.ContainerRuntimeEndpoint}
	if cfg.ImageServiceEndpoint != "" {
		sockets["imageServiceEndpoint"] = cfg.ImageServiceEndpoint
	}
	volumes := map[string]map[string]any{}
	vols, _, _ := unstructured.NestedSlice(spec, "volumes")
	for _, v := range vols {
		vm := v.(map[string]any)
		if hp, ok := vm["hostPath"].(map[string]any); ok {
			volumes[vm["name"].(string)] = hp
		}
	}
	ctrs, _, _ := unstructured.NestedSlice(spec, "containers")
	mounts, _, _ := unstructured.NestedSlice(ctrs[0].(map[string]any), "volumeMounts")
	for field, ep := range sockets {
		socket, err := endpoint.SocketPath(ep)
		if err != nil {
			t.Fatalf("%s: %v", field, err)
		}
		dir := filepath.Dir(socket)
		var found bool
		for _, m := range mounts {
			mm := m.(map[string]any)
			name, path := mm["name"].(string), mm["mountPath"].(string)
			hp := volumes[name]
			if hp == nil {
				continue
			}
			if path == socket || hp["path"] == socket || hp["type"] == "Socket" {
				t.Errorf("volume %s mounts the socket file %s (hostPath type %v): a restarted runtime's new socket would never be seen; mount %s instead", name, socket, hp["type"], dir)
			}
			if path != dir {
				continue
			}
			found = true
			if hp["path"] != dir || hp["type"] != "Directory" {
				t.Errorf("volume %s: hostPath %v (type %v), want %s (type Directory)", name, hp["path"], hp["type"], dir)
			}
			if ro, _ := mm["readOnly"].(bool); !ro {
				t.Errorf("mount of %s is writable; connecting to a socket needs no write access to its directory", dir)
			}
		}
		if !found {
			t.Errorf("%s %s: no hostPath volume mounted at the socket's directory %s", field, ep, dir)
		}
	}
}

// TestNodeAgentProbes: the liveness probe asks /healthz, which fails only
// when a GC loop is wedged, and gives it room; the readiness probe asks
// /readyz and waits longer than /readyz waits for the runtime.
func TestNodeAgentProbes(t *testing.T) {
	_, spec := nodeAgent(t)
	ctrs, _, _ := unstructured.NestedSlice(spec, "containers")
	c := ctrs[0].(map[string]any)
	// A number of the probe, or the API's default when unset.
	num := func(kind, field string, def int64) int64 {
		switch v := c[kind].(map[string]any)[field].(type) {
		case float64: // YAML numbers decode as float64
			return int64(v)
		case int64:
			return v
		}
		return def
	}
	probe := func(kind string) (path string, timeout, period, failures int64) {
		path, _, _ = unstructured.NestedString(c, kind, "httpGet", "path")
		return path, num(kind, "timeoutSeconds", 1), num(kind, "periodSeconds", 10), num(kind, "failureThreshold", 3)
	}
	if path, timeout, period, failures := probe("livenessProbe"); path != "/healthz" || timeout < 5 || period*failures > 120 {
		t.Errorf("livenessProbe: %s every %ds, timeout %ds, %d failures; want /healthz, a timeout of at least 5s (it answers from memory, but the agent may be CPU-throttled) and a restart within 2 minutes of the wedge being seen",
			path, period, timeout, failures)
	}
	if path, timeout, _, _ := probe("readinessProbe"); path != "/readyz" || time.Duration(timeout)*time.Second <= agent.RuntimeCheckTimeout {
		t.Errorf("readinessProbe: %s, timeout %ds; want /readyz with a timeout above the %v /readyz waits for the runtime", path, timeout, agent.RuntimeCheckTimeout)
	}
}

// TestApplyAndRBAC applies the manifests to a real kube-apiserver, with
// server-side dry-run first and then for real, and checks the RBAC with
// SubjectAccessReviews: the node agent cannot delete Deployments nor read
// Secrets, and has only what its code uses (list and watch of pods and
// nodes, core/v1 events, get of node leases); the owner collector can delete Deployments, and
// writes no events.k8s.io events either.
func TestApplyAndRBAC(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	ctx := t.Context()
	rc := c.RESTConfig()
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	disco, err := discovery.NewDiscoveryClientForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := restmapper.GetAPIGroupResources(disco)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	objs := readObjects(t)

	apply := func(o *unstructured.Unstructured, dryRun bool) error {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return err
		}
		data, err := o.MarshalJSON()
		if err != nil {
			return err
		}
		opts := metav1.PatchOptions{FieldManager: "nodegc-test", Force: ptr.To(true)}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if ns := o.GetNamespace(); ns != "" {
			ri = dyn.Resource(m.Resource).Namespace(ns)
		}
		_, err = ri.Patch(ctx, o.GetName(), types.ApplyPatchType, data, opts)
		return err
	}
	// The namespace must exist for namespaced objects, even in dry-run.
	// kube-apiserver creates kube-node-lease (the node agent's Role for
	// its Node's lease is there) soon after it starts.
	testbed.WaitFor(t, 30*time.Second, "namespace kube-node-lease", func() bool {
		_, err := c.Client().CoreV1().Namespaces().Get(ctx, corev1.NamespaceNodeLease, metav1.GetOptions{})
		return err == nil
	})
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			if err := apply(o, true); err != nil {
				t.Fatalf("dry-run %s %s: %v", o.GetKind(), o.GetName(), err)
			}
			if err := apply(o, false); err != nil {
				t.Fatalf("apply %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	}
	for _, dryRun := range []bool{true, false} {
		for _, o := range objs {
			if err := apply(o, dryRun); err != nil {
				t.Fatalf("apply (dry-run %v) %s %s/%s: %v", dryRun, o.GetKind(), o.GetNamespace(), o.GetName(), err)
			}
		}
	}
	kinds := map[string]bool{}
	for _, o := range objs {
		kinds[o.GetKind()] = true
	}
	for _, k := range []string{"Namespace", "ConfigMap", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "DaemonSet", "Deployment"} {
		if !kinds[k] {
			t.Errorf("%s has no %s", manifest, k)
		}
	}
	ds, err := c.Client().AppsV1().DaemonSets("nodegc").Get(ctx, "nodegc-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if args := ds.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--owner-gc=off") {
		t.Errorf("DaemonSet args %v lack --owner-gc=off", args)
	}

	const node, owner = "system:serviceaccount:nodegc:nodegc-node", "system:serviceaccount:nodegc:nodegc-owner"
	cases := []struct {
		user    string
		attrs   authorizationv1.ResourceAttributes
		allowed bool
	}{
		{node, authorizationv1.ResourceAttributes{Group: "apps", Resource: "deployments", Verb: "delete", Namespace: "default"}, false},
		{node, authorizationv1.ResourceAttributes{Resource: "secrets", Verb: "get", Namespace: "default"}, false},
		{node, authorizationv1.ResourceAttributes{Resource: "secrets", Verb: "list"}, false},
		{node, authorizationv1.ResourceAttributes{Resource: "pods", Verb: "delete", Namespace: "default"}, false},
		{node, authorizationv1.ResourceAttributes{Resource: "pods", Verb: "list"}, true},
		{node, authorizationv1.ResourceAttributes{Resource: "pods", Verb: "watch"}, true},
		// Informers only: list and watch, never get.
		{node, authorizationv1.ResourceAttributes{Resource: "nodes", Verb: "list"}, true},
		{node, authorizationv1.ResourceAttributes{Resource: "nodes", Verb: "watch"}, true},
		{node, authorizationv1.ResourceAttributes{Resource: "nodes", Verb: "get"}, false},
		{node, authorizationv1.ResourceAttributes{Resource: "pods", Verb: "get", Namespace: "default"}, false},
		// Events through core/v1 only.
		{node, authorizationv1.ResourceAttributes{Resource: "events", Verb: "create", Namespace: "default"}, true},
		{node, authorizationv1.ResourceAttributes{Resource: "events", Verb: "patch", Namespace: "default"}, true},
		// The Node's events are in default (client-go's recorder puts a
		// cluster-scoped object's there): nowhere else.
		{node, authorizationv1.ResourceAttributes{Resource: "events", Verb: "create", Namespace: "kube-system"}, false},
		{node, authorizationv1.ResourceAttributes{Resource: "events", Verb: "patch", Namespace: "tenant-a"}, false},
		{node, authorizationv1.ResourceAttributes{Group: "events.k8s.io", Resource: "events", Verb: "create", Namespace: "default"}, false},
		{owner, authorizationv1.ResourceAttributes{Resource: "events", Verb: "create", Namespace: "default"}, true},
		{owner, authorizationv1.ResourceAttributes{Group: "events.k8s.io", Resource: "events", Verb: "create", Namespace: "default"}, false},
		{node, authorizationv1.ResourceAttributes{Group: "coordination.k8s.io", Resource: "leases", Verb: "update", Namespace: "nodegc"}, false},
		// Its Node's lease, which the kubelet renews: get only, in
		// kube-node-lease only.
		{node, authorizationv1.ResourceAttributes{Group: "coordination.k8s.io", Resource: "leases", Verb: "get", Namespace: "kube-node-lease", Name: "node-a"}, true},
		{node, authorizationv1.ResourceAttributes{Group: "coordination.k8s.io", Resource: "leases", Verb: "list", Namespace: "kube-node-lease"}, false},
		{node, authorizationv1.ResourceAttributes{Group: "coordination.k8s.io", Resource: "leases", Verb: "watch", Namespace: "kube-node-lease"}, false},
		{node, authorizationv1.ResourceAttributes{Group: "coordination.k8s.io", Resource: "leases", Verb: "update", Namespace: "kube-node-lease", Name: "node-a"}, false},
		{node, authorizationv1.ResourceAttributes{Group: "coordination.k8s.io", Resource: "leases", Verb: "get", Namespace: "kube-system"}, false},
		{owner, authorizationv1.ResourceAttributes{Group: "apps", Resource: "deployments", Verb: "delete", Namespace: "default"}, true},
		{owner, authorizationv1.ResourceAttributes{Group: "apps", Resource: "replicasets", Verb: "patch", Namespace: "default"}, true},
		{owner, authorizationv1.ResourceAttributes{Resource: "configmaps", Verb: "watch"}, true},
		{owner, authorizationv1.ResourceAttributes{Group: "coordination.k8s.io", Resource: "leases", Verb: "update", Namespace: "nodegc"}, true},
		{owner, authorizationv1.ResourceAttributes{Group: "coordination.k8s.io", Resource: "leases", Verb: "update", Namespace: "kube-system"}, false},
		{owner, authorizationv1.ResourceAttributes{Group: "apps", Resource: "deployments", Verb: "create", Namespace: "default"}, false},
		// get on every resource includes these subresources, as for
		// kube-controller-manager's collector (README, Deploy, says so):
		// API servers up to 1.34 authorize exec, attach and port-forward
		// over WebSocket with get, and nodes/proxy is the kubelet's API.
		// The node agent has none of them.
		{owner, authorizationv1.ResourceAttributes{Resource: "pods", Subresource: "exec", Verb: "get", Namespace: "kube-system"}, true},
		{owner, authorizationv1.ResourceAttributes{Resource: "pods", Subresource: "attach", Verb: "get", Namespace: "kube-system"}, true},
		{owner, authorizationv1.ResourceAttributes{Resource: "pods", Subresource: "portforward", Verb: "get", Namespace: "kube-system"}, true},
		{owner, authorizationv1.ResourceAttributes{Resource: "nodes", Subresource: "proxy", Verb: "get"}, true},
		{owner, authorizationv1.ResourceAttributes{Resource: "pods", Subresource: "exec", Verb: "create", Namespace: "kube-system"}, false},
		{node, authorizationv1.ResourceAttributes{Resource: "pods", Subresource: "exec", Verb: "get", Namespace: "kube-system"}, false},
		{node, authorizationv1.ResourceAttributes{Resource: "nodes", Subresource: "proxy", Verb: "get"}, false},
	}
	for _, tc := range cases {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: tc.user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:nodegc", "system:authenticated"},
			ResourceAttributes: &tc.attrs,
		}}
		got, err := c.Client().AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != tc.allowed {
			t.Errorf("%s may %s %s/%s.%s in %q: %v, want %v", tc.user, tc.attrs.Verb, tc.attrs.Resource, tc.attrs.Subresource, tc.attrs.Group, tc.attrs.Namespace, got.Status.Allowed, tc.allowed)
		}
	}
	// And through impersonation: the node agent's identity is refused a
	// Deployment delete by the API server itself.
	asNode, err := dynamic.NewForConfig(c.RESTConfigAs(node, "system:serviceaccounts", "system:serviceaccounts:nodegc", "system:authenticated"))
	if err != nil {
		t.Fatal(err)
	}
	deployments := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	err = asNode.Resource(deployments).Namespace("nodegc").Delete(ctx, "nodegc-owner", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsForbidden(err) {
		t.Errorf("node agent deleting a Deployment: %v, want Forbidden", err)
	}

	restartAfterConfigEdit(t, c)
}

// restartAfterConfigEdit runs the command the manifest's header gives for
// after a ConfigMap edit (the agents read it only at start, and the pods'
// checksum/config stays as rendered) against the applied manifest, and
// checks that it changed both workloads' pod templates, which rolls them.
func restartAfterConfigEdit(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	ctx := t.Context()
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var cmd string
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "#") {
			break // the header ends at the first object
		}
		if l := strings.TrimSpace(strings.TrimPrefix(line, "#")); strings.HasPrefix(l, "kubectl ") && strings.Contains(l, "rollout restart") {
			cmd = l
		}
	}
	if cmd == "" {
		t.Fatalf("%s's header gives no kubectl rollout restart for after a ConfigMap edit", manifest)
	}
	args := append([]string{"--kubeconfig=" + c.KubeconfigPath()}, strings.Fields(strings.TrimPrefix(cmd, "kubectl "))...)
	out, err := exec.CommandContext(ctx, testbed.Binary(t, "kubectl"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	ds, err := c.Client().AppsV1().DaemonSets("nodegc").Get(ctx, "nodegc-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dep, err := c.Client().AppsV1().Deployments("nodegc").Get(ctx, "nodegc-owner", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, ann := range map[string]map[string]string{"DaemonSet nodegc-node": ds.Spec.Template.Annotations, "Deployment nodegc-owner": dep.Spec.Template.Annotations} {
		if ann["kubectl.kubernetes.io/restartedAt"] == "" {
			t.Errorf("%s: %s left its pod template as it was (annotations %v): its pods would keep the old configuration", cmd, name, ann)
		}
	}
}

// TestGOMAXPROCSFollowsCPULimit: both workloads set GOMAXPROCS to their CPU
// limit rounded up, as the kubelet resolves a resourceFieldRef (500m and 1
// give 1), the value the benchmarks run nodegc with. Go's own default never
// goes below 2, so under a limit of one CPU two Ps would share it, at more
// CPU per collected object.
func TestGOMAXPROCSFollowsCPULimit(t *testing.T) {
	eachWorkloadContainer(t, func(kind, name string, c corev1.Container) {
		procs, err := gomaxprocs(c)
		if err != nil {
			t.Errorf("%s %s, container %s: %v", kind, name, c.Name, err)
			return
		}
		// The benchmarks run nodegc with this value, to measure it as deployed.
		if fmt.Sprint(procs) != nodegcproc.DeployedGOMAXPROCS {
			t.Errorf("%s %s, container %s: GOMAXPROCS resolves to %d with limits.cpu %s; the benchmarks run nodegc with %s (nodegcproc.DeployedGOMAXPROCS)",
				kind, name, c.Name, procs, c.Resources.Limits.Cpu(), nodegcproc.DeployedGOMAXPROCS)
		}
	})
}

// eachWorkloadContainer calls f with each container of the manifest's
// DaemonSet and Deployment, and fails the test when either is missing.
func eachWorkloadContainer(t *testing.T, f func(kind, name string, c corev1.Container)) {
	t.Helper()
	seen := map[string]bool{}
	for _, o := range readObjects(t) {
		if o.GetKind() != "DaemonSet" && o.GetKind() != "Deployment" {
			continue
		}
		var spec corev1.PodSpec
		m, _, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec")
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &spec); err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
		for _, c := range spec.Containers {
			seen[o.GetKind()] = true
			f(o.GetKind(), o.GetName(), c)
		}
	}
	if !seen["DaemonSet"] || !seen["Deployment"] {
		t.Fatalf("%s lacks the DaemonSet or the Deployment (found %v)", manifest, seen)
	}
}

// gomaxprocs is the GOMAXPROCS the kubelet gives c: its env's
// resourceFieldRef on its own limits.cpu, rounded up to the divisor.
func gomaxprocs(c corev1.Container) (int64, error) {
	for _, e := range c.Env {
		if e.Name != "GOMAXPROCS" {
			continue
		}
		ref := (*corev1.ResourceFieldSelector)(nil)
		if e.ValueFrom != nil {
			ref = e.ValueFrom.ResourceFieldRef
		}
		if ref == nil || ref.Resource != "limits.cpu" || (ref.ContainerName != "" && ref.ContainerName != c.Name) {
			return 0, fmt.Errorf("GOMAXPROCS is not taken from the container's own limits.cpu (value %q, resourceFieldRef %+v)", e.Value, ref)
		}
		limit, ok := c.Resources.Limits[corev1.ResourceCPU]
		if !ok {
			return 0, errors.New("no CPU limit: GOMAXPROCS would be the node's CPU count")
		}
		divisor := ref.Divisor
		if divisor.IsZero() {
			divisor = resource.MustParse("1")
		}
		return (limit.MilliValue() + divisor.MilliValue() - 1) / divisor.MilliValue(), nil
	}
	return 0, errors.New("no GOMAXPROCS in env: Go would run 2 Ps under a limit of one CPU")
}

// TestPriorityClass: the node agent is system-node-critical, the owner
// collector system-cluster-critical: under DiskPressure the kubelet admits
// only critical pods and evicts them last, and a node agent replaced there
// must start. Both classes exist in every kube-apiserver (TestApplyAndRBAC
// applies them).
func TestPriorityClass(t *testing.T) {
	want := map[string]string{"DaemonSet": "system-node-critical", "Deployment": "system-cluster-critical"}
	seen := 0
	for _, o := range readObjects(t) {
		class, ok := want[o.GetKind()]
		if !ok {
			continue
		}
		seen++
		if got, _, _ := unstructured.NestedString(o.Object, "spec", "template", "spec", "priorityClassName"); got != class {
			t.Errorf("%s %s priorityClassName %q, want %s", o.GetKind(), o.GetName(), got, class)
		}
	}
	if seen != len(want) {
		t.Fatalf("%s: %d workloads, want the DaemonSet and the Deployment", manifest, seen)
	}
}

// TestWorkloadsMountTheirToken: both workloads set
// automountServiceAccountToken: true on their pods, which wins over their
// ServiceAccount's: a policy that turns the ServiceAccount default off would
// otherwise make the node agent run node-only, quietly (its image GC's
// scheduled rule off), and the owner collector refuse to start.
func TestWorkloadsMountTheirToken(t *testing.T) {
	seen := 0
	for _, o := range readObjects(t) {
		if o.GetKind() != "DaemonSet" && o.GetKind() != "Deployment" {
			continue
		}
		seen++
		if got, found, _ := unstructured.NestedBool(o.Object, "spec", "template", "spec", "automountServiceAccountToken"); !found || !got {
			t.Errorf("%s %s automountServiceAccountToken %v (set: %v), want true", o.GetKind(), o.GetName(), got, found)
		}
	}
	if seen != 2 {
		t.Fatalf("%s: %d workloads, want the DaemonSet and the Deployment", manifest, seen)
	}
}

// TestLinuxNodesOnly: both workloads select Linux amd64 nodes (the image
// is built for amd64 alone): the node agent tolerates every taint, and
// would otherwise be scheduled onto Windows, arm64 and virtual nodes, where
// it never runs.
func TestLinuxNodesOnly(t *testing.T) {
	seen := 0
	for _, o := range readObjects(t) {
		if o.GetKind() != "DaemonSet" && o.GetKind() != "Deployment" {
			continue
		}
		seen++
		if sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "spec", "nodeSelector"); sel["kubernetes.io/os"] != "linux" || sel["kubernetes.io/arch"] != "amd64" {
			t.Errorf("%s %s nodeSelector %v, want kubernetes.io/os: linux and kubernetes.io/arch: amd64", o.GetKind(), o.GetName(), sel)
		}
	}
	if seen != 2 {
		t.Fatalf("%s: %d workloads, want the DaemonSet and the Deployment", manifest, seen)
	}
}

// TestGOMEMLIMITFollowsMemoryLimit: both workloads set GOMEMLIMIT to their
// memory limit, in bytes (a resourceFieldRef on their own limits.memory,
// as GOMAXPROCS on limits.cpu; nodegc run lowers it to 90% of the cgroup's
// limit, internal/memlimit), so that Go collects harder as the heap
// nears the limit instead of growing into the cgroup's OOM kill: the
// owner GC's start-up lists are its peak (README, Owner GC at scale), and
// in ownerGC.mode auto the elected node agent holds them under the node
// agent's limit.
func TestGOMEMLIMITFollowsMemoryLimit(t *testing.T) {
	eachWorkloadContainer(t, func(kind, name string, c corev1.Container) {
		if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
			t.Errorf("%s %s, container %s: no memory limit (GOMEMLIMIT would be the node's memory)", kind, name, c.Name)
		}
		i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "GOMEMLIMIT" })
		if i < 0 {
			t.Errorf("%s %s, container %s: no GOMEMLIMIT in env", kind, name, c.Name)
			return
		}
		e := c.Env[i]
		var ref *corev1.ResourceFieldSelector
		if e.ValueFrom != nil {
			ref = e.ValueFrom.ResourceFieldRef
		}
		// A divisor of 1 (or none): the value in bytes, which Go reads as bytes.
		if ref == nil || ref.Resource != "limits.memory" || (ref.ContainerName != "" && ref.ContainerName != c.Name) ||
			!(ref.Divisor.IsZero() || ref.Divisor.Cmp(resource.MustParse("1")) == 0) {
			t.Errorf("%s %s, container %s: GOMEMLIMIT is not the container's own limits.memory in bytes (value %q, resourceFieldRef %+v)",
				kind, name, c.Name, e.Value, ref)
		}
	})
}
