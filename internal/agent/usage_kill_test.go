package agent_test

import (
	"encoding/json"
	"syscall"
	"testing"
	"time"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
)

// TestUsageSurvivesKill9: image usage is written to the state directory
// within seconds of a change, not only at the end of GC runs and at
// SIGTERM. A container started a tenth of a second before nodegc is killed
// with SIGKILL counts as a use of its image for the next nodegc, provided
// the last write was more than the save interval (2 s) before the use.
// (containerd 2.x with imageGC.containerEvents: usage comes from the
// container event stream; polled, a use is seen at the next listing.)
func TestUsageSurvivesKill9(t *testing.T) {
	ctx := t.Context()
	n, img := nodeWithImage(t, "kill9/used")
	stateDir := t.TempDir()
	cfg := nodeConfig(t, n.Endpoint, stateDir, nil, []string{"highThresholdPercent: 100", "containerEvents: true"}, nil)
	p := startNodegc(t, "kill9", cfg, "--owner-gc=off")
	testbed.WaitFor(t, time.Minute, "image usage to come from the container event stream", func() bool {
		return p.metric("nodegc_image_usage_source", "source=events") == 1
	})
	// Whatever nodegc wrote at start is older than the save interval.
	time.Sleep(3 * time.Second)

	pod, err := n.RunPod(ctx, node.PodSpec{Name: "kill9", Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	if _, err := n.RunContainer(ctx, pod, node.ContainerSpec{Name: "c", Image: img.Ref}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	killed := time.Now()
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	// Without the container, the plan's listing does not date a use: what
	// it shows is what the state kept.
	if err := n.StopPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := n.RemovePod(ctx, pod); err != nil {
		t.Fatal(err)
	}

	// What the next nodegc reads: `nodegc plan` on the same state.
	stdout, _ := runPlan(t, cfg, "NODE_NAME=kill9")
	var plan struct {
		Images []struct {
			ID       string     `json:"id"`
			LastUsed *time.Time `json:"lastUsed"`
		} `json:"images"`
	}
	if err := json.Unmarshal(stdout, &plan); err != nil {
		t.Fatalf("nodegc plan -o json: %v\n%s", err, string(stdout))
	}
	for _, row := range plan.Images {
		if row.ID != img.ID() {
			continue
		}
		switch {
		case row.LastUsed == nil:
			t.Errorf("after kill -9, image %s has no last-used time; its container started %v before the kill", img.Ref, killed.Sub(started).Round(time.Millisecond))
		case row.LastUsed.Before(started.Add(-time.Second)):
			t.Errorf("after kill -9, image %s last used %v, want the container's start at %v", img.Ref, *row.LastUsed, started)
		default:
			t.Logf("container started %s; after kill -9 the image was last used %s", started.Format(time.StampMilli), row.LastUsed.Format(time.StampMilli))
		}
		return
	}
	t.Fatalf("image %s not in the plan:\n%s", img.ID(), string(stdout))
}
