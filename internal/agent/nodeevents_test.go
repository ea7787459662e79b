package agent_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/nodegc/nodegc/internal/agent"
	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/cluster"
	"github.com/nodegc/nodegc/internal/testbed/node"
)

// TestNodeEventsOnlyOnThisMachinesNode: on a real containerd and API
// server, an agent whose image GC fails at every check (asked to free the
// whole disk, with nothing removable) records FreeDiskSpaceFailed on the
// Node of its node name only when that Node is this machine's. Named after
// a Node that reports another boot ID (a nodeName left in a ConfigMap
// every node reads, a neighbour's name) or after none, it records no Event
// on it, from its first run on (before its pods are listed too), and logs
// why; named after this machine's Node, the Event is there.
func TestNodeEventsOnlyOnThisMachinesNode(t *testing.T) {
	testbed.RequireRoot(t)
	n := node.Start(t, node.Options{Version: testbed.Containerd2})
	c := cluster.Start(t, cluster.Options{})
	ctx := t.Context()
	client := c.Client()

	register := func(name, bootID string) {
		t.Helper()
		registered, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		registered.Status.NodeInfo.BootID = bootID
		if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, registered, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	register("events-other", "00000000-0000-4000-8000-000000000000")
	register("events-here", testbed.BootID(t))

	// Events on Node name, by reason.
	nodeEvents := func(name string) map[string]int {
		t.Helper()
		list, err := client.CoreV1().Events("").List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String()})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, ev := range list.Items {
			if ev.InvolvedObject.Kind == "Node" {
				got[ev.Reason] += int(max(ev.Count, 1))
			}
		}
		return got
	}
	run := func(nodeName string) *proc {
		t.Helper()
		cfg := nodeConfig(t, n.Endpoint, t.TempDir(), []string{"clientConnection:", "  kubeconfig: " + c.KubeconfigPath()},
			[]string{"highThresholdPercent: 1", "lowThresholdPercent: 0", "minimumGCAge: 0s"}, nil)
		return startNodegc(t, nodeName, cfg, "--owner-gc=off")
	}
	failures := func(p *proc) float64 { return p.metric("nodegc_image_gc_runs_total", "result=not_enough") }

	// A missing Node and another machine's: the first failed runs come
	// before the pods are listed, the others after.
	for _, name := range []string{"events-missing", "events-other"} {
		p := run(name)
		testbed.WaitFor(t, time.Minute, name+": three failed image GC runs", func() bool { return failures(p) >= 3 })
		line, err := p.logLine("No Node Events while the Node of this node's name is not this machine's")
		if err != nil {
			t.Errorf("%s: %v", name, err)
		} else {
			t.Logf("%s: %s", name, line)
		}
		sigterm(t, p)
	}

	// This machine's Node gets the Event: the control that shows the two
	// above could have recorded one.
	here := run("events-here")
	testbed.WaitFor(t, time.Minute, "FreeDiskSpaceFailed on this machine's Node", func() bool {
		return nodeEvents("events-here")[agent.EventFreeDiskSpaceFailed] > 0
	})
	sigterm(t, here)
	for _, name := range []string{"events-missing", "events-other"} {
		if got := nodeEvents(name); len(got) > 0 {
			t.Errorf("Events on Node %s, which is not this machine's: %v", name, got)
		}
	}
	if got := nodeEvents("events-here"); len(got) != 1 {
		t.Errorf("Events on this machine's Node: %v, want FreeDiskSpaceFailed only", got)
	}
}
