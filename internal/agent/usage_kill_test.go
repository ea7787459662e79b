package agent_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/pkg/images"
)

// TestUsageSurvivesKill9: image usage is written to the state directory
// within seconds of a change, not only at the end of GC runs (the sweep is
// every 5 minutes) and at SIGTERM; and what was written survives SIGKILL.
// The README promises the uses older than the save interval (2 s): so the
// test waits until the state file holds the container's use (how long that
// took is logged), kills nodegc with SIGKILL, and the next nodegc counts
// the use. (containerd 2.x with imageGC.containerEvents: usage comes from
// the container event stream; polled, a use is seen at the next listing.)
func TestUsageSurvivesKill9(t *testing.T) {
	ctx := t.Context()
	n, img := nodeWithImage(t, "kill9/used")
	stateDir := t.TempDir()
	cfg := nodeConfig(t, n.Endpoint, stateDir, nil, []string{"highThresholdPercent: 100", "containerEvents: true"}, nil)
	p := startNodegc(t, "kill9", cfg, "--owner-gc=off")
	testbed.WaitFor(t, time.Minute, "image usage to come from the container event stream", func() bool {
		return p.metric("nodegc_image_usage_source", "source=events") == 1
	})
	pod, err := n.RunPod(ctx, node.PodSpec{Name: "kill9", Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	if _, err := n.RunContainer(ctx, pod, node.ContainerSpec{Name: "c", Image: img.Ref}); err != nil {
		t.Fatal(err)
	}
	testbed.WaitFor(t, 30*time.Second, "the state file to hold the container's use", func() bool {
		lu, ok := savedLastUsed(stateDir, img.ID())
		return ok && !lu.Before(started.Add(-time.Second))
	})
	saved := time.Now()
	t.Logf("the use was in the state file %v after the container's start (the README's bound: 2s)", saved.Sub(started).Round(time.Millisecond))
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

// savedLastUsed reads image id's last-used time from the state file in dir
// as it is on disk; ok is false while the file or the time is not there.
func savedLastUsed(dir, id string) (time.Time, bool) {
	data, err := os.ReadFile(filepath.Join(dir, images.StateFileName))
	if err != nil {
		return time.Time{}, false
	}
	var sf struct {
		Images map[string]images.Usage `json:"images"`
	}
	if json.Unmarshal(data, &sf) != nil {
		return time.Time{}, false
	}
	u, ok := sf.Images[id]
	return u.LastUsed, ok && !u.LastUsed.IsZero()
}
