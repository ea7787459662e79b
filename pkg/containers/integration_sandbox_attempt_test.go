package containers_test

import (
	"slices"
	"testing"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/pkg/containers"
)

// TestNewestSandboxByAttempt, on a real containerd of each version: a live
// pod's sandbox of the highest attempt stays although it was created
// first (its creation time is containerd's clock; here the attempts are
// made out of order, as a step of the wall clock back between two
// creations dates the latest one earlier), and so does the newest by
// creation time; a third, older on both counts, goes as superseded.
func TestNewestSandboxByAttempt(t *testing.T) {
	onEachContainerd(t, func(t *testing.T, v testbed.ContainerdVersion, n *testNode) {
		ctx := t.Context()
		pod := node.PodSpec{Name: "stepped", Namespace: "team", UID: "30000000-0000-4000-8000-0000000000ae"}
		ids := map[uint32]string{}
		for _, attempt := range []uint32{0, 5, 1} { // 5 is the latest attempt, 1 the newest by creation
			pod.Attempt = attempt
			id, err := n.RunPod(ctx, pod)
			if err != nil {
				t.Fatal(err)
			}
			if err := n.StopPod(ctx, id); err != nil {
				t.Fatal(err)
			}
			ids[attempt] = id
		}
		// Node-only: the pod counts as live.
		m, err := containers.NewManager(containers.Options{Config: n.gcConfig(nil), Runtime: n.client})
		if err != nil {
			t.Fatal(err)
		}
		plan, err := m.Plan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := removals(plan), []string{ids[0] + ":superseded"}; !slices.Equal(got, want) {
			t.Errorf("plan removes %v, want %v (attempt 0 only)", got, want)
		}
		kept := map[string]string{}
		for _, d := range plan.KeepSandboxes {
			kept[d.Sandbox.ID] = d.Reason
		}
		for _, a := range []uint32{5, 1} {
			if kept[ids[a]] != containers.KeepNewestSandbox {
				t.Errorf("sandbox of attempt %d: kept %q, want %q", a, kept[ids[a]], containers.KeepNewestSandbox)
			}
		}
	})
}
