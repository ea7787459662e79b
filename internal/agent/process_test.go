package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/nodegc/nodegc/internal/testbed"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// nodegcBinary builds cmd/nodegc once per test process.
func nodegcBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := testbed.RepoRoot()
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "nodegc-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "nodegc")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/nodegc")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/nodegc: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// proc is a running `nodegc` process.
type proc struct {
	ctx     context.Context // the test's: scrapes end with it
	name    string
	cmd     *exec.Cmd
	metrics string // http://127.0.0.1:PORT
	healthz string
	logPath string
	done    chan struct{}
	exit    error
}

// startNodegc runs nodegc with the config text and extra args; its output
// goes to a log file in the test's temp dir.
func startNodegc(t *testing.T, name, configYAML string, args ...string) *proc {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	ports, err := testbed.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	mp, hp := ports[0], ports[1]
	full := configYAML + fmt.Sprintf("metricsBindAddress: 127.0.0.1:%d\nhealthzBindAddress: 127.0.0.1:%d\n", mp, hp)
	if err := os.WriteFile(cfgPath, []byte(full), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &proc{ctx: t.Context(), name: name, metrics: fmt.Sprintf("http://127.0.0.1:%d", mp), healthz: fmt.Sprintf("http://127.0.0.1:%d", hp),
		logPath: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	logf, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(nodegcBinary(t), append([]string{"run", "--config", cfgPath, "-v=2"}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.Env = append(os.Environ(), "NODE_NAME="+name, "KUBERNETES_SERVICE_HOST=")
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.exit = p.cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			data, _ := os.ReadFile(p.logPath)
			t.Logf("%s log (last 4 KiB):\n%s", name, tail(data, 4096))
		}
	})
	return p
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// metric returns the sum of the samples of a metric whose labels include
// every filter ("name=value"; see testbed.MetricSum), 0 when there is none,
// or -1 when /metrics is down or answers no valid exposition.
func (p *proc) metric(name string, filters ...string) float64 {
	families, err := testbed.ScrapeMetrics(p.ctx, p.metrics+"/metrics")
	if err != nil {
		return -1
	}
	sum, _ := testbed.MetricSum(families, name, filters...)
	return sum
}

// TestProcMetric: proc.metric reads a sample as the exposition states it:
// a filter names a label exactly (not one whose name ends in it), the value
// is not the timestamp, and a stopped /metrics reads -1.
func TestProcMetric(t *testing.T) {
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
			p := &proc{ctx: t.Context(), metrics: tc.url}
			if got := p.metric(tc.metric, tc.filters...); got != tc.want {
				t.Errorf("metric(%s, %q) = %v, want %v", tc.metric, tc.filters, got, tc.want)
			}
		})
	}
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
