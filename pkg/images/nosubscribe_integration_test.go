package images_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/cri"
)

// TestNoEventSubscriptionByDefault, on a real containerd 2.x, which offers
// the CRI container event stream and blocks its container lifecycle while
// a subscriber does not read: with imageGC.containerEvents unset the image
// GC never calls GetContainerEvents (the CRI client counts every such call
// when it ends, and the manager's end cancels any open one), and keeps
// image usage by listing; with it set, it does, once.
func TestNoEventSubscriptionByDefault(t *testing.T) {
	t.Parallel()
	b := newBed(t, testbed.Containerd2, 0)
	img := b.pushPull("nosub/app", 1)
	for _, events := range []bool{false, true} {
		reg := prometheus.NewRegistry()
		c, err := cri.Dial(t.Context(), cri.Options{RuntimeEndpoint: b.node.Endpoint, Timeout: time.Minute, Metrics: cri.NewMetrics(reg)})
		if err != nil {
			t.Fatal(err)
		}
		m := b.managerWith(c, t.TempDir(), clock.RealClock{}, func(cfg *config.ImageGCConfiguration) {
			noThresholdGC(cfg)
			cfg.ContainerEvents = events
		})
		ctx, stop := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		// A listing, a use listed, and time for a stream to have opened
		// (it counts as subscribed after half a second without events).
		testbed.WaitFor(t, 30*time.Second, "the manager to list the runtime", func() bool {
			_, ok := m.Tracker().Usage()[img.ID()]
			return ok
		})
		b.useImage(img)
		testbed.WaitFor(t, 10*time.Second, "the use of the image", func() bool { return !m.Tracker().Usage()[img.ID()].LastUsed.IsZero() })
		time.Sleep(2 * time.Second)
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		opened := func() float64 {
			families, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			n, _ := testbed.MetricSum(families, "nodegc_cri_requests_total", "method=GetContainerEvents")
			return n
		}
		if events {
			testbed.WaitFor(t, 10*time.Second, "the one subscription to be counted", func() bool { return opened() == 1 })
		} else if n := opened(); n != 0 {
			t.Errorf("with imageGC.containerEvents unset, the image GC called GetContainerEvents %v times, want none", n)
		}
		c.Close()
		b.removePods()
	}
}
