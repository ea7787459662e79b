package monitoring

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/promqltest"
)

// TestAlertsFire: each alert's expression, evaluated by Prometheus's engine
// at the end of synthetic series (most 30 minutes long, or the alert's `for`
// and 15 minutes, one sample a minute, promqltest's load syntax; some cases
// end a series earlier, or run it longer, to show what is gone), selects
// something when the condition holds and nothing on a healthy node or
// cluster, nor once a fault has ended (resolved). Evaluated every 30s over
// the series as Prometheus does, a firing case also holds for the alert's
// whole `for` (by the alert's labels), a healthy one for less. The tests
// after this one model faults whose series are not a constant: a crash
// loop (TestUpAlertsHoldForCrashLoops), runs a period apart
// (TestRunFailureAlertsWhateverThePeriod).
func TestAlertsFire(t *testing.T) {
	cases := map[string]struct {
		firing  []string
		healthy []string
		// the fault ended before the last sample: it may have fired,
		// and has resolved
		resolved []string
	}{
		"NodegcImageGCCannotFreeEnough": {
			firing: []string{
				`nodegc_image_gc_runs_total{node="n1",trigger="threshold",result="not_enough"} 0+1x30`,
				// Runs an hour apart: the last two ended not_enough, and
				// usage is over the low threshold.
				`nodegc_image_gc_runs_total{node="n1",trigger="periodic",result="not_enough"} 2x30
				nodegc_image_gc_consecutive_runs{node="n1",result="not_enough"} 2x30
				nodegc_image_fs_usage_percent{node="n1"} 90x30
				nodegc_image_gc_threshold_percent{node="n1",threshold="low"} 80x30`,
			},
			healthy: []string{`nodegc_image_gc_runs_total{node="n1",trigger="threshold",result="not_enough"} 3x30
				nodegc_image_gc_runs_total{node="n1",trigger="threshold",result="success"} 0+1x30`,
				// One run ended not_enough.
				`nodegc_image_gc_consecutive_runs{node="n1",result="not_enough"} 1x30
				nodegc_image_fs_usage_percent{node="n1"} 90x30
				nodegc_image_gc_threshold_percent{node="n1",threshold="low"} 80x30`,
				// Usage went under the low threshold since (other removals)
				// and no run came yet.
				`nodegc_image_gc_consecutive_runs{node="n1",result="not_enough"} 3x30
				nodegc_image_fs_usage_percent{node="n1"} 75x30
				nodegc_image_gc_threshold_percent{node="n1",threshold="low"} 80x30`,
			},
		},
		"NodegcImageGCFailing": {
			firing: []string{
				`nodegc_image_gc_runs_total{node="n1",trigger="periodic",result="error"} 0+1x30`,
				`nodegc_image_gc_runs_total{node="n1",trigger="threshold",result="invalid_capacity"} 0+1x30`,
				// Runs an hour apart, the last three failed.
				`nodegc_image_gc_runs_total{node="n1",trigger="periodic",result="invalid_capacity"} 3x30
				nodegc_image_gc_consecutive_runs{node="n1",result="invalid_capacity"} 3x30
				nodegc_image_gc_consecutive_runs{node="n1",result="error"} 0x30`,
			},
			healthy: []string{`nodegc_image_gc_runs_total{node="n1",trigger="periodic",result="error"} 0x30
				nodegc_image_gc_runs_total{node="n1",trigger="periodic",result="not_enough"} 0+1x30`,
				// The last run failed, the one before did not.
				`nodegc_image_gc_consecutive_runs{node="n1",result="error"} 1x30
				nodegc_image_gc_consecutive_runs{node="n1",result="success"} 0x30`},
		},
		"NodegcImageFSAboveHighThreshold": {
			firing: []string{`nodegc_image_fs_usage_percent{node="n1"} 85x45
				nodegc_image_gc_threshold_percent{node="n1",threshold="high"} 85x45
				nodegc_image_gc_threshold_percent{node="n1",threshold="low"} 80x45`},
			healthy: []string{
				`nodegc_image_fs_usage_percent{node="n1"} 84x30
				nodegc_image_gc_threshold_percent{node="n1",threshold="high"} 85x30
				nodegc_image_fs_usage_percent{node="n2"} 90x30
				nodegc_image_gc_threshold_percent{node="n2",threshold="high"} 95x30`,
				// highThresholdPercent 100 turns threshold GC off.
				`nodegc_image_fs_usage_percent{node="n1"} 100x30
				nodegc_image_gc_threshold_percent{node="n1",threshold="high"} 100x30`,
			},
		},
		"NodegcImageFSAtEvictionThreshold": {
			// The kubelet evicts when available < its threshold: 1000 GiB,
			// imagefs.available<15% (150 GiB).
			firing: []string{`nodegc_image_fs_available_bytes{node="n1"} 161061273599x30
				nodegc_image_fs_eviction_available_bytes{node="n1"} 161061273600x30`},
			healthy: []string{
				`nodegc_image_fs_available_bytes{node="n1"} 161061273600x30
				nodegc_image_fs_eviction_available_bytes{node="n1"} 161061273600x30`,
				// 159 GiB available: usage, rounded up to a whole percent,
				// reads 85, the eviction threshold in percent; the kubelet
				// does not evict.
				`nodegc_image_fs_available_bytes{node="n1"} 170724392960x30
				nodegc_image_fs_eviction_available_bytes{node="n1"} 161061273600x30
				nodegc_image_fs_usage_percent{node="n1"} 85x30
				nodegc_image_gc_threshold_percent{node="n1",threshold="eviction"} 85x30`,
				// No evictionHard on the image filesystem: no eviction series.
				`nodegc_image_fs_available_bytes{node="n1"} 0x30
				nodegc_image_fs_usage_percent{node="n1"} 100x30
				nodegc_image_gc_threshold_percent{node="n1",threshold="high"} 85x30`,
			},
		},
		"NodegcImageStateSavesFailing": {
			firing: []string{`nodegc_image_state_saves_total{node="n1",result="error"} 0+1x30
				nodegc_image_state_saves_total{node="n1",result="success"} 5x30`},
			healthy: []string{
				`nodegc_image_state_saves_total{node="n1",result="error"} 1x30
				nodegc_image_state_saves_total{node="n1",result="success"} 0+1x30`,
				// A save failed, the next one went through.
				`nodegc_image_state_saves_total{node="n1",result="error"} 0+1x30
				nodegc_image_state_saves_total{node="n1",result="success"} 0+1x30`,
				// Nothing to save (no container event).
				`nodegc_image_state_saves_total{node="n1",result="error"} 0x30
				nodegc_image_state_saves_total{node="n1",result="success"} 0x30`,
			},
		},
		"NodegcContainerGCFailing": {
			firing: []string{`nodegc_container_gc_runs_total{node="n1",trigger="periodic",result="error"} 0+1x30
				nodegc_container_gc_runs_total{node="n1",trigger="periodic",result="success"} 0x30`,
				// containerGC.period 1h: the last two runs failed.
				`nodegc_container_gc_runs_total{node="n1",trigger="periodic",result="error"} 2x30
				nodegc_container_gc_consecutive_runs{node="n1",result="error"} 2x30`},
			healthy: []string{`nodegc_container_gc_runs_total{node="n1",trigger="periodic",result="error"} 2x30
				nodegc_container_gc_runs_total{node="n1",trigger="periodic",result="success"} 0+1x30
				nodegc_container_gc_consecutive_runs{node="n1",result="success"} 0+1x30`,
				// The last run failed, the one before did not.
				`nodegc_container_gc_consecutive_runs{node="n1",result="error"} 1x30`},
		},
		"NodegcContainerGCOperationsFailing": {
			firing: []string{
				`nodegc_container_gc_errors_total{node="n1",operation="read_exit_time"} 0+1x30`,
				`nodegc_container_gc_errors_total{node="n1",operation="reclaim"} 0+1x30`,
				// containerGC.period 1h: the last two runs that removed
				// something failed to reclaim.
				`nodegc_container_gc_errors_total{node="n1",operation="reclaim"} 2x30
				nodegc_container_gc_operation_failing_runs{node="n1",operation="reclaim"} 2x30`,
			},
			healthy: []string{
				`nodegc_container_gc_errors_total{node="n1",operation="reclaim"} 3x30
				nodegc_container_gc_errors_total{node="n1",operation="read_exit_time"} 0x30`,
				// One run an hour ago failed to read the version, the next did not.
				`nodegc_container_gc_errors_total{node="n1",operation="read_version"} 1x30
				nodegc_container_gc_operation_failing_runs{node="n1",operation="read_version"} 0x30`,
				// Only the byte counters miss something.
				`nodegc_container_gc_errors_total{node="n1",operation="read_bytes"} 0+1x30`,
				// A failing removal fails its run: NodegcContainerGCFailing's case.
				`nodegc_container_gc_errors_total{node="n1",operation="remove_container"} 0+1x30`,
			},
		},
		"NodegcRuntimeUnreachable": {
			firing: []string{`nodegc_cri_connected{node="n1"} 0x30
				nodegc_node_gc_standby{node="n1"} 0x30`},
			healthy: []string{`nodegc_cri_connected{node="n1"} 1x30`,
				// A second agent waits for the lock and has not dialed: the
				// holder collects (NodegcNodeAgentOnStandby's case).
				`nodegc_cri_connected{node="n1"} 0x30
				nodegc_node_gc_standby{node="n1"} 1x30`},
		},
		"NodegcNodeAgentOnStandby": {
			firing: []string{`nodegc_node_gc_standby{node="n1"} 1x30`},
			healthy: []string{`nodegc_node_gc_standby{node="n1"} 0x30`,
				// The holder stopped: the one on standby took over.
				`nodegc_node_gc_standby{node="n1"} 1x5 0x25`},
		},
		"NodegcImageFSUnreadable": {
			firing: []string{`nodegc_image_gc_disk_check_errors_total{node="n1"} 0+60x30`},
			healthy: []string{`nodegc_image_gc_disk_check_errors_total{node="n1"} 0x30`,
				// A blip: a few failed readings, then none.
				`nodegc_image_gc_disk_check_errors_total{node="n1"} 0+3x3 9x27`},
		},
		"NodegcImageFSMisread": {
			firing: []string{`nodegc_image_gc_disk_unresponsive{node="n1"} 0x5 1x25`},
			healthy: []string{`nodegc_image_gc_disk_unresponsive{node="n1"} 0x30`,
				// Held, then a reading moved: removals go on.
				`nodegc_image_gc_disk_unresponsive{node="n1"} 1x3 0x27`},
		},
		"NodegcPodViewNotAuthoritative": {
			firing: []string{`nodegc_container_gc_pod_view_authoritative{node="n1"} 0x30`},
			healthy: []string{`nodegc_container_gc_pod_view_authoritative{node="n1"} 1x30`,
				// A node-only agent (no API access): 0 for good, by design.
				`nodegc_container_gc_pod_view_authoritative{node="n1"} 0x30
				nodegc_container_gc_pod_view_node_only{node="n1"} 1x30`},
		},
		"NodegcPodLogsUnseen": {
			// A disk mounted on /var/log/pods after nodegc's container
			// started: unseen until nodegc's pod restarts, with no dead
			// container a limit would remove (none kept as logs_unseen),
			// links and log directories still held.
			firing: []string{`nodegc_container_gc_pod_logs_unseen{node="n1"} 1x45
				nodegc_container_gc_containers_kept{node="n1",reason="logs_unseen"} 0x45`},
			healthy: []string{`nodegc_container_gc_pod_logs_unseen{node="n1"} 0x30`,
				// nodegc's pod restarted: its new mount sees the logs.
				`nodegc_container_gc_pod_logs_unseen{node="n1"} 1x10 _x2 0x18`},
		},
		"NodegcOwnerGCNoSyncedLeader": {
			firing: []string{
				// Nobody leads.
				`nodegc_owner_gc_leader{pod="a"} 0x30
				nodegc_owner_gc_synced{pod="a"} 0x30
				nodegc_owner_gc_leader{pod="b"} 0x30
				nodegc_owner_gc_synced{pod="b"} 0x30`,
				// The leader never syncs; another instance's synced says nothing.
				`nodegc_owner_gc_leader{pod="a"} 1x30
				nodegc_owner_gc_synced{pod="a"} 0x30
				nodegc_owner_gc_leader{pod="b"} 0x30
				nodegc_owner_gc_synced{pod="b"} 1x30`,
				// ownerGC.mode deployment, every owner collector crashing: only
				// the node agents (--owner-gc=off) export, their leader gauge
				// at 0, and the owner targets are down.
				`nodegc_owner_gc_leader{component="node",pod="n"} 0x30
				up{component="node",pod="n"} 1x30
				up{component="owner",pod="a"} 0x30
				up{component="owner",pod="b"} 0x30`,
				// The owner collectors led and were synced, then went away
				// (evicted, unschedulable, scaled to 0): no owner target
				// left, 3 hours on. In ownerGC.mode deployment the chart's
				// monitors give the node agents' targets owner_gc="deployment".
				`nodegc_owner_gc_leader{component="owner",pod="a"} 1x10
				nodegc_owner_gc_synced{component="owner",pod="a"} 1x10
				up{component="owner",pod="a"} 1x10
				nodegc_owner_gc_leader{component="node",pod="n"} 0x180
				up{component="node",owner_gc="deployment",pod="n"} 1x180`,
				// A fresh install whose owner collectors never get a pod IP
				// (unschedulable, refused by a quota or by admission): never
				// a target.
				`nodegc_owner_gc_leader{component="node",pod="n"} 0x180
				up{component="node",owner_gc="deployment",pod="n"} 1x180`,
			},
			healthy: []string{
				`nodegc_owner_gc_leader{pod="a"} 1x30
				nodegc_owner_gc_synced{pod="a"} 1x30
				nodegc_owner_gc_leader{pod="b"} 0x30
				nodegc_owner_gc_synced{pod="b"} 0x30`,
				// The owner GC runs nowhere (--owner-gc=off, or no API access):
				// only the leader gauge, at 0.
				`nodegc_owner_gc_leader{pod="a"} 0x30`,
				// ownerGC.mode off: node agents only, no owner target.
				`nodegc_owner_gc_leader{component="node",pod="n"} 0x30
				up{component="node",pod="n"} 1x30`,
				// Turned off (ownerGC.mode off) 20 minutes ago: the owner
				// collectors are gone, the node agents' new pods lack the
				// owner_gc label.
				`nodegc_owner_gc_leader{component="owner",pod="a"} 1x10
				nodegc_owner_gc_synced{component="owner",pod="a"} 1x10
				up{component="owner",pod="a"} 1x10
				nodegc_owner_gc_leader{component="node",pod="n"} 0x10
				up{component="node",owner_gc="deployment",pod="n"} 1x10
				nodegc_owner_gc_leader{component="node",pod="n2"} _x10 0x20
				up{component="node",pod="n2"} _x10 1x20`,
			},
		},
		// Prometheus's own up series of each scrape target; the chart's
		// PodMonitor and ServiceMonitor add component (node or owner).
		"NodegcNodeAgentDown": {
			firing: []string{`up{component="node",node="n1",pod="nodegc-node-a"} 0x30
				up{component="node",node="n2",pod="nodegc-node-b"} 1x30`,
				// A crash loop at the kubelet's backoff cap (5 minutes),
				// scraped while up: down for less than `for` at a time.
				`up{component="node",node="n1",pod="nodegc-node-a"} 1 0x4 1 0x4 1 0x4 1 0x4 1 0x4 1 0x4 1`},
			healthy: []string{
				`up{component="node",node="n1",pod="nodegc-node-a"} 1x30`,
				// Another component's target is none of this alert's.
				`up{component="owner",node="n1",pod="nodegc-owner-a"} 0x30
				up{component="node",node="n1",pod="nodegc-node-a"} 1x30`,
			},
			resolved: []string{
				// It crash-looped, and a rollout replaced the pod since.
				`up{component="node",node="n1",pod="nodegc-node-a"} 1 0x4 1 0x4 1 0x4 stale
				up{component="node",node="n1",pod="nodegc-node-b"} _x16 1x14`,
			},
		},
		"NodegcNodeAgentsAbsent": {
			firing: []string{
				// No node agent is a target at all.
				`up{component="owner",pod="nodegc-owner-a"} 1x30`,
				// They were, and are gone.
				`up{component="node",node="n1",pod="nodegc-node-a"} 1x10
				up{job="other"} 1x30`,
			},
			healthy: []string{
				`up{component="node",node="n1",pod="nodegc-node-a"} 1x30`,
				// Down, but a target: NodegcNodeAgentDown's case.
				`up{component="node",node="n1",pod="nodegc-node-a"} 0x30`,
			},
		},
		"NodegcOwnerCollectorDown": {
			firing: []string{`up{component="owner",node="n1",pod="nodegc-owner-a"} 0x30
				up{component="owner",node="n2",pod="nodegc-owner-b"} 1x30`,
				// Restarted by its liveness probe (the owner GC stalls) again and again.
				`up{component="owner",node="n1",pod="nodegc-owner-a"} 1x4 0x5 1x4 0x5 1x4 0x5 1x4 0x5 1x3`},
			healthy: []string{
				`up{component="owner",node="n1",pod="nodegc-owner-a"} 1x30
				up{component="node",node="n1",pod="nodegc-node-a"} 0x30`,
				// ownerGC.mode auto or off: no owner target.
				`up{component="node",node="n1",pod="nodegc-node-a"} 1x30`,
			},
			resolved: []string{
				// It crash-looped, and a rollout replaced the pod since.
				`up{component="owner",node="n1",pod="nodegc-owner-a"} 1 0x4 1 0x4 1 0x4 stale
				up{component="owner",node="n1",pod="nodegc-owner-b"} _x16 1x14`,
			},
		},
		// Every agent, one series at 1; only the node agents' count.
		"NodegcConfigMixed": {
			firing: []string{
				// A ConfigMap edited by hand: n2 restarted since, n1 not.
				`nodegc_config_info{component="node",node="n1",sha256="1111111111111111"} 1x45
				nodegc_config_info{component="node",node="n2",sha256="1111111111111111"} 1x5
				nodegc_config_info{component="node",node="n2",sha256="2222222222222222"} _x5 1x40
				nodegc_config_info{component="node",node="n3",sha256="2222222222222222"} 1x45`,
			},
			healthy: []string{
				`nodegc_config_info{component="node",node="n1",sha256="1111111111111111"} 1x30
				nodegc_config_info{component="node",node="n2",sha256="1111111111111111"} 1x30`,
				// The owner collector runs with flags of its own.
				`nodegc_config_info{component="node",node="n1",sha256="1111111111111111"} 1x30
				nodegc_config_info{component="owner",node="n2",sha256="2222222222222222"} 1x30`,
				// A rollout that ended: n1's old pod is gone (its series
				// stale after 5 minutes), its new one runs the new digest.
				`nodegc_config_info{component="node",node="n1",sha256="1111111111111111"} 1x10
				nodegc_config_info{component="node",node="n1",sha256="2222222222222222"} _x10 1x20
				nodegc_config_info{component="node",node="n2",sha256="2222222222222222"} 1x30`,
			},
		},
		// Exported by the leader only, one series per state.
		"NodegcOwnerGCMonitorsFailing": {
			firing: []string{
				// RBAC forbids one resource: its monitor failed, and the
				// owner GC collects without it, synced.
				`nodegc_owner_gc_monitors{pod="a",state="synced"} 40x45
				nodegc_owner_gc_monitors{pod="a",state="failed"} 1x45
				nodegc_owner_gc_monitors{pod="a",state="failing"} 0x45
				nodegc_owner_gc_monitors{pod="a",state="syncing"} 0x45
				nodegc_owner_gc_synced{pod="a"} 1x45
				nodegc_owner_gc_leader{pod="a"} 1x45`,
				// An aggregated API went down after the monitor synced.
				`nodegc_owner_gc_monitors{pod="a",state="synced"} 40x45
				nodegc_owner_gc_monitors{pod="a",state="failing"} 0x10 1x35
				nodegc_owner_gc_monitors{pod="a",state="failed"} 0x45`,
				// An aggregated API down since before the leader
				// started: never discovered, it has no monitor.
				`nodegc_owner_gc_monitors{pod="a",state="synced"} 40x45
				nodegc_owner_gc_monitors{pod="a",state="failed"} 0x45
				nodegc_owner_gc_monitors{pod="a",state="failing"} 0x45
				nodegc_owner_gc_unread_group_versions{pod="a"} 1x45`,
				// Its server answers discovery for a while, and then
				// fails the list: the failure moves to the monitor.
				`nodegc_owner_gc_monitors{pod="a",state="synced"} 40x45
				nodegc_owner_gc_monitors{pod="a",state="failed"} 0x45
				nodegc_owner_gc_monitors{pod="a",state="failing"} 0x15 1x30
				nodegc_owner_gc_unread_group_versions{pod="a"} 1x15 0x30`,
			},
			healthy: []string{
				`nodegc_owner_gc_monitors{pod="a",state="synced"} 41x30
				nodegc_owner_gc_monitors{pod="a",state="failed"} 0x30
				nodegc_owner_gc_monitors{pod="a",state="failing"} 0x30
				nodegc_owner_gc_monitors{pod="a",state="syncing"} 0x30
				nodegc_owner_gc_unread_group_versions{pod="a"} 0x30`,
				// An aggregated API down for a few minutes at the
				// leader's start.
				`nodegc_owner_gc_monitors{pod="a",state="synced"} 41x30
				nodegc_owner_gc_unread_group_versions{pod="a"} 1x5 0x25`,
				// Start-up: syncing for a while, then synced.
				`nodegc_owner_gc_monitors{pod="a",state="syncing"} 41x2 0x28
				nodegc_owner_gc_monitors{pod="a",state="synced"} 0x2 41x28
				nodegc_owner_gc_monitors{pod="a",state="failed"} 0x30`,
				// A standby exports no monitors.
				`nodegc_owner_gc_leader{pod="b"} 0x30
				nodegc_owner_gc_running{pod="b"} 0x30`,
			},
		},
		"NodegcOwnerGCActionErrors": {
			firing: []string{`nodegc_owner_gc_action_errors_total{pod="a",action="delete"} 0+1x30`},
			healthy: []string{`nodegc_owner_gc_action_errors_total{pod="a",action="delete"} 2x30
				nodegc_owner_gc_actions_total{pod="a",action="delete",rule="owner-gone"} 0+5x30`},
		},
		"NodegcOwnerGCStuckDeletions": {
			firing: []string{`nodegc_owner_gc_stuck_deletions{pod="a",reason="blocking-dependent"} 2x30
				nodegc_owner_gc_stuck_deletions{pod="a",reason="orphan"} 0x30`},
			healthy: []string{`nodegc_owner_gc_stuck_deletions{pod="a",reason="blocking-dependent"} 0x30`},
		},
		"NodegcOwnerGCUndecidedItems": {
			firing: []string{`nodegc_owner_gc_undecided_items{pod="a",reason="unknown-kind"} 3x75
				nodegc_owner_gc_undecided_items{pod="a",reason="lookup-error"} 0x75`},
			healthy: []string{`nodegc_owner_gc_undecided_items{pod="a",reason="unknown-kind"} 0x30
				nodegc_owner_gc_undecided_items{pod="a",reason="lookup-error"} 0x30`},
		},
	}
	queries, err := RuleQueries()
	if err != nil {
		t.Fatal(err)
	}
	groups, err := ParseRules(RulesFile())
	if err != nil {
		t.Fatal(err)
	}
	fors := map[string]time.Duration{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			fors[r.Alert] = time.Duration(r.For)
		}
	}
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	for _, q := range queries {
		name := q.Where[len("rule "):]
		tc, ok := cases[name]
		if !ok {
			t.Errorf("alert %s has no case here", name)
			continue
		}
		delete(cases, name)
		hold := fors[name]
		t.Run(name, func(t *testing.T) {
			for i, series := range tc.firing {
				if got := evalAtEnd(t, engine, series, q.Expr); len(got) == 0 {
					t.Errorf("firing case %d: nothing selected", i)
				}
				if got := heldLoaded(t, engine, "1m", series, q.Expr, alertKey); got < hold {
					t.Errorf("firing case %d: held at most %v, under its for: %v", i, got, hold)
				}
			}
			for i, series := range tc.healthy {
				if got := evalAtEnd(t, engine, series, q.Expr); len(got) != 0 {
					t.Errorf("healthy case %d: selected %v", i, got)
				}
				if got := heldLoaded(t, engine, "1m", series, q.Expr, alertKey); got >= hold {
					t.Errorf("healthy case %d: held %v, its for: %v (it would fire before the end)", i, got, hold)
				}
			}
			for i, series := range tc.resolved {
				if got := evalAtEnd(t, engine, series, q.Expr); len(got) != 0 {
					t.Errorf("resolved case %d: selected %v", i, got)
				}
			}
		})
	}
	for name := range cases {
		t.Errorf("case %s: no such alert", name)
	}
}

// evalAtEnd loads series (promqltest's load syntax, one sample a minute)
// and evaluates expr at the time of the last sample loaded.
func evalAtEnd(t *testing.T, engine *promql.Engine, series, expr string) promql.Vector {
	t.Helper()
	storage := promqltest.LoadedStorage(t, "load 1m\n  "+series+"\n")
	t.Cleanup(func() { storage.Close() })
	at := time.UnixMilli(storage.Head().MaxTime())
	q, err := engine.NewInstantQuery(t.Context(), storage, nil, expr, at)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	res := q.Exec(t.Context())
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	v, err := res.Vector()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestRunFailureAlertsWhateverThePeriod: NodegcContainerGCFailing,
// NodegcContainerGCOperationsFailing (an operation that fails in
// runs that succeed), NodegcImageGCFailing and NodegcImageGCCannotFreeEnough hold for their
// whole for duration once a collector's runs keep failing, however far apart
// its runs are (containerGC.period, imageGC.period, which also caps the
// image GC's backoff); a single failed run among successes holds for less,
// at any period. Evaluated as Prometheus does, every 30s over series scraped
// every 30s, the runs at the end of each period.
func TestRunFailureAlertsWhateverThePeriod(t *testing.T) {
	groups, err := ParseRules(RulesFile())
	if err != nil {
		t.Fatal(err)
	}
	alerts := map[string]struct {
		prefix, failed string
		// other series of the node, to load beside the runs
		extra string
		// the series of the runs, runSeries when nil
		series func(prefix, failed string, period, span time.Duration, fails func(run int) bool) string
	}{
		"NodegcContainerGCFailing": {prefix: "nodegc_container_gc", failed: "error"},
		// Runs that succeed, in which reading the runtime's version fails.
		"NodegcContainerGCOperationsFailing": {prefix: "nodegc_container_gc", failed: "read_version", series: operationSeries},
		"NodegcImageGCFailing":               {prefix: "nodegc_image_gc", failed: "error"},
		// The image filesystem stays over the low threshold.
		"NodegcImageGCCannotFreeEnough": {prefix: "nodegc_image_gc", failed: "not_enough",
			extra: `nodegc_image_fs_usage_percent{node="n1"} 90x1000
				nodegc_image_gc_threshold_percent{node="n1",threshold="low"} 80x1000`},
	}
	patterns := map[string]struct {
		fails    func(run int) bool
		wantFire bool
	}{
		"every run fails":                     {fails: func(int) bool { return true }, wantFire: true},
		"the third run fails, the others not": {fails: func(run int) bool { return run == 3 }},
	}
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			a, ok := alerts[r.Alert]
			if !ok {
				continue
			}
			delete(alerts, r.Alert)
			hold := time.Duration(r.For)
			for _, period := range []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute, 20 * time.Minute, time.Hour, 2 * time.Hour} {
				for name, p := range patterns {
					gen := runSeries
					if a.series != nil {
						gen = a.series
					}
					series := gen(a.prefix, a.failed, period, 8*time.Hour, p.fails) + "\n" + a.extra
					got := longestHeld(t, engine, series, r.Expr)
					if fired := got >= hold; fired != p.wantFire {
						t.Errorf("%s, period %v, %s: the expression held at most %v (for: %v), want firing %v",
							r.Alert, period, name, got, hold, p.wantFire)
					}
				}
			}
		}
	}
	for name := range alerts {
		t.Errorf("no alert %s", name)
	}
}

// TestOwnerGCMonitorsAlertHolds: NodegcOwnerGCMonitorsFailing holds for
// its whole for duration while one monitor stays unsynced, also when it
// goes from failed (never synced) to failing (its API came back for a
// moment between two scrapes, and went again): the alert sums the states. Watches that
// fail for a minute at a time (API server restarts) never hold it that
// long. Evaluated as Prometheus does, every 30s over series scraped every
// 30s, each series selected waiting for itself.
func TestOwnerGCMonitorsAlertHolds(t *testing.T) {
	groups, err := ParseRules(RulesFile())
	if err != nil {
		t.Fatal(err)
	}
	var expr string
	var hold time.Duration
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "NodegcOwnerGCMonitorsFailing" {
				expr, hold = r.Expr, time.Duration(r.For)
			}
		}
	}
	if expr == "" {
		t.Fatal("no alert NodegcOwnerGCMonitorsFailing")
	}
	// Samples every 30s for 2h; state(i) is the one monitor's state at
	// sample i, the other 40 are synced.
	series := func(state func(i int) string) string {
		const n = 240
		values := map[string]*strings.Builder{}
		for _, st := range []string{"syncing", "synced", "failed", "failing"} {
			values[st] = &strings.Builder{}
		}
		for i := range n {
			for st, b := range values {
				v := 0
				if st == "synced" {
					v = 40
				}
				if st == state(i) {
					v++
				}
				b.WriteString(" " + strconv.Itoa(v))
			}
		}
		var b, unread strings.Builder
		for st, vs := range values {
			b.WriteString(`nodegc_owner_gc_monitors{pod="a",state="` + st + `"}` + vs.String() + "\n")
		}
		for i := range n {
			if state(i) == "unread" {
				unread.WriteString(" 1")
			} else {
				unread.WriteString(" 0")
			}
		}
		b.WriteString(`nodegc_owner_gc_unread_group_versions{pod="a"}` + unread.String() + "\n")
		return b.String()
	}
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	for name, tc := range map[string]struct {
		state    func(i int) string
		wantFire bool
	}{
		// Failed 20 minutes, then failing 20 minutes (it synced, and
		// failed again, between two scrapes), then synced: neither state
		// lasts the for duration, the two together do.
		"failed, then failing": {state: func(i int) string {
			switch {
			case i < 40:
				return "failed"
			case i < 80:
				return "failing"
			}
			return "synced"
		}, wantFire: true},
		"failed for good": {state: func(int) string { return "failed" }, wantFire: true},
		// Discovery of its group version failed 20 minutes (no monitor,
		// the unread gauge), then it answered and the list fails: the
		// failure moved from one side of the "or" to the other; 20
		// minutes later it synced.
		"unread, then failing": {state: func(i int) string {
			switch {
			case i < 40:
				return "unread"
			case i < 80:
				return "failing"
			}
			return "synced"
		}, wantFire: true},
		"failing a minute in every ten": {state: func(i int) string {
			if i%20 < 2 {
				return "failing"
			}
			return "synced"
		}},
		"failed at start, synced after 20 minutes": {state: func(i int) string {
			if i < 40 {
				return "failed"
			}
			return "synced"
		}},
	} {
		got := longestHeldBySeries(t, engine, series(tc.state), expr)
		if fired := got >= hold; fired != tc.wantFire {
			t.Errorf("%s: the expression held at most %v (for: %v), want firing %v", name, got, hold, tc.wantFire)
		}
	}
}

// runSeries writes, in promqltest's load syntax with a sample every 30s for
// span, the run series of a collector (prefix) on node n1 that runs at the
// end of every period, run 1 first, each ending in failed when fails says
// so and in success otherwise: <prefix>_runs_total{trigger,result} and
// <prefix>_consecutive_runs{result}.
func runSeries(prefix, failed string, period, span time.Duration, fails func(run int) bool) string {
	const scrape = 30 * time.Second
	results := []string{"success", failed}
	total := map[string]int{}
	var last string
	streak := 0
	values := map[string]*strings.Builder{}
	for _, k := range []string{"total", "consecutive"} {
		for _, r := range results {
			values[k+r] = &strings.Builder{}
		}
	}
	for at := time.Duration(0); at <= span; at += scrape {
		if at > 0 && at%period == 0 {
			run := int(at / period)
			result := "success"
			if fails(run) {
				result = failed
			}
			total[result]++
			if result != last {
				last, streak = result, 0
			}
			streak++
		}
		for _, r := range results {
			consecutive := 0
			if r == last {
				consecutive = streak
			}
			values["total"+r].WriteString(" " + strconv.Itoa(total[r]))
			values["consecutive"+r].WriteString(" " + strconv.Itoa(consecutive))
		}
	}
	var b strings.Builder
	for _, r := range results {
		b.WriteString(prefix + `_runs_total{node="n1",trigger="periodic",result="` + r + `"}` + values["total"+r].String() + "\n")
		b.WriteString(prefix + `_consecutive_runs{node="n1",result="` + r + `"}` + values["consecutive"+r].String() + "\n")
	}
	return b.String()
}

// operationSeries writes, as runSeries, the series of a collector (prefix)
// on node n1 whose runs at the end of every period fail operation op when
// fails says so: <prefix>_errors_total{operation} and
// <prefix>_operation_failing_runs{operation}.
func operationSeries(prefix, op string, period, span time.Duration, fails func(run int) bool) string {
	var errs, streaks strings.Builder
	total, streak := 0, 0
	for at := time.Duration(0); at <= span; at += 30 * time.Second {
		if at > 0 && at%period == 0 {
			if fails(int(at / period)) {
				total++
				streak++
			} else {
				streak = 0
			}
		}
		errs.WriteString(" " + strconv.Itoa(total))
		streaks.WriteString(" " + strconv.Itoa(streak))
	}
	labels := `{node="n1",operation="` + op + `"}`
	return prefix + "_errors_total" + labels + errs.String() + "\n" +
		prefix + "_operation_failing_runs" + labels + streaks.String() + "\n"
}

// longestHeld loads series (promqltest's load syntax, one sample every
// 30s), evaluates expr every 30s from the first sample to the last, and
// returns the longest stretch during which it selected something: an alert
// with for: F fires only when that reaches F.
func longestHeld(t *testing.T, engine *promql.Engine, series, expr string) time.Duration {
	t.Helper()
	return held(t, engine, series, expr, func(promql.Sample) string { return "" })
}

// longestHeldBySeries is longestHeld by the label set of what expr
// selects, as Prometheus times an alert's for: a series that replaces
// another with other labels starts its own wait. The metric name is no
// part of it: Prometheus drops it from an alert's labels, so "x > 0"
// (which keeps it) and "sum(x) > 0" (which does not) on either side of an
// "or" are one alert.
func longestHeldBySeries(t *testing.T, engine *promql.Engine, series, expr string) time.Duration {
	t.Helper()
	return held(t, engine, series, expr, alertKey)
}

// alertKey is what Prometheus tells an alert's instances apart by.
func alertKey(s promql.Sample) string {
	return s.Metric.DropReserved(func(n string) bool { return n == model.MetricNameLabel }).String()
}

// held is longestHeld, the stretches counted for each key of what expr
// selects.
func held(t *testing.T, engine *promql.Engine, series, expr string, key func(promql.Sample) string) time.Duration {
	t.Helper()
	return heldLoaded(t, engine, "30s", series, expr, key)
}

// heldLoaded is held for series loaded one sample every step (promqltest's
// duration syntax), still evaluated every 30s.
func heldLoaded(t *testing.T, engine *promql.Engine, step, series, expr string, key func(promql.Sample) string) time.Duration {
	t.Helper()
	var load strings.Builder
	load.WriteString("load " + step + "\n")
	for line := range strings.Lines(series) {
		if line = strings.TrimSpace(line); line != "" {
			load.WriteString("  " + line + "\n")
		}
	}
	storage := promqltest.LoadedStorage(t, load.String())
	defer storage.Close()
	end := time.UnixMilli(storage.Head().MaxTime())
	var longest time.Duration
	current := map[string]time.Duration{}
	for at := time.UnixMilli(0); !at.After(end); at = at.Add(30 * time.Second) {
		q, err := engine.NewInstantQuery(t.Context(), storage, nil, expr, at)
		if err != nil {
			t.Fatal(err)
		}
		res := q.Exec(t.Context())
		v, err := res.Vector()
		q.Close()
		if err != nil {
			t.Fatal(err)
		}
		next := map[string]time.Duration{}
		for _, s := range v {
			k := key(s)
			next[k] = current[k] + 30*time.Second
			longest = max(longest, next[k])
		}
		current = next
	}
	return longest
}

// crashLoop writes, in promqltest's load syntax with a sample every 30s for
// span, Prometheus's up series of one target (labels) whose container lives
// for alive and is then down for down, again and again: a crash loop at the
// kubelet's backoff cap (5m), or a wedge the liveness probe restarts. alive
// 0 is a pod that never starts.
func crashLoop(labels string, alive, down, span time.Duration) string {
	var up strings.Builder
	for at := time.Duration(0); at <= span; at += 30 * time.Second {
		if at%(alive+down) < alive {
			up.WriteString(" 1")
		} else {
			up.WriteString(" 0")
		}
	}
	return "up" + labels + up.String() + "\n"
}

// TestUpAlertsHoldForCrashLoops: NodegcNodeAgentDown and
// NodegcOwnerCollectorDown hold for their whole for duration for a target
// that never starts, and for one in a crash loop or restarted by its
// liveness probe, though CrashLoopBackOff (capped at 5 minutes) keeps it
// down for less than `for` at a time; they do not for a single restart, a
// single outage shorter than `for`, or a rolling update (the new pod is a
// new series). Evaluated as Prometheus does, every 30s over series scraped
// every 30s, for 3 hours.
func TestUpAlertsHoldForCrashLoops(t *testing.T) {
	groups, err := ParseRules(RulesFile())
	if err != nil {
		t.Fatal(err)
	}
	const span = 3 * time.Hour
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	for alert, component := range map[string]string{"NodegcNodeAgentDown": "node", "NodegcOwnerCollectorDown": "owner"} {
		var expr string
		var hold time.Duration
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				if r.Alert == alert {
					expr, hold = r.Expr, time.Duration(r.For)
				}
			}
		}
		if expr == "" {
			t.Fatalf("no alert %s", alert)
		}
		target := `{component="` + component + `",node="n1",pod="nodegc-` + component + `-a"}`
		newPod := `{component="` + component + `",node="n1",pod="nodegc-` + component + `-b"}`
		for name, tc := range map[string]struct {
			series   string
			wantFire bool
		}{
			"never starts":                                     {crashLoop(target, 0, time.Hour, span), true},
			"dies at start, backoff at its cap":                {crashLoop(target, 30*time.Second, 5*time.Minute, span), true},
			"dies a minute in":                                 {crashLoop(target, time.Minute, 5*time.Minute, span), true},
			"wedged, restarted by the liveness probe":          {crashLoop(target, 4*time.Minute, 5*time.Minute, span), true},
			"dies 14 minutes in":                               {crashLoop(target, 14*time.Minute, 5*time.Minute, span), true},
			"down for good after an hour":                      {"up" + target + " 1x120 0x240", true},
			"healthy":                                          {"up" + target + " 1x360", false},
			"one restart (OOM killed once)":                    {"up" + target + " 1x120 0 1x239", false},
			"a reboot of the node, down 9 minutes":             {"up" + target + " 1x120 0x17 1x223", false},
			"down 5 minutes twice, an hour apart":              {"up" + target + " 1x120 0x10 1x110 0x10 1x110", false},
			"down 9 minutes, and 2 minutes half an hour later": {"up" + target + " 1x120 0x17 1x60 0x4 1x158", false},
			"restarted every 30 minutes, down a minute":        {crashLoop(target, 29*time.Minute, time.Minute, span), false},
			"rolling update":                                   {"up" + target + " 1x120 0 stale\nup" + newPod + " _x122 0 1x237", false},
			"a new pod pulling its image for 3 minutes":        {"up" + newPod + " 0x6 1x354", false},
			"down 15 minutes, then healthy for good":           {"up" + target + " 1x120 0x30 1x210", true}, // during the outage
		} {
			got := longestHeld(t, engine, tc.series, expr)
			if fired := got >= hold; fired != tc.wantFire {
				t.Errorf("%s, %s: the expression held at most %v (for: %v), want firing %v", alert, name, got, hold, tc.wantFire)
			}
		}
	}
}
