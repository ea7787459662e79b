package agent_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/cluster"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/internal/testbed/registry"
)

// TestPlanKeepsScheduledImages: on a real containerd node and API server,
// with every image unused, old enough and the disk far above the high
// threshold, `nodegc plan` keeps the images the pods bound to the node may
// still run (keep reason scheduled): a pending pod's container and init
// container, and the image ID a pod's status names although its spec names
// a tag that is gone; a pod's image volume. A finished pod's image and an
// image of no pod go. With a node name the API does not know (an operator's typo)
// the pod view is not authoritative and no image goes at all.
func TestPlanKeepsScheduledImages(t *testing.T) {
	testbed.RequireRoot(t)
	n := node.Start(t, node.Options{Version: testbed.Containerd2, SmallFS: 128 << 20})
	// Image volumes are beta, off by default, in Kubernetes 1.34.
	c := cluster.Start(t, cluster.Options{APIServerFlags: []string{"--feature-gates=ImageVolume=true"}})
	ctx := t.Context()
	client := c.Client()

	ids, refs := pushAndPull(t, n, "sched/main", "sched/init", "sched/ran", "sched/done", "sched/free", "sched/volume")

	const nodeName = "sched-node"
	// Registered as a kubelet of this machine registers it: with its boot
	// ID, without which `nodegc plan` takes the Node for another machine's.
	registered, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	registered.Status.NodeInfo.BootID = testbed.BootID(t)
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, registered, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.KubeletRenews(t, nodeName) // its kubelet runs: nodegc trusts a view only then
	pod := func(name string, init, main string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{
			NodeName:   nodeName,
			Containers: []corev1.Container{{Name: "app", Image: main}},
		}}
		if init != "" {
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: init}}
		}
		p, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Pending: its init container has not run, its container not started.
	pod("pending", refs["sched/init"], refs["sched/main"])
	// Running a container whose spec tag was re-pointed since: the status
	// names the image it runs by ID.
	ran := pod("ran", "", "127.0.0.1:1/gone/tag:v1")
	ran.Status.Phase = corev1.PodRunning
	ran.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Image: "127.0.0.1:1/gone/tag:v1", ImageID: ids["sched/ran"]}}
	if _, err := client.CoreV1().Pods("default").UpdateStatus(ctx, ran, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// An image volume's image. (A volume's image is also named by its status
	// with the ImageVolumeWithDigest feature, from Kubernetes 1.35.)
	volume := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "volume", Namespace: "default"}, Spec: corev1.PodSpec{
		NodeName: nodeName,
		Containers: []corev1.Container{{Name: "app", Image: "127.0.0.1:1/gone/app:v1",
			VolumeMounts: []corev1.VolumeMount{{Name: "models", MountPath: "/models", ReadOnly: true}}}},
		Volumes: []corev1.Volume{{Name: "models", VolumeSource: corev1.VolumeSource{
			Image: &corev1.ImageVolumeSource{Reference: refs["sched/volume"]}}}},
	}}
	volume, err = client.CoreV1().Pods("default").Create(ctx, volume, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(volume.Spec.Volumes) != 1 || volume.Spec.Volumes[0].Image == nil {
		t.Fatalf("the API server dropped the pod's image volume (feature gate ImageVolume off?): %+v", volume.Spec.Volumes)
	}
	done := pod("done", "", refs["sched/done"])
	done.Status.Phase = corev1.PodSucceeded
	if _, err := client.CoreV1().Pods("default").UpdateStatus(ctx, done, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	plan := func(name string) map[string]string {
		t.Helper()
		cfg := nodeConfig(t, n.Endpoint, t.TempDir(), []string{"nodeName: " + name, "clientConnection:", "  kubeconfig: " + c.KubeconfigPath()},
			[]string{"highThresholdPercent: 1", "lowThresholdPercent: 0", "minimumGCAge: 0s"}, nil)
		stdout, stderr := runPlan(t, cfg)
		var view struct {
			Images []struct {
				ID          string `json:"id"`
				Action      string `json:"action"`
				Reason      string `json:"reason"`
				ScheduledBy string `json:"scheduledBy"`
			} `json:"images"`
		}
		if err := json.Unmarshal(stdout, &view); err != nil {
			t.Fatalf("nodegc plan -o json: %v\n%s", err, stdout)
		}
		got := map[string]string{}
		for repo, id := range ids {
			got[repo] = "absent from the plan"
			for _, row := range view.Images {
				if row.ID == id {
					got[repo] = row.Action + " " + row.Reason
					if by, _, _ := strings.Cut(row.ScheduledBy, ":"); by != "" {
						got[repo] += ": " + by
					}
				}
			}
		}
		t.Logf("plan for node %q: %v\nstderr:\n%s", name, got, stderr)
		return got
	}

	want := map[string]string{
		"sched/main": "keep scheduled: pod default/pending", "sched/init": "keep scheduled: pod default/pending",
		"sched/ran": "keep scheduled: pod default/ran", "sched/done": "remove space", "sched/free": "remove space",
		"sched/volume": "keep scheduled: pod default/volume",
	}
	if diff := cmp.Diff(want, plan(nodeName)); diff != "" {
		t.Errorf("plan for the node (-want +got):\n%s", diff)
	}
	for repo := range want {
		want[repo] = "keep scheduled: pod view not authoritative (node_not_found)"
	}
	if diff := cmp.Diff(want, plan("sched-node-typo")); diff != "" {
		t.Errorf("plan for a node name the API does not know (-want +got):\n%s", diff)
	}
}

// TestWrongNameOfTheSameBootRemovesNoImage: on kind, k3d or minikube with a
// container driver, every node shares one kernel, so every Node reports the
// same boot ID, and a wrong node name (set in a config every node reads)
// that another registered Node has passes the boot ID check. The container
// GC's plan finds the view at odds with the runtime (here the runtime lists
// none of the pods the view's kubelet reports running, and runs one the
// view lacks); the image GC must not trust that view either: with the
// wrong name, `nodegc plan` keeps this node's pending pod's image as
// scheduled, as with the right name, and the image of the other Node's
// pod is not what keeps anything.
func TestWrongNameOfTheSameBootRemovesNoImage(t *testing.T) {
	testbed.RequireRoot(t)
	n := node.Start(t, node.Options{Version: testbed.Containerd2, SmallFS: 128 << 20})
	c := cluster.Start(t, cluster.Options{})
	ctx := t.Context()
	client := c.Client()
	ids, refs := pushAndPull(t, n, "same-boot/pending", "same-boot/running", "same-boot/elsewhere")
	boot := testbed.BootID(t)
	for _, name := range []string{"kind-worker", "kind-worker2"} {
		nd, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nd.Status.NodeInfo.BootID = boot
		if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, nd, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		c.KubeletRenews(t, name) // each Node's kubelet runs, on its own machine
	}
	pods := client.CoreV1().Pods("default")
	mk := func(name, nodeName, image string) *corev1.Pod {
		p, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "app", Image: image}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	mk("pending", "kind-worker", refs["same-boot/pending"]) // bound here, not started yet
	running := mk("running", "kind-worker", refs["same-boot/running"])
	elsewhere := mk("elsewhere", "kind-worker2", refs["same-boot/elsewhere"])
	// kind-worker2's kubelet, on its own machine, reports its pod running
	// for two hours.
	startedAt := metav1.NewTime(time.Now().Add(-2 * time.Hour).Truncate(time.Second))
	elsewhere.Status = corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &startedAt, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "app", Image: refs["same-boot/elsewhere"], Ready: true, ContainerID: "containerd://" + strings.Repeat("ef", 32),
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: startedAt}},
	}}}
	if _, err := pods.UpdateStatus(ctx, elsewhere, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// This machine runs kind-worker's pod "running".
	if _, err := n.RunPod(ctx, node.PodSpec{Name: running.Name, Namespace: running.Namespace, UID: string(running.UID)}); err != nil {
		t.Fatal(err)
	}

	plan := func(name string) (images map[string]string, containerView string) {
		cfg := nodeConfig(t, n.Endpoint, t.TempDir(), []string{"nodeName: " + name, "clientConnection:", "  kubeconfig: " + c.KubeconfigPath()},
			[]string{"highThresholdPercent: 1", "lowThresholdPercent: 0", "minimumGCAge: 0s"}, nil)
		stdout, stderr := runPlan(t, cfg)
		var view struct {
			PodsView string `json:"podsView"`
			Images   []struct {
				ID, Action, Reason, ScheduledBy string
			} `json:"images"`
		}
		if err := json.Unmarshal(stdout, &view); err != nil {
			t.Fatalf("%v\n%s", err, stdout)
		}
		images = map[string]string{}
		for repo, id := range ids {
			for _, row := range view.Images {
				if row.ID == id {
					images[repo] = row.Action + " " + row.Reason
					if row.ScheduledBy != "" {
						images[repo] += " (" + row.ScheduledBy + ")"
					}
				}
			}
		}
		t.Logf("nodeName %q: images %v; the container GC's pod view %q\nstderr:\n%s", name, images, view.PodsView, stderr)
		return images, view.PodsView
	}
	right, _ := plan("kind-worker")
	if !strings.HasPrefix(right["same-boot/pending"], "keep scheduled") || right["same-boot/elsewhere"] != "remove space" {
		t.Errorf("right name: images %v, want the pending pod's kept as scheduled, the other Node's pod's removed", right)
	}
	wrong, containerView := plan("kind-worker2")
	if !strings.Contains(containerView, "not authoritative") {
		t.Fatalf("wrong name: the container GC's pod view %q, want not authoritative (the check this test relies on)", containerView)
	}
	for _, repo := range []string{"same-boot/pending", "same-boot/running"} {
		if !strings.HasPrefix(wrong[repo], "keep ") {
			t.Errorf("wrong node name (another registered Node, same boot ID): %s's image is planned %q, want kept", repo, wrong[repo])
		}
	}
}

// pushAndPull pushes an image of 1 MiB tagged v1 for each repository to n's
// registry and pulls it, and returns the image IDs and the references, by
// repository.
func pushAndPull(t *testing.T, n *node.Node, repos ...string) (ids, refs map[string]string) {
	t.Helper()
	ids, refs = map[string]string{}, map[string]string{}
	for _, repo := range repos {
		img, err := n.Registry.Push(t.Context(), registry.ImageSpec{Repo: repo, Tag: "v1", Layers: []registry.LayerSpec{{Seed: repo, Size: 1 << 20}}})
		if err != nil {
			t.Fatal(err)
		}
		if ids[repo], err = n.PullImage(t.Context(), img.Ref); err != nil {
			t.Fatal(err)
		}
		refs[repo] = img.Ref
	}
	return ids, refs
}
