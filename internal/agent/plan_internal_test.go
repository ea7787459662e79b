package agent

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/config"
)

// logLines returns a context whose logger keeps its lines, and them.
func logLines(ctx context.Context) (context.Context, func() []string) {
	var mu sync.Mutex
	var lines []string
	logger := funcr.New(func(_, args string) { mu.Lock(); lines = append(lines, args); mu.Unlock() }, funcr.Options{})
	return klog.NewContext(ctx, logger), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), lines...)
	}
}

// TestPlanInterruptedLogs: `nodegc plan` interrupted (SIGINT) while it
// waits for the pod view of an API server that does not answer logs how
// long it actually waited, not the bound of the wait, and does not blame
// containerd's API for what the cancellation did.
func TestPlanInterruptedLogs(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
users: [{name: u, user: {token: x}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Defaulted()
	cfg.ContainerRuntimeEndpoint = testbed.ServeCRI(t, testbed.VersionOnly{Runtime: "containerd", RuntimeVersion: "2.1.0"})
	cfg.StateDirectory = t.TempDir()
	ctx, lines := logLines(t.Context())
	ctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(time.Second, cancel)
	start := time.Now()
	r, err := Plan(ctx, Options{Config: cfg, Kubeconfig: kubeconfig, NodeName: "n"})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("plan took %v after its cancellation at 1s", took)
	}
	if r.PodsSynced {
		t.Fatal("the pod view synced with an API server that does not answer")
	}
	waited := regexp.MustCompile(`"waited"="([^"]+)"`)
	var sawWait bool
	for _, l := range lines() {
		if m := waited.FindStringSubmatch(l); m != nil {
			sawWait = true
			if d, err := time.ParseDuration(m[1]); err != nil || d < time.Second/2 || d > 10*time.Second {
				t.Errorf("interrupted after 1s, plan logs it waited %s: %s", m[1], l)
			}
		}
		if strings.Contains(l, "Cannot use containerd's own API") {
			t.Errorf("interrupted, plan blames containerd's API: %s", l)
		}
	}
	if !sawWait {
		t.Errorf("plan does not log how long it waited for the pod view; its log:\n%s", strings.Join(lines(), "\n"))
	}
}
