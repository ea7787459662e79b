package monitoring

import (
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/promqltest"
)

// TestAlertsFire: each alert's expression, evaluated by Prometheus's engine
// after 30 minutes of synthetic series (one sample a minute, promqltest's
// load syntax), selects something when the condition holds and nothing on a
// healthy node or cluster. Its `for` is not evaluated here.
func TestAlertsFire(t *testing.T) {
	cases := map[string]struct {
		firing  []string
		healthy []string
	}{
		"NodegcImageGCCannotFreeEnough": {
			firing: []string{`nodegc_image_gc_runs_total{node="n1",trigger="threshold",result="not_enough"} 0+1x30`},
			healthy: []string{`nodegc_image_gc_runs_total{node="n1",trigger="threshold",result="not_enough"} 3x30
				nodegc_image_gc_runs_total{node="n1",trigger="threshold",result="success"} 0+1x30`},
		},
		"NodegcImageGCFailing": {
			firing: []string{
				`nodegc_image_gc_runs_total{node="n1",trigger="periodic",result="error"} 0+1x30`,
				`nodegc_image_gc_runs_total{node="n1",trigger="threshold",result="invalid_capacity"} 0+1x30`,
			},
			healthy: []string{`nodegc_image_gc_runs_total{node="n1",trigger="periodic",result="error"} 0x30
				nodegc_image_gc_runs_total{node="n1",trigger="periodic",result="not_enough"} 0+1x30`},
		},
		"NodegcImageFSAboveHighThreshold": {
			firing: []string{`nodegc_image_fs_usage_percent{node="n1"} 85x30
				nodegc_image_gc_threshold_percent{node="n1",threshold="high"} 85x30
				nodegc_image_gc_threshold_percent{node="n1",threshold="low"} 80x30`},
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
			firing: []string{`nodegc_image_fs_usage_percent{node="n1"} 86x30
				nodegc_image_gc_threshold_percent{node="n1",threshold="eviction"} 85x30`},
			healthy: []string{
				`nodegc_image_fs_usage_percent{node="n1"} 84x30
				nodegc_image_gc_threshold_percent{node="n1",threshold="eviction"} 85x30`,
				// No evictionHard on the image filesystem: no eviction series.
				`nodegc_image_fs_usage_percent{node="n1"} 99x30
				nodegc_image_gc_threshold_percent{node="n1",threshold="high"} 85x30`,
			},
		},
		"NodegcRuntimeUnreachable": {
			firing:  []string{`nodegc_cri_connected{node="n1"} 0x30`},
			healthy: []string{`nodegc_cri_connected{node="n1"} 1x30`},
		},
		"NodegcPodViewNotAuthoritative": {
			firing:  []string{`nodegc_container_gc_pod_view_authoritative{node="n1"} 0x30`},
			healthy: []string{`nodegc_container_gc_pod_view_authoritative{node="n1"} 1x30`},
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
			},
			healthy: []string{
				`nodegc_owner_gc_leader{pod="a"} 1x30
				nodegc_owner_gc_synced{pod="a"} 1x30
				nodegc_owner_gc_leader{pod="b"} 0x30
				nodegc_owner_gc_synced{pod="b"} 0x30`,
				// The owner GC runs nowhere (--owner-gc=off, or no API access):
				// only the leader gauge, at 0.
				`nodegc_owner_gc_leader{pod="a"} 0x30`,
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
	}
	queries, err := RuleQueries()
	if err != nil {
		t.Fatal(err)
	}
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	at := time.Unix(0, 0).Add(30 * time.Minute)
	for _, q := range queries {
		name := q.Where[len("rule "):]
		tc, ok := cases[name]
		if !ok {
			t.Errorf("alert %s has no case here", name)
			continue
		}
		delete(cases, name)
		t.Run(name, func(t *testing.T) {
			for i, series := range tc.firing {
				if got := evalAt(t, engine, series, q.Expr, at); len(got) == 0 {
					t.Errorf("firing case %d: nothing selected", i)
				}
			}
			for i, series := range tc.healthy {
				if got := evalAt(t, engine, series, q.Expr, at); len(got) != 0 {
					t.Errorf("healthy case %d: selected %v", i, got)
				}
			}
		})
	}
	for name := range cases {
		t.Errorf("case %s: no such alert", name)
	}
}

// evalAt loads series (promqltest's load syntax, one sample a minute) and
// evaluates expr at at.
func evalAt(t *testing.T, engine *promql.Engine, series, expr string, at time.Time) promql.Vector {
	t.Helper()
	storage := promqltest.LoadedStorage(t, "load 1m\n  "+series+"\n")
	t.Cleanup(func() { storage.Close() })
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
