package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nodegc/nodegc/internal/testbed/nodegcproc"
	"github.com/nodegc/nodegc/internal/testbed/proc"
)

// Thresholds of the demo config: nodegc acts when image filesystem usage
// reaches highThreshold and frees down to lowThreshold.
const (
	highThreshold = 80
	lowThreshold  = 60
)

// agentConfig is what the demo's nodegc config needs to know.
type agentConfig struct {
	endpoint    string // CRI endpoint of the node
	podLogs     string // the node's pod logs directory
	linkDir     string // the container log links directory
	configPath  string
	kubeconfig  string
	stateDir    string
	logPath     string
	planLogPath string
	binary      string
	file        *nodegcproc.Config // the written config, with its servers' URLs
	metricsURL  string
	healthzURL  string
	debugURL    string
	readyzURL   string
}

func newAgentConfig(dir, binary, endpoint, podLogs, linkDir, kubeconfig string) (*agentConfig, error) {
	a := &agentConfig{
		binary: binary, endpoint: endpoint, podLogs: podLogs, linkDir: linkDir, kubeconfig: kubeconfig,
		configPath: filepath.Join(dir, "nodegc.yaml"), stateDir: filepath.Join(dir, "state"),
		logPath: filepath.Join(dir, "nodegc.log"), planLogPath: filepath.Join(dir, "nodegc-plan.log"),
	}
	f, err := nodegcproc.WriteConfig(a.configPath, a.yaml())
	if err != nil {
		return nil, err
	}
	a.file = f
	a.metricsURL = f.MetricsURL + "/metrics"
	a.debugURL = f.MetricsURL + "/debug/controllers/garbagecollector/graph"
	a.healthzURL = f.HealthzURL + "/healthz"
	a.readyzURL = f.HealthzURL + "/readyz"
	return a, nil
}

// yaml is the demo's nodegc configuration.
func (a *agentConfig) yaml() string {
	return fmt.Sprintf(`# nodegc configuration written by the demo (hack/demo).
apiVersion: nodegc.io/v1alpha1
kind: NodeGCConfiguration
nodeName: %[1]s
stateDirectory: %[2]s
containerRuntimeEndpoint: %[3]s
runtimeRequestTimeout: 30s
imageGC:
  highThresholdPercent: %[4]d   # act at this image filesystem usage ...
  lowThresholdPercent: %[5]d    # ... and free down to this
  minimumGCAge: 0s              # the demo's images were all pulled a moment ago
  period: 1m
  diskCheckInterval: 2s         # react within 2s of crossing the high threshold
  exclude:
    - %[6]q
containerGC:
  maxPerPodContainer: 1         # kubelet's default: keep the newest dead instance
  period: 5s
  podLogsDirectory: %[7]s
  containerLogsDirectory: %[8]s
leaderElection:
  resourceNamespace: %[9]s
`, nodeName, a.stateDir, a.endpoint, highThreshold, lowThreshold, excludePattern,
		a.podLogs, a.linkDir, nsNodegc)
}

// env is the environment of every nodegc command: the node's name, no
// in-cluster configuration even if the demo itself runs in a pod, and the
// race detector's settings for a race-enabled nodegc (TestDemo's, with
// -race; see nodegcproc.Environ).
func (a *agentConfig) env() []string {
	return nodegcproc.Environ("NODE_NAME="+nodeName, "KUBERNETES_SERVICE_HOST=", "KUBERNETES_SERVICE_PORT=")
}

// plan runs `nodegc plan` with extra args and returns its standard output;
// its log goes to planLogPath.
func (a *agentConfig) plan(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	logf, err := os.OpenFile(a.planLogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, a.binary, append([]string{"plan", "--config", a.configPath, "--kubeconfig", a.kubeconfig}, args...)...)
	cmd.Env = a.env()
	cmd.Stdout, cmd.Stderr = &out, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Exit 2: one of the two plans is missing; the output says which, and
	// the demo reads what it needs of it.
	if err := cmd.Run(); err != nil {
		if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != 2 {
			return nil, fmt.Errorf("nodegc plan %s: %w (its log: %s)", strings.Join(args, " "), err, a.planLogPath)
		}
	}
	return out.Bytes(), nil
}

// planJSON is the part of `nodegc plan -o json` the demo reads.
type planJSON struct {
	Disk *struct {
		CapacityBytes        uint64 `json:"capacityBytes"`
		AvailableBytes       uint64 `json:"availableBytes"`
		UsagePercent         int    `json:"usagePercent"`
		BytesToFree          uint64 `json:"bytesToFree"`
		EstimatedFreedBytes  uint64 `json:"estimatedFreedBytes"`
		ExpectedUsagePercent int    `json:"expectedUsagePercent"`
		Accounting           string `json:"accounting"`
	} `json:"imageFilesystem"`
	Images []struct {
		Action string   `json:"action"`
		Reason string   `json:"reason"`
		Bytes  uint64   `json:"bytes"`
		ID     string   `json:"id"`
		Tags   []string `json:"tags"`
	} `json:"images"`
	ImagesErr  string `json:"imagesError"`
	PodsView   string `json:"podsView"`
	Containers []struct {
		Action string `json:"action"`
		Reason string `json:"reason"`
		Name   string `json:"name"`
		ID     string `json:"id"`
	} `json:"containers"`
	ContainerErr string `json:"containersError"`
}

func (a *agentConfig) planJSON(ctx context.Context) (*planJSON, error) {
	out, err := a.plan(ctx, "-o", "json")
	if err != nil {
		return nil, err
	}
	var p planJSON
	if err := json.Unmarshal(out, &p); err != nil {
		return nil, fmt.Errorf("decode `nodegc plan -o json`: %w", err)
	}
	if p.ImagesErr != "" {
		return nil, fmt.Errorf("nodegc plan: no image plan: %s", p.ImagesErr)
	}
	return &p, nil
}

// agent is a running `nodegc run`.
type agent struct {
	*nodegcproc.Agent
	cfg *agentConfig
}

// startAgent starts `nodegc run --owner-gc=auto` in a process group of its
// own (so that the terminal's Ctrl-C reaches the demo, which stops it with
// SIGTERM), logging to cfg.logPath. It gets SIGKILL if the demo dies.
func startAgent(cfg *agentConfig) (*agent, error) {
	a, err := nodegcproc.Start(cfg.binary, cfg.file, cfg.logPath, []string{"NODE_NAME=" + nodeName},
		"--kubeconfig", cfg.kubeconfig, "--owner-gc=auto", "-v=2")
	if err != nil {
		return nil, err
	}
	return &agent{Agent: a, cfg: cfg}, nil
}

// stop sends SIGTERM and waits up to grace for the exit, then SIGKILL. It
// returns the exit code (-1 when killed), how long the exit took, and the
// error of nodegcproc.Agent.Stop: one also when nodegc's log holds a data
// race report (a race-enabled nodegc, as TestDemo's with -race).
func (a *agent) stop(grace time.Duration) (code int, took time.Duration, killed bool, err error) {
	began := time.Now()
	killed, err = a.Stop(grace)
	return a.ExitCode(), time.Since(began), killed, err
}

// waitHTTP polls url until it answers 200, the agent exits, or timeout; a
// failure comes with the end of nodegc's log.
func (a *agent) waitHTTP(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := a.WaitReady(ctx, func(ctx context.Context) error { return proc.HealthzOK(ctx, url) }); err != nil {
		return fmt.Errorf("%w; last lines of nodegc's log:\n%s", err, a.Tail(20))
	}
	return nil
}
