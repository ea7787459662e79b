package testbed

import (
	"math"
	"testing"
)

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
			mean, lo, hi := RatioInterval(tc.ratios)
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
