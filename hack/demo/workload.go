package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/internal/testbed/registry"
)

const mib = 1 << 20

// Base layers shared by several images: removing one image that uses them
// frees only its own layers while another image keeps them.
var (
	baseOS      = registry.LayerSpec{Seed: "base/debian-12-slim", Size: 14 * mib}
	basePython  = registry.LayerSpec{Seed: "base/python-3.12", Size: 9 * mib}
	baseNode    = registry.LayerSpec{Seed: "base/node-22", Size: 7 * mib}
	baseJRE     = registry.LayerSpec{Seed: "base/temurin-21-jre", Size: 10 * mib}
	baseAlpine  = registry.LayerSpec{Seed: "base/alpine-3.8", Size: 3 * mib}
	baseToolbox = registry.LayerSpec{Seed: "base/ci-toolchain", Size: 12 * mib}
)

// app is an image's own top layer.
func app(seed string, size int64) registry.LayerSpec {
	return registry.LayerSpec{Seed: "app/" + seed, Size: size}
}

// catalog is the node's images: a few used by the pods below, many left
// behind by rollouts, CI jobs and debugging sessions. Sizes are the layers'
// contents; each takes about twice that on disk (the compressed blob in
// containerd's content store plus the unpacked snapshot).
var catalog = []registry.ImageSpec{
	// Used by the workload.
	{Repo: "shop/web", Tag: "v3", Layers: []registry.LayerSpec{baseOS, baseNode, app("web-v3", 5*mib)}},
	{Repo: "shop/cart", Tag: "v2", Layers: []registry.LayerSpec{baseOS, basePython, app("cart-v2", 4*mib)}},
	{Repo: "shop/worker", Tag: "v1", Layers: []registry.LayerSpec{baseOS, basePython, app("worker-v1", 3*mib)}},
	{Repo: "ops/log-agent", Tag: "1.4", Layers: []registry.LayerSpec{baseOS, app("log-agent-1.4", 3*mib)}},
	{Repo: "batch/report", Tag: "v1", Layers: []registry.LayerSpec{baseOS, baseJRE, app("report-v1", 4*mib)}},
	// Left behind.
	{Repo: "shop/web", Tag: "v1", Layers: []registry.LayerSpec{baseOS, baseNode, app("web-v1", 5*mib)}},
	{Repo: "shop/web", Tag: "v2", Layers: []registry.LayerSpec{baseOS, baseNode, app("web-v2", 5*mib)}},
	{Repo: "shop/cart", Tag: "v1", Layers: []registry.LayerSpec{baseOS, basePython, app("cart-v1", 4*mib)}},
	{Repo: "shop/search", Tag: "v1", Layers: []registry.LayerSpec{baseOS, baseJRE, app("search-v1", 8*mib)}},
	{Repo: "shop/search", Tag: "v2", Layers: []registry.LayerSpec{baseOS, baseJRE, app("search-v2", 8*mib)}},
	{Repo: "ml/model-server", Tag: "2024.1", Layers: []registry.LayerSpec{baseOS, basePython, app("model-2024.1", 22*mib)}},
	{Repo: "ml/notebook", Tag: "3.1", Layers: []registry.LayerSpec{baseOS, basePython, app("notebook-3.1", 10*mib)}},
	{Repo: "ci/builder", Tag: "v7", Layers: []registry.LayerSpec{baseToolbox, app("builder-v7", 2*mib)}},
	{Repo: "ci/builder", Tag: "v8", Layers: []registry.LayerSpec{baseToolbox, app("builder-v8", 2*mib)}},
	{Repo: "legacy/php-app", Tag: "5.6", Layers: []registry.LayerSpec{baseAlpine, app("php-5.6", 7*mib)}},
	{Repo: "legacy/php-app", Tag: "7.0", Layers: []registry.LayerSpec{baseAlpine, app("php-7.0", 7*mib)}},
	{Repo: "data/etl", Tag: "2023.12", Layers: []registry.LayerSpec{baseOS, baseJRE, app("etl-2023.12", 5*mib)}},
	{Repo: "data/etl", Tag: "2024.01", Layers: []registry.LayerSpec{baseOS, baseJRE, app("etl-2024.01", 5*mib)}},
	{Repo: "monitoring/exporter", Tag: "0.9", Layers: []registry.LayerSpec{baseOS, app("exporter-0.9", 2*mib)}},
	{Repo: "monitoring/exporter", Tag: "1.0", Layers: []registry.LayerSpec{baseOS, app("exporter-1.0", 2*mib)}},
	{Repo: "ops/log-agent", Tag: "1.3", Layers: []registry.LayerSpec{baseOS, app("log-agent-1.3", 3*mib)}},
	{Repo: "ops/backup", Tag: "2.2", Layers: []registry.LayerSpec{baseOS, app("backup-2.2", 5*mib)}},
	{Repo: "test/fixtures", Tag: "latest", Layers: []registry.LayerSpec{baseOS, app("fixtures", 3*mib)}},
	{Repo: "tools/netshoot", Tag: "0.11", Layers: []registry.LayerSpec{baseOS, app("netshoot-0.11", 4*mib)}},
	// Excluded by the config (imageGC.exclude): never removed.
	{Repo: "tools/debug", Tag: "1.0", Layers: []registry.LayerSpec{baseOS, app("debug-1.0", 5*mib)}},
}

// excludePattern is the demo config's imageGC.exclude entry.
const excludePattern = "*/tools/debug:*"

// Namespaces of the demo's API objects.
const (
	nsShop   = "shop"
	nsOps    = "ops"
	nsBatch  = "batch"
	nsNodegc = "nodegc" // the leader election Lease
)

// pod is a pod of the workload, in the API and on the node.
type pod struct {
	obj   *corev1.Pod
	image string // reference
	// sandboxID is the pod's sandbox on the node.
	sandboxID string
	// containers are the pod's containers on the node, oldest first.
	containers []string
}

func (p *pod) name() string { return p.obj.Namespace + "/" + p.obj.Name }
func (p *pod) uid() string  { return string(p.obj.UID) }
func (p *pod) logDir(n *node.Node) string {
	return filepath.Join(n.PodLogs, fmt.Sprintf("%s_%s_%s", p.obj.Namespace, p.obj.Name, p.obj.UID))
}

// workload is what the demo runs on the node and declares in the API.
type workload struct {
	images map[string]*registry.Image // by "repo:tag"
	pause  *registry.Image

	deployment *appsv1.Deployment
	replicaSet *appsv1.ReplicaSet
	web        []*pod // the ReplicaSet's pods
	cart       *pod   // running
	logAgent   *pod   // running
	worker     *pod   // crash-looping: restarted workerRestarts times
	report     *pod   // a finished batch pod, deleted from the API once nodegc runs

	// workerDead and workerRunning are the worker's exited attempts
	// (0..workerRestarts-1) and its running attempt.
	workerDead    []string
	workerRunning string
}

// workerRestarts is how many times the worker container has restarted.
const workerRestarts = 5

func (w *workload) image(repoTag string) string { return w.images[repoTag].Ref }

// live returns the pods that must survive the demo untouched.
func (w *workload) live() []*pod { return []*pod{w.cart, w.logAgent, w.worker} }

// pushImages builds and pushes every image of the catalog.
func pushImages(ctx context.Context, reg *registry.Registry) (map[string]*registry.Image, error) {
	out := make(map[string]*registry.Image, len(catalog))
	for _, spec := range catalog {
		img, err := reg.Push(ctx, spec)
		if err != nil {
			return nil, err
		}
		out[spec.Repo+":"+spec.Tag] = img
	}
	return out, nil
}

// pullImages pulls every image onto the node, a few at a time.
func pullImages(ctx context.Context, n *node.Node, imgs map[string]*registry.Image) error {
	sem := make(chan struct{}, 3)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, img := range imgs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := n.PullImage(ctx, img.Ref); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("%d of %d pulls failed, first: %w", len(errs), len(imgs), errs[0])
	}
	return nil
}

// createNamespaces creates the namespaces the demo uses.
func createNamespaces(ctx context.Context, c kubernetes.Interface) error {
	for _, ns := range []string{nsShop, nsOps, nsBatch, nsNodegc} {
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create namespace %s: %w", ns, err)
		}
	}
	return nil
}

// bootIDFile holds this machine's boot ID, which a kubelet reports in its
// Node's status.nodeInfo.bootID.
const bootIDFile = "/proc/sys/kernel/random/boot_id"

// createNode registers the demo node in the API and reports it Ready, with
// this machine's boot ID, and creates its lease, as a kubelet would: nodegc
// trusts the pod view only while its Node reports the boot nodegc runs on
// (a Node without it is a node that booted again, or another machine).
func createNode(ctx context.Context, c kubernetes.Interface, name string) error {
	bootID, err := os.ReadFile(bootIDFile)
	if err != nil {
		return fmt.Errorf("this machine's boot ID: %w", err)
	}
	n, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create Node %s: %w", name, err)
	}
	now := metav1.Now()
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "the demo plays the kubelet", LastHeartbeatTime: now, LastTransitionTime: now}}
	n.Status.NodeInfo.BootID = strings.TrimSpace(string(bootID))
	if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update the status of Node %s: %w", name, err)
	}
	// The kubelet stand-in renews it (step 4). kube-apiserver creates
	// kube-node-lease soon after it starts.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := renewNodeLease(ctx, c, name)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// setPhase reports the pod's phase in the API, as the kubelet would.
func setPhase(ctx context.Context, c kubernetes.Interface, p *pod, phase corev1.PodPhase) error {
	p.obj.Status.Phase = phase
	if phase == corev1.PodRunning {
		now := metav1.Now()
		p.obj.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
	}
	out, err := c.CoreV1().Pods(p.obj.Namespace).UpdateStatus(ctx, p.obj, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("update the status of Pod %s: %w", p.name(), err)
	}
	p.obj = out
	return nil
}

// reportStatus sets the API status of every pod to what runs on the node.
func (w *workload) reportStatus(ctx context.Context, c kubernetes.Interface) error {
	for _, p := range append(append([]*pod{}, w.web...), w.cart, w.logAgent, w.worker) {
		if err := setPhase(ctx, c, p, corev1.PodRunning); err != nil {
			return err
		}
	}
	return setPhase(ctx, c, w.report, corev1.PodSucceeded)
}

// podObject is a Pod bound to the demo node with one container.
func podObject(ns, name, container, image string, labels map[string]string, owners []metav1.OwnerReference) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, OwnerReferences: owners},
		Spec: corev1.PodSpec{
			NodeName:   nodeName,
			Containers: []corev1.Container{{Name: container, Image: image}},
		},
	}
}

// createAPIObjects declares the workload in the API: the Deployment →
// ReplicaSet → Pods chain (with the owner references the Deployment and
// ReplicaSet controllers would set; no controller-manager runs here), and
// the other pods.
func (w *workload) createAPIObjects(ctx context.Context, c kubernetes.Interface) error {
	labels := map[string]string{"app": "web"}
	const hash = "5d8f7c9b6d"
	dep, err := c.AppsV1().Deployments(nsShop).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: w.image("shop/web:v3")}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create Deployment: %w", err)
	}
	w.deployment = dep
	rsLabels := map[string]string{"app": "web", "pod-template-hash": hash}
	rs, err := c.AppsV1().ReplicaSets(nsShop).Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web-" + hash, Labels: rsLabels, OwnerReferences: []metav1.OwnerReference{controllerRef("apps/v1", "Deployment", dep.Name, dep.UID)}},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: rsLabels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: rsLabels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: w.image("shop/web:v3")}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create ReplicaSet: %w", err)
	}
	w.replicaSet = rs
	owner := []metav1.OwnerReference{controllerRef("apps/v1", "ReplicaSet", rs.Name, rs.UID)}
	for _, suffix := range []string{"x2k9p", "q7m4r"} {
		p, err := createPod(ctx, c, podObject(nsShop, rs.Name+"-"+suffix, "web", w.image("shop/web:v3"), rsLabels, owner))
		if err != nil {
			return err
		}
		w.web = append(w.web, &pod{obj: p, image: w.image("shop/web:v3")})
	}
	for _, p := range []struct {
		dst                  **pod
		ns, name, ctr, image string
	}{
		{&w.cart, nsShop, "cart-0", "cart", "shop/cart:v2"},
		{&w.logAgent, nsOps, "log-agent-7hx2q", "agent", "ops/log-agent:1.4"},
		{&w.worker, nsShop, "worker-6b7d9-zt5kw", "worker", "shop/worker:v1"},
		{&w.report, nsBatch, "report-28474560-jq8vn", "report", "batch/report:v1"},
	} {
		obj, err := createPod(ctx, c, podObject(p.ns, p.name, p.ctr, w.image(p.image), map[string]string{"app": p.ctr}, nil))
		if err != nil {
			return err
		}
		*p.dst = &pod{obj: obj, image: w.image(p.image)}
	}
	return nil
}

func createPod(ctx context.Context, c kubernetes.Interface, p *corev1.Pod) (*corev1.Pod, error) {
	out, err := c.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create Pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return out, nil
}

func controllerRef(apiVersion, kind, name string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
}

// runOnNode does what the kubelet would have done with those pods: a
// sandbox per pod carrying the Pod's UID, its containers, the log links.
func (w *workload) runOnNode(ctx context.Context, n *node.Node, linkDir string) error {
	for _, p := range append(append([]*pod{}, w.web...), w.cart, w.logAgent) {
		if err := runPod(ctx, n, p); err != nil {
			return err
		}
		if err := runContainer(ctx, n, p, linkDir, 0, nil, runtimeapi.ContainerState_CONTAINER_RUNNING); err != nil {
			return err
		}
	}
	// The worker crashed workerRestarts times: exited attempts 0..N-1, then
	// the running attempt N.
	if err := runPod(ctx, n, w.worker); err != nil {
		return err
	}
	for a := range workerRestarts {
		if err := runContainer(ctx, n, w.worker, linkDir, uint32(a), []string{"exit", "1"}, runtimeapi.ContainerState_CONTAINER_EXITED); err != nil {
			return err
		}
	}
	if err := runContainer(ctx, n, w.worker, linkDir, workerRestarts, nil, runtimeapi.ContainerState_CONTAINER_RUNNING); err != nil {
		return err
	}
	w.workerDead = w.worker.containers[:workerRestarts]
	w.workerRunning = w.worker.containers[workerRestarts]
	// The report job ran to completion; the kubelet stopped its sandbox.
	if err := runPod(ctx, n, w.report); err != nil {
		return err
	}
	if err := runContainer(ctx, n, w.report, linkDir, 0, []string{"exit", "0"}, runtimeapi.ContainerState_CONTAINER_EXITED); err != nil {
		return err
	}
	if err := n.StopPod(ctx, w.report.sandboxID); err != nil {
		return err
	}
	return nil
}

func runPod(ctx context.Context, n *node.Node, p *pod) error {
	id, err := n.RunPod(ctx, node.PodSpec{Name: p.obj.Name, Namespace: p.obj.Namespace, UID: p.uid(), Labels: p.obj.Labels})
	if err != nil {
		return err
	}
	p.sandboxID = id
	return nil
}

// runContainer runs attempt of the pod's container, waits for state, and
// links its log into linkDir as the kubelet does (/var/log/containers).
func runContainer(ctx context.Context, n *node.Node, p *pod, linkDir string, attempt uint32, args []string, state runtimeapi.ContainerState) error {
	name := p.obj.Spec.Containers[0].Name
	id, err := n.RunContainer(ctx, p.sandboxID, node.ContainerSpec{Name: name, Image: p.image, Args: args, Attempt: attempt})
	if err != nil {
		return err
	}
	st, err := n.WaitContainerState(ctx, id, state, 30*time.Second)
	if err != nil {
		return fmt.Errorf("pod %s container %s attempt %d: %w", p.name(), name, attempt, err)
	}
	link := filepath.Join(linkDir, fmt.Sprintf("%s_%s_%s-%s.log", p.obj.Name, p.obj.Namespace, name, id))
	if err := os.Symlink(st.GetLogPath(), link); err != nil {
		return err
	}
	p.containers = append(p.containers, id)
	return nil
}
