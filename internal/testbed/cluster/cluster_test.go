package cluster_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed/cluster"
)

// TestDeletePropagationWithoutCollector shows what the API server alone
// does with each propagation policy when no garbage collector runs: this is
// the state nodegc's owner GC starts from.
func TestDeletePropagationWithoutCollector(t *testing.T) {
	t.Parallel()
	c := cluster.Start(t, cluster.Options{})
	cs := c.Client()

	tests := map[string]struct {
		policy metav1.DeletionPropagation
		// wantFinalizers is nil when the owner must be gone at once.
		wantFinalizers []string
	}{
		"Background leaves the dependents, owner gone": {policy: metav1.DeletePropagationBackground},
		"Foreground keeps the owner with foregroundDeletion": {
			policy: metav1.DeletePropagationForeground, wantFinalizers: []string{metav1.FinalizerDeleteDependents},
		},
		"Orphan keeps the owner with orphan": {
			policy: metav1.DeletePropagationOrphan, wantFinalizers: []string{metav1.FinalizerOrphanDependents},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			ns := createNamespace(t, cs, "prop-"+strings.ToLower(string(tc.policy)))
			f := createFamily(t, cs, ns)

			if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, f.owner.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(tc.policy)}); err != nil {
				t.Fatalf("delete owner with %s: %v", tc.policy, err)
			}

			owner, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, f.owner.Name, metav1.GetOptions{})
			switch {
			case tc.wantFinalizers == nil:
				if !apierrors.IsNotFound(err) {
					t.Errorf("owner after %s delete: got %v (object %v), want NotFound", tc.policy, err, owner)
				}
			case err != nil:
				t.Fatalf("owner after %s delete: %v, want it kept by its finalizer", tc.policy, err)
			default:
				if owner.DeletionTimestamp == nil {
					t.Errorf("owner has no deletionTimestamp after a %s delete", tc.policy)
				}
				if diff := cmp.Diff(tc.wantFinalizers, owner.Finalizers); diff != "" {
					t.Errorf("owner finalizers (-want +got):\n%s", diff)
				}
				if owner.UID != f.owner.UID {
					t.Errorf("owner UID = %s, want %s", owner.UID, f.owner.UID)
				}
			}
			f.assertDependentsUntouched(t, cs)
		})
	}
}

// TestStopStartAPIServer shows that clients fail while kube-apiserver is
// stopped and that the restarted one serves the same data on the same URL.
func TestStopStartAPIServer(t *testing.T) {
	t.Parallel()
	c := cluster.Start(t, cluster.Options{})
	cs := c.Client()
	ns := createNamespace(t, cs, "restart")
	before, err := cs.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "survivor"}, Data: map[string]string{"k": "v"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create configmap: %v", err)
	}
	url, oldPID := c.URL, c.PIDs()["kube-apiserver"]

	c.StopAPIServer(t)
	if _, ok := c.PIDs()["kube-apiserver"]; ok {
		t.Errorf("PIDs() still lists kube-apiserver after StopAPIServer")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	_, err = cs.CoreV1().ConfigMaps(ns).Get(ctx, "survivor", metav1.GetOptions{})
	cancel()
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Get while stopped: got %v, want connection refused", err)
	}

	c.StartAPIServer(t)
	if c.URL != url {
		t.Errorf("URL changed across the restart: %s -> %s", url, c.URL)
	}
	if pid := c.PIDs()["kube-apiserver"]; pid == 0 || pid == oldPID {
		t.Errorf("kube-apiserver pid after restart = %d, want a new process (old %d)", pid, oldPID)
	}
	// The old clientset and a client from the kubeconfig both work again.
	after, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "survivor", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Get after restart (old client): %v", err)
	}
	if after.UID != before.UID || after.Data["k"] != "v" {
		t.Errorf("configmap after restart: uid %s data %v, want uid %s data k=v", after.UID, after.Data, before.UID)
	}
	fromFile := kubeconfigClient(t, c.KubeconfigPath())
	if _, err := fromFile.CoreV1().ConfigMaps(ns).Get(t.Context(), "survivor", metav1.GetOptions{}); err != nil {
		t.Errorf("Get after restart (kubeconfig client): %v", err)
	}
}

// TestAPIServerRequests checks the request counters against requests we
// make ourselves, on a resource no other client touches.
func TestAPIServerRequests(t *testing.T) {
	t.Parallel()
	c := cluster.Start(t, cluster.Options{})
	cs := c.Client()
	ctx := t.Context()
	ns := createNamespace(t, cs, "metrics")
	before, secondsBefore, err := c.APIServerRequestStats(ctx, "podtemplates")
	if err != nil {
		t.Fatal(err)
	}
	const n = 7
	began := time.Now()
	for i := range n {
		pt := &corev1.PodTemplate{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "pt-"},
			Template:   corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/x:1"}}}},
		}
		if _, err := cs.CoreV1().PodTemplates(ns).Create(ctx, pt, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create podtemplate %d: %v", i, err)
		}
	}
	if _, err := cs.CoreV1().PodTemplates(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	after, secondsAfter, err := c.APIServerRequestStats(ctx, "podtemplates")
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	if diff := cmp.Diff(cluster.RequestCounts{"POST": n, "LIST": 1}, after.Sub(before)); diff != "" {
		t.Errorf("podtemplates requests (-want +got):\n%s", diff)
	}
	// The creates ran one after another: kube-apiserver took some time for
	// them, and no more than the client waited.
	if d := secondsAfter["POST"] - secondsBefore["POST"]; d <= 0 || d > took.Seconds() {
		t.Errorf("podtemplates POST took %.6fs in kube-apiserver; want more than 0 and at most the %s the client took", d, took)
	}
	all, err := c.APIServerRequests(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if all.Total() < after.Total() {
		t.Errorf("all resources: %d requests, fewer than podtemplates alone (%d)", all.Total(), after.Total())
	}
}

// TestControllerManagerCollectsDependents proves the comparison collector
// works: with kube-controller-manager's garbagecollector running, dependents
// of a deleted owner are collected.
func TestControllerManagerCollectsDependents(t *testing.T) {
	t.Parallel()
	c := cluster.Start(t, cluster.Options{})
	kcm := c.StartControllerManager(t, "garbagecollector")
	cs := c.Client()
	ctx := t.Context()

	for _, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationBackground, metav1.DeletePropagationForeground} {
		t.Run(string(policy), func(t *testing.T) {
			ns := createNamespace(t, cs, "kcm-"+strings.ToLower(string(policy)))
			f := createFamily(t, cs, ns)
			begin := time.Now()
			if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, f.owner.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(policy)}); err != nil {
				t.Fatalf("delete owner: %v", err)
			}
			err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
				return f.allGone(ctx, cs)
			})
			if err != nil {
				t.Fatalf("owner and dependents not collected by %s within 60s: %v", kcm.Name, err)
			}
			t.Logf("%s delete: owner and dependents gone after %s", policy, time.Since(begin).Round(time.Millisecond))
		})
	}
}

// TestTeardownLeavesNothing checks that the cleanup of a test stops every
// process the cluster started and removes its dir.
func TestTeardownLeavesNothing(t *testing.T) {
	t.Parallel()
	var pids map[string]int
	var dir string
	begin := time.Now()
	t.Run("cluster", func(t *testing.T) {
		c := cluster.Start(t, cluster.Options{})
		c.StartControllerManager(t, "garbagecollector")
		pids, dir = c.PIDs(), c.Dir
	})
	t.Logf("start and teardown took %s", time.Since(begin).Round(time.Millisecond))
	if len(pids) != 3 {
		t.Fatalf("PIDs() = %v, want etcd, kube-apiserver and one kube-controller-manager", pids)
	}
	for name, pid := range pids {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			continue
		}
		// The PID exists: fail only if it is still our process (PIDs are reused).
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if strings.Contains(string(cmdline), dir) {
			t.Errorf("%s (pid %d) still running after teardown: %q", name, pid, cmdline)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cluster dir %s after teardown: stat error %v, want not exist", dir, err)
	}
}

// family is an owner ConfigMap with a ConfigMap and a Pod depending on it.
type family struct {
	owner     *corev1.ConfigMap
	depCM     *corev1.ConfigMap
	depPod    *corev1.Pod
	ownerRefs []metav1.OwnerReference
}

func createFamily(t *testing.T, cs kubernetes.Interface, ns string) *family {
	t.Helper()
	ctx := t.Context()
	owner, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create owner: %v", err)
	}
	refs := []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}}
	f := &family{owner: owner, ownerRefs: refs}
	f.depCM, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "dependent", OwnerReferences: refs},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create dependent configmap: %v", err)
	}
	f.depPod, err = cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "dependent", OwnerReferences: refs},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/x:1"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create dependent pod: %v", err)
	}
	return f
}

// assertDependentsUntouched checks that both dependents exist unchanged:
// same UID, same ownerReferences, no deletionTimestamp, no finalizers.
func (f *family) assertDependentsUntouched(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	ctx := t.Context()
	cm, err := cs.CoreV1().ConfigMaps(f.depCM.Namespace).Get(ctx, f.depCM.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("dependent configmap: %v", err)
	}
	pod, err := cs.CoreV1().Pods(f.depPod.Namespace).Get(ctx, f.depPod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("dependent pod: %v", err)
	}
	want := map[string]dependentState{
		"ConfigMap/dependent": {UID: f.depCM.UID, OwnerReferences: f.ownerRefs},
		"Pod/dependent":       {UID: f.depPod.UID, OwnerReferences: f.ownerRefs},
	}
	got := map[string]dependentState{"ConfigMap/dependent": stateOf(cm), "Pod/dependent": stateOf(pod)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("dependents changed (-want +got):\n%s", diff)
	}
}

// dependentState is what a collector would change on a dependent.
type dependentState struct {
	UID               types.UID
	OwnerReferences   []metav1.OwnerReference
	DeletionTimestamp *metav1.Time
	Finalizers        []string
}

func stateOf(o metav1.Object) dependentState {
	return dependentState{UID: o.GetUID(), OwnerReferences: o.GetOwnerReferences(),
		DeletionTimestamp: o.GetDeletionTimestamp(), Finalizers: o.GetFinalizers()}
}

// allGone reports whether the owner and both dependents are deleted.
func (f *family) allGone(ctx context.Context, cs kubernetes.Interface) (bool, error) {
	for _, get := range []func() error{
		func() error {
			_, err := cs.CoreV1().ConfigMaps(f.owner.Namespace).Get(ctx, f.owner.Name, metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := cs.CoreV1().ConfigMaps(f.depCM.Namespace).Get(ctx, f.depCM.Name, metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := cs.CoreV1().Pods(f.depPod.Namespace).Get(ctx, f.depPod.Name, metav1.GetOptions{})
			return err
		},
	} {
		switch err := get(); {
		case err == nil:
			return false, nil
		case !apierrors.IsNotFound(err):
			return false, err
		}
	}
	return true, nil
}

func createNamespace(t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	ns, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return ns.Name
}

func kubeconfigClient(t *testing.T, path string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("load kubeconfig %s: %v", path, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("client from kubeconfig: %v", err)
	}
	return cs
}

// TestImpersonationIsSubjectToRBAC: an impersonated service account may do
// only what a binding grants it.
func TestImpersonationIsSubjectToRBAC(t *testing.T) {
	t.Parallel()
	c := cluster.Start(t, cluster.Options{})
	ctx := t.Context()
	ns := createNamespace(t, c.Client(), "rbac")
	sa, err := kubernetes.NewForConfig(c.RESTConfigAs("system:serviceaccount:"+ns+":gc",
		"system:serviceaccounts", "system:serviceaccounts:"+ns))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sa.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("list pods without a binding: got %v, want Forbidden", err)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}}},
	}
	if _, err := c.Client().RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "gc-reads-pods"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "gc"}},
	}
	if _, err := c.Client().RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The RBAC authorizer reads bindings from an informer: poll until it sees ours.
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := sa.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if apierrors.IsForbidden(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("list pods with a binding: %v", err)
	}
	if err := sa.CoreV1().Pods(ns).Delete(ctx, "x", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("delete pod with only list granted: got %v, want Forbidden", err)
	}
}
