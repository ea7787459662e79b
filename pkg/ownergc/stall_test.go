package ownergc

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"
)

// stallRun is a run on a fake clock with one worker per queue, whose
// workers have not started.
func stallRun(t *testing.T) (*run, *Collector, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	c := &Collector{clock: clk, workers: 1, requestTimeout: 30 * time.Second, stallAfter: 5 * time.Minute}
	c.metrics = newMetrics(prometheus.NewRegistry(), c)
	r := newRun(klog.NewContext(t.Context(), testLogger(t)), c)
	c.current.Store(r)
	t.Cleanup(func() {
		r.deletes.ShutDown()
		r.orphans.ShutDown()
	})
	return r, c, clk
}

// TestStalledBuilder: events queued that the graph builder does not take
// (it holds the graph's lock for good, say) make the collector stalled once
// they have waited longer than the bound; taking some ends it.
func TestStalledBuilder(t *testing.T) {
	r, c, clk := stallRun(t)
	if err := c.Stalled(); err != nil {
		t.Fatalf("nothing queued: %v", err)
	}
	clk.Step(time.Hour) // idle for an hour: no stall of its own
	r.events.push(event{typ: evRunSynced})
	clk.Step(5 * time.Minute)
	if err := c.Stalled(); err != nil {
		t.Fatalf("queued for the bound: %v", err)
	}
	clk.Step(time.Second)
	if err := c.Stalled(); err == nil || !strings.Contains(err.Error(), "graph builder") {
		t.Fatalf("queued for longer than the bound: %v, want the graph builder stalled", err)
	}
	r.events.push(event{typ: evRunSynced})
	if _, ok := r.events.pop(nil, 1); !ok {
		t.Fatal("queue closed")
	}
	if err := c.Stalled(); err != nil {
		t.Errorf("the builder took an event, one still waits: %v", err)
	}
}

// TestStalledWorkers: a worker that holds its item without ending a
// request (a lock never released) while another item is ready makes the
// collector stalled after the bound. Requests it ends meanwhile are
// progress; a ready item while a worker is free is not a stall, however
// long the workers were idle before.
func TestStalledWorkers(t *testing.T) {
	r, c, clk := stallRun(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	taken, release, request := make(chan struct{}), make(chan struct{}), make(chan struct{})
	hold := func(ctx context.Context, _ types.UID) outcome {
		taken <- struct{}{}
		for {
			select {
			case <-release:
				return done
			case <-request:
				r.madeProgress(ctx) // as a request ending does
				taken <- struct{}{}
			}
		}
	}
	r.deletePool.mark(clk.Now())
	r.orphanPool.mark(clk.Now())
	r.working.Store(true)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		r.work(ctx, &r.deletePool, hold)
	}()

	clk.Step(time.Hour) // idle workers
	r.deletes.Add("a")
	<-taken
	r.deletes.Add("b")
	if err := c.Stalled(); err != nil {
		t.Fatalf("b ready, its worker just took a: %v", err)
	}
	clk.Step(4 * time.Minute)
	request <- struct{}{}
	<-taken
	clk.Step(4 * time.Minute)
	if err := c.Stalled(); err != nil {
		t.Fatalf("a request ended 4 minutes ago: %v", err)
	}
	clk.Step(time.Minute + time.Second)
	err := c.Stalled()
	if err == nil || !strings.Contains(err.Error(), "delete workers") || !strings.Contains(err.Error(), "ready items: 1") {
		t.Fatalf("no progress for longer than the bound: %v, want the delete workers stalled", err)
	}
	release <- struct{}{}
	<-taken // b
	if err := c.Stalled(); err != nil {
		t.Errorf("the worker finished a and took b: %v", err)
	}
	release <- struct{}{}
	r.deletes.ShutDown()
	<-stopped
}

// TestNotStalledByAHangingServer: an API server that answers no request
// does not make the owner GC stalled, for its requests end by their
// timeout, each a progress; a worker that holds its item without a request
// does (the control: the test can fail). Real clock, real client.
func TestNotStalledByAHangingServer(t *testing.T) {
	hang := func(http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			<-req.Context().Done()
			return nil, req.Context().Err()
		})
	}
	for name, requests := range map[string]bool{"requests to a hanging server": true, "a hold without requests": false} {
		t.Run(name, func(t *testing.T) {
			r, _, _, _ := rejectRun(t, newRejectServer(t), hang)
			r.c.requestTimeout, r.c.stallAfter = 50*time.Millisecond, 500*time.Millisecond
			r.c.current.Store(r)
			ctx, cancel := context.WithCancel(t.Context())
			id := objectID{uid: "u", apiVersion: "v1", kind: "ConfigMap", namespace: rejectNamespace, name: "cm"}
			process := func(ctx context.Context, _ types.UID) outcome {
				for ctx.Err() == nil {
					if !requests {
						<-ctx.Done()
						break
					}
					if _, err := r.getObject(ctx, id); err == nil {
						t.Error("a GET of the hanging server succeeded")
					}
				}
				return done
			}
			now := r.c.clock.Now()
			r.deletePool.mark(now)
			r.orphanPool.mark(now)
			r.working.Store(true)
			stopped := make(chan struct{})
			go func() {
				defer close(stopped)
				r.work(ctx, &r.deletePool, process)
			}()
			defer func() {
				cancel()
				r.deletes.ShutDown()
				<-stopped
			}()
			r.deletes.Add("a")
			r.deletes.Add("b")
			var stalled error
			for end := time.Now().Add(2 * time.Second); time.Now().Before(end) && stalled == nil; time.Sleep(20 * time.Millisecond) {
				stalled = r.c.Stalled()
			}
			if requests && stalled != nil {
				t.Errorf("stalled while every request ends by its timeout: %v", stalled)
			}
			if !requests && stalled == nil {
				t.Error("a worker holding its item without a request for 4 bounds: not stalled")
			}
		})
	}
}
