package agent_test

import (
	"context"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
)

// frozenCycles bounds the calibration: with nodegc subscribed to
// containerd 2.x's container event stream and stopped, RemoveContainer (or
// CreateContainer) hung after about 125 create+remove cycles; the
// calibration requires a hang within this many.
const frozenCycles = 250

// Per-call timeouts of the churn. A call of a cycle takes tens of
// milliseconds; hangCallTimeout, the calibration's, is short so that the
// hang it waits for costs little, and still seconds above a slow call of a
// loaded machine (and the hang is confirmed by a second call, see below).
// callTimeout, the default subtest's, is for a call that must succeed.
const (
	hangCallTimeout = 3 * time.Second
	callTimeout     = 15 * time.Second
)

// TestStoppedAgentDoesNotStallContainers: containerd 2.x's CRI hands each
// container event to every subscriber of GetContainerEvents through a
// small queue, and blocks the calls that publish events (CreateContainer,
// StartContainer, StopContainer, RemoveContainer) while a subscriber does
// not read. A `nodegc run` with the default configuration that is stopped
// (SIGSTOP here; a cgroup freeze, a checkpoint or a paused VM likewise)
// must not stall the node's container lifecycle: it subscribes to no
// stream (imageGC.containerEvents is off), and containers are created and
// removed while it is stopped as fast as without it.
//
// The "containerEvents" subtest calibrates that, first: with
// imageGC.containerEvents: true the same churn hangs (with nodegc stopped,
// a call never returned after about 125 create+remove cycles, and every
// later call that publishes an event hung with it) until nodegc is
// continued. It must hang within frozenCycles, and the "default" subtest
// then runs twice the cycles that hung, so that its churn would have hung
// a stopped subscriber. (Without the calibration, as with -run naming only
// "default", it runs frozenCycles.)
func TestStoppedAgentDoesNotStallContainers(t *testing.T) {
	cycles := frozenCycles
	t.Run("containerEvents", func(t *testing.T) {
		p, churn := frozenAgent(t, []string{"containerEvents: true"})
		testbed.WaitFor(t, 30*time.Second, "the event stream to be read", func() bool {
			return p.metric("nodegc_image_usage_source", "source=events") == 1
		})
		if err := p.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		done := 0 // cycles before the one that hung
		for {
			n, err := churn(frozenCycles-done, hangCallTimeout)
			done += n
			if err == nil {
				p.Signal(syscall.SIGCONT)
				t.Fatalf("%d create+remove cycles with nodegc stopped and subscribed: none hung, so the default subtest's churn proves nothing", done)
			}
			// A hang, not one slow call: the next call times out too.
			if _, next := churn(1, hangCallTimeout); next != nil {
				t.Logf("with nodegc stopped and subscribed, cycle %d hung after %v (%v), and the next call too", done+1, time.Since(began).Round(time.Millisecond), err)
				break
			}
			t.Logf("cycle %d timed out after %v (%v), but the next went through: a slow call, not a hang; going on", done+1, hangCallTimeout, err)
			done += 2
		}
		if err := p.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if _, err := churn(10, callTimeout); err != nil {
			t.Errorf("after SIGCONT: %v", err)
		}
		cycles = 2 * (done + 1)
	})
	t.Run("default", func(t *testing.T) {
		p, churn := frozenAgent(t, nil)
		if got := p.metric("nodegc_image_usage_source", "source=events"); got != 0 {
			t.Errorf("nodegc_image_usage_source{source=events} = %v with the default configuration, want 0 (no event stream)", got)
		}
		if err := p.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer p.Signal(syscall.SIGCONT)
		began := time.Now()
		if done, err := churn(cycles, callTimeout); err != nil {
			t.Fatalf("with nodegc stopped, container call of cycle %d failed after %v: %v", done+1, time.Since(began).Round(time.Millisecond), err)
		}
		t.Logf("%d create+remove cycles in %v with nodegc stopped", cycles, time.Since(began).Round(time.Millisecond))
	})
}

// frozenAgent starts a containerd 2.x node with a pod and a `nodegc run`
// (node-only, the image GC's thresholds off, the given imageGC lines), and
// waits until the agent is ready and keeps image usage. churn creates and
// removes n containers of the pod, one after the other, each call within
// timeout; it returns the cycles it completed and the first error.
func frozenAgent(t *testing.T, imageGC []string) (*proc, func(n int, timeout time.Duration) (int, error)) {
	t.Helper()
	ctx := t.Context()
	n, img := nodeWithImage(t, "frozen/app")
	pod, err := n.RunPod(ctx, node.PodSpec{Name: "churn", Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := nodeConfig(t, n.Endpoint, t.TempDir(), nil, append([]string{"highThresholdPercent: 100"}, imageGC...), []string{"period: 1h"})
	p := startNodegc(t, "frozen", cfg, "--owner-gc=off")
	testbed.WaitFor(t, time.Minute, "the agent to be ready and keep image usage", func() bool {
		resp, err := http.Get(p.healthz + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK &&
			p.metric("nodegc_image_usage_source", "source=events")+p.metric("nodegc_image_usage_source", "source=polling") == 1
	})
	i := 0
	churn := func(cycles int, timeout time.Duration) (int, error) {
		for done := range cycles {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			id, err := n.CreateContainer(cctx, pod, node.ContainerSpec{Name: fmt.Sprintf("c%d", i), Image: img.Ref, Args: []string{"exit", "0"}})
			i++
			if err == nil {
				err = n.RemoveContainer(cctx, id)
			}
			cancel()
			if err != nil {
				return done, err
			}
		}
		return cycles, nil
	}
	return p, churn
}
