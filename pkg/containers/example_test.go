package containers_test

import (
	"fmt"
	"time"

	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/containers"
)

// A Policy plans without the runtime: given what is on the node, which pods
// exist and the time, it says what to remove and what to keep, and why.
// Pod web restarted its app container twice; pod old was deleted, its dead
// container and stopped sandbox are left. The defaults keep one dead
// instance per container (maxPerPodContainer 1). Without API access
// (NodeOnlyView) no pod is ever gone, so old stays; with a view from the
// API server that no longer lists it, old goes.
func Example() {
	policy := containers.NewPolicy(config.Defaulted().ContainerGC, config.Defaulted().RuntimeRequestTimeout.Duration)
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ctr := func(pod, name string, attempt uint32, state containers.State, age time.Duration) containers.Container {
		return containers.Container{ID: fmt.Sprintf("%s-%s-%d", pod, name, attempt), SandboxID: pod + "-sandbox", Managed: true,
			PodUID: "uid-" + pod, PodName: pod, PodNamespace: "shop", Name: name, Attempt: attempt, State: state,
			CreatedAt: now.Add(-age), GracePeriod: 30}
	}
	node := containers.NodeState{
		Sandboxes: []containers.Sandbox{
			{ID: "web-sandbox", Managed: true, PodUID: "uid-web", PodName: "web", PodNamespace: "shop", Ready: true,
				CreatedAt: now.Add(-4 * time.Hour), Source: containers.SourceAPI},
			{ID: "old-sandbox", Managed: true, PodUID: "uid-old", PodName: "old", PodNamespace: "shop",
				CreatedAt: now.Add(-9 * time.Hour), Source: containers.SourceAPI},
		},
		Containers: []containers.Container{
			ctr("web", "app", 0, containers.StateExited, 3*time.Hour),
			ctr("web", "app", 1, containers.StateExited, 2*time.Hour),
			ctr("web", "app", 2, containers.StateRunning, time.Hour),
			ctr("old", "app", 0, containers.StateExited, 8*time.Hour),
		},
	}
	// The kubelet of node-a renewed its lease 5s ago: without a fresh
	// one, nothing is gone.
	lease := func() containers.NodeLease { return containers.NodeLease{RenewTime: now.Add(-5 * time.Second)} }
	fromAPI := containers.PodView{Node: "node-a", Authoritative: true, Live: map[string]bool{"uid-web": true}, ListedAt: now.Add(-time.Minute),
		NodeLease: lease}
	for _, view := range []containers.PodView{containers.NodeOnlyView(), fromAPI} {
		plan := policy.Plan(node, view, now)
		fmt.Printf("pod view authoritative: %v\n", plan.PodsAuthoritative)
		for _, d := range plan.RemoveContainers {
			fmt.Printf("  remove container %s (%s)\n", d.Container.ID, d.Reason)
		}
		for _, d := range plan.RemoveSandboxes {
			fmt.Printf("  remove sandbox %s (%s)\n", d.Sandbox.ID, d.Reason)
		}
		for _, d := range plan.KeepContainers {
			fmt.Printf("  keep container %s (%s)\n", d.Container.ID, d.Reason)
		}
	}
	// Output:
	// pod view authoritative: false
	//   remove container web-app-0 (per_container_limit)
	//   keep container old-app-0 (within_limit)
	//   keep container web-app-1 (within_limit)
	//   keep container web-app-2 (running)
	// pod view authoritative: true
	//   remove container old-app-0 (pod_gone)
	//   remove container web-app-0 (per_container_limit)
	//   remove sandbox old-sandbox (pod_gone)
	//   keep container web-app-1 (within_limit)
	//   keep container web-app-2 (running)
}
