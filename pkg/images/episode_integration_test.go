package images_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/registry"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/images"
)

// TestEpisodeCollectsUntilLowBesidePulls, on a real containerd: the image
// filesystem reaches the high threshold; the run plans down to the low
// threshold from the disk it read, and while it removes, an image is
// pulled beside it, so that the run ends with usage between the
// thresholds. Once usage reached high, nodegc collects down to low: the
// next disk check runs again (trigger threshold, under the high threshold
// now), and usage ends at or under low, with the image pulled beside the
// run (the newest) kept. (Before, no run was called for between the
// thresholds: usage stayed there until the next crossing.)
func TestEpisodeCollectsUntilLowBesidePulls(t *testing.T) {
	t.Parallel()
	b := newBed(t, testbed.Containerd2, 256*mib)
	ctx := t.Context()
	for i := range 10 {
		b.pushPull(repoName(i), 3)
	}
	// Pulled during the run: about 5% of the filesystem on disk (blob and
	// snapshot), while the run frees about 8% (images of about 2.5% each).
	beside, err := b.node.Registry.Push(ctx, registryImage("gc/beside", 6))
	if err != nil {
		t.Fatal(err)
	}
	high, low := thresholdsAround(b.diskStats(), 8)

	rt := &afterFirstRemoval{recordingRuntime: b.runtime, then: func(ctx context.Context, _ string) error {
		_, err := b.node.PullImage(ctx, beside.Ref)
		return err
	}}
	var (
		mu   sync.Mutex
		runs []*images.Report
	)
	b.onRun = func(r *images.Report) { mu.Lock(); runs = append(runs, r); mu.Unlock() }
	m := b.managerWith(rt, t.TempDir(), clock.RealClock{}, func(c *config.ImageGCConfiguration) {
		setThresholds(high, low)(c)
		noProjection(c)
	})
	images.RunUntilCleanup(t, m)

	// Until usage is at or under low and the run that took it there has
	// reported (after the runtime's cleanup settled).
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(runs)
		mu.Unlock()
		if b.diskStats().UsagePercent() <= int(low) && n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			mu.Lock()
			t.Fatalf("image filesystem at %d%% 30 s after it reached the high threshold (%d%%), want at most the low threshold (%d%%); runs: %s",
				b.diskStats().UsagePercent(), high, low, reportsLine(runs))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := rt.thenErr(); err != nil {
		t.Fatalf("pulling %s beside the run: %v", beside.Ref, err)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("high %d%%, low %d%%; runs: %s", high, low, reportsLine(runs))
	if len(runs) < 2 {
		t.Fatalf("%d runs, want the one at the crossing and one between the thresholds after it", len(runs))
	}
	first, second := runs[0], runs[1]
	if first.Trigger != images.TriggerThreshold || first.Plan.Required == 0 {
		t.Errorf("first run: trigger %q, required %d bytes; want threshold, with bytes to free", first.Trigger, first.Plan.Required)
	}
	if u := second.Before.UsagePercent(); second.Trigger != images.TriggerThreshold || u >= int(high) || u <= int(low) {
		t.Errorf("second run: trigger %q at %d%%; want threshold, between the thresholds (the pull beside the first run left usage there)", second.Trigger, u)
	}
	if second.Plan.Required != 0 || second.Plan.Target == 0 {
		t.Errorf("second run: required %d, target %d bytes; want a target down to low, none required (under the high threshold, a run that cannot is no failure)",
			second.Plan.Required, second.Plan.Target)
	}
	if !b.imageIDs()[beside.ID()] {
		t.Errorf("the image pulled beside the run, the newest, was removed")
	}
}

// registryImage is an image of repo with one own layer of ownMiB.
func registryImage(repo string, ownMiB int64) registry.ImageSpec {
	return registry.ImageSpec{Repo: repo, Tag: "v1", Layers: []registry.LayerSpec{{Seed: repo, Size: ownMiB * mib}}}
}

// reportsLine says, for each run, its trigger, the usage before and after
// it, and how many images it removed.
func reportsLine(runs []*images.Report) string {
	var parts []string
	for _, r := range runs {
		removed := 0
		if r.Outcome != nil {
			removed = len(r.Outcome.Removed)
		}
		parts = append(parts, fmt.Sprintf("%s %d%%->%d%% removed %d", r.Trigger, r.Before.UsagePercent(), r.After.UsagePercent(), removed))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}
