package containers_test

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/containers"
)

// TestPodLogsDirMovedLeavesNewPodsToTheKubelet, on a real containerd of
// each version: the kubelet's podLogsDir was moved and nodegc was not told
// (its podLogsDirectory is the old one). A pod started before the move
// still runs and logs in the old directory, so nodegc sees the logs there;
// a pod started after logs in the new one, which the runtime reports as
// its containers' log paths. The per-container limit plans the older dead
// instance of the new pod's container; the check before its removal finds
// its log outside podLogsDirectory and leaves it, with its log file, to
// the kubelet's GC (logs_elsewhere): nodegc could not remove that file,
// and once the container is gone the kubelet would not either.
func TestPodLogsDirMovedLeavesNewPodsToTheKubelet(t *testing.T) {
	onEachContainerd(t, func(t *testing.T, v testbed.ContainerdVersion, n *testNode) {
		ctx := t.Context()
		oldLogs := filepath.Join(t.TempDir(), "pods")
		before, err := n.RunPod(ctx, node.PodSpec{Name: "db", Namespace: "team", LogsUnder: oldLogs})
		if err != nil {
			t.Fatal(err)
		}
		running, err := n.RunContainer(ctx, before, node.ContainerSpec{Name: "db", Image: n.image})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.WaitContainerState(ctx, running, runtimeapi.ContainerState_CONTAINER_RUNNING, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		after, err := n.RunPod(ctx, node.PodSpec{Name: "crashy", Namespace: "team"})
		if err != nil {
			t.Fatal(err)
		}
		dead := n.runDead(t, after, "crashy", "team", "app", 2)
		oldest := filepath.Join(n.PodLogs, "team_crashy_"+podUID(t, n, after), "app", "0.log")
		if !exists(oldest) {
			t.Fatalf("containerd did not write %s", oldest)
		}

		cfg := n.gcConfig(func(c *config.ContainerGCConfiguration) {
			c.PodLogsDirectory, c.MaxPerPodContainer = oldLogs, ptr.To[int32](1)
		})
		r, err := n.manager(t, cfg, nil).GarbageCollect(ctx, containers.TriggerManual)
		if err != nil {
			t.Fatal(err)
		}
		if r.Plan.PodLogsUnseen {
			t.Error("the pod logs count as unseen; want seen (the pod started before the move logs where nodegc looks)")
		}
		if got := removals(r.Plan); !slices.Contains(got, dead[0]+":per_container_limit") {
			t.Fatalf("plan %v; want the older dead instance %s by the per-container limit", got, dead[0])
		}
		var skipped []string
		for _, s := range r.Outcome.Skipped {
			skipped = append(skipped, s.ID+" "+s.Why)
		}
		if diff := cmp.Diff([]string{dead[0] + " " + containers.SkipLogsElsewhere}, skipped); diff != "" {
			t.Errorf("skipped (-want +got):\n%s", diff)
		}
		states := n.containerStates(t)
		if _, ok := states[dead[0]]; !ok {
			t.Errorf("the older dead instance %s was removed; its log %s stays behind: exists %t", dead[0], oldest, exists(oldest))
		}
		if !exists(oldest) {
			t.Errorf("log %s removed", oldest)
		}
		t.Logf("containerd %s: containers after the run %v", v, states)
	})
}
