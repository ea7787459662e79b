package deploy

import (
	"cmp"
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/cluster"
)

// The commands of README.md's "Uninstalling" that its text shows inline;
// the ```sh blocks are read from it.
const (
	uninstallCmd      = "helm uninstall nodegc -n nodegc"
	deleteNamespace   = "kubectl delete namespace nodegc"
	clusterLeftovers  = "kubectl delete clusterrole,clusterrolebinding,flowschema -l app.kubernetes.io/name=nodegc"
	defaultNSLeftover = "kubectl -n default delete role,rolebinding -l app.kubernetes.io/name=nodegc"
	leaseNSLeftover   = "kubectl -n kube-node-lease delete role,rolebinding -l app.kubernetes.io/name=nodegc"
)

// TestUninstall runs README.md's "Uninstalling", as it is there, on a real
// kube-apiserver with no garbage collector: the chart installed with the
// README's commands, and beside its workloads what their controllers would
// have made (the owner Deployment's ReplicaSet and pod, the DaemonSet's pod
// and ControllerRevision, and the election's Lease), which nothing collects
// once helm uninstall has deleted the workloads. Each way the README gives
// removes them: the commands for a namespace shared with other workloads
// (which they leave alone), kube-controller-manager's collector turned on
// before helm uninstall, the namespace deleted after it (the namespace
// controller), or before it, with the cluster-scoped objects deleted as the
// README says. The commands that unstick a foreground deletion of the owner
// Deployment (the ReplicaSet and the Deployment held by foregroundDeletion,
// as the owner GC leaves them after deleting its own pods) remove both.
// In mode auto (no owner Deployment: the DaemonSet's agents elect the
// collector) the commands for a shared namespace remove what is left, and
// the README's command for the DaemonSet unsticks its foreground deletion.
// After an install the chart's notes say how to uninstall, except with
// ownerGC.mode off.
func TestUninstall(t *testing.T) {
	readme := repoFile(t, "README.md")
	section := strings.Join(strings.Fields(readmeSection(t, readme, "### Uninstalling")), " ")
	for _, want := range []string{"-garbagecollector", "--cascade foreground", "--cascade=foreground", "foregroundDeletion",
		"`" + uninstallCmd + "`", "`" + deleteNamespace + "`", "`" + clusterLeftovers + "`", "`" + defaultNSLeftover + "`", "`" + leaseNSLeftover + "`"} {
		if !strings.Contains(section, want) {
			t.Errorf("README.md, Uninstalling, does not say %q", want)
		}
	}
	var leftoverCmds, unstickCmds, unstickAutoCmds []string
	for _, cmd := range readmeCommands(t, readme, "### Uninstalling") {
		switch {
		case regexp.MustCompile(`^kubectl -n nodegc delete [a-z,]+ (-l app\.kubernetes\.io/name=nodegc|nodegc-owner-gc --ignore-not-found)$`).MatchString(cmd):
			leftoverCmds = append(leftoverCmds, cmd)
		case strings.Contains(cmd, "kubectl -n nodegc patch daemonset nodegc-node ") && strings.HasSuffix(cmd, `'{"metadata":{"finalizers":null}}'`):
			unstickAutoCmds = append(unstickAutoCmds, cmd)
		case strings.Contains(cmd, "kubectl -n nodegc patch ") && strings.HasSuffix(cmd, `'{"metadata":{"finalizers":null}}'`):
			unstickCmds = append(unstickCmds, cmd)
		default:
			t.Errorf("README.md, Uninstalling, shows %q, which this test does not run", cmd)
		}
	}
	if len(leftoverCmds) != 3 || len(unstickCmds) != 2 || len(unstickAutoCmds) != 1 {
		t.Fatalf("README.md, Uninstalling, shows the leftovers' commands %q, the unsticking ones %q and for mode auto %q; want 3, 2 and 1",
			leftoverCmds, unstickCmds, unstickAutoCmds)
	}
	var nsCmd string
	for _, cmd := range readmeCommands(t, readme, "### Install with Helm") {
		if strings.HasPrefix(cmd, "kubectl create namespace nodegc ") {
			nsCmd = cmd
		}
	}
	if nsCmd == "" {
		t.Fatal("README.md, Install with Helm, shows no kubectl create namespace nodegc")
	}

	c := cluster.Start(t, cluster.Options{})
	cs := c.Client()
	bin := filepath.Dir(testbed.Binary(t, "helm"))
	testbed.Binary(t, "kubectl")
	env := append(helmEnv(t), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+c.KubeconfigPath())
	root, err := testbed.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, cmd string) string {
		t.Helper()
		sh := exec.CommandContext(t.Context(), "bash", "-euo", "pipefail", "-c", cmd)
		sh.Dir, sh.Env = root, env
		out, err := sh.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
		return string(out)
	}
	runAll := func(t *testing.T, cmds ...string) {
		t.Helper()
		for _, cmd := range cmds {
			run(t, cmd)
		}
	}
	// install makes the namespace and installs the chart as the README
	// says, with flags, and what the workloads' controllers would have
	// made.
	install := func(t *testing.T, flags ...string) *leftovers {
		t.Helper()
		run(t, nsCmd)
		notes := strings.Join(strings.Fields(run(t, strings.Join(append([]string{"helm install nodegc deploy/" + chart + " -n nodegc"}, flags...), " "))), " ")
		for _, want := range []string{"Uninstalling:", "app.kubernetes.io/name=nodegc", "--cascade foreground", `README.md, "Uninstalling"`} {
			if !strings.Contains(notes, want) {
				t.Errorf("the chart's notes do not say %q:\n%s", want, notes)
			}
		}
		return makeLeftovers(t, cs, "nodegc")
	}

	t.Run("notes with ownerGC.mode off", func(t *testing.T) {
		run(t, nsCmd)
		if notes := run(t, "helm install nodegc deploy/"+chart+" -n nodegc --dry-run=server --set ownerGC.mode=off"); strings.Contains(notes, "Uninstalling") {
			t.Errorf("with ownerGC.mode off (kube-controller-manager's collector on), the notes say how to uninstall without it:\n%s", notes)
		}
	})
	t.Run("shared namespace", func(t *testing.T) {
		left := install(t)
		other := otherWorkload(t, cs, "nodegc")
		run(t, uninstallCmd)
		if missing := left.all().missing(t, cs); len(missing) > 0 {
			t.Errorf("after helm uninstall alone, %v are gone: this cluster has no garbage collector", missing)
		}
		runAll(t, leftoverCmds...)
		left.all().waitGone(t, cs)
		if missing := other.missing(t, cs); len(missing) > 0 {
			t.Errorf("the README's commands deleted another workload's %v", missing)
		}
		if err := cs.AppsV1().ReplicaSets("nodegc").Delete(t.Context(), "other", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cs.CoreV1().Pods("nodegc").Delete(t.Context(), "other", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("foreground deletion unstuck", func(t *testing.T) {
		left := install(t)
		run(t, "kubectl -n nodegc delete deployment nodegc-owner --cascade=foreground --wait=false")
		// What the owner GC does: the ReplicaSet deleted in the
		// foreground, then its pod, which is the collector itself.
		ctx := t.Context()
		if err := cs.AppsV1().ReplicaSets("nodegc").Delete(ctx, left.rs, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
			t.Fatal(err)
		}
		if err := cs.CoreV1().Pods("nodegc").Delete(ctx, left.ownerPod, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		rs, err := cs.AppsV1().ReplicaSets("nodegc").Get(ctx, left.rs, metav1.GetOptions{})
		if err != nil || rs.DeletionTimestamp == nil || !slices.Contains(rs.Finalizers, metav1.FinalizerDeleteDependents) {
			t.Fatalf("the ReplicaSet deleted in the foreground: %v, %v; want it held by foregroundDeletion", err, rs)
		}
		dep, err := cs.AppsV1().Deployments("nodegc").Get(ctx, "nodegc-owner", metav1.GetOptions{})
		if err != nil || dep.DeletionTimestamp == nil || !slices.Contains(dep.Finalizers, metav1.FinalizerDeleteDependents) {
			t.Fatalf("the Deployment deleted in the foreground: %v, %v; want it held by foregroundDeletion", err, dep)
		}
		runAll(t, unstickCmds...)
		objects{"ReplicaSet " + left.rs, "Deployment nodegc-owner"}.waitGone(t, cs)
		run(t, uninstallCmd)
		runAll(t, leftoverCmds...)
		left.all().waitGone(t, cs)
	})
	t.Run("mode auto, shared namespace", func(t *testing.T) {
		left := install(t, "--set ownerGC.mode=auto")
		if left.rs != "" {
			t.Fatalf("mode auto installed the owner Deployment")
		}
		run(t, uninstallCmd)
		if missing := left.all().missing(t, cs); len(missing) > 0 {
			t.Errorf("after helm uninstall alone, %v are gone: this cluster has no garbage collector", missing)
		}
		runAll(t, leftoverCmds...)
		left.all().waitGone(t, cs)
	})
	t.Run("mode auto, foreground deletion unstuck", func(t *testing.T) {
		left := install(t, "--set ownerGC.mode=auto")
		run(t, "kubectl -n nodegc delete daemonset nodegc-node --cascade=foreground --wait=false")
		// What the owner GC, elected among the DaemonSet's pods, does:
		// it deletes the DaemonSet's pods, itself among them, and its
		// ControllerRevisions.
		ctx := t.Context()
		if err := cs.CoreV1().Pods("nodegc").Delete(ctx, left.nodePod, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cs.AppsV1().ControllerRevisions("nodegc").Delete(ctx, left.revision, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		ds, err := cs.AppsV1().DaemonSets("nodegc").Get(ctx, "nodegc-node", metav1.GetOptions{})
		if err != nil || ds.DeletionTimestamp == nil || !slices.Contains(ds.Finalizers, metav1.FinalizerDeleteDependents) {
			t.Fatalf("the DaemonSet deleted in the foreground: %v, %v; want it held by foregroundDeletion", err, ds)
		}
		runAll(t, unstickAutoCmds...)
		objects{"DaemonSet nodegc-node"}.waitGone(t, cs)
		run(t, uninstallCmd)
		runAll(t, leftoverCmds...)
		left.all().waitGone(t, cs)
	})
	t.Run("kube-controller-manager's collector on first", func(t *testing.T) {
		left := install(t)
		kcm := c.StartControllerManager(t, "garbagecollector")
		defer kcm.Stop(t)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if _, _, err := kcm.WaitLogLine(ctx, 200*time.Millisecond, "all resource monitors have synced"); err != nil {
			t.Fatalf("kube-controller-manager's garbage collector did not sync: %v", err)
		}
		run(t, uninstallCmd)
		owned := slices.DeleteFunc(left.all(), func(o string) bool { return strings.HasPrefix(o, "Lease ") })
		owned.waitGone(t, cs)
		if !exists(t, cs, "nodegc", "Lease nodegc-owner-gc") {
			t.Error("kube-controller-manager's collector deleted the Lease, which has no owner: the README says it stays")
		}
		run(t, leftoverCmds[2])
		left.all().waitGone(t, cs)
	})
	t.Run("namespace deleted", func(t *testing.T) {
		kcm := c.StartControllerManager(t, "namespace-controller")
		defer kcm.Stop(t)
		install(t)
		run(t, uninstallCmd)
		run(t, deleteNamespace)
		waitNamespaceGone(t, cs, "nodegc")
		if left := labelledNodegc(t, cs); len(left) > 0 {
			t.Errorf("after helm uninstall and the namespace's deletion, %v remain", left)
		}

		// The namespace first: Helm's record goes with it, the
		// cluster-scoped objects and those in default stay.
		install(t)
		run(t, deleteNamespace)
		waitNamespaceGone(t, cs, "nodegc")
		if left := labelledNodegc(t, cs); len(left) == 0 {
			t.Error("with the namespace deleted first, no cluster-scoped object or Role in default or kube-node-lease is left: the README says they are")
		}
		runAll(t, clusterLeftovers, defaultNSLeftover, leaseNSLeftover)
		if left := labelledNodegc(t, cs); len(left) > 0 {
			t.Errorf("after the README's commands for them, %v remain", left)
		}
	})
}

// leftovers are what the controllers make of the chart's workloads, which
// only a garbage collector deletes once the workloads are gone.
type leftovers struct {
	rs, ownerPod, nodePod, revision string
}

// makeLeftovers makes in ns what the ReplicaSet, Deployment and DaemonSet
// controllers would have made of the release's workloads (the test cluster
// runs none): the Deployment's ReplicaSet and its pod (in mode auto there
// is no Deployment), the DaemonSet's pod and ControllerRevision, labelled
// and owned as they label and own them, and the Lease the owner GC's
// election takes.
func makeLeftovers(t *testing.T, cs kubernetes.Interface, ns string) *leftovers {
	t.Helper()
	ctx := t.Context()
	ds, err := cs.AppsV1().DaemonSets(ns).Get(ctx, "nodegc-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	controlledBy := func(kind string, o metav1.Object) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: o.GetName(), UID: o.GetUID(),
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	}
	const hash = "6b9f8d7c5"
	var left leftovers
	dep, err := cs.AppsV1().Deployments(ns).Get(ctx, "nodegc-owner", metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		t.Fatal(err)
	default:
		left.rs, left.ownerPod = ownerLeftovers(t, cs, dep, controlledBy("Deployment", dep), hash)
	}
	dsLabels := maps.Clone(ds.Spec.Template.Labels)
	dsLabels[appsv1.DefaultDaemonSetUniqueLabelKey] = hash
	rev, err := cs.AppsV1().ControllerRevisions(ns).Create(ctx, &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Name: ds.Name + "-" + hash, Labels: dsLabels, OwnerReferences: controlledBy("DaemonSet", ds)},
		Data:       runtime.RawExtension{Raw: []byte(`{}`)},
		Revision:   1,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podLabels := maps.Clone(dsLabels)
	podLabels["pod-template-generation"] = "1"
	nodePod, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: ds.Name + "-q4m8z", Labels: podLabels, OwnerReferences: controlledBy("DaemonSet", ds)},
		Spec:       ds.Spec.Template.Spec,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	left.nodePod, left.revision = nodePod.Name, rev.Name
	if _, err := cs.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "nodegc-owner-gc"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(cmp.Or(left.ownerPod, left.nodePod))},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return &left
}

// ownerLeftovers makes the owner Deployment dep's ReplicaSet, owned by
// owners, and its pod, and returns their names.
func ownerLeftovers(t *testing.T, cs kubernetes.Interface, dep *appsv1.Deployment, owners []metav1.OwnerReference, hash string) (rs, pod string) {
	t.Helper()
	ctx := t.Context()
	tmpl := dep.Spec.Template.DeepCopy()
	tmpl.Labels = maps.Clone(tmpl.Labels)
	tmpl.Labels[appsv1.DefaultDeploymentUniqueLabelKey] = hash
	set, err := cs.AppsV1().ReplicaSets(dep.Namespace).Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: dep.Name + "-" + hash, Labels: tmpl.Labels, OwnerReferences: owners},
		Spec:       appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels}, Template: *tmpl},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := cs.CoreV1().Pods(dep.Namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: set.Name + "-x7k2p", Labels: tmpl.Labels, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "ReplicaSet", Name: set.Name, UID: set.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: tmpl.Spec,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return set.Name, p.Name
}

// all names the leftovers (in mode auto no ReplicaSet or owner pod).
func (l *leftovers) all() objects {
	objs := objects{"Pod " + l.nodePod, "ControllerRevision " + l.revision, "Lease nodegc-owner-gc"}
	if l.rs != "" {
		objs = append(objs, "ReplicaSet "+l.rs, "Pod "+l.ownerPod)
	}
	return objs
}

// objects names objects of namespace nodegc, each "Kind name".
type objects []string

// missing returns those of objs that do not exist.
func (objs objects) missing(t *testing.T, cs kubernetes.Interface) []string {
	t.Helper()
	var out []string
	for _, o := range objs {
		if !exists(t, cs, "nodegc", o) {
			out = append(out, o)
		}
	}
	return out
}

// waitGone waits until none of objs exists.
func (objs objects) waitGone(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	var left []string
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		left = slices.DeleteFunc(slices.Clone(objs), func(o string) bool { return !exists(t, cs, "nodegc", o) })
		return len(left) == 0, nil
	})
	if err != nil {
		t.Fatalf("%v still there: %v", left, err)
	}
}

// exists reports whether obj ("Kind name") exists in namespace ns.
func exists(t *testing.T, cs kubernetes.Interface, ns, obj string) bool {
	t.Helper()
	kind, name, _ := strings.Cut(obj, " ")
	ctx := t.Context()
	var err error
	switch kind {
	case "ReplicaSet":
		_, err = cs.AppsV1().ReplicaSets(ns).Get(ctx, name, metav1.GetOptions{})
	case "Deployment":
		_, err = cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	case "DaemonSet":
		_, err = cs.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
	case "Pod":
		_, err = cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	case "ControllerRevision":
		_, err = cs.AppsV1().ControllerRevisions(ns).Get(ctx, name, metav1.GetOptions{})
	case "Lease":
		_, err = cs.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	default:
		t.Fatalf("exists: kind %s", kind)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// otherWorkload makes in ns a ReplicaSet "other" and its pod "other",
// which are not nodegc's, as in a namespace nodegc shares (kube-system).
func otherWorkload(t *testing.T, cs kubernetes.Interface, ns string) objects {
	t.Helper()
	labels := map[string]string{"app.kubernetes.io/name": "other"}
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/other"}}}}
	if _, err := cs.AppsV1().ReplicaSets(ns).Create(t.Context(), &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "other", Labels: labels},
		Spec:       appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other", Labels: labels}, Spec: tmpl.Spec}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return objects{"ReplicaSet other", "Pod other"}
}

// waitNamespaceGone waits until namespace ns is gone (the namespace
// controller deleted what it held).
func waitNamespaceGone(t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("namespace %s not deleted: %v", ns, err)
	}
}

// labelledNodegc names the cluster-scoped objects and those in default and
// kube-node-lease labelled app.kubernetes.io/name=nodegc: the chart's RBAC
// outside its namespace, and its FlowSchema.
func labelledNodegc(t *testing.T, cs kubernetes.Interface) []string {
	t.Helper()
	ctx := t.Context()
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=nodegc"}
	var out []string
	crs, err := cs.RbacV1().ClusterRoles().List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range crs.Items {
		out = append(out, "ClusterRole "+o.Name)
	}
	crbs, err := cs.RbacV1().ClusterRoleBindings().List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range crbs.Items {
		out = append(out, "ClusterRoleBinding "+o.Name)
	}
	fss, err := cs.FlowcontrolV1().FlowSchemas().List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range fss.Items {
		out = append(out, "FlowSchema "+o.Name)
	}
	for _, ns := range []string{metav1.NamespaceDefault, corev1.NamespaceNodeLease} {
		roles, err := cs.RbacV1().Roles(ns).List(ctx, sel)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range roles.Items {
			out = append(out, "Role "+ns+"/"+o.Name)
		}
		rbs, err := cs.RbacV1().RoleBindings(ns).List(ctx, sel)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range rbs.Items {
			out = append(out, "RoleBinding "+ns+"/"+o.Name)
		}
	}
	return out
}
