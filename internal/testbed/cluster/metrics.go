package cluster

import (
	"bytes"
	"context"
	"fmt"

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

// APIServerRequests reads kube-apiserver's own /metrics and returns
// apiserver_request_total summed by verb, counting requests from every
// client. With resource non-empty only requests for that resource (e.g.
// "pods", any API group, any subresource) count. Requests for non-resource
// URLs (/metrics, /readyz, /version, ...) never count, so reading the
// counters does not change them.
func (c *Cluster) APIServerRequests(ctx context.Context, resource string) (RequestCounts, error) {
	raw, err := c.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("read kube-apiserver /metrics: %w", err)
	}
	return parseRequestCounts(raw, resource)
}

const requestTotal = "apiserver_request_total"

func parseRequestCounts(raw []byte, resource string) (RequestCounts, error) {
	// /metrics is about 1.5 MB; parsing only our family's lines is ~100x faster.
	var keep bytes.Buffer
	for line := range bytes.Lines(raw) {
		name := line
		if rest, ok := bytes.CutPrefix(line, []byte("# HELP ")); ok {
			name = rest
		} else if rest, ok := bytes.CutPrefix(line, []byte("# TYPE ")); ok {
			name = rest
		}
		if rest, ok := bytes.CutPrefix(name, []byte(requestTotal)); ok && len(rest) > 0 && (rest[0] == '{' || rest[0] == ' ') {
			keep.Write(line)
		}
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(&keep)
	if err != nil {
		return nil, fmt.Errorf("parse kube-apiserver /metrics: %w", err)
	}
	counts := RequestCounts{}
	fam, ok := families[requestTotal]
	if !ok {
		return counts, nil
	}
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["resource"] == "" || (resource != "" && labels["resource"] != resource) {
			continue
		}
		counts[labels["verb"]] += int64(m.GetCounter().GetValue())
	}
	return counts, nil
}
