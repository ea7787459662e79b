package containerdapi_test

import (
	"sync"
	"testing"
	"time"

	"github.com/nodegc/nodegc/internal/containerdapi"
	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/pkg/cri"
)

// countingActivity counts the calls that start and end under it.
type countingActivity struct {
	mu           sync.Mutex
	starts, ends int
	timeouts     []time.Duration
}

func (a *countingActivity) Start(timeout time.Duration) func() {
	a.mu.Lock()
	a.starts++
	a.timeouts = append(a.timeouts, timeout)
	a.mu.Unlock()
	return func() {
		a.mu.Lock()
		a.ends++
		a.mu.Unlock()
	}
}

func (a *countingActivity) Progress() {}

// TestCallsReportToTheActivity, on each real containerd: a call through
// containerd's own API under a context from cri.WithActivity reports as it
// starts, with its deadline, and as it ends, as a CRI call does; the
// agent's watchdog then sees a GC loop that waits on containerd (reading
// layers, arrivals, sandbox sizes) as waiting on the runtime, not stuck.
func TestCallsReportToTheActivity(t *testing.T) {
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			testbed.RequireRoot(t)
			n := node.Start(t, node.Options{Version: v})
			c, err := containerdapi.Dial(t.Context(), n.Socket, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			a := &countingActivity{}
			ctx, cancel := containerdapi.WithTimeout(cri.WithActivity(t.Context(), a), time.Minute)
			defer cancel()
			if _, err := c.Version(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := c.ImageService().List(ctx); err != nil {
				t.Fatal(err)
			}
			a.mu.Lock()
			defer a.mu.Unlock()
			if a.starts != 2 || a.ends != 2 {
				t.Errorf("%d calls started and %d ended under the activity, want 2 and 2", a.starts, a.ends)
			}
			for _, d := range a.timeouts {
				if d <= 0 || d > time.Minute {
					t.Errorf("a call reported %v to its deadline, want within (0, 1m]", d)
				}
			}
		})
	}
}
