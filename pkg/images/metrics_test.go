package images

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"unique"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
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
		"a soft threshold stricter than the hard one": {mutate: func(c *config.ImageGCConfiguration) {
			c.EvictionSoft = map[string]string{config.SignalNodeFsAvailable: "30Gi"}
		}, want: map[string]float64{"high": 85, "low": 80, "eviction": 70}},
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
			m.observeDisk(t.Context(), disk)
			if diff := cmp.Diff(tc.want, thresholdGauges(t, reg)); diff != "" {
				t.Errorf("nodegc_image_gc_threshold_percent (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEvictionAvailableGauge: nodegc_image_fs_eviction_available_bytes is
// the kubelet's own threshold, in available bytes at the current capacity,
// so that nodegc_image_fs_available_bytes is below it exactly when the
// kubelet evicts (available < threshold). nodegc_image_fs_usage_percent is
// a whole percent rounded up (100 - floor(available%)): at 15.9% available
// it reads 85, the usage at which imagefs.available<15% is met, while the
// kubelet does not evict; compared with the eviction threshold in percent it
// would say evicting up to 1% of the capacity early (10 GiB of 1000 GiB).
func TestEvictionAvailableGauge(t *testing.T) {
	for name, tc := range map[string]struct {
		evictionHard map[string]string
		disk         DiskStats
		wantUsage    float64
		wantEvicts   bool
	}{
		"imagefs.available<15%, 15.9% available": {
			disk: DiskStats{Capacity: 1000 * gib, Available: 159 * gib}, wantUsage: 85},
		"imagefs.available<15%, exactly 15% available": {
			disk: DiskStats{Capacity: 1000 * gib, Available: 150 * gib}, wantUsage: 85},
		"imagefs.available<15%, a byte under 15% available": {
			disk: DiskStats{Capacity: 1000 * gib, Available: 150*gib - 1}, wantUsage: 86, wantEvicts: true},
		"nodefs.available<1Gi, 1.5 GiB of 100 GiB available": {evictionHard: map[string]string{config.SignalNodeFsAvailable: "1Gi"},
			disk: DiskStats{Capacity: 100 * gib, Available: 3 * gib / 2}, wantUsage: 99},
		"nodefs.available<1Gi, a byte under 1 GiB available": {evictionHard: map[string]string{config.SignalNodeFsAvailable: "1Gi"},
			disk: DiskStats{Capacity: 100 * gib, Available: gib - 1}, wantUsage: 100, wantEvicts: true},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := config.Defaulted().ImageGC
			if tc.evictionHard != nil {
				cfg.EvictionHard = tc.evictionHard
			}
			reg := prometheus.NewRegistry()
			m, err := NewManager(Options{Config: cfg, StateDirectory: t.TempDir(), Runtime: &streamRuntime{}, Disk: fixedDisk{},
				Clock: clocktesting.NewFakeClock(t0), Registerer: reg, PlanOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			m.observeDisk(t.Context(), tc.disk)
			gauges := gaugeValues(t, reg)
			if got := gauges["nodegc_image_fs_usage_percent"]; got != tc.wantUsage {
				t.Errorf("nodegc_image_fs_usage_percent %v, want %v", got, tc.wantUsage)
			}
			evictAt, ok := gauges["nodegc_image_fs_eviction_available_bytes"]
			if !ok {
				t.Fatal("no nodegc_image_fs_eviction_available_bytes")
			}
			if got := gauges["nodegc_image_fs_available_bytes"] < evictAt; got != tc.wantEvicts {
				t.Errorf("nodegc_image_fs_available_bytes %v < nodegc_image_fs_eviction_available_bytes %v is %v; the kubelet evicts: %v",
					gauges["nodegc_image_fs_available_bytes"], evictAt, got, tc.wantEvicts)
			}
			// Without an eviction threshold the series goes.
			m.metrics.observeEviction(tc.disk.Capacity, 0, config.EvictionThreshold{}, false)
			if _, ok := gaugeValues(t, reg)["nodegc_image_fs_eviction_available_bytes"]; ok {
				t.Error("nodegc_image_fs_eviction_available_bytes stays without an eviction threshold")
			}
		})
	}
}

// gaugeValues returns the value of every gauge without labels in reg, by
// name.
func gaugeValues(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) == 0 && m.GetGauge() != nil {
				got[f.GetName()] = m.GetGauge().GetValue()
			}
		}
	}
	return got
}

// thresholdGauges returns nodegc_image_gc_threshold_percent by threshold.
func thresholdGauges(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	return byLabel(t, reg, "nodegc_image_gc_threshold_percent", "threshold")
}

// byLabel returns the series of the gauge or counter name in reg, summed by
// the value of their label.
func byLabel(t *testing.T, reg *prometheus.Registry, name, label string) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					got[l.GetValue()] += m.GetGauge().GetValue() + m.GetCounter().GetValue()
				}
			}
		}
	}
	return got
}

// layersFailing is a LayerSource whose layers cannot be read (err), or, with
// err nil, every image holds one layer of its own.
type layersFailing struct{ err error }

func (l layersFailing) Layers(_ context.Context, img *Image) ([]Layer, error) {
	if l.err != nil {
		return nil, l.err
	}
	return []Layer{{Key: unique.Make("blob:" + img.ID), Size: uint64(img.Size)}}, nil
}
func (layersFailing) Held(context.Context) (map[unique.Handle[string]]bool, error) { return nil, nil }
func (layersFailing) Forget(string)                                                {}
func (layersFailing) Retain(map[string]bool)                                       {}

// TestExactAccountingGauge: nodegc_image_gc_exact_accounting says whether
// the last run's plan counted layers through containerd (1) or fell back to
// CRI sizes (0): a layer that cannot be read turns the exact accounting off
// for that plan, which the log says only once per process.
func TestExactAccountingGauge(t *testing.T) {
	for name, tc := range map[string]struct {
		layers LayerSource
		want   float64
	}{
		"layers read":        {layers: layersFailing{}, want: 1},
		"a layer unreadable": {layers: layersFailing{err: errors.New("no config for this platform")}, want: 0},
		"no containerd API":  {want: 0},
	} {
		t.Run(name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			rt := &imagesRuntime{streamRuntime: &streamRuntime{}, images: []*runtimeapi.Image{{Id: "sha256:a", Size: 10, RepoTags: []string{"example.com/a:1"}}}}
			m, err := NewManager(Options{Config: config.Defaulted().ImageGC, StateDirectory: t.TempDir(), Runtime: rt, Disk: fixedDisk{},
				Layers: tc.layers, Clock: clocktesting.NewFakeClock(t0), Registerer: reg})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.GarbageCollect(t.Context(), TriggerManual); err != nil {
				t.Fatal(err)
			}
			if got := testutil.ToFloat64(m.metrics.exactAccounting); got != tc.want {
				t.Errorf("nodegc_image_gc_exact_accounting = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestBytesTargetedLeavesDryRunsOut: a run that removes counts what it
// planned to free for space in nodegc_image_gc_bytes_targeted_total, as it
// counts its estimate in nodegc_image_gc_bytes_estimated_freed_total; a dry
// run counts in neither (it counted in the first, so the ratio of the two
// fell with every dry run).
func TestBytesTargetedLeavesDryRunsOut(t *testing.T) {
	for name, dryRun := range map[string]bool{"removes": false, "dry run": true} {
		t.Run(name, func(t *testing.T) {
			rt := &removalsRuntime{images: []*runtimeapi.Image{{Id: "sha256:aa", RepoTags: []string{"registry.example/a:1"}, Size: 30 * mib}}}
			m := everythingNeeded(t, Options{Runtime: rt, Registerer: prometheus.NewRegistry()}, func(c *config.ImageGCConfiguration) { c.DryRun = dryRun })
			r, err := m.GarbageCollect(t.Context(), TriggerManual)
			if r == nil || r.Plan == nil {
				t.Fatalf("no plan: %v", err)
			}
			targeted, estimated := testutil.ToFloat64(m.metrics.bytesTargeted), testutil.ToFloat64(m.metrics.bytesEstimated)
			wantTargeted, wantEstimated := float64(r.Plan.BytesToFree), float64(30*mib)
			if dryRun {
				wantTargeted, wantEstimated = 0, 0
			}
			if targeted != wantTargeted || estimated != wantEstimated {
				t.Errorf("targeted %v, estimated %v; want %v and %v (dry run %v)", targeted, estimated, wantTargeted, wantEstimated, dryRun)
			}
		})
	}
}

// TestStateDiscardedIsCounted: a state file whose records the image GC
// discards at its start (set aside: unusable, or written for another node)
// is counted by reason in nodegc_image_state_discarded_total, beside the
// log line: those records' times start over. A usable file, no file, and
// `nodegc plan` (which leaves the file where it is) count nothing.
func TestStateDiscardedIsCounted(t *testing.T) {
	for name, tc := range map[string]struct {
		file     string
		planOnly bool
		want     map[string]float64
	}{
		"no file":        {want: map[string]float64{discardedUnusable: 0, discardedOtherNode: 0}},
		"usable":         {file: `{"version": 1, "node": "n1", "images": {}}`, want: map[string]float64{discardedUnusable: 0, discardedOtherNode: 0}},
		"not JSON":       {file: `{"version": 1, "images": {"x": `, want: map[string]float64{discardedUnusable: 1, discardedOtherNode: 0}},
		"other version":  {file: `{"version": 99, "images": {}}`, want: map[string]float64{discardedUnusable: 1, discardedOtherNode: 0}},
		"another node":   {file: `{"version": 1, "node": "template", "images": {}}`, want: map[string]float64{discardedUnusable: 0, discardedOtherNode: 1}},
		"plan, not JSON": {file: `{"version": 1, "images": {"x": `, planOnly: true, want: map[string]float64{discardedUnusable: 0, discardedOtherNode: 0}},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.file != "" {
				if err := os.WriteFile(filepath.Join(dir, StateFileName), []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			reg := prometheus.NewRegistry()
			m, err := NewManager(Options{Config: config.Defaulted().ImageGC, StateDirectory: dir, NodeName: "n1", Runtime: &streamRuntime{}, Disk: fixedDisk{},
				Clock: clocktesting.NewFakeClock(t0), Registerer: reg, PlanOnly: tc.planOnly})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]float64{}
			for _, r := range discardedReasons {
				got[r] = testutil.ToFloat64(m.metrics.stateDiscarded.WithLabelValues(r))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("nodegc_image_state_discarded_total by reason (-want +got):\n%s", diff)
			}
		})
	}
}
