package cluster

import (
	"bytes"
	"context"
	"fmt"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// RequestCounts is kube-apiserver's apiserver_request_total summed by its
// verb label over every other label (code, group, version, scope,
// subresource, ...). The verbs are as the API server labels them: GET,
// LIST, WATCH, POST (create), PUT (update), PATCH, APPLY, DELETE,
// DELETECOLLECTION, CONNECT.
type RequestCounts map[string]int64

// Total is the sum over all verbs.
func (r RequestCounts) Total() int64 {
	var n int64
	for _, v := range r {
		n += v
	}
	return n
}

// Sub returns r - before, verb by verb, dropping verbs with no difference:
// the requests made between two snapshots.
func (r RequestCounts) Sub(before RequestCounts) RequestCounts {
	d := RequestCounts{}
	for verb, v := range r {
		if n := v - before[verb]; n != 0 {
			d[verb] = n
		}
	}
	for verb, v := range before {
		if _, ok := r[verb]; !ok && v != 0 {
			d[verb] = -v
		}
	}
	return d
}

// RequestSeconds is kube-apiserver's apiserver_request_duration_seconds:
// the time its requests took, from arrival to response, summed by verb as
// RequestCounts. Over a span, its increase divided by the span is how many
// requests kube-apiserver was handling at a time, on average.
type RequestSeconds map[string]float64

// APIServerRequests reads kube-apiserver's own /metrics and returns
// apiserver_request_total summed by verb, counting requests from every
// client. With resource non-empty only requests for that resource (e.g.
// "pods", any API group, any subresource) count. Requests for non-resource
// URLs (/metrics, /readyz, /version, ...) never count, so reading the
// counters does not change them.
func (c *Cluster) APIServerRequests(ctx context.Context, resource string) (RequestCounts, error) {
	counts, _, err := c.APIServerRequestStats(ctx, resource)
	return counts, err
}

// APIServerRequestStats is APIServerRequests with the time the same
// requests took (RequestSeconds).
func (c *Cluster) APIServerRequestStats(ctx context.Context, resource string) (RequestCounts, RequestSeconds, error) {
	raw, err := c.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("read kube-apiserver /metrics: %w", err)
	}
	return parseRequestStats(raw, resource)
}

const (
	requestTotal    = "apiserver_request_total"
	requestDuration = "apiserver_request_duration_seconds"
)

func parseRequestStats(raw []byte, resource string) (RequestCounts, RequestSeconds, error) {
	// /metrics is about 1.5 MB; parsing only our families' lines is ~100x
	// faster. A histogram's lines are its name with _bucket, _sum, _count.
	ours := func(name []byte) bool {
		for _, fam := range []string{requestTotal, requestDuration} {
			rest, ok := bytes.CutPrefix(name, []byte(fam))
			if !ok || len(rest) == 0 {
				continue
			}
			if fam == requestDuration {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					rest, _ = bytes.CutPrefix(rest, []byte(suffix))
				}
			}
			if len(rest) > 0 && (rest[0] == '{' || rest[0] == ' ') {
				return true
			}
		}
		return false
	}
	var keep bytes.Buffer
	for line := range bytes.Lines(raw) {
		name := line
		if rest, ok := bytes.CutPrefix(line, []byte("# HELP ")); ok {
			name = rest
		} else if rest, ok := bytes.CutPrefix(line, []byte("# TYPE ")); ok {
			name = rest
		}
		if ours(name) {
			keep.Write(line)
		}
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(&keep)
	if err != nil {
		return nil, nil, fmt.Errorf("parse kube-apiserver /metrics: %w", err)
	}
	counts, seconds := RequestCounts{}, RequestSeconds{}
	for _, m := range families[requestTotal].GetMetric() {
		if verb, ok := requestVerb(m, resource); ok {
			counts[verb] += int64(m.GetCounter().GetValue())
		}
	}
	for _, m := range families[requestDuration].GetMetric() {
		if verb, ok := requestVerb(m, resource); ok {
			seconds[verb] += m.GetHistogram().GetSampleSum()
		}
	}
	return counts, seconds, nil
}

// requestVerb returns the verb of one series of kube-apiserver's request
// metrics, and whether it is about resource (any resource when empty; never
// a non-resource URL).
func requestVerb(m *dto.Metric, resource string) (string, bool) {
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["resource"] == "" || (resource != "" && labels["resource"] != resource) {
		return "", false
	}
	return labels["verb"], true
}
