package main

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
// It also renews the Node's lease every nodeLeaseRenewEvery, as the
// kubelet does: nodegc takes pods that run here as showing the pod view is
// this node's only while it is fresh.
//
// It stops sandboxes and deletes Pods; it never removes a container, a
// sandbox, a log or an image: that is nodegc's job.
type kubeletStandIn struct {
	client  kubernetes.Interface
	node    *node.Node
	renewed time.Time // the last renewal of the Node's lease
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
		if time.Since(k.renewed) >= nodeLeaseRenewEvery {
			if err := renewNodeLease(ctx, k.client, nodeName); err != nil {
				say("[demo]    kubelet stand-in: %v; will retry", err)
			} else {
				k.renewed = time.Now()
			}
		}
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

// nodeLeaseRenewEvery is how often the kubelet renews its Node's lease: a
// quarter of its duration, nodeLeaseSeconds.
const (
	nodeLeaseRenewEvery = 10 * time.Second
	nodeLeaseSeconds    = 40
)

// renewNodeLease creates or renews the lease of Node name in
// kube-node-lease, as its kubelet does.
func renewNodeLease(ctx context.Context, c kubernetes.Interface, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	leases := c.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	spec := coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](nodeLeaseSeconds),
		RenewTime: &metav1.MicroTime{Time: time.Now()}}
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{})
	case err == nil:
		l.Spec = spec
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("renew the lease of Node %s: %w", name, err)
	}
	return nil
}
