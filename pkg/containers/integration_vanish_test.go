package containers_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/pkg/containers"
)

// TestSandboxRemovedBehindOurBack, on a real containerd of each version: a
// pod's superseded sandbox that the kubelet's own GC removes after nodegc
// planned its removal (and counted its writable layer) but before nodegc
// reaches it. containerd's StopPodSandbox and RemovePodSandbox succeed for
// the unknown ID; its PodSandboxStatus says NotFound. The run succeeds,
// frees 0 bytes of writable layer and skips the sandbox as gone: nodegc
// freed and removed nothing.
func TestSandboxRemovedBehindOurBack(t *testing.T) {
	onEachContainerd(t, func(t *testing.T, v testbed.ContainerdVersion, n *testNode) {
		ctx := t.Context()
		pod := node.PodSpec{Name: "moved", Namespace: "team", UID: "30000000-0000-4000-8000-0000000000ed"}
		old, err := n.RunPod(ctx, pod)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.StopPod(ctx, old); err != nil {
			t.Fatal(err)
		}
		pod.Attempt = 1
		if _, err := n.RunPod(ctx, pod); err != nil {
			t.Fatal(err)
		}
		// containerd's API answers the unknown ID as the kubelet's would
		// see it: removals succeed, the status is NotFound.
		for _, call := range []func(context.Context, string) error{n.client.StopPodSandbox, n.client.RemovePodSandbox} {
			if err := call(ctx, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"); err != nil {
				t.Fatalf("stopping or removing an unknown sandbox: %v, want success", err)
			}
		}

		layers, err := containers.NewContainerdWritableLayers(ctx, n.Socket, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { layers.Close() })
		rt := &kubeletFirst{RuntimeService: n.client, sandbox: old, remove: func() {
			if err := n.RemovePod(ctx, old); err != nil {
				t.Errorf("the kubelet's removal of sandbox %s: %v", old, err)
			}
		}}
		// Node-only: the pod counts as live, and its older, stopped
		// sandbox is superseded.
		m, err := containers.NewManager(containers.Options{Config: n.gcConfig(nil), Runtime: rt, WritableLayers: layers})
		if err != nil {
			t.Fatal(err)
		}
		r, err := m.GarbageCollect(ctx, containers.TriggerManual)
		if err != nil {
			t.Fatalf("GC run: %v", err)
		}
		if got := removals(r.Plan); !slices.Equal(got, []string{old + ":superseded"}) {
			t.Fatalf("plan: %v, want the superseded sandbox %s", got, old)
		}
		planned := r.Plan.RemoveSandboxes[0].WritableLayerBytes
		t.Logf("planned: sandbox %s frees %d bytes of writable layer", old[:12], planned)
		if planned == 0 {
			t.Fatal("the plan counted no writable layer for the sandbox: the test shows nothing")
		}
		if !rt.removed() {
			t.Fatal("the sandbox was not removed behind nodegc's back: the test shows nothing")
		}
		if r.Freed.WritableLayer != 0 {
			t.Errorf("run freed %d bytes of writable layer, want 0: the kubelet removed the sandbox", r.Freed.WritableLayer)
		}
		if len(r.Outcome.Sandboxes) != 0 || !slices.Contains(r.Outcome.Skipped, containers.Skip{Kind: "sandbox", ID: old, Why: containers.SkipGone}) {
			t.Errorf("outcome sandboxes %+v, skipped %+v; want none removed, the sandbox skipped as gone", r.Outcome.Sandboxes, r.Outcome.Skipped)
		}
		if sbs, err := n.client.ListPodSandboxes(ctx, &runtimeapi.PodSandboxFilter{Id: old}); err != nil || len(sbs) != 0 {
			t.Errorf("sandbox %s listed after the run: %v, %v", old, sbs, err)
		}
	})
}

// kubeletFirst is the runtime as nodegc's executor meets it when the
// kubelet's GC removes sandbox right before nodegc's first call about it.
type kubeletFirst struct {
	containers.RuntimeService
	sandbox string
	remove  func()
	once    sync.Once
	done    bool
}

func (k *kubeletFirst) before(id string) {
	if id == k.sandbox {
		k.once.Do(func() { k.remove(); k.done = true })
	}
}

func (k *kubeletFirst) removed() bool {
	k.once.Do(func() {}) // no later removal; orders the read after one that ran
	return k.done
}

func (k *kubeletFirst) PodSandboxStatus(ctx context.Context, id string) (*runtimeapi.PodSandboxStatus, error) {
	k.before(id)
	return k.RuntimeService.PodSandboxStatus(ctx, id)
}

func (k *kubeletFirst) StopPodSandbox(ctx context.Context, id string) error {
	k.before(id)
	return k.RuntimeService.StopPodSandbox(ctx, id)
}

func (k *kubeletFirst) RemovePodSandbox(ctx context.Context, id string) error {
	k.before(id)
	return k.RuntimeService.RemovePodSandbox(ctx, id)
}

// TestContainerMadeBetweenTheListings, on a real containerd of each
// version: a run lists the containers, then the sandboxes. In between, the
// kubelet starts a container in a pod's sandbox, the sandbox is stopped
// (the container exits with it), and the pod gets a new sandbox. The plan
// takes the old sandbox for superseded, holding no container it listed.
// containerd's RemovePodSandbox removes whatever containers the sandbox
// holds, so right before, the executor lists the sandbox's containers: the
// one made meanwhile keeps the sandbox (sandbox_inuse), and the container
// stays. (Before, it was removed with the sandbox.)
func TestContainerMadeBetweenTheListings(t *testing.T) {
	onEachContainerd(t, func(t *testing.T, v testbed.ContainerdVersion, n *testNode) {
		ctx := t.Context()
		pod := node.PodSpec{Name: "late", Namespace: "team", UID: "40000000-0000-4000-8000-00000000000a"}
		old, err := n.RunPod(ctx, pod)
		if err != nil {
			t.Fatal(err)
		}
		var late string
		rt := &betweenListings{RuntimeService: n.client, between: func() error {
			id, err := n.RunContainer(ctx, old, node.ContainerSpec{Name: "app", Image: n.image})
			if err != nil {
				return err
			}
			if _, err := n.WaitContainerState(ctx, id, runtimeapi.ContainerState_CONTAINER_RUNNING, 30*time.Second); err != nil {
				return err
			}
			late = id
			if err := n.StopPod(ctx, old); err != nil {
				return err
			}
			pod.Attempt = 1
			_, err = n.RunPod(ctx, pod)
			return err
		}}
		// Node-only: the pod counts as live, and its older, stopped
		// sandbox is superseded.
		m, err := containers.NewManager(containers.Options{Config: n.gcConfig(nil), Runtime: rt})
		if err != nil {
			t.Fatal(err)
		}
		r, err := m.GarbageCollect(ctx, containers.TriggerManual)
		if err != nil {
			t.Fatalf("GC run: %v", err)
		}
		if late == "" {
			t.Fatal("no container was made between the listings: the test shows nothing")
		}
		if got := removals(r.Plan); !slices.Equal(got, []string{old + ":superseded"}) {
			t.Fatalf("plan: %v, want the superseded sandbox %s", got, old)
		}
		if _, ok := n.containerStates(t)[late]; !ok {
			t.Errorf("container %s, made between the listings, was removed with its sandbox", late[:12])
		}
		if sbs, err := n.client.ListPodSandboxes(ctx, &runtimeapi.PodSandboxFilter{Id: old}); err != nil || len(sbs) != 1 {
			t.Errorf("sandbox %s listed after the run: %v, %v; want it kept", old[:12], sbs, err)
		}
		if !slices.Contains(r.Outcome.Skipped, containers.Skip{Kind: "sandbox", ID: old, Why: containers.SkipSandboxInUse}) {
			t.Errorf("skipped %+v, want the sandbox as %s", r.Outcome.Skipped, containers.SkipSandboxInUse)
		}
	})
}

// betweenListings is the runtime as a run meets it when between runs
// between its container and its sandbox listings.
type betweenListings struct {
	containers.RuntimeService
	between func() error
	once    sync.Once
}

func (b *betweenListings) ListPodSandboxes(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	var err error
	b.once.Do(func() { err = b.between() })
	if err != nil {
		return nil, err
	}
	return b.RuntimeService.ListPodSandboxes(ctx, filter)
}
