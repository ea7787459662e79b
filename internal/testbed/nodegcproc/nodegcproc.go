// Package nodegcproc runs the nodegc binary as its users do, for the tests
// that need the real process (signals, restarts, kill -9, two agents in a
// leader election) and for the demo (hack/demo): one harness for both.
//
// Build builds ./cmd/nodegc once per test binary, with the race detector
// when the test binary has it (go test -race): the tests that run the real
// process then check its concurrency too. WriteConfig writes a
// configuration with /metrics and /healthz on free loopback ports. Start
// runs `nodegc run` on it as a proc.Process (its own process group, output
// in a log file, SIGKILL if the caller dies); the Agent then reads its
// /metrics with the testbed's parser, and waits for its endpoints as the
// other test-bed processes do (proc.Process.WaitReady with proc.HealthzOK).
// Agent.Stop fails when the agent's log holds a race report.
package nodegcproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/proc"
)

// Build builds ./cmd/nodegc of this repository once per process and
// returns the binary's path: _output/testbin/race/nodegc when the test
// binary runs with the race detector (the agent then gets it too; see
// Environ), _output/testbin/norace/nodegc otherwise. The binary is always
// named nodegc (a test puts its directory on PATH).
//
// The directory is the repository's, not a temporary one: a binary of
// 60-80 MB per test package and run would otherwise pile up in /tmp. It
// is `go build -o` that keeps it current: go relinks the target unless
// the build ID it holds is that of the sources, flags and toolchain at
// hand (it only touches it then), so a stale binary is never run, and the
// link is skipped when nothing changed. A relink renames the new binary
// into place, so test processes that build it together, or run it
// meanwhile, each see a whole binary.
var Build = sync.OnceValues(func() (string, error) {
	root, err := testbed.RepoRoot()
	if err != nil {
		return "", err
	}
	args, flavour := []string{"build"}, "norace"
	if raceEnabled {
		args, flavour = append(args, "-race"), "race"
	}
	dir := filepath.Join(root, "_output", "testbin", flavour)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "nodegc")
	cmd := exec.Command("go", append(args, "-o", bin, "./cmd/nodegc")...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return bin, nil
})

// raceOptions is the race detector's configuration (GORACE) for a Build
// binary with the race detector: exit (with status 66) at the first data
// race, its report on stderr. A race then fails the command that hit it,
// and stops an agent, whose Stop then returns the report (RaceReport).
// Without the race detector, GORACE is ignored.
const raceOptions = "halt_on_error=1"

// RaceEnv is the GORACE variable ("GORACE=...") of every command the
// tests run from Build, agents (Start) and one-shot commands alike:
// raceOptions, after any GORACE of this process's own.
func RaceEnv() string {
	if own := os.Getenv("GORACE"); own != "" {
		return "GORACE=" + own + " " + raceOptions
	}
	return "GORACE=" + raceOptions
}

// Environ returns this process's environment followed by RaceEnv() and
// extra: the environment of a command run from Build.
func Environ(extra ...string) []string {
	return append(append(os.Environ(), RaceEnv()), extra...)
}

// raceWarning starts each report of the race detector.
const raceWarning = "WARNING: DATA RACE"

// RaceReport returns the race detector's reports in a log (the output of a
// Build binary), from the first one on and at most 200 lines, or "" when
// there is none.
func RaceReport(log []byte) string {
	i := bytes.Index(log, []byte(raceWarning))
	if i < 0 {
		return ""
	}
	lines := strings.SplitAfter(string(log[i:]), "\n")
	if len(lines) > 200 {
		lines = append(lines[:200], "... (the rest is in the log)\n")
	}
	return "==================\n" + strings.Join(lines, "")
}

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
// Environ(), with no in-cluster API configuration unless env gives one),
// its output in logPath.
func Start(binary string, cfg *Config, logPath string, env []string, args ...string) (*Agent, error) {
	full := append(Environ("KUBERNETES_SERVICE_HOST=", "KUBERNETES_SERVICE_PORT="), env...)
	p, err := proc.Start("nodegc", binary, append([]string{"run", "--config", cfg.Path}, args...), full, logPath)
	if err != nil {
		return nil, err
	}
	return &Agent{Process: p, Config: cfg}, nil
}

// Stop stops the agent as proc.Process.Stop does (also once it has exited:
// then it only checks), and returns an error, too, when its log holds a
// report of the race detector: a data race fails the test that ran the
// agent, whether or not the race stopped it (raceOptions), and whether or
// not the test killed it meanwhile.
func (a *Agent) Stop(grace time.Duration) (killed bool, err error) {
	killed, err = a.Process.Stop(grace)
	log, rerr := os.ReadFile(a.LogPath)
	if rerr != nil {
		return killed, errors.Join(err, fmt.Errorf("%s: check its log for data races: %w", a.Name, rerr))
	}
	if r := RaceReport(log); r != "" {
		status := "exit status 0"
		if e := a.Err(); e != nil {
			status = e.Error()
		}
		err = errors.Join(err, fmt.Errorf("%s (pid %d, %s): the race detector reported a data race (log %s):\n%s",
			a.Name, a.PID(), status, a.LogPath, r))
	}
	return killed, err
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
