package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/internal/testbed/nodegcproc"
	"github.com/nodegc/nodegc/internal/testbed/registry"
)

// nodegcBinary builds cmd/nodegc once per test process.
func nodegcBinary(t *testing.T) string {
	t.Helper()
	bin, err := nodegcproc.Build()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// proc is a running `nodegc` process.
type proc struct {
	*nodegcproc.Agent
	ctx     context.Context // the test's: scrapes end with it
	name    string
	metrics string // http://127.0.0.1:PORT
	healthz string
	logPath string
}

// startNodegc runs nodegc with the config text and extra args; its output
// goes to a log file in the test's temp dir.
func startNodegc(t *testing.T, name, configYAML string, args ...string) *proc {
	t.Helper()
	dir := t.TempDir()
	cfg, err := nodegcproc.WriteConfig(filepath.Join(dir, "config.yaml"), configYAML)
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, name+".log")
	a, err := nodegcproc.Start(nodegcBinary(t), cfg, logPath, []string{"NODE_NAME=" + name}, append([]string{"-v=2"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{Agent: a, ctx: t.Context(), name: name, metrics: cfg.MetricsURL, healthz: cfg.HealthzURL, logPath: logPath}
	t.Cleanup(func() {
		if _, err := a.Stop(0); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("%s log (last 60 lines):\n%s", name, a.Tail(60))
		}
	})
	return p
}

// metric returns the sum of the samples of a metric whose labels include
// every filter ("name=value"; see testbed.MetricSum), 0 when there is none,
// or -1 when /metrics is down or answers no valid exposition.
func (p *proc) metric(name string, filters ...string) float64 {
	return p.Metric(p.ctx, name, filters...)
}

// logLine waits up to 10 s for a line of p's log that contains substr,
// and returns it.
func (p *proc) logLine(substr string) (string, error) {
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	line, _, err := p.WaitLogLine(ctx, 100*time.Millisecond, substr)
	return line, err
}

func (p *proc) body(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := io.Copy(&b, resp.Body); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// nodeConfig is the configuration of a node agent on the runtime at
// endpoint, with its state in stateDir, pod and container log directories
// of the test's own unless containerGC sets them, and the extra lines
// given: top-level fields, then those of imageGC and of containerGC, each
// a "key: value" line.
func nodeConfig(t *testing.T, endpoint, stateDir string, top, imageGC, containerGC []string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: nodegc.io/v1alpha1\nkind: NodeGCConfiguration\ncontainerRuntimeEndpoint: %s\nstateDirectory: %s\n", endpoint, stateDir)
	for _, l := range top {
		fmt.Fprintf(&b, "%s\n", l)
	}
	b.WriteString("imageGC:\n")
	for _, l := range imageGC {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	b.WriteString("containerGC:\n")
	for _, l := range containerGC {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	if !slices.ContainsFunc(containerGC, func(l string) bool { return strings.HasPrefix(l, "podLogsDirectory:") }) {
		fmt.Fprintf(&b, "  podLogsDirectory: %s\n  containerLogsDirectory: %s\n", t.TempDir(), t.TempDir())
	}
	return b.String()
}

// runPlan runs `nodegc plan -o json` with the configuration text and the
// extra environment, and returns its standard output and error.
func runPlan(t *testing.T, configYAML string, env ...string) ([]byte, string) {
	t.Helper()
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(configYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), nodegcBinary(t), "plan", "-c", cfgPath, "-o", "json")
	cmd.Env = append(append(os.Environ(), "KUBERNETES_SERVICE_HOST="), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("nodegc plan: %v\n%s", err, stderr.String())
	}
	return stdout.Bytes(), stderr.String()
}

// nodeWithImage starts a containerd 2.x node with one image pushed to its
// registry as repo:v1 and pulled.
func nodeWithImage(t *testing.T, repo string) (*node.Node, *registry.Image) {
	t.Helper()
	testbed.RequireRoot(t)
	n := node.Start(t, node.Options{Version: testbed.Containerd2})
	img, err := n.Registry.Push(t.Context(), registry.ImageSpec{Repo: repo, Tag: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.PullImage(t.Context(), img.Ref); err != nil {
		t.Fatal(err)
	}
	return n, img
}
