package agent_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/nodegc/nodegc/internal/testbed"
)

// TestNodeLockOfAKilledAgent: the node GC's lock is the kernel's (flock),
// so an agent killed outright (SIGKILL: the OOM killer, a node's eviction,
// kubectl delete --force --grace-period=0) releases it with its process,
// without a word: the agent on standby beside it takes over and collects,
// as after a stop (TestOneNodeGCPerNode). A lock left behind by a dead
// holder would leave the node without GC until someone removed it.
func TestNodeLockOfAKilledAgent(t *testing.T) {
	n, _ := nodeWithImage(t, "lock/killed")
	cfg := nodeConfig(t, n.Endpoint, t.TempDir(), []string{"nodeName: lock-node"}, []string{"highThresholdPercent: 100"}, []string{"period: 1s"})
	first := startNodegc(t, "first", cfg, "--owner-gc=off")
	testbed.WaitFor(t, time.Minute, "the first agent to run node GC", func() bool {
		return first.metric("nodegc_node_gc_standby") == 0 && first.metric("nodegc_container_gc_runs_total") >= 1
	})
	second := startNodegc(t, "second", cfg, "--owner-gc=off")
	testbed.WaitFor(t, time.Minute, "the second agent to wait on standby", func() bool {
		return second.metric("nodegc_node_gc_standby") == 1
	})
	if got := second.metric("nodegc_container_gc_runs_total"); got != 0 {
		t.Fatalf("the second agent ran container GC beside the first: nodegc_container_gc_runs_total = %v", got)
	}

	if err := first.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the first agent still runs 30 s after SIGKILL")
	}
	killed := time.Now()
	testbed.WaitFor(t, time.Minute, "the second agent to take over from the killed one and collect", func() bool {
		return second.metric("nodegc_node_gc_standby") == 0 && second.metric("nodegc_container_gc_runs_total") >= 1
	})
	t.Logf("the second agent took over and collected %v after the first was killed", time.Since(killed).Round(time.Millisecond))
	if _, err := second.logLine("Took over node GC"); err != nil {
		t.Error(err)
	}
}
