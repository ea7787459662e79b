package ownergcbench

import (
	"strings"
	"testing"
)

// TestTableCompared: with a build to compare with (NODEGC_BENCH_COMPARE),
// the details give its deletion and this tree's rate over it round by
// round, with the geometric mean; without one, neither.
func TestTableCompared(t *testing.T) {
	row := rateRow{n: 5000,
		nodegc: cascadeResult{n: 5000, perSecond: 200, rates: []float64{100, 200, 300}},
		loop:   cascadeResult{n: 5000, perSecond: 200, rates: []float64{100, 200, 300}}}
	res := results{unthrottled: []rateRow{row}}
	out := res.table().String()
	if strings.Contains(out, "built elsewhere") {
		t.Errorf("no build compared, yet the table mentions one:\n%s", out)
	}

	row.compared = cascadeResult{n: 5000, perSecond: 100, rates: []float64{100, 100, 150}}
	res.unthrottled = []rateRow{row}
	out = res.table().String()
	if !strings.Contains(out, "nodegc built elsewhere (NODEGC_BENCH_COMPARE)") {
		t.Errorf("the compared build's deletion is missing:\n%s", out)
	}
	// 100/100, 200/100, 300/150: a geometric mean of 4^(1/3) = 1.587.
	want := "round by round: 1.00, 2.00, 2.00; geometric mean 1.59"
	for line := range strings.SplitSeq(out, "\n") {
		if strings.Contains(line, "nodegc/nodegc built elsewhere") {
			if !strings.Contains(line, want) {
				t.Errorf("ratio line %q, want it to contain %q", line, want)
			}
			return
		}
	}
	t.Errorf("no line of this tree's rate over the compared build's:\n%s", out)
}
