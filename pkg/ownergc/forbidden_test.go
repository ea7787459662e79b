package ownergc

import (
	"context"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
)

// testResourceForbiddenByRBAC: the collector runs as a user whose
// ClusterRole grants what the owner GC needs on every resource but Secrets,
// as when the chart's */* rule is narrowed to named resources and one is
// missed. The Secrets monitor's list is refused (403): the monitor counts
// as failed, the collector syncs without it (nodegc_owner_gc_synced 1)
// and collects the rest, and nodegc_owner_gc_monitors{state="failed"},
// what NodegcOwnerGCMonitorsFailing fires on, counts it, its errors counted
// under its group and resource. Once the ClusterRole grants Secrets, the
// monitor syncs: the alert resolves.
func testResourceForbiddenByRBAC(t *testing.T, env *itEnv) {
	ctx := t.Context()
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	_, lists, err := env.cs.Discovery().ServerGroupsAndResources()
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		t.Fatal(err)
	}
	verbs := []string{"get", "list", "watch", "patch", "delete"}
	var rules []rbacv1.PolicyRule
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range l.APIResources {
			if !strings.Contains(r.Name, "/") && (gv != secrets.GroupVersion() || r.Name != secrets.Resource) {
				names = append(names, r.Name)
			}
		}
		if len(names) > 0 {
			rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{gv.Group}, Resources: names, Verbs: verbs})
		}
	}
	rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}})
	user := "ownergc-narrow-" + utilrand.String(5)
	roles, bindings := env.cs.RbacV1().ClusterRoles(), env.cs.RbacV1().ClusterRoleBindings()
	role, err := roles.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: rules}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = roles.Delete(context.Background(), role.Name, metav1.DeleteOptions{}) })
	_, err = bindings.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bindings.Delete(context.Background(), user, metav1.DeleteOptions{}) })
	ns := env.namespace(t, "forbidden")
	// The role takes effect once the API server's RBAC cache has it.
	asUser := env.c.RESTConfigAs(user, "system:authenticated")
	eventually(t, 30*time.Second, "the narrow ClusterRole to allow listing ConfigMaps", func(ctx context.Context) (bool, error) {
		cs, err := kubernetes.NewForConfig(asUser)
		if err != nil {
			return false, err
		}
		_, err = cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		return err == nil, nil
	})

	gc := env.startCollectorVia(t, asUser, testConfig()) // returns once synced
	if got := gc.monitorState(secrets); got != monitorStates[stateFailed] {
		t.Errorf("the Secrets monitor is %q, want failed", got)
	}
	// Other monitors may fail for a moment (a CRD of an earlier test whose
	// storage re-initializes): only the Secrets monitor is asserted on.
	if states := counterByLabel(t, gc.reg, "nodegc_owner_gc_monitors", "state"); states["failed"] < 1 {
		t.Errorf("monitors by state = %v; want the Secrets monitor failed", states)
	}
	if synced := counterByLabel(t, gc.reg, "nodegc_owner_gc_synced", "")[""]; synced != 1 {
		t.Errorf("nodegc_owner_gc_synced = %v with the Secrets monitor failed, want 1", synced)
	}
	if errs := counterByLabel(t, gc.reg, "nodegc_owner_gc_monitor_errors_total", "resource"); errs["secrets"] == 0 {
		t.Errorf("monitor errors by resource = %v; want those of secrets", errs)
	}

	owner := env.configMap(t, ns, "owner", nil)
	env.configMap(t, ns, "d", []metav1.OwnerReference{cmRef(owner, true)})
	env.deleteCM(t, ns, "owner", metav1.DeletePropagationBackground)
	eventually(t, 30*time.Second, "the rest to be collected", env.cmGone(ns, "d"))

	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: verbs})
	if _, err := roles.Update(ctx, role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The reflector retries with a backoff of up to 30s.
	eventually(t, 90*time.Second, "the Secrets monitor to sync once RBAC allows it", func(context.Context) (bool, error) {
		return gc.monitorState(secrets) == monitorStates[stateSynced], nil
	})
}

// testUnreadGroupVersion: an aggregated API whose server is missing, as
// one whose backing Deployment was never rolled out, from before the
// collector starts. kube-apiserver names its group version, and discovery
// fails for it at every round: the collector never learns its resources,
// so it has no monitor and is in no state of nodegc_owner_gc_monitors.
// nodegc_owner_gc_unread_group_versions counts it, which
// NodegcOwnerGCMonitorsFailing fires on; once the APIService is deleted,
// the next round counts none. Before, only the discovery error counter
// and the log told it.
func testUnreadGroupVersion(t *testing.T, env *itEnv) {
	ctx := t.Context()
	gv := schema.GroupVersion{Group: "ownergc-" + utilrand.String(5) + ".test.nodegc.io", Version: "v1"}
	apiServices := env.dyn.Resource(schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"})
	svc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": gv.Version + "." + gv.Group},
		"spec": map[string]any{
			"group": gv.Group, "version": gv.Version, "groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			"insecureSkipTLSVerify": true,
			"service":               map[string]any{"namespace": "default", "name": "nodegc-test-missing"},
		},
	}}
	if _, err := apiServices.Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := false
	deleteService := func() {
		if err := apiServices.Delete(context.Background(), svc.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
		deleted = true
	}
	t.Cleanup(func() {
		if !deleted {
			deleteService()
		}
	})
	eventually(t, 30*time.Second, "discovery to fail for "+gv.String(), func(ctx context.Context) (bool, error) {
		_, _, err := env.cs.Discovery().ServerGroupsAndResources()
		failed, _ := discovery.GroupDiscoveryFailedErrorGroups(err)
		_, ok := failed[gv]
		return ok, nil
	})

	gc := env.startCollector(t, testConfig()) // returns once synced
	unread := func() float64 {
		return counterByLabel(t, gc.reg, "nodegc_owner_gc_unread_group_versions", "")[""]
	}
	if got := unread(); got != 1 {
		t.Errorf("nodegc_owner_gc_unread_group_versions = %v with %s failing since the start, want 1", got, gv)
	}
	if synced := counterByLabel(t, gc.reg, "nodegc_owner_gc_synced", "")[""]; synced != 1 {
		t.Errorf("nodegc_owner_gc_synced = %v, want 1: the collector collects without that API", synced)
	}

	deleteService()
	r := gc.current.Load()
	begun := r.roundsStarted.Load()
	select {
	case r.kick <- struct{}{}:
	default:
	}
	eventually(t, 60*time.Second, "a discovery round without the APIService to count none", func(context.Context) (bool, error) {
		return r.roundDone.Load() > begun && unread() == 0, nil
	})
}
