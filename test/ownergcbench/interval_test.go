package ownergcbench

import (
	"math"
	"testing"
)

// ratioInterval is the geometric mean of ratios (each a round's pair of
// rates, run side by side) and its 95% confidence interval: Student's t
// over the logarithms, as the ratios of rates are spread multiplicatively.
// A goal outside the interval is met or missed beyond the rounds' noise.
func ratioInterval(ratios []float64) (mean, lo, hi float64) {
	n := len(ratios)
	var sum, sq float64
	for _, r := range ratios {
		sum += math.Log(r)
	}
	m := sum / float64(n)
	for _, r := range ratios {
		sq += (math.Log(r) - m) * (math.Log(r) - m)
	}
	half := tQuantile975(n-1) * math.Sqrt(sq/float64(n-1)/float64(n))
	return math.Exp(m), math.Exp(m - half), math.Exp(m + half)
}

// tQuantile975 is the 97.5th percentile of Student's t distribution with df
// degrees of freedom (df >= 1); beyond 30, the normal distribution's 1.96
// (at most 4% narrower than the true value).
func tQuantile975(df int) float64 {
	table := []float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
		2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}
	if df <= len(table) {
		return table[df-1]
	}
	return 1.96
}

func TestRatioInterval(t *testing.T) {
	tests := map[string]struct {
		ratios       []float64
		mean, lo, hi float64
	}{
		// Equal ratios: no spread, the interval is the point.
		"no spread": {ratios: []float64{0.9, 0.9, 0.9}, mean: 0.9, lo: 0.9, hi: 0.9},
		// Logs -0.1 and 0.1: mean 0, standard error 0.1, t(1) = 12.706.
		"two rounds": {ratios: []float64{math.Exp(-0.1), math.Exp(0.1)}, mean: 1, lo: math.Exp(-1.2706), hi: math.Exp(1.2706)},
		// Logs -0.2, 0, 0.2 around log 0.9: standard error 0.2/sqrt(3), t(2) = 4.303.
		"three rounds": {ratios: []float64{0.9 * math.Exp(-0.2), 0.9, 0.9 * math.Exp(0.2)}, mean: 0.9,
			lo: 0.9 * math.Exp(-4.303*0.2/math.Sqrt(3)), hi: 0.9 * math.Exp(4.303*0.2/math.Sqrt(3))},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			mean, lo, hi := ratioInterval(tc.ratios)
			for _, c := range []struct {
				what      string
				got, want float64
			}{{"mean", mean, tc.mean}, {"low end", lo, tc.lo}, {"high end", hi, tc.hi}} {
				if math.Abs(c.got-c.want) > 1e-9 {
					t.Errorf("%s = %.6f, want %.6f", c.what, c.got, c.want)
				}
			}
		})
	}
}

func TestTQuantile975(t *testing.T) {
	for df, want := range map[int]float64{1: 12.706, 4: 2.776, 30: 2.042, 31: 1.96, 100: 1.96} {
		if got := tQuantile975(df); got != want {
			t.Errorf("tQuantile975(%d) = %v, want %v", df, got, want)
		}
	}
}
