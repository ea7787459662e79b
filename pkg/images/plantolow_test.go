package images

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/pkg/config"
)

// TestPlanToLowIsWhatACollectionUnderWayRemoves: between the thresholds,
// PlanAndToLow's first plan frees nothing, and its second lists what the
// agent's run removes in a collection under way (usage reached high and has
// not been under low since), on the same node state. Before, `nodegc plan` showed only the
// first, while the agent removed images.
func TestPlanToLowIsWhatACollectionUnderWayRemoves(t *testing.T) {
	mk := func() (*Manager, *removalsRuntime) {
		rt := &removalsRuntime{images: []*runtimeapi.Image{
			{Id: "sha256:aa", RepoTags: []string{"registry.example/a:1"}, Size: 5 * mib},
			{Id: "sha256:bb", RepoTags: []string{"registry.example/b:1"}, Size: 5 * mib},
		}}
		// 100 MiB, 10 MiB available: usage 90%, between low 85 and high 95.
		m := everythingNeeded(t, Options{Runtime: rt, Registerer: prometheus.NewRegistry()}, func(c *config.ImageGCConfiguration) {
			c.HighThresholdPercent, c.LowThresholdPercent = ptr.To[int32](95), ptr.To[int32](85)
		})
		return m, rt
	}
	m, _ := mk()
	now, toLow, err := m.PlanAndToLow(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if now.Target != 0 || len(now.Remove) != 0 {
		t.Fatalf("Plan under the high threshold: target %d, removes %d; want nothing", now.Target, len(now.Remove))
	}
	if toLow == nil {
		t.Fatal("no plan for a collection under way, with usage over the low threshold")
	}
	var planned []string
	for _, d := range toLow.Remove {
		planned = append(planned, d.Image.ID)
	}
	m, rt := mk()
	if _, err := m.collectFor(t.Context(), TriggerThreshold, demand{toLow: true}); err != nil {
		t.Fatal(err)
	}
	if len(planned) == 0 || !cmp.Equal(planned, rt.removed) {
		t.Errorf("PlanAndToLow's plan to low removes %v; the run of a collection under way removed %v", planned, rt.removed)
	}
	if toLow.Required != 0 {
		t.Errorf("PlanAndToLow's plan to low requires %d now, want 0: under the high threshold a run that cannot reach low is no failure", toLow.Required)
	}
}
