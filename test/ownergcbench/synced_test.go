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
	e.quiesce()
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

// startup starts col alone on the cluster as it is, waits until it has
// synced and stops it: how long it took to sync.
func (e *benchEnv) startup(col collector) time.Duration {
	e.b.Helper()
	e.quiesce()
	r := col.start(e)
	defer r.stop()
	profiled := e.prof.start(e, deleter{name: col.short, profileURL: r.profileURL}, fmt.Sprintf("%s-startup-%d", col.short, e.sizes.scale[1]))
	d := r.sync(e).synced
	profiled()
	fmt.Printf("[bench] %s synced in %s\n", col.name, d.Round(time.Millisecond))
	return d
}

// Quiet is what quiesce waits for: kube-apiserver and etcd together using
// at most quietCPU of CPU time over quietWindow, up to quietMax.
const (
	quietWindow = 500 * time.Millisecond
	quietCPU    = 50 * time.Millisecond
	quietMax    = 20 * time.Second
)

// quiesce has kube-apiserver collect its garbage, then waits until the
// cluster is quiet (see quietCPU): before each start-up and each timed
// deletion. A collector run just before leaves
// kube-apiserver tearing down its watches and holding the garbage of the
// 100,000 objects it served, whose collection would otherwise fall into
// the next collector's start-up: nodegc right after kube-controller-manager
// took 3.5-6.4 s, right after nodegc 2.4-3.0 s (kube-controller-manager
// after nodegc was slower too, by less).
func (e *benchEnv) quiesce() {
	e.b.Helper()
	// A heap profile with gc=1 runs a garbage collection first (profiling
	// is on in kube-apiserver by default).
	if _, err := e.fast.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/heap").Param("gc", "1").DoRaw(e.b.Context()); err != nil {
		e.b.Fatalf("have kube-apiserver collect its garbage (GET /debug/pprof/heap?gc=1): %v", err)
	}
	pids := e.c.PIDs()
	total := func() time.Duration {
		var sum time.Duration
		for _, d := range e.cpuTimes(pids) {
			sum += d
		}
		return sum
	}
	deadline := time.Now().Add(quietMax)
	last := total()
	for time.Now().Before(deadline) {
		time.Sleep(quietWindow)
		now := total()
		if now-last <= quietCPU {
			return
		}
		last = now
	}
	fmt.Printf("[bench] the cluster did not quiet down within %s (kube-apiserver and etcd above %s of CPU per %s); going on\n", quietMax, quietCPU, quietWindow)
}
