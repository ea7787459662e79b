package nodegcproc

import (
	"debug/buildinfo"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAgentMetric: Agent.Metric reads a sample as the exposition states it:
// a filter names a label exactly (not one whose name ends in it), the value
// is not the timestamp, and a stopped /metrics reads -1.
func TestAgentMetric(t *testing.T) {
	const exposition = `# TYPE nodegc_owner_gc_api_requests_total counter
nodegc_owner_gc_api_requests_total{resource="configmaps",verb="DELETE"} 3
nodegc_owner_gc_api_requests_total{resource="pods",verb="DELETE"} 4
nodegc_owner_gc_api_requests_total{resource="pods",verb="GET",xverb="DELETE"} 100
# TYPE nodegc_owner_gc_leader gauge
nodegc_owner_gc_leader 1 1700000000000
# TYPE nodegc_owner_gc_leader_changes_total counter
nodegc_owner_gc_leader_changes_total 9
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, exposition)
	}))
	defer srv.Close()
	stopped := httptest.NewServer(http.NotFoundHandler())
	stopped.Close()
	for name, tc := range map[string]struct {
		url     string
		metric  string
		filters []string
		want    float64
	}{
		"every series":                  {srv.URL, "nodegc_owner_gc_api_requests_total", nil, 107},
		"a label, not one ending in it": {srv.URL, "nodegc_owner_gc_api_requests_total", []string{"verb=DELETE"}, 7},
		"two labels":                    {srv.URL, "nodegc_owner_gc_api_requests_total", []string{"verb=DELETE", "resource=pods"}, 4},
		"value, not timestamp":          {srv.URL, "nodegc_owner_gc_leader", nil, 1},
		"absent":                        {srv.URL, "nodegc_owner_gc_synced", nil, 0},
		"down":                          {stopped.URL, "nodegc_owner_gc_leader", nil, -1},
	} {
		t.Run(name, func(t *testing.T) {
			a := &Agent{Config: &Config{MetricsURL: tc.url}}
			if got := a.Metric(t.Context(), tc.metric, tc.filters...); got != tc.want {
				t.Errorf("metric(%s, %q) = %v, want %v", tc.metric, tc.filters, got, tc.want)
			}
		})
	}
}

// TestStopReportsDataRace: Agent.Stop fails when the agent's log holds a
// race detector report, also once the agent has exited by itself (as
// halt_on_error makes it), and the agent runs with raceOptions in GORACE.
// The agent is a script that writes what a race-enabled nodegc would.
func TestStopReportsDataRace(t *testing.T) {
	const report = "==================\nWARNING: DATA RACE\nWrite at 0x00c000012345 by goroutine 7:\n  main.main()\n==================\n"
	for name, tc := range map[string]struct {
		script  string
		wantErr bool
	}{
		"no race":               {`echo "GORACE=$GORACE"; echo ready; exec sleep 60`, false},
		"race, still running":   {"printf '" + report + "'; echo ready; exec sleep 60", true},
		"race, exited (halted)": {"printf '" + report + "'; exit 66", true},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "nodegc")
			if err := os.WriteFile(bin, []byte("#!/bin/sh\n"+tc.script+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			a, err := Start(bin, &Config{Path: filepath.Join(dir, "config.yaml")}, filepath.Join(dir, "nodegc.log"), nil)
			if err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(10 * time.Second); !a.Exited() && !strings.Contains(a.Tail(10), "ready"); {
				if time.Now().After(deadline) {
					a.Process.Stop(0)
					t.Fatalf("the script neither exited nor said ready; its output:\n%s", a.Tail(10))
				}
				time.Sleep(10 * time.Millisecond)
			}
			_, err = a.Stop(5 * time.Second)
			if got := err != nil; got != tc.wantErr {
				t.Fatalf("Stop: %v; want an error: %v", err, tc.wantErr)
			}
			if tc.wantErr && !strings.Contains(err.Error(), "WARNING: DATA RACE") {
				t.Errorf("Stop: %v; want the report in it", err)
			}
			if out := a.Tail(10); strings.HasPrefix(tc.script, `echo "GORACE`) && !strings.Contains(out, "GORACE=") || strings.Contains(out, "GORACE=") && !strings.Contains(out, raceOptions) {
				t.Errorf("the agent printed %q; want its GORACE to hold %s", out, raceOptions)
			}
		})
	}
}

// TestBuildFollowsRace: Build's nodegc has the race detector exactly when
// this test binary has it.
func TestBuildFollowsRace(t *testing.T) {
	bin, err := Build()
	if err != nil {
		t.Fatal(err)
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	race := false
	for _, s := range info.Settings {
		if s.Key == "-race" {
			race = s.Value == "true"
		}
	}
	if race != raceEnabled {
		t.Errorf("%s: built with -race=%v; the test binary runs with the race detector: %v", bin, race, raceEnabled)
	}
	if want := filepath.Join(map[bool]string{true: "race", false: "norace"}[raceEnabled], "nodegc"); !strings.HasSuffix(bin, want) {
		t.Errorf("Build() = %s, want a path ending in %s", bin, want)
	}
}
