package main

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed/node"
)

// kubeletStandIn does the one part of the kubelet's job the demo needs: a
// Pod bound to the node that is marked for deletion (graceful deletion
// sets deletionTimestamp and waits for the kubelet) gets its sandbox
// stopped, then its deletion confirmed with grace period 0, as the kubelet's
// status manager does once the pod's containers have stopped. Without it,
// deleted Pods of a node would stay in the API forever.
//
// It stops sandboxes and deletes Pods; it never removes a container, a
// sandbox, a log or an image: that is nodegc's job.
type kubeletStandIn struct {
	client kubernetes.Interface
	node   *node.Node
}

func newKubeletStandIn(c kubernetes.Interface, n *node.Node) *kubeletStandIn {
	return &kubeletStandIn{client: c, node: n}
}

// run polls the node's Pods until ctx ends.
func (k *kubeletStandIn) run(ctx context.Context) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		k.sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (k *kubeletStandIn) sync(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pods, err := k.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", nodeName).String(),
	})
	if err != nil {
		return // the next tick tries again
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp == nil {
			continue
		}
		k.terminate(ctx, p)
	}
}

func (k *kubeletStandIn) terminate(ctx context.Context, p *corev1.Pod) {
	sbs, err := k.node.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{node.LabelPodUID: string(p.UID)},
	}})
	if err != nil {
		return
	}
	stopped := 0
	for _, sb := range sbs.GetItems() {
		if sb.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		if err := k.node.StopPod(ctx, sb.GetId()); err != nil {
			say("[demo]    kubelet stand-in: stop the sandbox of Pod %s/%s: %v; will retry", p.Namespace, p.Name, err)
			return
		}
		stopped++
	}
	err = k.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &p.UID},
	})
	if err != nil {
		return // gone already, or the next tick tries again
	}
	say("[demo]    kubelet stand-in: Pod %s/%s is marked for deletion: stopped %d running sandbox(es), confirmed the deletion (grace period 0)", p.Namespace, p.Name, stopped)
}
