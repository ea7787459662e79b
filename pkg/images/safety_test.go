package images_test

import (
	"fmt"
	"math/rand/v2"
	"path"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/internal/testbed/registry"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/images"
)

// TestSafetyProperty runs randomized rounds on a real containerd: random
// images present, containers running or exited using some of them,
// exclusion patterns, minimum and maximum ages and time passing on an
// injected clock, and thresholds that ask the GC to free everything it may.
// In every round the images the GC removed must be eligible by ground truth
// taken from the runtime, not from nodegc: not used by any container, not
// pinned, not the sandbox image, not excluded, and pulled at least the
// minimum age ago.
func TestSafetyProperty(t *testing.T) {
	t.Parallel()
	rounds := map[testbed.ContainerdVersion]int{testbed.Containerd2: 50, testbed.Containerd16: 15}
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			t.Parallel()
			b := newBed(t, v, 128*mib)         // its own filesystem: measurements are not disturbed by other writers
			b.settleTimeout = time.Millisecond // measuring freed bytes is not what this test checks
			ctx := t.Context()
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 7))

			const poolSize = 8
			var pool []*registry.Image
			base := registry.LayerSpec{Seed: "safety-base", Size: mib}
			for i := range poolSize {
				img, err := b.node.Registry.Push(ctx, registry.ImageSpec{Repo: fmt.Sprintf("safety/app%d", i%3), Tag: fmt.Sprintf("v%d", i),
					Layers: []registry.LayerSpec{base, {Seed: fmt.Sprintf("safety-%d", i), Size: 256 << 10}}})
				if err != nil {
					t.Fatal(err)
				}
				pool = append(pool, img)
			}
			clk := clocktesting.NewFakeClock(time.Now())
			pulledAt := map[string]time.Time{} // image ID -> fake time of the test's pull
			stateDir := t.TempDir()
			removedTotal := 0

			for round := range rounds[v] {
				// Time passes; some images get pulled (again).
				clk.Step(time.Duration(rng.IntN(30)) * time.Minute)
				present := b.imageIDs()
				for _, img := range pool {
					if !present[img.ID()] && rng.IntN(2) == 0 {
						if _, err := b.node.PullImage(ctx, img.Ref); err != nil {
							t.Fatal(err)
						}
						pulledAt[img.ID()] = clk.Now()
					}
				}
				// Containers come and go: remove some pods, start new ones
				// running or exiting.
				pods, err := b.cri.ListPodSandboxes(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range pods {
					if rng.IntN(2) == 0 {
						if err := b.node.StopPod(ctx, p.GetId()); err != nil {
							t.Fatal(err)
						}
						if err := b.node.RemovePod(ctx, p.GetId()); err != nil {
							t.Fatal(err)
						}
					}
				}
				present = b.imageIDs()
				for _, img := range pool {
					if present[img.ID()] && rng.IntN(4) == 0 {
						pod, err := b.node.RunPod(ctx, node.PodSpec{Name: fmt.Sprintf("r%d", round), Namespace: "safety"})
						if err != nil {
							t.Fatal(err)
						}
						args := []string{"sleep"}
						if rng.IntN(2) == 0 {
							args = []string{"exit", "1"}
						}
						if _, err := b.node.RunContainer(ctx, pod, node.ContainerSpec{Name: "c", Image: img.Ref, Args: args}); err != nil {
							t.Fatal(err)
						}
					}
				}

				// A random policy that asks to free everything it may.
				minAge := time.Duration(rng.IntN(4)) * 15 * time.Minute
				var maxAge time.Duration
				if rng.IntN(3) == 0 {
					maxAge = minAge + time.Duration(1+rng.IntN(60))*time.Minute
				}
				var exclude []string
				if rng.IntN(2) == 0 {
					exclude = append(exclude, pool[rng.IntN(poolSize)].Ref)
				}
				if rng.IntN(3) == 0 {
					exclude = append(exclude, fmt.Sprintf("%s/safety/app%d:*", b.node.Registry.Host, rng.IntN(3)))
				}
				high := int32(1)
				if rng.IntN(4) == 0 {
					high = 100 // threshold GC off: only max age may remove
				}
				m := b.manager(stateDir, clk, func(c *config.ImageGCConfiguration) {
					c.HighThresholdPercent, c.LowThresholdPercent = ptr.To(high), ptr.To[int32](0)
					c.MinimumGCAge = &metav1.Duration{Duration: minAge}
					if maxAge > 0 {
						c.MaximumGCAge = &metav1.Duration{Duration: maxAge}
					}
					c.Exclude = exclude
				})

				// Ground truth, from the runtime and the test's own records.
				containers, err := b.cri.ListContainers(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				usedRefs := map[string]bool{}
				for _, c := range containers {
					usedRefs[c.GetImageRef()] = true
					usedRefs[c.GetImage().GetImage()] = true
				}
				listed, err := b.cri.ListImages(ctx)
				if err != nil {
					t.Fatal(err)
				}
				ineligible := map[string]string{}
				for _, img := range listed {
					id := img.GetId()
					names := append(append([]string{id}, img.GetRepoTags()...), img.GetRepoDigests()...)
					switch {
					case anyIn(usedRefs, names):
						ineligible[id] = "in use"
					case img.GetPinned():
						ineligible[id] = "pinned"
					case id == b.node.Pause.ID():
						ineligible[id] = "sandbox"
					case matchesAny(exclude, img.GetRepoTags()):
						ineligible[id] = "excluded"
					case clk.Now().Sub(pulledAt[id]) < minAge:
						ineligible[id] = "younger than the minimum age"
					}
				}

				r, err := m.GarbageCollect(ctx, images.TriggerManual)
				if err != nil && r == nil {
					t.Fatalf("round %d: %v", round, err)
				}
				for _, d := range r.Outcome.Removed {
					removedTotal++
					if why, bad := ineligible[d.Image.ID]; bad {
						t.Errorf("round %d: removed %v (%s), which was ineligible: %s", round, d.Image.RepoTags, d.Image.ID, why)
					}
				}
				after := b.imageIDs()
				for id, why := range ineligible {
					if !after[id] {
						t.Errorf("round %d: ineligible image %s (%s) is gone", round, id, why)
					}
				}
				// Every container's image is still there.
				for _, c := range containers {
					if !after[c.GetImageRef()] {
						t.Errorf("round %d: container %s lost its image %s", round, c.GetId(), c.GetImageRef())
					}
				}
				if c := containers; len(c) > 0 && c[0].GetState() == runtimeapi.ContainerState_CONTAINER_UNKNOWN {
					t.Logf("round %d: a container in unknown state", round)
				}
			}
			t.Logf("%d rounds, %d removals, 0 of them ineligible", rounds[v], removedTotal)
			if removedTotal == 0 {
				t.Error("no removal in any round: the property was not exercised")
			}
		})
	}
}

func anyIn(set map[string]bool, names []string) bool {
	for _, n := range names {
		if set[n] {
			return true
		}
	}
	return false
}

func matchesAny(patterns, names []string) bool {
	for _, p := range patterns {
		for _, n := range names {
			if ok, _ := path.Match(p, n); ok {
				return true
			}
		}
	}
	return false
}
