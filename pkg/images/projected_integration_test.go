package images_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/images"
)

// TestProjectedTrigger: on a real containerd node, something writes to the
// image filesystem at 2 MiB/s. At that rate it reaches the high threshold
// in about 20 s and the kubelet's eviction threshold (evictionHard, a few
// MiB further) soon after; with fillRateHorizon 30s the image GC starts
// within seconds (trigger "projected"), before usage reaches the high
// threshold, and frees down to the low threshold counting what the horizon
// brings. With the kubelet not evicting on disk (evictionHard {}) the same
// fill starts nothing until the high threshold.
func TestProjectedTrigger(t *testing.T) {
	t.Parallel()
	for name, evict := range map[string]bool{"kubelet evicts": true, "kubelet does not evict": false} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := newBed(t, testbed.Containerd2, 256*mib)
			for i := range 3 {
				b.pushPull(repoName(i), 10)
			}
			start := b.diskStats()
			// high at +16 %, the kubelet at +20 % (about 41 and 51 MiB
			// away), low where usage is now.
			now := start.UsagePercent()
			high, low := int32(now+16), int32(now)
			evictAvailable := start.Available - start.Capacity*20/100
			var (
				mu   sync.Mutex
				runs []*images.Report
			)
			b.onRun = func(r *images.Report) { mu.Lock(); runs = append(runs, r); mu.Unlock() }
			m := b.manager(t.TempDir(), clock.RealClock{}, func(c *config.ImageGCConfiguration) {
				setThresholds(high, low)(c)
				c.FillRateHorizon = &metav1.Duration{Duration: 30 * time.Second}
				c.EvictionHard = map[string]string{config.SignalImageFsAvailable: fmt.Sprint(evictAvailable)}
				if !evict {
					c.EvictionHard = map[string]string{}
				}
			})
			images.RunUntilCleanup(t, m)

			// 2 MiB/s for 12 s at most: 24 MiB, under the high threshold.
			f, err := os.Create(filepath.Join(b.node.Root, "filler"))
			if err != nil {
				t.Fatal(err)
			}
			defer os.Remove(f.Name())
			defer f.Close()
			chunk := make([]byte, 512<<10)
			for i := range chunk {
				chunk[i] = byte(i)
			}
			began := time.Now()
			var first *images.Report
			for i := 0; i < 48 && first == nil; i++ {
				if _, err := f.Write(chunk); err != nil {
					t.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(250 * time.Millisecond)
				mu.Lock()
				if len(runs) > 0 {
					first = runs[0]
				}
				mu.Unlock()
			}
			if !evict {
				if first != nil {
					t.Fatalf("a run (trigger %s) with the kubelet not evicting, usage %d%% under high %d%%", first.Trigger, first.Before.UsagePercent(), high)
				}
				return
			}
			if first == nil {
				t.Fatalf("no run within %v of filling at 2 MiB/s; usage %d%%, high %d%%", time.Since(began).Round(time.Second), b.diskStats().UsagePercent(), high)
			}
			t.Logf("first run %v after the fill began: trigger %s, usage %d%%, ahead %d MiB, target %d MiB, removed %d images",
				first.Start.Sub(began).Round(100*time.Millisecond), first.Trigger, first.Before.UsagePercent(), first.Plan.Ahead/mib, first.Plan.Target/mib, len(first.Outcome.Removed))
			if first.Trigger != images.TriggerProjected {
				t.Errorf("trigger %q, want %q", first.Trigger, images.TriggerProjected)
			}
			if first.Before.UsagePercent() >= int(high) {
				t.Errorf("the run began at %d%%, at or above the high threshold %d%%: it did not start early", first.Before.UsagePercent(), high)
			}
			if first.Plan.Ahead == 0 || len(first.Outcome.Removed) == 0 {
				t.Errorf("the run planned %d bytes ahead and removed %d images; want both > 0", first.Plan.Ahead, len(first.Outcome.Removed))
			}
		})
	}
}
