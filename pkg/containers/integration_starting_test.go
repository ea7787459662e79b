package containers_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/internal/testbed/registry"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/containers"
)

// TestCreatedNeverStartedKeepsNewestExited, on a real containerd of each
// version: a pod's container has an exited instance and a newer one created
// but never started (the window between CreateContainer and StartContainer,
// or what a kubelet crash leaves). With maxPerPodContainer 1, and with
// maxContainers 0, both stay; once the clock is past the grace the stale
// created instance goes and the exited one stays.
func TestCreatedNeverStartedKeepsNewestExited(t *testing.T) {
	testbed.RequireRoot(t)
	reg := registry.Start(t)
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			n := startNode(t, v, reg)
			for _, tc := range []struct {
				name      string
				mutate    func(*config.ContainerGCConfiguration)
				staleGoes string
			}{
				{"maxPerPodContainer 1", func(c *config.ContainerGCConfiguration) { c.MaxPerPodContainer = ptr.To[int32](1) }, "per_container_limit"},
				{"maxContainers 0", func(c *config.ContainerGCConfiguration) {
					c.MaxPerPodContainer, c.MaxContainers = ptr.To[int32](-1), ptr.To[int32](0) // only the node limit at work
				}, "node_limit"},
			} {
				t.Run(tc.name, func(t *testing.T) { createdNeverStartedScenario(t, n, tc.mutate, tc.staleGoes) })
			}
		})
	}
}

func createdNeverStartedScenario(t *testing.T, n *testNode, mutate func(*config.ContainerGCConfiguration), staleGoes string) {
	ctx := t.Context()
	sb, err := n.RunPod(ctx, node.PodSpec{Name: "starting", Namespace: "team"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // t.Context() has ended by then
		if err := n.RemovePod(context.WithoutCancel(ctx), sb); err != nil {
			t.Error(err)
		}
	})
	exitedID := n.runDead(t, sb, "starting", "team", "app", 1)[0]
	createdID, err := n.CreateContainer(ctx, sb, node.ContainerSpec{Name: "app", Image: n.image, Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	exited, created := runtimeapi.ContainerState_CONTAINER_EXITED, runtimeapi.ContainerState_CONTAINER_CREATED
	if diff := cmp.Diff(map[string]runtimeapi.ContainerState{exitedID: exited, createdID: created}, n.containerStates(t)); diff != "" {
		t.Fatalf("containers before GC (-want +got):\n%s", diff)
	}
	clk := clocktesting.NewFakeClock(time.Now())
	m, err := containers.NewManager(containers.Options{Config: n.gcConfig(mutate), Runtime: n.client, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	gc := func() []string {
		t.Helper()
		r, err := m.GarbageCollect(ctx, containers.TriggerManual)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range r.Outcome.Containers {
			out = append(out, d.Container.ID+":"+d.Reason)
		}
		return out
	}
	if got := gc(); len(got) != 0 {
		t.Errorf("while the new instance may be starting: removed %v, want nothing", got)
	}
	if diff := cmp.Diff(map[string]runtimeapi.ContainerState{exitedID: exited, createdID: created}, n.containerStates(t)); diff != "" {
		t.Errorf("containers after a run within the grace (-want +got):\n%s", diff)
	}

	clk.Step(2 * time.Minute) // past the grace: the created instance is a leftover
	if diff := cmp.Diff([]string{createdID + ":" + staleGoes}, gc()); diff != "" {
		t.Errorf("past the grace: removed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]runtimeapi.ContainerState{exitedID: exited}, n.containerStates(t)); diff != "" {
		t.Errorf("containers past the grace (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(filepath.Join(n.PodLogs, "team_starting_"+podUID(t, n, sb), "app", "0.log")); err != nil {
		t.Errorf("the exited instance's log: %v", err)
	}
}
