package testbed

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrapeTimeout bounds one ScrapeMetrics.
const scrapeTimeout = 5 * time.Second

// ParseMetrics reads the Prometheus text exposition format (what an
// exporter's /metrics answers) with expfmt and returns its metric families
// sorted by name: the form a prometheus.Gatherer's Gather returns, so that
// Samples and MetricSum read a scrape and an in-process registry alike. A
// malformed exposition is an error, not a smaller sum.
func ParseMetrics(r io.Reader) ([]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	byName, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	families := make([]*dto.MetricFamily, 0, len(byName))
	for _, f := range byName {
		families = append(families, f)
	}
	slices.SortFunc(families, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return families, nil
}

// ScrapeMetrics GETs url (an exporter's /metrics), within 5 s and ctx, and
// parses what it answers (see ParseMetrics). An answer other than 200 OK is
// an error that quotes its start.
func ScrapeMetrics(ctx context.Context, url string) ([]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(body))
	}
	families, err := ParseMetrics(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return families, nil
}

// Sample is one sample as the text format exposes it.
type Sample struct {
	// Name is the sample's name: its family's for a counter, gauge or
	// untyped metric and for a summary's quantiles; the family's plus
	// _bucket, _sum or _count for a histogram's buckets, sum and count,
	// plus _sum or _count for a summary's sum and count.
	Name string
	// Labels holds the sample's labels, a bucket's "le" and a quantile's
	// "quantile" included, their bounds written as the text format writes
	// them ("0.5", "+Inf").
	Labels map[string]string
	Value  float64
}

// String writes s as a line of the text format, without timestamp: its
// labels sorted by name, "le" or "quantile" last.
func (s Sample) String() string {
	names := make([]string, 0, len(s.Labels))
	for k := range s.Labels {
		names = append(names, k)
	}
	last := func(k string) bool { return k == model.BucketLabel || k == model.QuantileLabel }
	slices.SortFunc(names, func(a, b string) int {
		if la, lb := last(a), last(b); la != lb {
			if la {
				return 1
			}
			return -1
		}
		return strings.Compare(a, b)
	})
	var b strings.Builder
	b.WriteString(s.Name)
	for i, k := range names {
		if i == 0 {
			b.WriteByte('{')
		} else {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=\"%s\"", k, labelEscaper.Replace(s.Labels[k]))
	}
	if len(names) > 0 {
		b.WriteByte('}')
	}
	b.WriteByte(' ')
	b.WriteString(formatFloat(s.Value))
	return b.String()
}

// labelEscaper escapes a label value as the text format does.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// formatFloat writes v as the text format does.
func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// Samples lists the samples of families in the order the text format
// exposes them: family by family, in each a histogram's buckets (its +Inf
// bucket too, which a registry's Gather leaves implicit), then its _sum and
// _count, and a summary's quantiles, then its _sum and _count.
func Samples(families []*dto.MetricFamily) []Sample {
	var out []Sample
	for _, f := range families {
		out = append(out, familySamples(f)...)
	}
	return out
}

// MetricSum sums the samples named name (see Sample.Name) whose labels
// match every filter, "label=value" (a label the sample lacks has the value
// ""). ok is false when no sample matches.
func MetricSum(families []*dto.MetricFamily, name string, filters ...string) (sum float64, ok bool) {
	for _, f := range families {
		if !strings.HasPrefix(name, f.GetName()) {
			continue // neither the family's name nor one of its suffixes
		}
		for _, s := range familySamples(f) {
			if s.Name == name && matches(s.Labels, filters) {
				sum += s.Value
				ok = true
			}
		}
	}
	return sum, ok
}

func matches(labels map[string]string, filters []string) bool {
	for _, f := range filters {
		k, v, _ := strings.Cut(f, "=")
		if labels[k] != v {
			return false
		}
	}
	return true
}

// familySamples lists the samples of one family (see Samples).
func familySamples(f *dto.MetricFamily) []Sample {
	name := f.GetName()
	var out []Sample
	for _, m := range f.GetMetric() {
		labels := func(extra ...string) map[string]string {
			l := make(map[string]string, len(m.GetLabel())+1)
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if len(extra) == 2 {
				l[extra[0]] = extra[1]
			}
			return l
		}
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			out = append(out, Sample{name, labels(), m.GetCounter().GetValue()})
		case dto.MetricType_GAUGE:
			out = append(out, Sample{name, labels(), m.GetGauge().GetValue()})
		case dto.MetricType_UNTYPED:
			out = append(out, Sample{name, labels(), m.GetUntyped().GetValue()})
		case dto.MetricType_SUMMARY:
			s := m.GetSummary()
			for _, q := range s.GetQuantile() {
				out = append(out, Sample{name, labels(model.QuantileLabel, formatFloat(q.GetQuantile())), q.GetValue()})
			}
			out = append(out,
				Sample{name + "_sum", labels(), s.GetSampleSum()},
				Sample{name + "_count", labels(), float64(s.GetSampleCount())})
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			h := m.GetHistogram()
			count := h.GetSampleCountFloat()
			if count == 0 {
				count = float64(h.GetSampleCount())
			}
			infSeen := false
			for _, b := range h.GetBucket() {
				v := b.GetCumulativeCountFloat()
				if v == 0 {
					v = float64(b.GetCumulativeCount())
				}
				infSeen = infSeen || math.IsInf(b.GetUpperBound(), 1)
				out = append(out, Sample{name + "_bucket", labels(model.BucketLabel, formatFloat(b.GetUpperBound())), v})
			}
			if !infSeen {
				out = append(out, Sample{name + "_bucket", labels(model.BucketLabel, "+Inf"), count})
			}
			out = append(out,
				Sample{name + "_sum", labels(), h.GetSampleSum()},
				Sample{name + "_count", labels(), count})
		}
	}
	return out
}
