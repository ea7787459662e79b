package gcrun

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// TestSerialOneRunAtATime: a run asked for while another holds the lock is
// refused at once, makes no report and calls nothing; Exclusive is refused
// the same way; once the first run ends both go through.
func TestSerialOneRunAtATime(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	s := NewSerial(clk)
	inside, release := make(chan struct{}), make(chan struct{})
	type result struct {
		r   *testReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := Collect(s, "periodic", func(*testReport) error {
			close(inside)
			<-release
			clk.Step(3 * time.Second)
			return errors.New("boom")
		})
		done <- result{r, err}
	}()
	<-inside
	called := false
	second, err := Collect(s, "threshold", func(*testReport) error { called = true; return nil }, func(*testReport) { called = true })
	if !errors.Is(err, ErrInProgress) {
		t.Errorf("second Collect = %v, want ErrInProgress", err)
	}
	if err := s.Exclusive(func() { called = true }); !errors.Is(err, ErrInProgress) {
		t.Errorf("Exclusive during a run = %v, want ErrInProgress", err)
	}
	if called || second != nil {
		t.Errorf("a refused run ran (called=%v) or left a trace: %+v", called, second)
	}
	close(release)
	first := <-done
	if first.r == nil {
		t.Fatalf("first Collect = %v, want a report", first.err)
	}
	if r := first.r.Run; r.Trigger != "periodic" || !r.Start.Equal(t0) || r.Duration != 3*time.Second || r.Err == nil || r.Err.Error() != "boom" || first.err != r.Err {
		t.Errorf("first run = %+v (returned %v), want trigger periodic, start t0, 3s, err boom", r, first.err)
	}
	if err := s.Exclusive(func() { called = true }); err != nil || !called {
		t.Errorf("Exclusive after the run = %v (called %v), want it to run", err, called)
	}
}

// TestSerialAfterRunsUnderTheLock: what after does (record, save, report)
// cannot interleave with another run, and it sees the run's end.
func TestSerialAfterRunsUnderTheLock(t *testing.T) {
	s := NewSerial(clocktesting.NewFakeClock(t0))
	var during error
	var seen Run
	if _, err := Collect(s, "manual", func(*testReport) error { return nil }, func(r *testReport) {
		seen = r.Run
		during = s.Exclusive(func() {})
	}); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(during, ErrInProgress) {
		t.Errorf("Exclusive from after = %v, want ErrInProgress (after must hold the lock)", during)
	}
	if seen.Trigger != "manual" || !seen.Start.Equal(t0) {
		t.Errorf("after saw %+v, want the finished run", seen)
	}
}

// TestEveryRunsAtOnceThenPerTick: the first iteration needs no tick, each
// tick next waits for gives one more, and every iteration goes through the
// supervisor.
func TestEveryRunsAtOnceThenPerTick(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	tick := make(chan time.Time)
	calls := make(chan struct{}, 10)
	supervised := 0
	sup := Supervisor(func(ctx context.Context, work func(context.Context)) { supervised++; work(ctx) })
	done := make(chan struct{})
	go func() {
		defer close(done)
		next := func(ctx context.Context) bool {
			select {
			case <-ctx.Done():
				return false
			case <-tick:
				return true
			}
		}
		Every(ctx, sup, next, func(context.Context) { calls <- struct{}{} })
	}()
	<-calls // at once
	tick <- t0
	<-calls
	tick <- t0
	<-calls
	cancel()
	<-done
	if supervised != 3 {
		t.Errorf("%d supervised iterations, want 3", supervised)
	}
	if len(calls) != 0 {
		t.Errorf("%d iterations without a tick", len(calls))
	}
}

// TestSupervisorNilCallsDirectly: a nil Supervisor means no watchdog.
func TestSupervisorNilCallsDirectly(t *testing.T) {
	var s Supervisor
	ran := false
	s.Call(t.Context(), func(context.Context) { ran = true })
	if !ran {
		t.Error("a nil Supervisor did not call work")
	}
}

// TestLogEnd: only runs that did not simply succeed are logged.
func TestLogEnd(t *testing.T) {
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	for name, tc := range map[string]struct {
		ctx  context.Context
		err  error
		want bool
	}{
		"success":     {t.Context(), nil, false},
		"skipped":     {t.Context(), ErrInProgress, true},
		"interrupted": {canceled, context.Canceled, true},
		"failed":      {t.Context(), errors.New("listing failed"), true},
	} {
		t.Run(name, func(t *testing.T) {
			if got := LogEnd(tc.ctx, "Test GC", "periodic", tc.err, "removed", 1); got != tc.want {
				t.Errorf("LogEnd = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRunMetrics: names, Help built from the label values, one observation
// per run.
func TestRunMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewRunMetrics(reg, "nodegc_test_gc", "Test GC", "from listing to the last removal", []string{"threshold", "periodic", "manual"}, []string{"success", "error"})
	m.Init("threshold")
	m.Observe("periodic", "success", time.Second)
	m.Observe("periodic", "error", time.Second)
	m.Observe("manual", "success", 2*time.Second)
	want := `
# HELP nodegc_test_gc_runs_total Test GC runs, by trigger (threshold, periodic, manual) and result (success, error).
# TYPE nodegc_test_gc_runs_total counter
nodegc_test_gc_runs_total{result="error",trigger="periodic"} 1
nodegc_test_gc_runs_total{result="success",trigger="manual"} 1
nodegc_test_gc_runs_total{result="success",trigger="periodic"} 1
nodegc_test_gc_runs_total{result="error",trigger="threshold"} 0
nodegc_test_gc_runs_total{result="success",trigger="threshold"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "nodegc_test_gc_runs_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m.duration); n != 3 {
		t.Errorf("%d duration series, want 3 (one per trigger observed or initialised)", n)
	}
}

// TestRunMetricsConsecutive: <prefix>_consecutive_runs counts the runs in a
// row that ended with the last run's result, whatever their trigger, and
// every other result is 0: a failure among successes is 1, a collector
// whose runs keep failing counts up however far apart they are.
func TestRunMetricsConsecutive(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewRunMetrics(reg, "nodegc_test_gc", "Test GC", "from listing to the last removal", []string{"threshold", "periodic"}, []string{"success", "error"})
	streak := func() map[string]float64 {
		return map[string]float64{
			"success": testutil.ToFloat64(m.consecutive.WithLabelValues("success")),
			"error":   testutil.ToFloat64(m.consecutive.WithLabelValues("error")),
		}
	}
	for i, step := range []struct {
		trigger, result string
		want            map[string]float64
	}{
		{"", "", map[string]float64{"success": 0, "error": 0}},
		{"periodic", "success", map[string]float64{"success": 1, "error": 0}},
		{"threshold", "success", map[string]float64{"success": 2, "error": 0}},
		{"periodic", "error", map[string]float64{"success": 0, "error": 1}},
		{"periodic", "success", map[string]float64{"success": 1, "error": 0}},
		{"periodic", "error", map[string]float64{"success": 0, "error": 1}},
		{"threshold", "error", map[string]float64{"success": 0, "error": 2}},
		{"periodic", "error", map[string]float64{"success": 0, "error": 3}},
	} {
		if step.result != "" {
			m.Observe(step.trigger, step.result, time.Second)
		}
		if got := streak(); !maps.Equal(got, step.want) {
			t.Errorf("after step %d (%s %s): %v, want %v", i, step.trigger, step.result, got, step.want)
		}
	}
	want := `
# HELP nodegc_test_gc_consecutive_runs Test GC runs in a row, the last one included, that ended with this result, whatever their trigger: the last run's result has the length of its streak, every other result 0 (success, error).
# TYPE nodegc_test_gc_consecutive_runs gauge
nodegc_test_gc_consecutive_runs{result="error"} 3
nodegc_test_gc_consecutive_runs{result="success"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "nodegc_test_gc_consecutive_runs"); err != nil {
		t.Error(err)
	}
}

// testReport is a collector's report, as the node collectors embed Run.
type testReport struct {
	Run
	removed int
}

// TestCollect: the report's Run is filled in, the afters see the finished
// report in order (nil ones skipped), and a refused run returns no report.
func TestCollect(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	s := NewSerial(clk)
	var order []string
	r, err := Collect(s, "threshold", func(r *testReport) error {
		r.removed = 2
		clk.Step(time.Second)
		return errors.New("one removal failed")
	}, func(r *testReport) { order = append(order, fmt.Sprintf("record %d", r.removed)) }, nil,
		func(r *testReport) { order = append(order, "report "+r.Trigger) })
	if err == nil || err.Error() != "one removal failed" || r == nil || r.Err != err {
		t.Fatalf("Collect = %+v, %v; want the report and its error", r, err)
	}
	if r.Trigger != "threshold" || r.Duration != time.Second || r.removed != 2 {
		t.Errorf("report %+v, want trigger threshold, 1s, 2 removed", r)
	}
	if want := []string{"record 2", "report threshold"}; !slices.Equal(order, want) {
		t.Errorf("afters ran %q, want %q", order, want)
	}

	inside, release := make(chan struct{}), make(chan struct{})
	go func() {
		_ = s.Exclusive(func() { close(inside); <-release })
	}()
	<-inside
	defer close(release)
	r, err = Collect(s, "periodic", func(*testReport) error { t.Error("body ran during another run"); return nil })
	if !errors.Is(err, ErrInProgress) || r != nil {
		t.Errorf("Collect during a run = %+v, %v; want nil, ErrInProgress", r, err)
	}
}
