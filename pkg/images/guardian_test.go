package images

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodegc/nodegc/pkg/config"
)

const gib = 1 << 30

// fill feeds g readings one second apart, from t0, of a 100 GiB filesystem
// whose available bytes go through avail (GiB).
func fill(g *guardian, avail ...float64) (last DiskStats, at time.Time) {
	for i, a := range avail {
		at = t0.Add(time.Duration(i) * time.Second)
		last = DiskStats{Capacity: 100 * gib, Available: uint64(a * gib)}
		g.observe(at, last)
	}
	return last, at
}

// TestProjection: the fill rate of the last seconds, over the horizon,
// against the kubelet's eviction threshold (defaults: imagefs.available 15%,
// horizon 30s, high 85).
func TestProjection(t *testing.T) {
	cases := map[string]struct {
		mutate    func(*config.ImageGCConfiguration)
		avail     []float64 // GiB, one reading per second
		wantAhead uint64
	}{
		"1 GiB/s with 15 GiB to the threshold: 30 GiB ahead": {avail: []float64{33, 32, 31, 30}, wantAhead: 30 * gib},
		"0.4 GiB/s: 12 GiB ahead, 15 to go":                  {avail: []float64{31.2, 30.8, 30.4, 30}},
		"0.6 GiB/s: 18 GiB ahead, 15 to go":                  {avail: []float64{31.8, 31.2, 30.6, 30}, wantAhead: 18 * gib},
		// 90→30.4 would be 8.5 GiB/s; the window holds 0.1 GiB/s.
		"only the last 5 s count": {avail: []float64{90, 31, 30.9, 30.8, 30.7, 30.6, 30.5, 30.4}},
		"the disk freed: no rate": {avail: []float64{20, 25, 30}},
		// A burst that stopped: 1.2 GiB in the first second, nothing since.
		// Its average over the window (0.24 GiB/s) says nothing of the
		// next 30 s.
		"a burst that stopped: no rate": {avail: []float64{23, 21.8, 21.8, 21.8, 21.8, 21.8}},
		// A flat disk, then one drop of 3 GiB between two readings (a file
		// fallocated beside the images, reserved blocks raised, a layer
		// seen at its commit), in the window's latter half: one step is
		// not a fill, wherever it falls (6 times the step ahead would start
		// a run 11 GiB deep at 73% usage).
		"flat, then one step in the last second: no rate":           {avail: []float64{30, 30, 30, 30, 30, 27}},
		"flat, then one step a reading before the last: no rate":    {avail: []float64{30, 30, 30, 30, 27, 27}},
		"flat, then one step two readings before the last: no rate": {avail: []float64{30, 30, 30, 27, 27, 27}},
		"flat, then one step, a second of readings since: no rate":  {avail: []float64{30, 30, 27}},
		// A burst over two seconds that spans a reading, so both halves
		// of the window shrink, ended a second or two ago: not a fill.
		// Before, 0.75 and 0.5 GiB/s: 22.5 and 15 GiB ahead, a projected
		// run 8-15 GiB deep at 73% usage.
		"a burst over two readings that ended a second ago: no rate":    {avail: []float64{30, 30, 28.5, 27, 27}},
		"a burst over two readings that ended two seconds ago: no rate": {avail: []float64{30, 30, 28.5, 27, 27, 27}},
		// One second of readings (as right after a run, which forgets the
		// rate): one step is not yet a fill.
		"one second of readings: no rate":      {avail: []float64{17, 16}},
		"two seconds at 1 GiB/s: 30 GiB ahead": {avail: []float64{18, 17, 16}, wantAhead: 30 * gib},
		// 5 GiB at once, then 0.2 GiB/s: the pace kept up is 0.2 (6 GiB
		// ahead, 1.2 to go), not the window's 1.16 GiB/s.
		"a burst, then a slow fill: the slow rate":      {avail: []float64{22, 17, 16.8, 16.6, 16.4, 16.2}, wantAhead: 6 * gib},
		"one reading: no rate":                          {avail: []float64{10}},
		"under the eviction threshold already, filling": {avail: []float64{10, 9.9, 9.8}, wantAhead: uint64(0.1 * 30 * gib)},
		"horizon 0: off": {mutate: func(c *config.ImageGCConfiguration) { c.FillRateHorizon = &metav1.Duration{} },
			avail: []float64{33, 32, 31, 30}},
		"the kubelet evicts on nothing: off": {mutate: func(c *config.ImageGCConfiguration) { c.EvictionHard = map[string]string{} },
			avail: []float64{33, 32, 31, 30}},
		"threshold GC off (high 100): off": {mutate: func(c *config.ImageGCConfiguration) {
			c.HighThresholdPercent = ptrTo[int32](100)
			c.LowThresholdPercent = ptrTo[int32](99)
		},
			avail: []float64{33, 32, 31, 30}},
		"a quantity threshold, the stricter: 40 GiB to go": {mutate: func(c *config.ImageGCConfiguration) {
			c.EvictionHard = map[string]string{config.SignalImageFsAvailable: "5%", config.SignalNodeFsAvailable: "25Gi"}
		}, avail: []float64{33, 32, 31, 30}, wantAhead: 30 * gib},
		// 0.2 GiB/s: 6 GiB within the horizon. imagefs.available 25% soft
		// is 5 GiB away at 30 GiB available (the hard 15%, 15 GiB).
		"a soft threshold, the stricter: 5 GiB to go": {mutate: func(c *config.ImageGCConfiguration) {
			c.EvictionSoft = map[string]string{config.SignalImageFsAvailable: "25%"}
		}, avail: []float64{30.6, 30.4, 30.2, 30}, wantAhead: uint64(0.2 * 30 * gib)},
		"a soft threshold, the stricter: 10 GiB to go": {mutate: func(c *config.ImageGCConfiguration) {
			c.EvictionSoft = map[string]string{config.SignalImageFsAvailable: "20%"}
		}, avail: []float64{30.6, 30.4, 30.2, 30}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			g := newGuardian(policyFor(t, tc.mutate))
			disk, _ := fill(g, tc.avail...)
			got := g.ahead(disk)
			// The rate is a float: a few bytes either way.
			if diff := int64(got) - int64(tc.wantAhead); diff < -1024 || diff > 1024 {
				t.Errorf("ahead = %d bytes (%.2f GiB), want %.2f GiB (rate %.3f GiB/s)", got, float64(got)/gib, float64(tc.wantAhead)/gib, g.fillRate()/gib)
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestReactionTimes: one first_removal and one below_low per crossing,
// timed from the first reading at or above the high threshold.
func TestReactionTimes(t *testing.T) {
	g := newGuardian(policyFor(t, nil)) // high 85, low 80
	disk := func(usage float64) DiskStats {
		return DiskStats{Capacity: 100 * gib, Available: uint64((100 - usage) * gib)}
	}

	if r := g.observe(t0, disk(84)); r.crossed || r.belowLow != 0 {
		t.Fatalf("under high: %+v", r)
	}
	if d := g.removed(t0.Add(time.Second)); d != 0 {
		t.Errorf("a removal outside an episode timed %v", d)
	}
	if r := g.observe(t0.Add(2*time.Second), disk(86)); !r.crossed {
		t.Fatal("the crossing was not seen")
	}
	if r := g.observe(t0.Add(3*time.Second), disk(90)); r.crossed {
		t.Error("a second crossing within the episode")
	}
	if d := g.removed(t0.Add(2*time.Second + 700*time.Millisecond)); d != 700*time.Millisecond {
		t.Errorf("first removal after %v, want 700ms", d)
	}
	if d := g.removed(t0.Add(4 * time.Second)); d != 0 {
		t.Errorf("a second removal timed %v", d)
	}
	if r := g.observe(t0.Add(4*time.Second), disk(82)); r.belowLow != 0 {
		t.Errorf("under high but above low ended the episode: %+v", r)
	}
	if r := g.observe(t0.Add(5*time.Second+500*time.Millisecond), disk(79)); r.belowLow != 3500*time.Millisecond {
		t.Errorf("below low after %v, want 3.5s", r.belowLow)
	}
	if r := g.observe(t0.Add(6*time.Second), disk(79)); r.belowLow != 0 {
		t.Errorf("below low timed twice: %+v", r)
	}
	// A new episode times from its own crossing.
	g.observe(t0.Add(10*time.Second), disk(85))
	if d := g.removed(t0.Add(11 * time.Second)); d != time.Second {
		t.Errorf("second episode's first removal after %v, want 1s", d)
	}
}

// TestEvictionWarning: warned once, when the high threshold is at or
// above the usage at which the kubelet evicts, on its hard threshold or,
// after a grace period, on a stricter soft one.
func TestEvictionWarning(t *testing.T) {
	cases := map[string]struct {
		mutate   func(*config.ImageGCConfiguration)
		capacity uint64 // 100 GiB if 0
		want     string
	}{
		"defaults: 85 against imagefs.available 15%": {want: "imageGC.highThresholdPercent (85) lets the kubelet evict pods first: its evictionHard imagefs.available<15% is met at 85.0% usage"},
		// 15% of it is not a whole number of bytes: the threshold's bytes
		// are rounded down, the usage at which it is met is still 85%.
		// Before, the warning came only on a capacity that is a multiple
		// of 20 bytes.
		"defaults on a capacity of 100 GiB and a block": {capacity: 100*gib + 4096,
			want: "imageGC.highThresholdPercent (85) lets the kubelet evict pods first: its evictionHard imagefs.available<15% is met at 85.0% usage"},
		"defaults on a capacity of 50 GiB and 3 blocks": {capacity: 50*gib + 3*4096,
			want: "imageGC.highThresholdPercent (85) lets the kubelet evict pods first"},
		"80 against 15% on a capacity of 100 GiB and a block": {capacity: 100*gib + 4096, mutate: func(c *config.ImageGCConfiguration) {
			c.HighThresholdPercent = ptrTo[int32](80)
			c.LowThresholdPercent = ptrTo[int32](75)
		}},
		"80 against 15%": {mutate: func(c *config.ImageGCConfiguration) {
			c.HighThresholdPercent = ptrTo[int32](80)
			c.LowThresholdPercent = ptrTo[int32](75)
		}},
		"80 against 20Gi of 100Gi": {mutate: func(c *config.ImageGCConfiguration) {
			c.HighThresholdPercent, c.LowThresholdPercent = ptrTo[int32](80), ptrTo[int32](75)
			c.EvictionHard = map[string]string{config.SignalNodeFsAvailable: "20Gi"}
		}, want: "evictionHard nodefs.available<20Gi is met at 80.0% usage"},
		"no disk eviction": {mutate: func(c *config.ImageGCConfiguration) { c.EvictionHard = map[string]string{} }},
		// The kubelet evicts from 75% once its grace period has passed.
		"80 against a soft 25%": {mutate: func(c *config.ImageGCConfiguration) {
			c.HighThresholdPercent, c.LowThresholdPercent = ptrTo[int32](80), ptrTo[int32](75)
			c.EvictionSoft = map[string]string{config.SignalImageFsAvailable: "25%"}
		}, want: "its evictionSoft imagefs.available<25% is met at 75.0% usage of the image filesystem (a soft threshold: the kubelet evicts once it has held for its evictionSoftGracePeriod)"},
		"80 against a soft 10%: the hard 15% is stricter": {mutate: func(c *config.ImageGCConfiguration) {
			c.HighThresholdPercent, c.LowThresholdPercent = ptrTo[int32](80), ptrTo[int32](75)
			c.EvictionSoft = map[string]string{config.SignalImageFsAvailable: "10%"}
		}},
		"threshold GC off": {mutate: func(c *config.ImageGCConfiguration) {
			c.HighThresholdPercent = ptrTo[int32](100)
			c.LowThresholdPercent = ptrTo[int32](99)
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			disk := DiskStats{Capacity: 100 * gib, Available: 50 * gib}
			if tc.capacity != 0 {
				disk = DiskStats{Capacity: tc.capacity, Available: tc.capacity / 2}
			}
			g := newGuardian(policyFor(t, tc.mutate))
			got := g.evictionWarning(disk)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("warning %q, want one containing %q", got, tc.want)
			}
			if again := g.evictionWarning(disk); again != "" {
				t.Errorf("warned twice: %q", again)
			}
		})
	}
}

// TestPlanAhead: under the high threshold now, a plan for bytes ahead frees
// down to the low threshold as usage will be then; a plan without is
// kubelet's.
func TestPlanAhead(t *testing.T) {
	p := policyFor(t, nil) // low 80
	images := []Image{img("a", 4096, time.Hour, time.Hour), img("b", 4096, time.Hour, 2*time.Hour), img("c", 4096, time.Hour, 3*time.Hour)}
	disk := DiskStats{Capacity: 100 * gib, Available: 25 * gib} // 75%
	plain, err := p.Plan(images, disk, t0)
	if err != nil {
		t.Fatal(err)
	}
	if plain.Target != 0 || len(plain.Remove) != 0 {
		t.Fatalf("under high, no ahead: target %d, %d removals", plain.Target, len(plain.Remove))
	}
	ahead, err := p.PlanAhead(images, disk, t0, 10*gib) // 85% in the horizon: free 5 GiB to be at 80
	if err != nil {
		t.Fatal(err)
	}
	if ahead.Target != 5*gib || ahead.Ahead != 10*gib {
		t.Errorf("target %d, ahead %d; want 5 GiB and 10 GiB", ahead.Target, ahead.Ahead)
	}
	var ids []string
	for _, d := range ahead.Remove {
		ids = append(ids, d.Image.ID)
	}
	if strings.Join(ids, ",") != "c,b" {
		t.Errorf("removes %v, want the two least recently used (c,b)", ids)
	}
	if ahead.Required != 0 {
		t.Errorf("under the high threshold, required %d; want 0 (only the threshold's bytes must be freed)", ahead.Required)
	}
	// Nothing removable: a projected run frees what it can and does not
	// fail; over the high threshold it fails for the threshold's bytes only.
	held := []Image{with(images[0], func(i *Image) { i.InUse = true })}
	under, _ := p.PlanAhead(held, disk, t0, 10*gib)
	if _, err := execute(t.Context(), &fakeRemover{}, under, never, nil, nil, false); err != nil {
		t.Errorf("a projected run under the high threshold with nothing to remove failed: %v", err)
	}
	over, _ := p.PlanAhead(held, DiskStats{Capacity: 100 * gib, Available: 10 * gib}, t0, 10*gib) // 90%
	if over.Required != 10*gib || over.Target != 20*gib {
		t.Errorf("over high: required %d, target %d; want 10 and 20 GiB", over.Required, over.Target)
	}
	_, err = execute(t.Context(), &fakeRemover{}, over, never, nil, nil, false)
	var fe *FreeDiskSpaceError
	if !errors.As(err, &fe) || fe.BytesToFree != 10*gib {
		t.Errorf("over high with nothing to remove: %v; want a FreeDiskSpaceError for the threshold's 10 GiB", err)
	}
	if _, err := p.PlanAhead(images, DiskStats{}, t0, gib); err != ErrInvalidDiskCapacity {
		t.Errorf("capacity 0: %v", err)
	}
}
