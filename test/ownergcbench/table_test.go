package ownergcbench

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/nodegcproc"
)

// results is everything one run measured.
type results struct {
	kcmVersion  string
	cpus        string // how the processes shared the CPUs (see benchEnv.pin)
	unthrottled []rateRow
	equal       rateRow
	scale       [2]scaleRow
	// startups are the start-up times to synced at the large size, every
	// round (the first is the memory row's run); the row shows each
	// collector's median.
	startups struct{ nodegc, kcm []time.Duration }
	idle     time.Duration // how long each synced collector idled before its RSS was read
	took     time.Duration
}

// rateRow is one size of cascade under each deleter (loop: zero when not
// measured).
type rateRow struct {
	n                 int
	nodegc, kcm, loop cascadeResult
	loopWatch         cascadeResult // the loop that watches (see deleteLoop)
	compared          cascadeResult // nodegc built elsewhere (sizes.compare); zero when not run
}

// scaleRow is one size of the population under each collector.
type scaleRow struct {
	n           int
	nodegc, kcm syncedResult
}

// ratio is one ratio the table checks against its goal.
type ratio struct {
	value float64
	// lo and hi bound value's 95% confidence interval when it is the
	// geometric mean of several rounds' ratios (see roundsRatio); both 0
	// when it is one measurement's.
	lo, hi float64
	max    bool    // the goal is an upper bound (else a lower bound)
	goal   float64 // 0: no goal
	unit   string  // its name in b.ReportMetric
}

// hasInterval says whether value is a mean of rounds, bounded by lo and hi.
func (r ratio) hasInterval() bool { return r.lo != 0 || r.hi != 0 }

func (r ratio) String() string {
	if !r.hasInterval() {
		return fmt.Sprintf("%.2f", r.value)
	}
	return fmt.Sprintf("%.2f (%.2f-%.2f)", r.value, r.lo, r.hi)
}

// The verdicts of a ratio on its goal.
const (
	met      = "ok"
	missed   = "FAIL"
	notShown = "not shown" // the interval holds values on both sides of the goal
)

// verdict says whether the ratio meets its goal. A ratio with an interval
// meets it only if all of the interval does, and misses it only if all of
// the interval does: a round's rate moves by 10-20%, so a mean a little
// past the goal says neither.
func (r ratio) verdict() string {
	worst, best := r.value, r.value
	if r.hasInterval() {
		worst, best = r.lo, r.hi
		if r.max {
			worst, best = r.hi, r.lo
		}
	}
	meets := func(v float64) bool {
		if r.max {
			return v <= r.goal
		}
		return v >= r.goal
	}
	switch {
	case meets(worst):
		return met
	case !meets(best):
		return missed
	default:
		return notShown
	}
}

// mark is the goal and the ratio's verdict on it.
func (r ratio) mark() string {
	if r.goal == 0 {
		return ""
	}
	return fmt.Sprintf("%s %.2f  %s", r.op(), r.goal, r.verdict())
}

func (r ratio) op() string {
	if r.max {
		return "<="
	}
	return ">="
}

// roundsRatio is the ratio of a's rate to b's. When both were measured in
// the same rounds, it is the geometric mean of the rounds' ratios (a's
// rate over b's in the same round, so that what a round did to the
// cluster, it did to both) with its 95% interval; else (a deleter measured
// once) the ratio of their medians.
func roundsRatio(a, b []float64, medians float64) ratio {
	ratios, ok := pairedRatios(a, b)
	if !ok {
		return ratio{value: medians}
	}
	mean, lo, hi := testbed.RatioInterval(ratios)
	return ratio{value: mean, lo: lo, hi: hi}
}

// pairedRatios is a[i]/b[i] for each round i, ok when a and b hold the
// same two or more rounds.
func pairedRatios(a, b []float64) ([]float64, bool) {
	if len(a) < 2 || len(a) != len(b) {
		return nil, false
	}
	ratios := make([]float64, len(a))
	for i := range a {
		ratios[i] = a[i] / b[i]
	}
	return ratios, true
}

// table is the printed table and the ratios it checked.
type table struct {
	strings.Builder
	ratios []ratio
}

const rowFormat = "%-62s %14s %16s %12s  %-38s %s\n"

// row writes one row; rt may be nil (no ratio), and a row with several
// ratios is continued on lines of its own.
func (t *table) row(name, nodegc, kcm, loop string, what []string, rs ...ratio) {
	if len(rs) == 0 {
		fmt.Fprintf(t, rowFormat, name, nodegc, kcm, loop, "", "")
		return
	}
	for i, r := range rs {
		if i > 0 {
			name, nodegc, kcm, loop = "", "", "", ""
		}
		fmt.Fprintf(t, rowFormat, name, nodegc, kcm, loop, what[i]+" "+r.String(), r.mark())
		if r.goal != 0 {
			t.ratios = append(t.ratios, r)
		}
	}
}

func mb(bytes uint64) string { return fmt.Sprintf("%.1f MB", float64(bytes)/1e6) }

func secs(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

// table writes the run's table: the rows of issue 18, then the details
// they come from.
func (res *results) table() *table {
	t := &table{}
	small, large := res.scale[0], res.scale[1]
	fmt.Fprintf(t, "\nOwner GC at scale: nodegc (`nodegc run --owner-gc=only`, this tree) vs kube-controller-manager (%s) --controllers=garbagecollector (kcm)\nvs a plain DELETE loop, ", res.kcmVersion)
	fmt.Fprintf(t, "on one kube-apiserver + etcd, one run (%s)\n\n", res.took.Round(time.Second))
	fmt.Fprintf(t, rowFormat, "row", "nodegc", "kcm (GC only)", "DELETE loop", "ratio", "goal")

	t.row(fmt.Sprintf("memory: RSS synced, %d objects", small.n), mb(small.nodegc.rss), mb(small.kcm.rss), "-",
		[]string{"nodegc/kcm"}, ratio{value: float64(small.nodegc.rss) / float64(small.kcm.rss)})
	t.row(fmt.Sprintf("memory: RSS synced, %d objects", large.n), mb(large.nodegc.rss), mb(large.kcm.rss), "-",
		[]string{"nodegc/kcm"}, ratio{value: float64(large.nodegc.rss) / float64(large.kcm.rss)})
	slope := func(small, large syncedResult) float64 {
		return (float64(large.rss) - float64(small.rss)) / float64(res.scale[1].n-res.scale[0].n)
	}
	sn, sk := slope(small.nodegc, large.nodegc), slope(small.kcm, large.kcm)
	t.row(fmt.Sprintf("memory: bytes/object (RSS slope %d->%d)", small.n, large.n), fmt.Sprintf("%.0f", sn), fmt.Sprintf("%.0f", sk), "-",
		[]string{"nodegc/kcm"}, ratio{value: sn / sk, max: true, goal: 0.5, unit: "memory-slope-nodegc/kcm"})
	t.row(fmt.Sprintf("memory: peak (VmHWM), %d objects", large.n), mb(large.nodegc.hwm), mb(large.kcm.hwm), "-",
		[]string{"nodegc/kcm"}, ratio{value: float64(large.nodegc.hwm) / float64(large.kcm.hwm)})
	ns, ks := medianDuration(res.startups.nodegc), medianDuration(res.startups.kcm)
	t.row(fmt.Sprintf("start-up to synced, %d objects", large.n), secs(ns), secs(ks), "-",
		[]string{"nodegc/kcm"}, ratio{value: ns.Seconds() / ks.Seconds(), max: true, goal: 0.5, unit: "startup-nodegc/kcm"})

	for _, r := range res.unthrottled {
		vsLoop := roundsRatio(r.nodegc.rates, r.loop.rates, r.nodegc.perSecond/r.loop.perSecond)
		vsLoop.goal, vsLoop.unit = 0.95, fmt.Sprintf("rate%d-nodegc/loop", r.n)
		vsKcm := roundsRatio(r.nodegc.rates, r.kcm.rates, r.nodegc.perSecond/r.kcm.perSecond)
		vsKcm.goal, vsKcm.unit = 2, fmt.Sprintf("rate%d-nodegc/kcm", r.n)
		t.row(fmt.Sprintf("rate unthrottled, %d dependents: objects/s", r.n),
			fmt.Sprintf("%.0f", r.nodegc.perSecond), fmt.Sprintf("%.0f", r.kcm.perSecond), fmt.Sprintf("%.0f", r.loop.perSecond),
			[]string{"nodegc/loop", "nodegc/kcm"}, vsLoop, vsKcm)
		t.row(fmt.Sprintf("rate unthrottled, %d dependents: loop watching, objects/s", r.n), "-", "-", fmt.Sprintf("%.0f", r.loopWatch.perSecond),
			[]string{"loop watching/loop", "nodegc/loop watching"},
			roundsRatio(r.loopWatch.rates, r.loop.rates, r.loopWatch.perSecond/r.loop.perSecond),
			roundsRatio(r.nodegc.rates, r.loopWatch.rates, r.nodegc.perSecond/r.loopWatch.perSecond))
		t.row(fmt.Sprintf("rate unthrottled, %d dependents: requests/object", r.n),
			fmt.Sprintf("%.2f", r.nodegc.perObject), fmt.Sprintf("%.2f", r.kcm.perObject), fmt.Sprintf("%.2f", r.loop.perObject), nil)
		t.row(fmt.Sprintf("rate unthrottled, %d dependents: CPU us/object", r.n),
			fmt.Sprintf("%.0f", r.nodegc.cpuAll()), fmt.Sprintf("%.0f", r.kcm.cpuAll()), fmt.Sprintf("%.0f", r.loop.cpuAll()),
			[]string{"nodegc/loop", "loop watching/loop"}, ratio{value: r.nodegc.cpuAll() / r.loop.cpuAll()},
			ratio{value: r.loopWatch.cpuAll() / r.loop.cpuAll()})
	}
	e := res.equal
	t.row(fmt.Sprintf("rate at equal QPS, %d dependents: objects/s", e.n), fmt.Sprintf("%.1f", e.nodegc.perSecond), fmt.Sprintf("%.1f", e.kcm.perSecond), "-",
		[]string{"nodegc/kcm"}, ratio{value: e.nodegc.perSecond / e.kcm.perSecond, goal: 2, unit: "equal-qps-rate-nodegc/kcm"})
	t.row(fmt.Sprintf("rate at equal QPS, %d dependents: requests/object", e.n), fmt.Sprintf("%.2f", e.nodegc.perObject), fmt.Sprintf("%.2f", e.kcm.perObject), "-",
		[]string{"nodegc"}, ratio{value: e.nodegc.perObject, max: true, goal: 1.1, unit: "equal-qps-nodegc-requests/object"})
	verdicts := map[string]int{}
	for _, r := range t.ratios {
		verdicts[r.verdict()]++
	}
	fmt.Fprintf(t, "goals met: %d of %d (missed: %d; not shown either way, the interval of the rounds' ratios holding the goal: %d)\n",
		verdicts[met], len(t.ratios), verdicts[missed], verdicts[notShown])
	fmt.Fprintf(t, "A ratio of rates measured in several rounds is the geometric mean of the rounds' ratios, with its 95%% interval; the objects/s are the medians.\n")

	fmt.Fprintf(t, "\nEqual QPS: nodegc kubeAPIQPS 40 / burst 60; kcm --kube-api-qps=20 --kube-api-burst=30 (its collector doubles both). Unthrottled: nodegc kubeAPIQPS -1 (no client-side limit), kcm 500/1000, the loop %d goroutines, no client limit.\n", loopWorkers)
	fmt.Fprintf(t, "nodegc runs with GOMAXPROCS=%s, as its manifests set it from its CPU limit; kcm and the bench with Go's default.\n", nodegcproc.DeployedGOMAXPROCS)
	fmt.Fprintf(t, "Deletions (requests: kube-apiserver's apiserver_request_total on configmaps; CPU: user+system during the deletion, %s;\n", res.cpus)
	fmt.Fprintf(t, "CPU us/object: deleter, kube-apiserver, etcd and the bench (its watch of the deletions), pooled over the rounds):\n")
	deletion := func(what string, r cascadeResult) {
		if r.n == 0 {
			return
		}
		verbs := slices.Sorted(maps.Keys(r.requests))
		var rq []string
		for _, v := range verbs {
			rq = append(rq, fmt.Sprintf("%s %d", v, r.requests[v]))
		}
		bench := ""
		if d, ok := r.cpu["bench"]; ok {
			bench = ", bench " + secs(d)
		}
		fmt.Fprintf(t, "  %-44s %6d in %8s (first after %s)  %7.1f/s  %5.2f req/obj (%s)  CPU: deleter %s, kube-apiserver %s, etcd %s%s\n",
			what, r.n, secs(r.took), secs(r.first), r.perSecond, r.perObject, strings.Join(rq, ", "), secs(r.cpu["collector"]), secs(r.cpu["kube-apiserver"]), secs(r.cpu["etcd"]), bench)
		if len(r.rates) > 1 {
			var rates []string
			for _, v := range r.rates {
				rates = append(rates, fmt.Sprintf("%.0f", v))
			}
			fmt.Fprintf(t, "  %-44s the median of %d rounds (objects/s: %s); its requests and CPU\n", "", len(r.rates), strings.Join(rates, ", "))
		}
		var per []string
		for _, name := range []string{"collector", "kube-apiserver", "etcd", "bench"} {
			if v, ok := r.cpuPerObject[name]; ok {
				if name == "collector" {
					name = "deleter"
				}
				per = append(per, fmt.Sprintf("%s %.0f", name, v))
			}
		}
		pooled := ""
		if len(r.rates) > 1 {
			pooled = ", pooled over the rounds"
		}
		fmt.Fprintf(t, "  %-44s CPU us/object%s: %s; DELETEs in kube-apiserver at a time: %.1f\n", "", pooled, strings.Join(per, ", "), r.serverDeleting)
	}
	for _, r := range res.unthrottled {
		deletion("nodegc unthrottled", r.nodegc)
		deletion("kcm unthrottled", r.kcm)
		deletion("DELETE loop (deleter: the bench process)", r.loop)
		deletion("DELETE loop that watches (the bench process)", r.loopWatch)
		deletion("nodegc built elsewhere (NODEGC_BENCH_COMPARE)", r.compared)
		for _, p := range []struct {
			what string
			a, b []float64
		}{{"nodegc/loop", r.nodegc.rates, r.loop.rates}, {"loop watching/loop", r.loopWatch.rates, r.loop.rates},
			{"nodegc/nodegc built elsewhere", r.nodegc.rates, r.compared.rates},
			// A change to the collector's own work shows in its process's
			// CPU time without kube-apiserver's and etcd's share; over 10
			// rounds its interval was about 7% either side, the rate's 9%.
			{"its CPU us/object: nodegc/built elsewhere", r.nodegc.deleterCPU, r.compared.deleterCPU}} {
			ratios, ok := pairedRatios(p.a, p.b)
			if !ok {
				continue
			}
			paired := make([]string, len(ratios))
			for i, v := range ratios {
				paired[i] = fmt.Sprintf("%.2f", v)
			}
			mean, lo, hi := testbed.RatioInterval(ratios)
			fmt.Fprintf(t, "  %-44s round by round: %s; geometric mean %.2f, 95%% interval %.2f-%.2f\n", p.what, strings.Join(paired, ", "), mean, lo, hi)
		}
	}
	deletion("nodegc at equal QPS", e.nodegc)
	deletion("kcm at equal QPS", e.kcm)

	fmt.Fprintf(t, "Start-up and memory (each collector alone; RSS: median of %d VmRSS readings %s apart after %s idle once synced):\n", rssSamples, rssInterval, res.idle)
	for _, s := range res.scale {
		for _, c := range []struct {
			name string
			r    syncedResult
		}{{"nodegc", s.nodegc}, {"kcm", s.kcm}} {
			started := "not found in its log"
			if c.r.gcStarted > 0 {
				started = secs(c.r.gcStarted)
			}
			var samples []string
			for _, v := range c.r.rssAll {
				samples = append(samples, fmt.Sprintf("%.1f", float64(v)/1e6))
			}
			fmt.Fprintf(t, "  %-6s %6d objects: collector started after %s, synced after %s; RSS %s (samples MB: %s), VmHWM %s; writes to the population meanwhile: %d\n",
				c.name, s.n, started, secs(c.r.synced), mb(c.r.rss), strings.Join(samples, " "), mb(c.r.hwm), c.r.writes)
		}
	}
	fmt.Fprintf(t, "Start-up to synced at %d objects, every round (the median is the row's; the first round is the memory row's run, then each round alternates which collector starts first):\n", large.n)
	for _, c := range []struct {
		name string
		d    []time.Duration
	}{{"nodegc", res.startups.nodegc}, {"kcm", res.startups.kcm}} {
		var all []string
		for _, d := range c.d {
			all = append(all, secs(d))
		}
		fmt.Fprintf(t, "  %-6s %s\n", c.name, strings.Join(all, ", "))
	}
	return t
}

// medianDuration returns the median of ds (the lower middle one of an even
// count), 0 for none.
func medianDuration(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sorted := slices.Sorted(slices.Values(ds))
	return sorted[(len(sorted)-1)/2]
}
