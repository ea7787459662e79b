package images

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodegc/nodegc/pkg/config"
)

// TestThresholdGauges: nodegc_image_gc_threshold_percent exports the high
// and low thresholds of the configuration from the start, and after a disk
// reading the usage at which the kubelet's stricter disk eviction threshold
// is met (none without one).
func TestThresholdGauges(t *testing.T) {
	disk := DiskStats{Capacity: 100 * gib, Available: 50 * gib}
	cases := map[string]struct {
		mutate func(*config.ImageGCConfiguration)
		want   map[string]float64
	}{
		"defaults: 85, 80, imagefs.available 15%": {want: map[string]float64{"high": 85, "low": 80, "eviction": 85}},
		"bytes: nodefs.available 20Gi of 100Gi": {mutate: func(c *config.ImageGCConfiguration) {
			c.HighThresholdPercent, c.LowThresholdPercent = ptrTo[int32](70), ptrTo[int32](60)
			c.EvictionHard = map[string]string{config.SignalNodeFsAvailable: "20Gi"}
		}, want: map[string]float64{"high": 70, "low": 60, "eviction": 80}},
		"the stricter of both signals": {mutate: func(c *config.ImageGCConfiguration) {
			c.EvictionHard = map[string]string{config.SignalNodeFsAvailable: "10%", config.SignalImageFsAvailable: "25Gi"}
		}, want: map[string]float64{"high": 85, "low": 80, "eviction": 75}},
		"no disk eviction": {mutate: func(c *config.ImageGCConfiguration) { c.EvictionHard = map[string]string{} },
			want: map[string]float64{"high": 85, "low": 80}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := config.Defaulted().ImageGC
			if tc.mutate != nil {
				tc.mutate(&cfg)
			}
			reg := prometheus.NewRegistry()
			m, err := NewManager(Options{Config: cfg, StateDirectory: t.TempDir(), Runtime: &streamRuntime{}, Disk: fixedDisk{},
				Clock: clocktesting.NewFakeClock(t0), Registerer: reg, PlanOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			before := thresholdGauges(t, reg)
			if _, ok := before["eviction"]; ok || before["high"] != tc.want["high"] || before["low"] != tc.want["low"] {
				t.Errorf("before a disk reading: %v, want high and low only", before)
			}
			m.observeDisk(disk)
			if diff := cmp.Diff(tc.want, thresholdGauges(t, reg)); diff != "" {
				t.Errorf("nodegc_image_gc_threshold_percent (-want +got):\n%s", diff)
			}
		})
	}
}

// thresholdGauges returns nodegc_image_gc_threshold_percent by threshold.
func thresholdGauges(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "nodegc_image_gc_threshold_percent" {
			continue
		}
		for _, m := range f.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	return got
}
