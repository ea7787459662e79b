//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
)

// postRenderEnv, when set, makes the test binary Helm's post-renderer
// instead of running tests (see TestMain): its value is the adaptation as
// JSON, plus the file where the post-renderer writes what it changed.
const postRenderEnv = "NODEGC_E2E_POST_RENDER"

// postRenderSpec is postRenderEnv's value.
type postRenderSpec struct {
	adaptation
	// Log is the file the post-renderer writes its changes to, one a line.
	Log string `json:"log"`
}

// TestMain runs the tests, or, with postRenderEnv set, is the post-renderer
// of `helm install --post-renderer` (this very binary): the helm install
// case adapts the chart's objects for the test node by the same code as the
// kubectl-applied manifest (adaptation.apply).
func TestMain(m *testing.M) {
	if spec, ok := os.LookupEnv(postRenderEnv); ok {
		if err := postRender(spec, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "e2e post-renderer: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// postRender reads Helm's rendered manifests from in, applies the
// adaptation of spec and writes the objects to out.
func postRender(spec string, in io.Reader, out io.Writer) error {
	var ps postRenderSpec
	if err := json.Unmarshal([]byte(spec), &ps); err != nil {
		return fmt.Errorf("%s: %w", postRenderEnv, err)
	}
	objs, err := parseObjects(in)
	if err != nil {
		return err
	}
	_, changes, err := ps.adaptation.apply(objs)
	if err != nil {
		return err
	}
	data, err := encodeObjects(objs)
	if err != nil {
		return err
	}
	if _, err := out.Write(data); err != nil {
		return err
	}
	if ps.Log != "" {
		return os.WriteFile(ps.Log, []byte(strings.Join(changes, "\n")+"\n"), 0o644)
	}
	return nil
}

// helmNamespace is where the helm install case installs the release.
const helmNamespace = "nodegc-helm"

// testHelmInstall removes the kubectl-applied manifest, installs the chart
// deploy/helm/nodegc with helm for this node (values for the image, paths
// and ports; this test binary as the post-renderer for the test node's
// adaptations), checks that the node agent and the owner collector work
// (CRI connected, leader and synced, one owner GC cascade) and uninstalls.
func (s *suite) testHelmInstall(t *testing.T) {
	ctx := t.Context()
	if s.manifest == "" {
		t.Fatal("no kubectl-applied manifest to remove")
	}
	began := time.Now()
	s.removeManifest(t)
	t.Logf("kubectl delete of %s: objects and pods gone after %v", s.manifest, time.Since(began).Round(time.Millisecond))

	root, err := testbed.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	repo, tag, ok := strings.Cut(s.image[strings.LastIndex(s.image, "/")+1:], ":")
	if !ok {
		t.Fatalf("image %s has no tag", s.image)
	}
	repo = s.image[:strings.LastIndex(s.image, "/")+1] + repo
	values := map[string]string{
		"image.repository":       repo,
		"image.tag":              tag,
		"runtime.socket":         s.kc.Node.Socket,
		"runtime.containerdRoot": s.kc.Node.Root,
		"podLogsDirectory":       s.kc.PodLogsDir,
		"stateDirectory":         s.stateDir,
		"ports.healthz":          strconv.Itoa(s.healthzPort),
		"ports.metrics":          strconv.Itoa(s.metricsPort),
	}
	renderLog := filepath.Join(t.TempDir(), "post-render.log")
	spec, err := json.Marshal(postRenderSpec{adaptation: s.adaptation(), Log: renderLog})
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	helmCmd := func(args ...string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, testbed.Binary(t, "helm"), append(args, "--kubeconfig="+s.kc.API.KubeconfigPath())...)
		home := t.TempDir()
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home, postRenderEnv+"="+string(spec))
		return cmd.CombinedOutput()
	}
	args := []string{"install", "nodegc", filepath.Join(root, "deploy", "helm", "nodegc"),
		"--namespace", helmNamespace, "--create-namespace", "--post-renderer", self}
	var desc []string
	for _, k := range slices.Sorted(maps.Keys(values)) {
		args = append(args, "--set", k+"="+values[k])
		desc = append(desc, k+"="+values[k])
	}
	installBegan := time.Now()
	if out, err := helmCmd(args...); err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	changes, err := os.ReadFile(renderLog)
	if err != nil {
		t.Fatalf("the post-renderer left no log: %v", err)
	}
	t.Logf("helm install nodegc -n %s --create-namespace --post-renderer %s (%s); post-rendered for the test node:\n  %s",
		helmNamespace, self, strings.Join(desc, " "), strings.ReplaceAll(strings.TrimSpace(string(changes)), "\n", "\n  "))

	// The release's workloads, as Helm made them (Helm's labels) and as
	// the post-renderer adapted them.
	ds, err := s.client.AppsV1().DaemonSets(helmNamespace).Get(ctx, "nodegc-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ds.Labels["app.kubernetes.io/managed-by"] != "Helm" {
		t.Errorf("DaemonSet labels %v lack app.kubernetes.io/managed-by: Helm", ds.Labels)
	}
	dep, err := s.client.AppsV1().Deployments(helmNamespace).Get(ctx, "nodegc-owner", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ptr.Deref(dep.Spec.Replicas, 0) != 1 || !dep.Spec.Template.Spec.HostNetwork {
		t.Errorf("Deployment nodegc-owner: %d replicas, hostNetwork %v; want the post-renderer's 1 and true", ptr.Deref(dep.Spec.Replicas, 0), dep.Spec.Template.Spec.HostNetwork)
	}

	nodePod := s.waitHelmPod(t, "node")
	ownerPod := s.waitHelmPod(t, "owner")
	var nm, om metrics
	if err := poll(ctx, 2*time.Minute, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		nm, err = scrape(ctx, s.metricsPort)
		if err != nil {
			return false, nil
		}
		om, err = scrape(ctx, s.ownerMetricsPort)
		return err == nil && nm.sum("nodegc_cri_connected") == 1 &&
			om.sum("nodegc_owner_gc_leader") == 1 && om.sum("nodegc_owner_gc_synced") == 1, nil
	}); err != nil {
		t.Fatalf("after helm install: node agent nodegc_cri_connected %v, owner collector nodegc_owner_gc_leader %v, nodegc_owner_gc_synced %v; want 1, 1, 1: %v",
			nm.sum("nodegc_cri_connected"), om.sum("nodegc_owner_gc_leader"), om.sum("nodegc_owner_gc_synced"), err)
	}
	checkGOMAXPROCS(t, "helm DaemonSet pod", nm)
	checkGOMAXPROCS(t, "helm owner collector", om)
	lease, err := s.client.CoordinationV1().Leases(helmNamespace).Get(ctx, "nodegc-owner-gc", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the owner collector's Lease in the release's namespace: %v", err)
	}
	t.Logf("helm release up after %v: DaemonSet pod %s Ready (nodegc_cri_connected 1 on :%d), owner collector %s Ready, leader and synced, Lease %s/nodegc-owner-gc held by %s",
		time.Since(installBegan).Round(time.Millisecond), nodePod.Name, s.metricsPort, ownerPod.Name, helmNamespace, ptr.Deref(lease.Spec.HolderIdentity, ""))

	s.checkOwnerCascade(t)

	uninstallBegan := time.Now()
	if out, err := helmCmd("uninstall", "nodegc", "--namespace", helmNamespace, "--wait"); err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	gone := func(what string, get func(ctx context.Context) error) {
		t.Helper()
		if err := poll(ctx, time.Minute, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
			return apierrors.IsNotFound(get(ctx)), nil
		}); err != nil {
			t.Errorf("after helm uninstall, %s is still there: %v", what, err)
		}
	}
	gone("DaemonSet nodegc-node", func(ctx context.Context) error {
		_, err := s.client.AppsV1().DaemonSets(helmNamespace).Get(ctx, "nodegc-node", metav1.GetOptions{})
		return err
	})
	gone("Deployment nodegc-owner", func(ctx context.Context) error {
		_, err := s.client.AppsV1().Deployments(helmNamespace).Get(ctx, "nodegc-owner", metav1.GetOptions{})
		return err
	})
	gone("ConfigMap nodegc-config", func(ctx context.Context) error {
		_, err := s.client.CoreV1().ConfigMaps(helmNamespace).Get(ctx, "nodegc-config", metav1.GetOptions{})
		return err
	})
	for _, name := range []string{"nodegc-node", "nodegc-owner"} {
		gone("ServiceAccount "+name, func(ctx context.Context) error {
			_, err := s.client.CoreV1().ServiceAccounts(helmNamespace).Get(ctx, name, metav1.GetOptions{})
			return err
		})
		gone("ClusterRole "+name, func(ctx context.Context) error {
			_, err := s.client.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
			return err
		})
		gone("ClusterRoleBinding "+name, func(ctx context.Context) error {
			_, err := s.client.RbacV1().ClusterRoleBindings().Get(ctx, name, metav1.GetOptions{})
			return err
		})
	}
	gone("FlowSchema nodegc-owner-gc", func(ctx context.Context) error {
		_, err := s.client.FlowcontrolV1().FlowSchemas().Get(ctx, "nodegc-owner-gc", metav1.GetOptions{})
		return err
	})
	gone("RoleBinding nodegc-owner-leader-election", func(ctx context.Context) error {
		_, err := s.client.RbacV1().RoleBindings(helmNamespace).Get(ctx, "nodegc-owner-leader-election", metav1.GetOptions{})
		return err
	})
	t.Logf("helm uninstall: the release's objects gone after %v", time.Since(uninstallBegan).Round(time.Millisecond))

	// The pods of the uninstalled workloads are orphans: this cluster has no
	// garbage collector but nodegc's, uninstalled with the rest, and no
	// namespace controller. README.md, "Uninstalling", for a namespace that
	// is not deleted.
	s.deleteLeftovers(t, helmNamespace)
}

// removeManifest deletes the objects of the kubectl-applied manifest but
// its Namespace (the test cluster runs no namespace controller to finish a
// namespace's deletion), then what the workloads leave, which only a
// garbage collector would delete, and waits for the pods to be gone.
func (s *suite) removeManifest(t *testing.T) {
	data, err := os.ReadFile(s.manifest)
	if err != nil {
		t.Fatal(err)
	}
	kept := slices.DeleteFunc(decodeObjects(t, data), func(o *unstructured.Unstructured) bool { return o.GetKind() == "Namespace" })
	encoded, err := encodeObjects(kept)
	if err != nil {
		t.Fatal(err)
	}
	objs := filepath.Join(t.TempDir(), "nodegc-e2e-objects.yaml")
	if err := os.WriteFile(objs, encoded, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, testbed.Binary(t, "kubectl"), "--kubeconfig="+s.kc.API.KubeconfigPath(), "delete", "-f", objs, "--wait", "--timeout=1m").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl delete -f %s: %v\n%s", objs, err, out)
	}
	s.deleteLeftovers(t, "nodegc")
}

// deleteLeftovers deletes what nodegc's uninstalled workloads leave in
// namespace ns where no garbage collector runs, by README.md's commands
// ("Uninstalling", a namespace that is not deleted): the ReplicaSets first
// (the ReplicaSet controller would replace their pods), then the pods and
// the DaemonSet's ControllerRevisions, and the election's Lease. It waits
// for the pods to be gone (their containers stopped: the host ports free).
func (s *suite) deleteLeftovers(t *testing.T, ns string) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	for _, args := range [][]string{
		{"delete", "replicasets", "-l", "app.kubernetes.io/name=nodegc"},
		{"delete", "pods,controllerrevisions", "-l", "app.kubernetes.io/name=nodegc"},
		{"delete", "lease", "nodegc-owner-gc", "--ignore-not-found"},
	} {
		args = append([]string{"--kubeconfig=" + s.kc.API.KubeconfigPath(), "-n", ns}, args...)
		if out, err := exec.CommandContext(ctx, testbed.Binary(t, "kubectl"), args...).CombinedOutput(); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args[1:], " "), err, out)
		}
	}
	if err := poll(ctx, 2*time.Minute, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		pods, err := s.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) > 0 {
			return false, nil
		}
		rss, err := s.client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(rss.Items) > 0 {
			return false, nil
		}
		revs, err := s.client.AppsV1().ControllerRevisions(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(revs.Items) == 0, nil
	}); err != nil {
		t.Fatalf("the pods, ReplicaSets or ControllerRevisions of namespace %s are not gone: %v", ns, err)
	}
}

// waitHelmPod waits for the helm release's pod of component (node, owner)
// to be Running and Ready on the node.
func (s *suite) waitHelmPod(t *testing.T, component string) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := poll(t.Context(), 2*time.Minute, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		pods, err := s.client.CoreV1().Pods(helmNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=" + component})
		if err != nil || len(pods.Items) == 0 {
			return false, nil
		}
		last = &pods.Items[0]
		return podReady(last) && last.Spec.NodeName == s.kc.NodeName, nil
	})
	if err != nil {
		t.Fatalf("helm release's %s pod not Running and Ready: %v: %s\n%s", component, err, describePod(last), s.kc.KubeletLogTail(30))
	}
	return last
}

// checkOwnerCascade: a ConfigMap owned by another one is collected once
// its owner is deleted (only nodegc's owner collector collects here).
func (s *suite) checkOwnerCascade(t *testing.T) {
	ctx := t.Context()
	ns := s.namespace(t, "helm-owner-gc")
	cms := s.client.CoreV1().ConfigMaps(ns)
	owner, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dependent", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID,
	}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := cms.Delete(ctx, owner.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		_, err := cms.Get(ctx, "dependent", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("ConfigMap %s/dependent not collected after its owner's delete: %v", ns, err)
	}
	t.Logf("owner GC of the helm release: ConfigMap %s/dependent collected %v after its owner's delete", ns, time.Since(began).Round(time.Millisecond))
}
