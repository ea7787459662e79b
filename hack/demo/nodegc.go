package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
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
	mp, err := freePort()
	if err != nil {
		return nil, err
	}
	hp, err := freePort()
	if err != nil {
		return nil, err
	}
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

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
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
	for {
		code, body, err := get(ctx, url)
		switch {
		case err != nil:
			last = err.Error()
		case code == http.StatusOK:
			return nil
		default:
			last = fmt.Sprintf("HTTP %d: %s", code, strings.TrimSpace(body))
		}
		select {
		case <-a.done:
			return fmt.Errorf("nodegc exited (%v) before %s answered; last lines of its log:\n%s", a.err, url, a.logTail(20))
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer 200 within %v (last: %s)", url, timeout, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// metrics returns the agent's /metrics text.
func (a *agent) metrics(ctx context.Context) (string, error) {
	code, body, err := get(ctx, a.cfg.metricsURL)
	if err != nil {
		return "", err
	}
	if code != http.StatusOK {
		return "", fmt.Errorf("%s: HTTP %d", a.cfg.metricsURL, code)
	}
	return body, nil
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

// sample is one line of the Prometheus text format.
type sample struct {
	line  string // as exposed
	name  string
	value float64
}

// samples returns the samples of the metric families whose names start
// with one of prefixes, histogram buckets left out.
func samples(text string, prefixes ...string) []sample {
	var out []sample
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, _, _ := strings.Cut(line, " ")
		name, _, _ = strings.Cut(name, "{")
		if strings.HasSuffix(name, "_bucket") {
			continue
		}
		match := false
		for _, p := range prefixes {
			match = match || strings.HasPrefix(name, p)
		}
		if !match {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		out = append(out, sample{line: line, name: name, value: v})
	}
	return out
}

// metricValue sums the samples of one metric whose line contains every
// filter (e.g. `reason="space"`); ok is false when there is none.
func metricValue(text, name string, filters ...string) (sum float64, ok bool) {
	for _, s := range samples(text, name) {
		if s.name != name {
			continue
		}
		all := true
		for _, f := range filters {
			all = all && strings.Contains(s.line, f)
		}
		if all {
			sum += s.value
			ok = true
		}
	}
	return sum, ok
}
