package images

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/nodegc/nodegc/pkg/config"
)

// fillWindow is how far back the fill rate looks: long enough to span a few
// disk checks, short enough that a burst of pulls shows within seconds.
const fillWindow = 5 * time.Second

// diskSample is one reading of the image filesystem's available bytes.
type diskSample struct {
	at        time.Time
	available uint64
}

// guardian watches the image filesystem between and during runs, from the
// readings the manager takes: how fast it fills, whether the kubelet's
// eviction threshold is near, and how long the GC takes to react to a
// crossing of the high threshold. Safe for concurrent use (a plan for
// `nodegc plan` reads the disk beside the loop).
type guardian struct {
	policy *Policy

	mu sync.Mutex

	samples []diskSample // the last fillWindow, oldest first

	// The reaction to the current episode over the high threshold: when a
	// reading first saw usage at or above it (zero outside an episode), and
	// whether the first removal since was timed.
	crossedAt    time.Time
	removalTimed bool

	// warned says the start-up comparison with the kubelet's eviction
	// threshold was made.
	warned bool
}

func newGuardian(p *Policy) *guardian {
	return &guardian{policy: p}
}

// reaction is what one reading says about the current episode: the
// crossing it started, or how long it took usage to come back under the low
// threshold (belowLow > 0).
type reaction struct {
	crossed  bool
	belowLow time.Duration
}

// observe records a reading.
func (g *guardian) observe(now time.Time, d DiskStats) reaction {
	g.mu.Lock()
	defer g.mu.Unlock()
	keep := 0
	for keep < len(g.samples) && now.Sub(g.samples[keep].at) > fillWindow {
		keep++
	}
	g.samples = append(g.samples[keep:], diskSample{at: now, available: d.Available})

	var r reaction
	switch {
	case g.crossedAt.IsZero() && g.policy.overHighThreshold(d):
		g.crossedAt, g.removalTimed, r.crossed = now, false, true
	case !g.crossedAt.IsZero() && d.UsagePercent() < g.policy.lowThresholdPercent():
		r.belowLow = max(now.Sub(g.crossedAt), time.Nanosecond)
		g.crossedAt = time.Time{}
	}
	return r
}

// removed is told when a run removed its first image; it returns the time
// since the crossing, the first time in an episode, else 0.
func (g *guardian) removed(at time.Time) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.crossedAt.IsZero() || g.removalTimed || at.Before(g.crossedAt) {
		return 0
	}
	g.removalTimed = true
	return max(at.Sub(g.crossedAt), time.Nanosecond)
}

// restart forgets the fill rate: after removals the available bytes jumped,
// which says nothing about how fast the filesystem fills.
func (g *guardian) restart() {
	g.mu.Lock()
	g.samples = g.samples[:0]
	g.mu.Unlock()
}

// minFillSpan is the shortest run of readings a fill rate is taken from:
// two readings are not yet a fill (a pull that just ended, or the first
// readings after a run, which forgets the rate).
const minFillSpan = 2 * time.Second

// fillRate is how many bytes per second the available space shrank over the
// readings of the last fillWindow, at the pace the fill kept up: the slowest
// of its rates over the window's first and latter halves, and over its last
// second (from the latest reading at least minFillSpan/2 before the last),
// each from the reading that starts it to the one that ends it. A burst
// that stopped no longer counts, also one that spanned a reading and so
// both halves (a pull's burst, at the readings a second apart or faster
// that its writes bring); a burst followed by a slow fill counts at the
// slow rate; one step between two readings, wherever it falls, is in one
// half only, and is not a fill. 0 if the space did not shrink in each,
// or with less than minFillSpan of readings. (The rate over the whole
// window lies between the halves', so it is never the slower.) A fill
// that starts after a flat spell counts once it reaches into the first
// half, 3 to 4 s after it began at a reading a second, and at less than
// its pace until it spans the window; the high threshold and the checks
// after the runtime's writes do not wait for it.
func (g *guardian) fillRate() float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.samples) < 2 {
		return 0
	}
	first, last := g.samples[0], g.samples[len(g.samples)-1]
	span := last.at.Sub(first.at)
	if span < minFillSpan {
		return 0
	}
	// The latter half starts at the latest reading taken at least half the
	// span before the last: at least a second, as minFillSpan is 2 s. With
	// no reading between first and last, the first half is empty: no rate.
	mid, tail := first, first
	for _, s := range g.samples {
		if last.at.Sub(s.at) < span/2 {
			break
		}
		mid = s
	}
	for _, s := range g.samples {
		if last.at.Sub(s.at) < minFillSpan/2 {
			break
		}
		tail = s
	}
	return min(shrinkRate(first, mid), shrinkRate(mid, last), shrinkRate(tail, last))
}

// shrinkRate is how many bytes per second the available space shrank from
// a to b; 0 if it did not.
func shrinkRate(a, b diskSample) float64 {
	span := b.at.Sub(a.at)
	if span <= 0 || b.available >= a.available {
		return 0
	}
	return float64(a.available-b.available) / span.Seconds()
}

// ahead returns what the fill rate says will be written within the horizon
// if that would take the filesystem to the kubelet's eviction threshold,
// else 0. Off with fillRateHorizon 0, with disk-threshold GC off, or when
// the kubelet does not evict on disk.
func (g *guardian) ahead(d DiskStats) uint64 {
	horizon := g.policy.fillRateHorizon()
	if horizon <= 0 || !g.policy.thresholdGCEnabled() {
		return 0
	}
	evictAt, _, ok := g.policy.cfg.DiskEviction(d.Capacity)
	if !ok {
		return 0
	}
	bytes := uint64(math.MaxUint64) // a rate past 2^64 bytes in the horizon
	if b := g.fillRate() * horizon.Seconds(); b < math.MaxUint64 {
		bytes = uint64(b)
	}
	if bytes == 0 || (d.Available > evictAt && d.Available-evictAt > bytes) {
		return 0
	}
	return bytes
}

// evictionWarning says, once, whether the high threshold lets the kubelet
// evict pods first: it is at or above the usage at which the kubelet's
// eviction threshold is met. "" when it does not, or there is nothing to
// compare with.
func (g *guardian) evictionWarning(d DiskStats) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.warned || d.Capacity == 0 {
		return ""
	}
	g.warned = true
	evictAt, which, ok := g.policy.cfg.DiskEviction(d.Capacity)
	if !ok || !g.policy.thresholdGCEnabled() {
		return ""
	}
	evictUsage := evictionUsagePercent(d.Capacity, evictAt, which.Threshold)
	high := g.policy.highThresholdPercent()
	if float64(high) < evictUsage {
		return ""
	}
	var soft string
	if which.Soft() {
		soft = " (a soft threshold: the kubelet evicts once it has held for its evictionSoftGracePeriod)"
	}
	return fmt.Sprintf("imageGC.highThresholdPercent (%d) lets the kubelet evict pods first: its %s is met at %.1f%% usage of the image filesystem%s; "+
		"set highThresholdPercent below %.0f (a few points of margin), or keep fillRateHorizon on to start early when the disk fills fast",
		high, which, evictUsage, soft, evictUsage)
}

// evictionUsagePercent is the usage in percent, as UsagePercent computes it
// but not rounded, at which available bytes fall under evictAt, threshold
// th's bytes on a filesystem of that capacity. A percentage is its own:
// its bytes are rounded down, which would put the usage a hair above it on
// most capacities (85.0000000001% for 15% of 100 GiB and 4 KiB).
func evictionUsagePercent(capacity, evictAt uint64, th config.EvictionThreshold) float64 {
	if th.IsPercent {
		return 100 - min(th.Percent, 100)
	}
	evictAt = min(evictAt, capacity)
	return 100 - float64(evictAt)*100/float64(capacity)
}
