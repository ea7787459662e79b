package agent_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	procfs "github.com/nodegc/nodegc/internal/testbed/proc"
	"github.com/nodegc/nodegc/internal/testbed/registry"
)

// probeSamples is what /healthz and /readyz answered over a stretch of
// time.
type probeSamples struct {
	mu       sync.Mutex
	healthz  []string // answers other than 200
	readyz   []string // every 503 answer
	polls    int
	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

// sampleProbes polls the agent's /healthz and /readyz every 100ms until
// stopped.
func sampleProbes(p *proc) *probeSamples {
	s := &probeSamples{stop: make(chan struct{}), done: make(chan struct{})}
	get := func(path string) (int, string) {
		resp, err := http.Get(p.healthz + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	go func() {
		defer close(s.done)
		for {
			hc, hb := get("/healthz")
			rc, rb := get("/readyz")
			s.mu.Lock()
			s.polls++
			if hc != http.StatusOK {
				s.healthz = append(s.healthz, fmt.Sprintf("%d %s", hc, hb))
			}
			if rc == http.StatusServiceUnavailable {
				s.readyz = append(s.readyz, rb)
			}
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return s
}

func (s *probeSamples) finish() {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.done
}

// deadContainers makes n dead containers named c in pod, with increasing
// attempts from first, and waits for them to have exited.
func deadContainers(t *testing.T, n *node.Node, pod, image string, first, count uint32) []string {
	t.Helper()
	ctx := t.Context()
	var ids []string
	for a := first; a < first+count; a++ {
		id, err := n.RunContainer(ctx, pod, node.ContainerSpec{Name: "c", Image: image, Args: []string{"exit", "1"}, Attempt: a})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.WaitContainerState(ctx, id, runtimeapi.ContainerState_CONTAINER_EXITED, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// containersLeft returns which of ids the runtime still has.
func containersLeft(ctx context.Context, n *node.Node, ids []string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := n.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, c := range resp.GetContainers() {
		have[c.GetId()] = true
	}
	var left []string
	for _, id := range ids {
		if have[id] {
			left = append(left, id)
		}
	}
	return left, nil
}

// TestRuntimeRestartUnderAgent, for each real containerd: a running
// `nodegc run` (node-only, container GC every second, one dead container
// kept per pod and container name) collects dead containers; containerd is
// killed (SIGKILL) and started again with a new socket file. While it is
// down, /readyz says the runtime does not answer and since when, and
// /healthz stays ok (a runtime that is down is no reason to restart the
// agent). Once it is back, the same agent process redials within its
// backoff's cap and collects again: of three new dead containers, the two
// oldest are gone soon after both the return and their making (about two
// container GC periods; logged, and bounded only where a broken agent would
// be); the agent logs the loss and the return, and counts one
// reconnect. Its containerd client keeps working: no writable layer's
// bytes go unread, and no removal's reclaim fails but one the kill cut
// short, which leaves at most an expiring lease.
func TestRuntimeRestartUnderAgent(t *testing.T) {
	// The times below are logged; their bounds are so generous that only
	// a broken agent reaches them, not a loaded CI machine (2 cores, API
	// servers and runtimes of other packages beside it). The CRI client's
	// backoff cap itself (3 s, with 20% jitter) is pinned by pkg/cri's
	// TestDialBackoffIsCapped.
	//
	// brokenRedial: a redial that waits for something else than the
	// client's backoff (connect's own after a failed Dial, which grows to
	// a minute; a client rebuilt late; no redial) reaches it. An uncapped
	// backoff does not yet in the few seconds containerd is down here: the
	// cap is TestDialBackoffIsCapped's to prove. brokenCollection: a
	// container GC that
	// waited for the profile's next read (unreadRetry, 30 s) or for
	// connect's backoff would collect 30 s or more after the reconnect,
	// where a working one does within about two 1 s periods plus a run's
	// own time (1.3 s once on 2 cores beside other packages).
	const brokenRedial, brokenCollection = 20 * time.Second, 20 * time.Second
	testbed.RequireRoot(t)
	const period = time.Second
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			ctx := t.Context()
			n := node.Start(t, node.Options{Version: v})
			img, err := n.Registry.Push(ctx, registry.ImageSpec{Repo: "restart/exits", Tag: "v1"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := n.PullImage(ctx, img.Ref); err != nil {
				t.Fatal(err)
			}
			pod, err := n.RunPod(ctx, node.PodSpec{Name: "dies", Namespace: "default"})
			if err != nil {
				t.Fatal(err)
			}
			// The pod logs directory the runtime writes the containers'
			// logs in: a live pod's dead container whose log lies
			// elsewhere is left to the kubelet's GC.
			cfg := nodeConfig(t, n.Endpoint, t.TempDir(), []string{"runtimeRequestTimeout: 10s"},
				[]string{"highThresholdPercent: 100"}, []string{fmt.Sprintf("period: %v", period), "maxPerPodContainer: 1",
					"podLogsDirectory: " + n.PodLogs, "containerLogsDirectory: " + t.TempDir()})
			p := startNodegc(t, "restart", cfg, "--owner-gc=off")
			testbed.WaitFor(t, time.Minute, "the agent to be ready", func() bool {
				resp, err := http.Get(p.healthz + "/readyz")
				if err != nil {
					return false
				}
				resp.Body.Close()
				return resp.StatusCode == http.StatusOK
			})

			// Working before the restart.
			old := deadContainers(t, n, pod, img.Ref, 0, 3)
			testbed.WaitFor(t, 30*time.Second, "the two older dead containers removed before the restart", func() bool {
				left, err := containersLeft(ctx, n, old)
				return err == nil && len(left) == 1 && left[0] == old[2]
			})
			// And the run that removed them has ended: it measures what
			// it freed once the runtime settled, which a runtime killed
			// then stretches by seconds, and the bound below counts
			// periods from the restart, not the end of such a run.
			testbed.WaitFor(t, 30*time.Second, "the run that removed them to end", func() bool {
				log, err := os.ReadFile(p.logPath)
				return err == nil && runEndedAfter(string(log), old[:2])
			})

			probes := sampleProbes(p)
			defer probes.finish()
			if err := n.Kill9(); err != nil {
				t.Fatal(err)
			}
			// The runtime stays down until /readyz said so, and since when.
			const downSince = "container runtime does not answer (connection lost at"
			var said string
			testbed.WaitFor(t, 30*time.Second, "/readyz to say the runtime does not answer and since when", func() bool {
				probes.mu.Lock()
				defer probes.mu.Unlock()
				for _, r := range probes.readyz {
					if strings.Contains(r, downSince) {
						said = r
						return true
					}
				}
				return false
			})
			if err := n.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			back := time.Now()
			fresh := deadContainers(t, n, pod, img.Ref, 3, 3)
			made := time.Now()
			// The agent redials within its backoff's cap (3s, with up
			// to 20% jitter) of the runtime's return: logged; failed
			// only when far beyond it (see brokenRedial).
			line, err := p.logLine("Reconnected to the container runtime")
			if err != nil {
				t.Fatal(err)
			}
			reconnected, ok := procfs.KlogTime(line, back)
			if !ok {
				t.Fatalf("no klog time in %q", line)
			}
			redial := reconnected.Sub(back)
			t.Logf("the agent reconnected %v after containerd answered again (its backoff's cap: 3s, 20%% jitter)", redial.Round(time.Millisecond))
			if redial > brokenRedial {
				t.Errorf("the agent reconnected %v after containerd answered again: its redial is not capped (a capped one takes about 3s at most)", redial.Round(time.Millisecond))
			}
			// Then the container GC collects again, once the new dead
			// containers exist: within about two periods, logged; failed
			// only when far beyond (see brokenCollection).
			from := made
			if reconnected.After(made) {
				from = reconnected
			}
			var left []string
			testbed.WaitFor(t, brokenCollection+brokenRedial, "the two older of the new dead containers removed", func() bool {
				left, err = containersLeft(ctx, n, append(old[2:], fresh...))
				return err == nil && len(left) == 1 && left[0] == fresh[2]
			})
			collected := time.Since(from)
			t.Logf("the two older of the new dead containers removed %v after the agent reconnected and they were made (period %v)", collected.Round(time.Millisecond), period)
			if collected > brokenCollection {
				t.Errorf("the two older of the new dead containers were removed %v after the agent reconnected and they were made (period %v): the container GC waited for something other than its periods",
					collected.Round(time.Millisecond), period)
			}
			probes.finish()

			log, err := os.ReadFile(p.logPath)
			if err != nil {
				t.Fatal(err)
			}
			for _, msg := range []string{"Lost the connection to the container runtime", "Reconnected to the container runtime"} {
				if !strings.Contains(string(log), msg) {
					t.Errorf("the agent's log lacks %q", msg)
				}
			}
			probes.mu.Lock()
			defer probes.mu.Unlock()
			if len(probes.healthz) > 0 {
				t.Errorf("/healthz failed %d of %d times while the runtime was down or back; first: %s", len(probes.healthz), probes.polls, probes.healthz[0])
			}
			if got := p.metric("nodegc_cri_reconnects_total"); got != 1 {
				t.Errorf("nodegc_cri_reconnects_total = %v after one restart, want 1", got)
			}
			if got := p.metric("nodegc_cri_connected"); got != 1 {
				t.Errorf("nodegc_cri_connected = %v, want 1", got)
			}
			// The agent's containerd client (writable layers' bytes, and
			// reclaiming them) works across the restart: one reclaim may
			// fail, the one the kill cut short, and it leaves at most a
			// lease that expires.
			if got := p.metric("nodegc_container_gc_errors_total", "operation=reclaim"); got > 1 {
				t.Errorf("nodegc_container_gc_errors_total{operation=reclaim} = %v, want at most the one the kill interrupted", got)
			}
			if got := p.metric("nodegc_container_gc_errors_total", "operation=read_bytes"); got != 0 {
				t.Errorf("nodegc_container_gc_errors_total{operation=read_bytes} = %v, want 0", got)
			}
			leases, err := n.Leases(ctx, `labels."nodegc.io/purpose"`)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range leases {
				if l.Labels["containerd.io/gc.expire"] == "" {
					t.Errorf("lease %s of the agent's is left without an expiry: %v", l.ID, l.Labels)
				}
			}
			if len(leases) > 1 {
				t.Errorf("%d leases of the agent's are left, want at most the one the kill interrupted", len(leases))
			}
			t.Logf("containerd %s killed and restarted: /readyz said %q; once containerd answered again, the agent reconnected in %v and the new dead containers were made in %v; they were collected %v after both; /healthz ok in all %d polls",
				v, said, reconnected.Sub(back).Round(time.Millisecond), made.Sub(back).Round(time.Millisecond), collected.Round(time.Millisecond), probes.polls)
		})
	}
}

// runEndedAfter says whether log has a container GC run's end after the
// removal of each of ids.
func runEndedAfter(log string, ids []string) bool {
	last := -1
	for _, id := range ids {
		i := strings.LastIndex(log, `containerID="`+id+`"`)
		if i < 0 {
			return false
		}
		last = max(last, i)
	}
	return strings.Contains(log[last:], `"Container GC run done"`)
}
