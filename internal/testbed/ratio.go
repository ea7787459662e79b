package testbed

import "math"

// RatioInterval is the geometric mean of ratios (each a round's pair of
// rates, run side by side) and its 95% confidence interval: Student's t
// over the logarithms, as the ratios of rates are spread multiplicatively.
// A goal outside the interval is met or missed beyond the rounds' noise.
func RatioInterval(ratios []float64) (mean, lo, hi float64) {
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
