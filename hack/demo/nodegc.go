package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/nodegc/nodegc/internal/testbed"
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
	metricsAddr string
	healthzAddr string
	configPath  string
	kubeconfig  string
	stateDir    string
	logPath     string
	planLogPath string
	binary      string
	metricsURL  string
	healthzURL  string
	debugURL    string
	readyzURL   string
}

func newAgentConfig(dir, binary, endpoint, podLogs, linkDir, kubeconfig string) (*agentConfig, error) {
	ports, err := testbed.FreePorts(2)
	if err != nil {
		return nil, err
	}
	mp, hp := ports[0], ports[1]
	a := &agentConfig{
		binary: binary, endpoint: endpoint, podLogs: podLogs, linkDir: linkDir, kubeconfig: kubeconfig,
		metricsAddr: fmt.Sprintf("127.0.0.1:%d", mp), healthzAddr: fmt.Sprintf("127.0.0.1:%d", hp),
		configPath: filepath.Join(dir, "nodegc.yaml"), stateDir: filepath.Join(dir, "state"),
		logPath: filepath.Join(dir, "nodegc.log"), planLogPath: filepath.Join(dir, "nodegc-plan.log"),
	}
	a.metricsURL = "http://" + a.metricsAddr + "/metrics"
	a.debugURL = "http://" + a.metricsAddr + "/debug/controllers/garbagecollector/graph"
	a.healthzURL = "http://" + a.healthzAddr + "/healthz"
	a.readyzURL = "http://" + a.healthzAddr + "/readyz"
	return a, os.WriteFile(a.configPath, []byte(a.yaml()), 0o644)
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
metricsBindAddress: %[4]s
healthzBindAddress: %[5]s
imageGC:
  highThresholdPercent: %[6]d   # act at this image filesystem usage ...
  lowThresholdPercent: %[7]d    # ... and free down to this
  minimumGCAge: 0s              # the demo's images were all pulled a moment ago
  period: 1m
  diskCheckInterval: 2s         # react within 2s of crossing the high threshold
  exclude:
    - %[8]q
containerGC:
  maxPerPodContainer: 1         # kubelet's default: keep the newest dead instance
  period: 5s
  podLogsDirectory: %[9]s
  containerLogsDirectory: %[10]s
leaderElection:
  resourceNamespace: %[11]s
`, nodeName, a.stateDir, a.endpoint, a.metricsAddr, a.healthzAddr, highThreshold, lowThreshold, excludePattern,
		a.podLogs, a.linkDir, nsNodegc)
}

// env is the environment of every nodegc command: the node's name, and no
// in-cluster configuration even if the demo itself runs in a pod.
func (a *agentConfig) env() []string {
	return append(os.Environ(), "NODE_NAME="+nodeName, "KUBERNETES_SERVICE_HOST=", "KUBERNETES_SERVICE_PORT=")
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
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("nodegc plan %s: %w (its log: %s)", strings.Join(args, " "), err, a.planLogPath)
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
	cfg  *agentConfig
	cmd  *exec.Cmd
	done chan struct{}
	err  error // the exit, once done is closed
}

// startAgent starts `nodegc run --owner-gc=auto` in a process group of its
// own (so that the terminal's Ctrl-C reaches the demo, which stops it with
// SIGTERM), logging to cfg.logPath. It gets SIGKILL if the demo dies.
func startAgent(cfg *agentConfig) (*agent, error) {
	logf, err := os.Create(cfg.logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(cfg.binary, "run", "--config", cfg.configPath, "--kubeconfig", cfg.kubeconfig, "--owner-gc=auto", "-v=2")
	cmd.Env = cfg.env()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	a := &agent{cfg: cfg, cmd: cmd, done: make(chan struct{})}
	// Pdeathsig fires when the thread that forked the child exits: fork
	// from a goroutine locked to its thread until the child is reaped.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer logf.Close()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		a.err = cmd.Wait()
		close(a.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", cfg.binary, err)
	}
	return a, nil
}

func (a *agent) pid() int { return a.cmd.Process.Pid }

func (a *agent) exited() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits up to grace for the exit, then SIGKILL. It
// returns the exit code (-1 when killed) and how long the exit took.
func (a *agent) stop(grace time.Duration) (code int, took time.Duration, killed bool) {
	began := time.Now()
	if !a.exited() {
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.done:
		case <-time.After(grace):
			_ = a.cmd.Process.Kill()
			<-a.done
			killed = true
		}
	}
	return a.cmd.ProcessState.ExitCode(), time.Since(began), killed
}

// logTail returns the last n lines of the agent's log.
func (a *agent) logTail(n int) string {
	data, err := os.ReadFile(a.cfg.logPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitHTTP polls url until it answers 200, the agent exits, or timeout.
func (a *agent) waitHTTP(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	err := testbed.Poll(ctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		code, body, err := get(ctx, url)
		switch {
		case err != nil:
			last = err.Error()
		case code == http.StatusOK:
			return true, nil
		default:
			last = fmt.Sprintf("HTTP %d: %s", code, strings.TrimSpace(body))
		}
		if a.exited() {
			return false, fmt.Errorf("nodegc exited (%v) before %s answered; last lines of its log:\n%s", a.err, url, a.logTail(20))
		}
		return false, nil
	})
	if err != nil && errors.Is(err, ctx.Err()) {
		return fmt.Errorf("%s did not answer 200 within %v (last: %s)", url, timeout, last)
	}
	return err
}

// metrics scrapes the agent's /metrics.
func (a *agent) metrics(ctx context.Context) ([]*dto.MetricFamily, error) {
	return testbed.ScrapeMetrics(ctx, a.cfg.metricsURL)
}

func get(ctx context.Context, url string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
