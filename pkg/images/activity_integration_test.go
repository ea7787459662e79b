package images_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/images"
)

// TestPullTriggersDiskCheck, on each real containerd: a pull that takes the
// image filesystem over the high threshold starts a run at once, not at the
// next disk check. The disk check and the sweep are ten minutes apart, so
// after the check at start only the runtime's own events (a blob written,
// a layer unpacked, an image created) can have the GC read the disk again.
func TestPullTriggersDiskCheck(t *testing.T) {
	t.Parallel()
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			t.Parallel()
			b := newBed(t, v, 256*mib)
			for i := range 3 {
				b.pushPull(repoName(i), 10)
			}
			start := b.diskStats()
			// The 30 MiB pull crosses high (about 20 MiB away); low is
			// where usage is now.
			now := start.UsagePercent()
			high, low := int32(now+8), int32(now)
			var (
				mu   sync.Mutex
				runs []*images.Report
			)
			b.onRun = func(r *images.Report) { mu.Lock(); runs = append(runs, r); mu.Unlock() }
			b.registry = prometheus.NewRegistry()
			m := b.manager(t.TempDir(), clock.RealClock{}, func(c *config.ImageGCConfiguration) {
				setThresholds(high, low)(c)
				noProjection(c)
				c.DiskCheckInterval = metav1.Duration{Duration: 10 * time.Minute}
				c.Period = metav1.Duration{Duration: 10 * time.Minute}
			})
			images.RunUntilCleanup(t, m)
			// The stream is open once the gauge says so; containerd confirms
			// no subscription, so a small pull shows it delivers.
			testbed.WaitFor(t, 10*time.Second, "the runtime's writes followed", func() bool {
				return b.metric("nodegc_image_gc_runtime_writes_followed") == 1
			})
			b.pushPull("activity/small", 1)
			testbed.WaitFor(t, 10*time.Second, "a disk check after the small pull", func() bool {
				return b.metric("nodegc_image_gc_disk_checks_total", "cause=write") > 0
			})
			if got := b.metric("nodegc_image_gc_disk_checks_total", "cause=interval"); got != 1 {
				t.Errorf("disk checks at the interval = %v, want 1 (the one at start)", got)
			}
			mu.Lock()
			if len(runs) > 0 {
				t.Fatalf("a run (trigger %s) before the big pull, usage %d%% under high %d%%", runs[0].Trigger, runs[0].Before.UsagePercent(), high)
			}
			mu.Unlock()

			img := b.pushPull("activity/big", 30)
			pulled := time.Now()
			var under time.Duration
			testbed.WaitFor(t, 10*time.Second, fmt.Sprintf("a run, and usage back at or under low %d%% after the pull crossed high %d%%", low, high), func() bool {
				if under == 0 && b.diskStats().UsagePercent() <= int(low) {
					under = time.Since(pulled)
				}
				mu.Lock()
				defer mu.Unlock()
				return under > 0 && len(runs) > 0
			})
			mu.Lock()
			defer mu.Unlock()
			var removed int
			for _, r := range runs {
				removed += len(r.Outcome.Removed)
				if r.Trigger != images.TriggerThreshold {
					t.Errorf("a run with trigger %q, want %q", r.Trigger, images.TriggerThreshold)
				}
			}
			if got := b.metric("nodegc_image_gc_disk_checks_total", "cause=interval"); got != 1 {
				t.Errorf("disk checks at the interval = %v, want 1 (the one at start)", got)
			}
			t.Logf("containerd %s: pull of %s from %d%% over high %d%%: first run %v after the pull returned at %d%%; %d runs removed %d images; usage at or under low %d%% %v after the pull returned; %v disk checks after writes",
				v, img.Ref, now, high, runs[0].Start.Sub(pulled).Round(time.Millisecond), runs[0].Before.UsagePercent(), len(runs), removed, low,
				under.Round(time.Millisecond), b.metric("nodegc_image_gc_disk_checks_total", "cause=write"))
		})
	}
}
