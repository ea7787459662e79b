package agent_test

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/pkg/images"
)

// TestOneNodeGCPerNode: two agents on one node, with one state directory
// (a second install with ports of its own, an operator's `nodegc run` by
// hand beside the DaemonSet). The second collects nothing while the first
// runs: no image or container GC of its own (no listing, no removal, no
// write of the state file the first one writes), is ready (it is healthy;
// it has nothing to do), and says why in its log and in
// nodegc_node_gc_standby. When the first stops (SIGTERM, its
// last write of the state made), the second takes over within seconds and
// reads that state.
func TestOneNodeGCPerNode(t *testing.T) {
	ctx := t.Context()
	n, img := nodeWithImage(t, "lock/used")
	stateDir := t.TempDir()
	// One node: both agents collect for the same node name (the state
	// file names it).
	cfg := nodeConfig(t, n.Endpoint, stateDir, []string{"nodeName: lock-node"}, []string{"highThresholdPercent: 100"}, []string{"period: 1s"})
	// As the DaemonSet sets them: the second agent's log names the pod
	// that holds the lock.
	t.Setenv("POD_NAMESPACE", "nodegc")
	t.Setenv("POD_NAME", "nodegc-first")
	first := startNodegc(t, "first", cfg, "--owner-gc=off")
	testbed.WaitFor(t, time.Minute, "the first agent's image GC to keep image usage", func() bool {
		return first.metric("nodegc_image_usage_source", "source=polling") == 1
	})
	t.Setenv("POD_NAME", "nodegc-second")
	second := startNodegc(t, "second", cfg, "--owner-gc=off")
	testbed.WaitFor(t, 30*time.Second, "the second agent's /metrics", func() bool {
		return second.metric("nodegc_node_gc_standby") >= 0
	})
	// Long enough for a second collector to list, collect and write.
	time.Sleep(3 * time.Second)
	for _, m := range []string{"nodegc_image_usage_source", "nodegc_container_gc_runs_total", "nodegc_image_state_saves_total"} {
		if got := second.metric(m); got != 0 {
			t.Errorf("second agent beside the first: %s = %v, want no sample (it must not collect)", m, got)
		}
	}
	if got := second.metric("nodegc_node_gc_standby"); got != 1 {
		t.Errorf("second agent: nodegc_node_gc_standby = %v, want 1", got)
	}
	if code := status(t, second.healthz+"/readyz"); code != http.StatusOK {
		t.Errorf("second agent on standby: /readyz answered %d, want 200 (it is healthy)", code)
	}
	line, err := second.logLine("waits for it to stop")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second agent: %s", line)
	// `nodegc plan` says who runs node GC here.
	out, _ := runPlan(t, cfg, "NODE_NAME=plan")
	var plan struct {
		NodeGC struct {
			Running bool   `json:"running"`
			Holder  string `json:"holder"`
		} `json:"nodeGC"`
	}
	if err := json.Unmarshal(out, &plan); err != nil || !plan.NodeGC.Running || !strings.HasPrefix(plan.NodeGC.Holder, "pod nodegc/nodegc-first ") {
		t.Errorf("nodegc plan's nodeGC = %+v (%v), want running by pod nodegc/nodegc-first", plan.NodeGC, err)
	}
	if !strings.Contains(line, `holder="pod nodegc/nodegc-first (pid `) {
		t.Errorf("the second agent's log does not name the pod holding the lock: %s", line)
	}

	// A use the second agent cannot see, on standby: a container that runs
	// and is gone before the first stops. The second knows of it only from
	// the state file, so it must read that file after the first's last
	// write (at SIGTERM), not before.
	pod, err := n.RunPod(ctx, node.PodSpec{Name: "lock", Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	if _, err := n.RunContainer(ctx, pod, node.ContainerSpec{Name: "c", Image: img.Ref}); err != nil {
		t.Fatal(err)
	}
	// Until the first agent saw it (its 1s polls), and wrote it.
	testbed.WaitFor(t, 30*time.Second, "the first agent's state file to hold the container's use", func() bool {
		lu, ok := savedLastUsed(stateDir, img.ID())
		return ok && !lu.Before(started.Add(-time.Second))
	})
	if err := n.StopPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := n.RemovePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	stopped := sigterm(t, first)
	used := readState(t, stateDir)[img.ID()].LastUsed
	if used.IsZero() {
		t.Fatalf("the first agent's last state has no last-used time for %s", img.ID())
	}
	testbed.WaitFor(t, 30*time.Second, "the second agent to take over", func() bool {
		return second.metric("nodegc_node_gc_standby") == 0 && second.metric("nodegc_image_usage_source", "source=polling") == 1
	})
	t.Logf("the second agent took over %v after the first stopped", time.Since(stopped).Round(time.Millisecond))
	if _, err := second.logLine("Took over node GC"); err != nil {
		t.Error(err)
	}
	sigterm(t, second)
	if got := readState(t, stateDir)[img.ID()].LastUsed; !got.Equal(used) {
		t.Errorf("the second agent's state has last-used %v for %s, want the first agent's %v: it read the state before the first's last write", got, img.ID(), used)
	}
}

// sigterm stops p with SIGTERM and returns when it exited, with status 0.
func sigterm(t *testing.T, p *proc) time.Time {
	t.Helper()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(time.Minute):
		t.Fatalf("%s still running a minute after SIGTERM", p.name)
	}
	if p.Err() != nil {
		t.Errorf("%s exit after SIGTERM: %v, want status 0", p.name, p.Err())
	}
	return time.Now()
}

// readState reads the usage records in the state directory.
func readState(t *testing.T, dir string) map[string]images.Usage {
	t.Helper()
	tr, warn := images.NewTracker(dir, time.Now())
	if warn != nil {
		t.Fatalf("state in %s: %v", filepath.Join(dir, images.StateFileName), warn)
	}
	return tr.Usage()
}

func status(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
