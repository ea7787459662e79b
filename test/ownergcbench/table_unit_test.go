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
