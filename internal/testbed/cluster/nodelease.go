package cluster

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
)

// RenewNodeLease creates or renews the lease of Node name in
// kube-node-lease, renewed at renewed for 40s, as its kubelet would.
func (c *Cluster) RenewNodeLease(t testing.TB, name string, renewed time.Time) {
	t.Helper()
	leases := c.Client().CoordinationV1().Leases(corev1.NamespaceNodeLease)
	spec := coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &metav1.MicroTime{Time: renewed}}
	// kube-apiserver creates its namespace soon after it starts.
	testbed.WaitFor(t, 30*time.Second, "the lease of "+name+" to be written", func() bool {
		l, err := leases.Get(t.Context(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = leases.Create(t.Context(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{})
			return err == nil
		}
		if err != nil {
			return false
		}
		l.Spec = spec
		_, err = leases.Update(t.Context(), l, metav1.UpdateOptions{})
		return err == nil
	})
}

// KubeletRenews renews the lease of Node name now and then every 5s until
// the test ends, as its kubelet would: nodegc trusts the API's pods of a
// Node only while its lease is fresh. Renewals that fail (an API server
// the test stopped) are tried again at the next tick.
func (c *Cluster) KubeletRenews(t testing.TB, name string) {
	t.Helper()
	c.RenewNodeLease(t, name, time.Now())
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan struct{})
	go func() {
		defer close(done)
		leases := c.Client().CoordinationV1().Leases(corev1.NamespaceNodeLease)
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			l, err := leases.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			_, _ = leases.Update(ctx, l, metav1.UpdateOptions{})
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}
