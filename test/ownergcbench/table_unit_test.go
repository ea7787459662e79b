package ownergcbench

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestTableCompared: with a build to compare with (NODEGC_BENCH_COMPARE),
// the details give its deletion and this tree's rate over it round by
// round, with the geometric mean; without one, neither.
func TestTableCompared(t *testing.T) {
	row := rateRow{n: 5000,
		nodegc: cascadeResult{n: 5000, perSecond: 200, rates: []float64{100, 200, 300}, deleterCPU: []float64{200, 200, 200}},
		loop:   cascadeResult{n: 5000, perSecond: 200, rates: []float64{100, 200, 300}}}
	res := results{unthrottled: []rateRow{row}}
	out := res.table().String()
	if strings.Contains(out, "built elsewhere") {
		t.Errorf("no build compared, yet the table mentions one:\n%s", out)
	}

	row.compared = cascadeResult{n: 5000, perSecond: 100, rates: []float64{100, 100, 150}, deleterCPU: []float64{200, 100, 400}}
	res.unthrottled = []rateRow{row}
	out = res.table().String()
	if !strings.Contains(out, "nodegc built elsewhere (NODEGC_BENCH_COMPARE)") {
		t.Errorf("the compared build's deletion is missing:\n%s", out)
	}
	for _, c := range []struct{ what, want string }{
		// 100/100, 200/100, 300/150: a geometric mean of 4^(1/3) = 1.587.
		{"nodegc/nodegc built elsewhere", "round by round: 1.00, 2.00, 2.00; geometric mean 1.59"},
		// 200/200, 200/100, 200/400: a geometric mean of 1.
		{"its CPU us/object: nodegc/built elsewhere", "round by round: 1.00, 2.00, 0.50; geometric mean 1.00"},
	} {
		line := lineWith(out, c.what)
		if line == "" {
			t.Errorf("no line %q in the table:\n%s", c.what, out)
		} else if !strings.Contains(line, c.want) {
			t.Errorf("line %q, want it to contain %q", line, c.want)
		}
	}
}

// lineWith is the first line of out that contains s ("" if none).
func lineWith(out, s string) string {
	for line := range strings.SplitSeq(out, "\n") {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}

// TestTableRateGoal: a rate ratio measured in several rounds is the
// geometric mean of the rounds' ratios, with its 95% interval, not the
// ratio of the two medians, and its goal is met only when the whole
// interval meets it, missed only when the whole interval misses it, and
// otherwise not shown either way; a deleter measured once (kcm at a large
// size) is compared by its one rate.
func TestTableRateGoal(t *testing.T) {
	median := func(rates []float64) float64 { return slices.Sorted(slices.Values(rates))[len(rates)/2] }
	row := func(nodegc, loop []float64) rateRow {
		return rateRow{n: 5000,
			nodegc: cascadeResult{n: 5000, perSecond: median(nodegc), rates: nodegc},
			kcm:    cascadeResult{n: 5000, perSecond: 100, rates: []float64{100}},
			loop:   cascadeResult{n: 5000, perSecond: median(loop), rates: loop}}
	}
	for _, c := range []struct {
		name         string
		nodegc, loop []float64
		want         string // in the nodegc/loop line
		met          string // the same line's goal and verdict
		summary      string
	}{
		// Ratios 0.90, 0.92, 0.91: a mean of 0.91; t(2) = 4.303 times the
		// logs' standard error gives 0.89-0.94.
		{"missed", []float64{900, 920, 910}, []float64{1000, 1000, 1000}, "nodegc/loop 0.91 (0.89-0.94)", ">= 0.95  FAIL",
			"goals met: 5 of 6 (missed: 1; not shown"},
		// Ratios 1.00, 1.02, 1.01: 0.99-1.04.
		{"met", []float64{1000, 1020, 1010}, []float64{1000, 1000, 1000}, "nodegc/loop 1.01 (0.99-1.04)", ">= 0.95  ok",
			"goals met: 6 of 6 (missed: 0; not shown"},
		// Ratios 0.80, 1.10, 0.95: 0.63-1.40. The medians' ratio would
		// say 0.95, met.
		{"not shown", []float64{800, 1100, 950}, []float64{1000, 1000, 1000}, "nodegc/loop 0.94 (0.63-1.40)", ">= 0.95  not shown",
			"goals met: 5 of 6 (missed: 0; not shown either way, the interval of the rounds' ratios holding the goal: 1)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The other goals, all met: memory, start-up, equal QPS.
			res := results{unthrottled: []rateRow{row(c.nodegc, c.loop)},
				equal: rateRow{n: 100, nodegc: cascadeResult{n: 100, perSecond: 40, perObject: 1}, kcm: cascadeResult{n: 100, perSecond: 20, perObject: 2}},
				scale: [2]scaleRow{
					{n: 1000, nodegc: syncedResult{rss: 10e6, hwm: 10e6}, kcm: syncedResult{rss: 20e6, hwm: 20e6}},
					{n: 2000, nodegc: syncedResult{rss: 11e6, hwm: 11e6}, kcm: syncedResult{rss: 30e6, hwm: 30e6}}}}
			res.startups.nodegc, res.startups.kcm = []time.Duration{time.Second}, []time.Duration{3 * time.Second}
			out := res.table().String()
			line := lineWith(out, "rate unthrottled, 5000 dependents: objects/s")
			if !strings.Contains(line, c.want) || !strings.Contains(line, c.met) {
				t.Errorf("rate line %q, want %q and %q", line, c.want, c.met)
			}
			// kcm ran once: its ratio is that of its one rate and nodegc's
			// median, with no interval.
			want := fmt.Sprintf("nodegc/kcm %.2f ", median(c.nodegc)/100)
			if kcm := lineWith(out, ">= 2.00"); !strings.Contains(kcm, want) || strings.Contains(kcm, "(") {
				t.Errorf("kcm, measured once: %q, want the ratio of the medians, no interval", kcm)
			}
			if !strings.Contains(out, c.summary) {
				t.Errorf("want %q in the table:\n%s", c.summary, out)
			}
		})
	}
}

// TestRatioVerdict: an upper-bound goal with an interval, as a lower-bound
// one, is met only by the whole interval.
func TestRatioVerdict(t *testing.T) {
	for _, c := range []struct {
		r    ratio
		want string
	}{
		{ratio{value: 0.4, max: true, goal: 0.5}, met},
		{ratio{value: 0.6, max: true, goal: 0.5}, missed},
		{ratio{value: 0.4, lo: 0.3, hi: 0.49, max: true, goal: 0.5}, met},
		{ratio{value: 0.4, lo: 0.3, hi: 0.6, max: true, goal: 0.5}, notShown},
		{ratio{value: 0.6, lo: 0.51, hi: 0.7, max: true, goal: 0.5}, missed},
		{ratio{value: 0.95, goal: 0.95}, met},
		{ratio{value: 0.95, lo: 0.94, hi: 0.96, goal: 0.95}, notShown},
	} {
		if got := c.r.verdict(); got != c.want {
			t.Errorf("%+v: verdict %q, want %q", c.r, got, c.want)
		}
	}
}
