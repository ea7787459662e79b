package containers_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/cluster"
)

// TestAPIPodSourceFollowsTheNode, on a real kube-apiserver: a pod view is
// authoritative only while the Node of its name exists. A source whose node
// was never registered syncs and is reachable, yet says node_not_found; it
// turns authoritative when the Node is created and stops being so when the
// Node is deleted.
func TestAPIPodSourceFollowsTheNode(t *testing.T) {
	testbed.RequireRoot(t)
	c := cluster.Start(t, cluster.Options{})
	const name = "late-node"
	src := startSource(t, c, name)
	reason := func() string {
		v := src.View(time.Now())
		if v.Authoritative {
			return "authoritative"
		}
		return v.Reason
	}
	waitFor(t, 30*time.Second, "the pod source to sync", src.HasSynced)
	if got := reason(); got != "node_not_found" {
		t.Errorf("synced, no Node %q: view %q, want node_not_found", name, got)
	}
	registerNode(t, c, name)
	waitFor(t, 30*time.Second, "the view to turn authoritative once the Node exists", func() bool { return reason() == "authoritative" })
	if err := c.Client().CoreV1().Nodes().Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the view to say node_not_found once the Node is deleted", func() bool { return reason() == "node_not_found" })
}
