package agent

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/cri"
)

// versionOnly is a CRI runtime that answers Version and nothing else: the
// calls a test loop makes go through a real cri.Client and gRPC, so that
// the watchdog sees them as the agent's loops' calls are seen.
type versionOnly struct {
	runtimeapi.UnimplementedRuntimeServiceServer
}

func (versionOnly) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "test", RuntimeApiVersion: "v1"}, nil
}

func dialVersionOnly(t *testing.T) *cri.Client {
	t.Helper()
	return dialServer(t, versionOnly{})
}

// slowStop is a CRI runtime whose StopContainer says on stopping that it
// began and then lasts until the call's deadline or the end of the test: a
// container that ignores SIGTERM for its pod's whole grace period.
type slowStop struct {
	versionOnly
	stopping chan struct{}
	done     <-chan struct{}
}

func (s slowStop) StopContainer(ctx context.Context, _ *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	s.stopping <- struct{}{}
	select {
	case <-ctx.Done():
	case <-s.done:
	}
	return nil, ctx.Err()
}

func dialServer(t *testing.T, rt runtimeapi.RuntimeServiceServer) *cri.Client {
	t.Helper()
	c, err := cri.Dial(t.Context(), cri.Options{RuntimeEndpoint: testbed.ServeCRI(t, rt), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() }) // before the server stops: cleanups run last first
	return c
}

// The test loops' configuration: the container GC defaults.
const (
	testWait    = time.Minute     // containerGC.period
	testTimeout = 2 * time.Minute // runtimeRequestTimeout
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// TestWatchdog drives one watched loop through iterations on a fake clock.
// A loop blocked on purpose in an iteration (a call without deadline, a
// deadlock) is wedged once it made no runtime call for
// runtimeRequestTimeout + stallMargin; an iteration that keeps making
// runtime calls is never wedged however long it runs; a loop waiting
// between iterations is wedged only when no iteration began for its wait
// plus that bound; a loop whose Run returned while the agent runs is
// wedged at once. /readyz says which loop and since when.
func TestWatchdog(t *testing.T) {
	stall := testTimeout + stallMargin
	cases := map[string]struct {
		// run drives the loop; it returns once the clock is where the
		// verdict is taken, and the loop in the state to judge.
		run         func(t *testing.T, clk *testingclock.FakeClock, lw *loopWatch, c *cri.Client)
		wantWedged  bool
		wantReasons []string // substrings of the verdict
	}{
		"waiting between iterations, within its wait and the bound": {
			run: func(t *testing.T, clk *testingclock.FakeClock, lw *loopWatch, c *cri.Client) {
				lw.iteration(t.Context(), func(ctx context.Context) { runtimeCall(t, ctx, c) })
				clk.Step(testWait + stall)
			},
		},
		"no iteration for its wait plus the bound": {
			run: func(t *testing.T, clk *testingclock.FakeClock, lw *loopWatch, c *cri.Client) {
				lw.iteration(t.Context(), func(ctx context.Context) { runtimeCall(t, ctx, c) })
				clk.Step(testWait + stall + time.Second)
			},
			wantWedged:  true,
			wantReasons: []string{"container GC loop wedged", "no iteration since 2030-01-02T03:04:05Z (4m1s ago", "waits at most 1m0s", "bound 3m0s: runtimeRequestTimeout 2m0s + 1m0s"},
		},
		"blocked in an iteration, just within the bound": {
			run: func(t *testing.T, clk *testingclock.FakeClock, lw *loopWatch, c *cri.Client) {
				blockIteration(t, lw, func(ctx context.Context) { runtimeCall(t, ctx, c) })
				clk.Step(stall)
			},
		},
		"blocked in an iteration beyond the bound": {
			run: func(t *testing.T, clk *testingclock.FakeClock, lw *loopWatch, c *cri.Client) {
				clk.Step(10 * time.Second)
				blockIteration(t, lw, func(ctx context.Context) {
					clk.Step(20 * time.Second)
					runtimeCall(t, ctx, c) // then blocks for good
				})
				clk.Step(stall + time.Second)
			},
			wantWedged: true,
			wantReasons: []string{"container GC loop wedged", "iteration running since 2030-01-02T03:04:15Z (3m21s ago)",
				"no runtime call for 3m1s", "bound 3m0s: runtimeRequestTimeout 2m0s + 1m0s"},
		},
		"slow but working: a runtime call within every bound, for an hour": {
			run: func(t *testing.T, clk *testingclock.FakeClock, lw *loopWatch, c *cri.Client) {
				next := make(chan struct{})
				did := make(chan struct{})
				go lw.iteration(t.Context(), func(ctx context.Context) {
					for range 20 {
						runtimeCall(t, ctx, c)
						did <- struct{}{}
						<-next
					}
					<-t.Context().Done()
				})
				for range 20 {
					<-did
					clk.Step(stall)
					if err := lw.wedged(clk.Now()); err != nil {
						t.Fatalf("a working iteration judged wedged after %v: %v", clk.Since(t0), err)
					}
					next <- struct{}{}
				}
			},
		},
		"Run returned while the agent runs": {
			run: func(t *testing.T, clk *testingclock.FakeClock, lw *loopWatch, c *cri.Client) {
				clk.Step(time.Second)
				lw.stopped(errors.New("boom"))
			},
			wantWedged:  true,
			wantReasons: []string{"container GC loop stopped at 2030-01-02T03:04:06Z", "boom"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(t0)
			reg := prometheus.NewRegistry()
			st := newStatusWithClock(reg, clk)
			lw := st.watchdog.add("container GC", testWait, testTimeout)
			c := dialVersionOnly(t)
			tc.run(t, clk, lw, c)

			err := st.healthy()
			if (err != nil) != tc.wantWedged {
				t.Fatalf("healthy() = %v, want wedged %t", err, tc.wantWedged)
			}
			srv := httptest.NewServer(healthMux(st))
			defer srv.Close()
			wantHealthz, wantReadyz := http.StatusOK, http.StatusOK
			if tc.wantWedged {
				wantHealthz, wantReadyz = http.StatusInternalServerError, http.StatusServiceUnavailable
			}
			for path, want := range map[string]int{"/healthz": wantHealthz, "/readyz": wantReadyz} {
				code, body := get(t, srv.URL+path)
				if code != want {
					t.Errorf("%s = %d %q, want %d", path, code, body, want)
				}
				for _, r := range tc.wantReasons {
					if !strings.Contains(body, r) {
						t.Errorf("%s says %q, want it to say %q", path, body, r)
					}
				}
			}
		})
	}
}

// TestWatchdogLongStop: a runtime call in flight is given its own deadline.
// The container GC stops a container in an unknown state with its pod's
// grace period (terminationGracePeriodSeconds 600), and the call's deadline
// is runtimeRequestTimeout plus that grace; a container that ignores
// SIGTERM makes it last that long. The loop is not wedged while the call
// may still return, however long past the stall bound; once the call's
// deadline plus the margin has passed with the call still in flight, it
// is.
func TestWatchdogLongStop(t *testing.T) {
	const grace = 600 // seconds
	clk := testingclock.NewFakeClock(t0)
	st := newStatusWithClock(prometheus.NewRegistry(), clk)
	lw := st.watchdog.add("container GC", testWait, testTimeout)
	rt := slowStop{stopping: make(chan struct{}, 1), done: t.Context().Done()}
	c := dialServer(t, rt)
	// The client's own deadline is 5s: the call's is 5s + the grace.
	callDeadline := 5*time.Second + grace*time.Second
	go lw.iteration(t.Context(), func(ctx context.Context) {
		if err := c.StopContainer(ctx, "ignores-sigterm", grace); err != nil && t.Context().Err() == nil {
			t.Errorf("StopContainer: %v", err)
		}
		<-t.Context().Done()
	})
	<-rt.stopping
	for _, d := range []time.Duration{testTimeout + stallMargin + time.Second, 5 * time.Minute, callDeadline + stallMargin - time.Second} {
		clk.SetTime(t0.Add(d))
		if err := st.healthy(); err != nil {
			t.Errorf("%v into a StopContainer whose deadline is %v: healthy() = %v, want nil", d, callDeadline, err)
		}
	}
	clk.SetTime(t0.Add(callDeadline + stallMargin + 2*time.Second))
	err := st.healthy()
	if err == nil {
		t.Fatalf("past the StopContainer's deadline and the margin, the call still in flight: healthy() = nil, want wedged")
	}
	for _, want := range []string{"container GC loop wedged", "1 runtime call in flight"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("healthy() = %q, want it to say %q", err, want)
		}
	}
}

// TestWatchdogShutdown: loops that stop because the agent stops are not
// wedged.
func TestWatchdogShutdown(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	st := newStatusWithClock(prometheus.NewRegistry(), clk)
	lw := st.watchdog.add("image GC", 10*time.Second, testTimeout)
	st.watchdog.shutdown()
	lw.stopped(nil)
	clk.Step(time.Hour)
	if err := st.healthy(); err != nil {
		t.Errorf("after shutdown: healthy() = %v, want nil", err)
	}
}

// runtimeCall makes one CRI call through the iteration's context.
func runtimeCall(t *testing.T, ctx context.Context, c *cri.Client) {
	t.Helper()
	if _, err := c.Version(ctx); err != nil {
		t.Errorf("Version: %v", err)
	}
}

// blockIteration starts an iteration that runs before, then blocks until
// the test ends, and returns once before has run.
func blockIteration(t *testing.T, lw *loopWatch, before func(context.Context)) {
	t.Helper()
	started := make(chan struct{})
	go lw.iteration(t.Context(), func(ctx context.Context) {
		before(ctx)
		close(started)
		<-t.Context().Done()
	})
	<-started
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, b.String()
}

// TestWatchdogSetup: the node GC's setup for a runtime (its profile and the
// managers, before either loop's first iteration) waits on runtime calls
// within their deadlines, the sum of which can pass a loop's wait plus the
// stall bound (a runtime that answers Version but is slow on Status and
// ImageFsInfo: 2 x runtimeRequestTimeout). Run as an iteration of both
// loops, with its calls reported to both, it is progress, not a wedge: the
// agent is not restarted into the same slow setup again and again. Past
// the call's deadline and the margin it is wedged, as any iteration.
func TestWatchdogSetup(t *testing.T) {
	const grace = 600 // seconds: a call whose deadline is far ahead
	clk := testingclock.NewFakeClock(t0)
	st := newStatusWithClock(prometheus.NewRegistry(), clk)
	images := st.watchdog.add("image GC", time.Second, testTimeout)
	containers := st.watchdog.add("container GC", testWait, testTimeout)
	rt := slowStop{stopping: make(chan struct{}, 1), done: t.Context().Done()}
	c := dialServer(t, rt)
	callDeadline := 5*time.Second + grace*time.Second
	go setupIteration(t.Context(), []*loopWatch{images, containers}, func(ctx context.Context) {
		if err := c.StopContainer(ctx, "slow-setup", grace); err != nil && t.Context().Err() == nil {
			t.Errorf("StopContainer: %v", err)
		}
		<-t.Context().Done()
	})
	<-rt.stopping
	for _, d := range []time.Duration{testWait + testTimeout + stallMargin + time.Second, callDeadline + stallMargin - time.Second} {
		clk.SetTime(t0.Add(d))
		if err := st.healthy(); err != nil {
			t.Errorf("%v into a setup waiting on a call whose deadline is %v: healthy() = %v, want nil", d, callDeadline, err)
		}
	}
	clk.SetTime(t0.Add(callDeadline + stallMargin + 2*time.Second))
	err := st.healthy()
	if err == nil {
		t.Fatal("past the call's deadline and the margin: healthy() = nil, want both loops wedged")
	}
	for _, want := range []string{"image GC loop wedged", "container GC loop wedged", "1 runtime call in flight"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("healthy() = %q, want it to say %q", err, want)
		}
	}
}
