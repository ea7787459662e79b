package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/proc"
)

// ControllerManagerOptions says which kube-controller-manager to run.
type ControllerManagerOptions struct {
	// Controllers is the --controllers list, e.g. {"garbagecollector"}.
	// Required: the default ("*") would run every controller.
	Controllers []string
	// Flags are appended after the harness's own, e.g.
	// {"--kube-api-qps=500", "--kube-api-burst=1000"}.
	Flags []string
}

// ControllerManager is a kube-controller-manager started by
// StartControllerManager.
type ControllerManager struct {
	// Port is its secure port on 127.0.0.1 (serving /healthz and /metrics).
	Port int
	// Name is its name in PIDs and logs, kube-controller-manager-<n>.
	Name string

	proc        *proc.Process
	stopTimeout time.Duration
}

// PID returns its process ID.
func (m *ControllerManager) PID() int { return m.proc.PID() }

// LogPath returns the file holding its stdout and stderr.
func (m *ControllerManager) LogPath() string { return m.proc.LogPath }

// WaitLogLine waits until a line of its log contains one of substrs (see
// proc.Process.WaitLogLine), e.g. its garbage collector's
// "all resource monitors have synced".
func (m *ControllerManager) WaitLogLine(ctx context.Context, interval time.Duration, substrs ...string) (line string, which int, err error) {
	return m.proc.WaitLogLine(ctx, interval, substrs...)
}

// Stop stops it now (SIGTERM, SIGKILL after Options.StopTimeout) instead
// of at cleanup, e.g. to start another with different flags.
func (m *ControllerManager) Stop(t testbed.TB) {
	t.Helper()
	if _, err := m.proc.Stop(m.stopTimeout); err != nil {
		t.Fatalf("stop %s: %v", m.Name, err)
	}
}

// StartControllerManager starts kube-controller-manager running only the
// named controllers (e.g. "garbagecollector") as the admin, waits until its
// /healthz is ok, and stops it in t.Cleanup.
func (c *Cluster) StartControllerManager(t testbed.TB, controllers ...string) *ControllerManager {
	t.Helper()
	return c.StartControllerManagerWith(t, ControllerManagerOptions{Controllers: controllers})
}

// StartControllerManagerWith is StartControllerManager with extra flags.
func (c *Cluster) StartControllerManagerWith(t testbed.TB, opts ControllerManagerOptions) *ControllerManager {
	t.Helper()
	if len(opts.Controllers) == 0 {
		t.Fatalf("StartControllerManager: name the controllers to run (e.g. garbagecollector)")
	}
	bin := testbed.Binary(t, "kube-controller-manager")
	begin := time.Now()
	m, err := c.startControllerManager(t.Context(), bin, opts, t.Logf)
	if m != nil {
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("--- last lines of %s log (%s) ---\n%s", m.Name, m.proc.LogPath, m.proc.Tail(40))
			}
			stopBegin := time.Now()
			killed, err := m.proc.Stop(m.stopTimeout)
			if err != nil {
				t.Errorf("stop %s: %v", m.Name, err)
			}
			t.Logf("%s stopped in %s (SIGKILL needed: %t)", m.Name, time.Since(stopBegin).Round(time.Millisecond), killed)
		})
	}
	if err != nil {
		t.Fatalf("start kube-controller-manager: %v", err)
	}
	t.Logf("%s (%s) healthy in %s on 127.0.0.1:%d", m.Name, strings.Join(opts.Controllers, ","),
		time.Since(begin).Round(time.Millisecond), m.Port)
	return m
}

func (c *Cluster) startControllerManager(ctx context.Context, bin string, opts ControllerManagerOptions, logf func(string, ...any)) (*ControllerManager, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	c.mu.Lock()
	name := fmt.Sprintf("kube-controller-manager-%d", len(c.kcms))
	c.mu.Unlock()
	certDir := c.path(name)
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", certDir, err)
	}
	var m *ControllerManager
	for attempt := 1; ; attempt++ {
		ports, err := pickPorts(1)
		if err != nil {
			return m, err
		}
		args := []string{
			"--controllers=" + strings.Join(opts.Controllers, ","),
			"--kubeconfig=" + c.kubeconfig,
			"--use-service-account-credentials=false",
			"--leader-elect=false",
			"--bind-address=127.0.0.1",
			fmt.Sprintf("--secure-port=%d", ports[0]),
			"--cert-dir=" + certDir,
		}
		args = append(args, opts.Flags...)
		p, err := proc.Start(name, bin, args, nil, c.path(fmt.Sprintf("%s.%d.log", name, attempt)))
		if err != nil {
			return m, err
		}
		m = &ControllerManager{Port: ports[0], Name: name, proc: p, stopTimeout: c.opts.StopTimeout}
		c.mu.Lock()
		c.kcms = append(c.kcms, m) // so teardown stops it whatever happens next
		c.mu.Unlock()
		err = p.WaitReady(ctx, func(ctx context.Context) error {
			return proc.HealthzOK(ctx, fmt.Sprintf("https://127.0.0.1:%d/healthz", ports[0]))
		})
		if err == nil {
			return m, nil
		}
		if _, stopErr := p.Stop(c.opts.StopTimeout); stopErr != nil {
			return m, errors.Join(err, stopErr)
		}
		if !errors.Is(err, proc.ErrAddrInUse) || attempt == maxStartAttempts {
			return m, fmt.Errorf("%w\n%s", err, p.Tail(30))
		}
		logf("%s attempt %d: port %d was taken, retrying with a fresh port", name, attempt, ports[0])
	}
}
