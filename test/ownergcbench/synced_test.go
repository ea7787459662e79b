package ownergcbench

import (
	"fmt"
	"slices"
	"time"

	"github.com/nodegc/nodegc/internal/testbed/proc"
)

// rssSamples and rssInterval: the resident memory of a synced, idle
// collector is the median of rssSamples readings of VmRSS rssInterval
// apart.
const (
	rssSamples  = 5
	rssInterval = time.Second
)

// syncedResult is one collector, started alone on the population, synced
// and idle.
type syncedResult struct {
	startup
	rss    uint64   // median VmRSS, bytes
	hwm    uint64   // VmHWM at the end, bytes
	rssAll []uint64 // the samples
	// writes counts the write requests on the population's resources
	// served from the collector's start to its last sample: anything but 0
	// means something reacted to the population (nothing should).
	writes int64
}

// synced starts col alone on the cluster as it is, waits until it has
// synced, lets it idle for e.sizes.idle, samples its memory and stops it.
func (e *benchEnv) synced(col collector) syncedResult {
	e.b.Helper()
	writesBefore := e.populationWrites()
	r := col.start(e)
	defer r.stop()
	var res syncedResult
	res.startup = r.sync(e)
	fmt.Printf("[bench] %s synced in %s; idle for %s, then %d RSS samples\n", col.name, res.synced.Round(time.Millisecond), e.sizes.idle, rssSamples)
	select {
	case <-time.After(e.sizes.idle):
	case <-e.b.Context().Done():
		e.b.Fatal("bench ended while the collector idled")
	}
	var m proc.Memory
	for i := range rssSamples {
		if i > 0 {
			time.Sleep(rssInterval)
		}
		var err error
		if m, err = proc.ReadMemory(r.pid); err != nil {
			e.b.Fatalf("memory of %s: %v", col.name, err)
		}
		res.rssAll = append(res.rssAll, m.RSS)
	}
	res.hwm = m.HWM
	sorted := slices.Sorted(slices.Values(res.rssAll))
	res.rss = sorted[len(sorted)/2]
	res.writes = e.populationWrites() - writesBefore
	return res
}
