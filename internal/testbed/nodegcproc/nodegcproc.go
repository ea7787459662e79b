// Package nodegcproc runs the nodegc binary as its users do, for the tests
// that need the real process (signals, restarts, kill -9, two agents in a
// leader election) and for the demo (hack/demo): one harness for both.
//
// Build builds ./cmd/nodegc once per test binary. WriteConfig writes a
// configuration with /metrics and /healthz on free loopback ports. Start
// runs `nodegc run` on it as a proc.Process (its own process group, output
// in a log file, SIGKILL if the caller dies); the Agent then reads its
// /metrics with the testbed's parser, and waits for its endpoints as the
// other test-bed processes do (proc.Process.WaitReady with proc.HealthzOK).
package nodegcproc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	dto "github.com/prometheus/client_model/go"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/proc"
)

// Build builds ./cmd/nodegc of this repository once per process, into a
// temporary directory, and returns the binary's path.
var Build = sync.OnceValues(func() (string, error) {
	root, err := testbed.RepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "nodegc-bin")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "nodegc")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/nodegc")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/nodegc: %v\n%s", err, out)
	}
	return bin, nil
})

// Config is a configuration file written by WriteConfig.
type Config struct {
	Path string
	// MetricsURL and HealthzURL are the servers' base URLs
	// (http://127.0.0.1:PORT), without a path.
	MetricsURL, HealthzURL string
}

// WriteConfig writes text to path, followed by metricsBindAddress and
// healthzBindAddress on two free loopback ports (text must not set them).
func WriteConfig(path, text string) (*Config, error) {
	ports, err := testbed.FreePorts(2)
	if err != nil {
		return nil, err
	}
	m, h := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	text += fmt.Sprintf("metricsBindAddress: %s\nhealthzBindAddress: %s\n", m, h)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		return nil, err
	}
	return &Config{Path: path, MetricsURL: "http://" + m, HealthzURL: "http://" + h}, nil
}

// DeployedGOMAXPROCS is the GOMAXPROCS nodegc runs with as deployed: the
// manifests set it from the container's CPU limit, which resolves to 1
// (deploy's TestGOMAXPROCSFollowsCPULimit). Go's own default would be at
// least 2. Benchmarks start nodegc with it (Start's env), to measure it as
// it runs.
const DeployedGOMAXPROCS = "1"

// Agent is a running `nodegc run`.
type Agent struct {
	*proc.Process
	Config *Config
}

// Start runs `binary run --config cfg.Path args...` with env (appended to
// this process's environment, with no in-cluster API configuration unless
// env gives one), its output in logPath.
func Start(binary string, cfg *Config, logPath string, env []string, args ...string) (*Agent, error) {
	full := append(append(os.Environ(), "KUBERNETES_SERVICE_HOST=", "KUBERNETES_SERVICE_PORT="), env...)
	p, err := proc.Start("nodegc", binary, append([]string{"run", "--config", cfg.Path}, args...), full, logPath)
	if err != nil {
		return nil, err
	}
	return &Agent{Process: p, Config: cfg}, nil
}

// Scrape reads the agent's /metrics.
func (a *Agent) Scrape(ctx context.Context) ([]*dto.MetricFamily, error) {
	return testbed.ScrapeMetrics(ctx, a.Config.MetricsURL+"/metrics")
}

// Metric returns the sum of the samples of a metric whose labels include
// every filter ("name=value"; see testbed.MetricSum), 0 when there is none,
// or -1 when /metrics is down or answers no valid exposition.
func (a *Agent) Metric(ctx context.Context, name string, filters ...string) float64 {
	families, err := a.Scrape(ctx)
	if err != nil {
		return -1
	}
	sum, _ := testbed.MetricSum(families, name, filters...)
	return sum
}
