//go:build e2e

package e2e

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/nodegcproc"
)

// testMetrics reads /metrics of the DaemonSet pod and of the owner
// collector on the node's loopback (both on the host network) and checks
// that they show what the cases before removed.
func (s *suite) testMetrics(t *testing.T) {
	node := s.nodeMetrics(t)
	owner := s.ownerMetrics(t)
	type check struct {
		m             metrics
		where, metric string
		labels        []string
		min           float64
	}
	checks := []check{
		{node, "node", "nodegc_image_gc_images_removed_total", []string{"reason", "space"}, 2},
		{node, "node", "nodegc_image_gc_runs_total", []string{"result", "success"}, 1},
		{node, "node", "nodegc_image_gc_runs_total", []string{"result", "not_enough"}, 1},
		{node, "node", "nodegc_image_gc_bytes_measured_freed_total", nil, 1},
		{node, "node", "nodegc_image_fs_capacity_bytes", nil, 1},
		{node, "node", "nodegc_container_gc_containers_removed_total", []string{"reason", "per_container_limit"}, 1},
		{node, "node", "nodegc_container_gc_containers_removed_total", []string{"reason", "pod_gone"}, 3},
		{node, "node", "nodegc_container_gc_sandboxes_removed_total", []string{"reason", "pod_gone"}, 1},
		{node, "node", "nodegc_container_gc_log_directories_removed_total", nil, 1},
		{node, "node", "nodegc_container_gc_pod_view_authoritative", nil, 1},
		{owner, "owner", "nodegc_owner_gc_leader", nil, 1},
		{owner, "owner", "nodegc_owner_gc_synced", nil, 1},
		{owner, "owner", "nodegc_owner_gc_actions_total", []string{"action", "delete"}, 3},
	}
	var rows [][]string
	for _, c := range checks {
		v := c.m.sum(c.metric, c.labels...)
		ok := "ok"
		if v < c.min {
			ok = "TOO LOW"
			t.Errorf("%s /metrics: %s%s = %v, want at least %v", c.where, c.metric, labelString(c.labels), v, c.min)
		}
		rows = append(rows, []string{c.where, c.metric + labelString(c.labels), fmt.Sprintf("%v", v), ok})
	}
	for _, a := range []struct {
		m     metrics
		where string
	}{{node, "node"}, {owner, "owner"}} {
		got, ok := checkGOMAXPROCS(t, a.where, a.m)
		verdict := "ok"
		if !ok {
			verdict = "WRONG"
		}
		rows = append(rows, []string{a.where, "go_sched_gomaxprocs_threads", got, verdict + " (= " + nodegcproc.DeployedGOMAXPROCS + ", from limits.cpu)"})
	}
	table(t, fmt.Sprintf("/metrics of nodegc on the node (DaemonSet pod on 127.0.0.1:%d, owner collector on 127.0.0.1:%d)", s.metricsPort, s.ownerMetricsPort),
		[]string{"AGENT", "METRIC", "VALUE", "CHECK"}, rows)
	// The removal counters by label, as exported.
	var all []string
	for _, smp := range testbed.Samples(node) {
		if strings.HasSuffix(smp.Name, "_removed_total") && smp.Value > 0 {
			all = append(all, fmt.Sprintf("%s%s %v", smp.Name, labelMap(smp.Labels), smp.Value))
		}
	}
	sort.Strings(all)
	t.Logf("every non-zero removal counter of the DaemonSet pod:\n  %s", strings.Join(all, "\n  "))
}

func labelString(kv []string) string {
	if len(kv) == 0 {
		return ""
	}
	var parts []string
	for i := 0; i+1 < len(kv); i += 2 {
		parts = append(parts, fmt.Sprintf("%s=%q", kv[i], kv[i+1]))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func labelMap(m map[string]string) string {
	var kv []string
	for k, v := range m {
		kv = append(kv, k, v)
	}
	// Stable order.
	type p struct{ k, v string }
	var ps []p
	for i := 0; i+1 < len(kv); i += 2 {
		ps = append(ps, p{kv[i], kv[i+1]})
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].k < ps[j].k })
	kv = kv[:0]
	for _, x := range ps {
		kv = append(kv, x.k, x.v)
	}
	return labelString(kv)
}

// testEvents lists nodegc's Events on the Node: FreeDiskSpaceFailed from
// the in-use image case at least.
func (s *suite) testEvents(t *testing.T) {
	var rows [][]string
	for _, reason := range []string{"FreeDiskSpaceFailed", "ImageGCFailed", "InvalidDiskCapacity", "ContainerGCFailed"} {
		for _, e := range s.nodeEvents(t, reason) {
			rows = append(rows, []string{e.Type, e.Reason, fmt.Sprint(e.Count), e.Source.Component + "/" + e.Source.Host, e.Message})
		}
	}
	table(t, fmt.Sprintf("Events of nodegc on Node %s", s.kc.NodeName), []string{"TYPE", "REASON", "COUNT", "SOURCE", "MESSAGE"}, rows)
	if len(s.nodeEvents(t, "FreeDiskSpaceFailed")) == 0 {
		t.Errorf("no FreeDiskSpaceFailed Event on the Node")
	}
	for _, reason := range []string{"ImageGCFailed", "InvalidDiskCapacity", "ContainerGCFailed"} {
		if evs := s.nodeEvents(t, reason); len(evs) > 0 {
			t.Errorf("unexpected %s Events: %s", reason, evs[0].Message)
		}
	}
}
