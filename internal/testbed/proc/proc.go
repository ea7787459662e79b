// Package proc runs the test bed's child binaries (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, the kubelet): each in its own
// process group, with stdout and stderr in a log file, killed with the test
// binary if it dies, stopped with SIGTERM and, after a grace period,
// SIGKILL to the whole group. Processes are only ever signalled by the PIDs
// this package started.
//
// For the benchmarks it also reads what the kernel says of a process
// (ReadMemory: VmRSS and VmHWM; ReadCPUTime: user + system time) and waits
// for a line in a process's log (Process.WaitLogLine).
package proc

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// killWait bounds the wait for a process to exit after SIGKILL.
const killWait = 10 * time.Second

// pollInterval is how often WaitReady repeats its check.
const pollInterval = 50 * time.Millisecond

// ErrAddrInUse marks a start that failed because a port picked for the
// process was taken meanwhile: the caller may retry with fresh ports.
var ErrAddrInUse = errors.New("address already in use")

// Process is one child binary. Its exit is observed by one goroutine that
// closes done; err is written before done is closed and read only after.
type Process struct {
	// Name names the process in messages ("kube-apiserver").
	Name string
	// LogPath is the file holding its stdout and stderr.
	LogPath string

	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start starts bin with args in a new process group, with env (nil: this
// process's environment) and its output in logPath. The child gets SIGKILL
// if the test binary dies (Pdeathsig), so a crashed test leaves none of its
// children running.
//
// Pdeathsig fires when the OS thread that forked the child exits, not the
// process, and Go ends threads whose goroutine exits while locked to them
// (as namespace-switching code does). So the child is forked from a
// goroutine locked to its thread until the child has been reaped: that
// thread cannot be handed to anyone else meanwhile.
func Start(name, bin string, args, env []string, logPath string) (*Process, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create log of %s: %w", name, err)
	}
	defer f.Close() // the child holds its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	return p, nil
}

// PID returns the process ID (also the process group ID).
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Signal sends sig to the process (not its group), as a test that kills
// or stops it on purpose does.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// ExitCode is the exit code once the process has exited (-1 when a signal
// ended it, or while it runs).
func (p *Process) ExitCode() int {
	if !p.Exited() {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

// Done is closed when the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is the process's exit status (exec.Cmd.Wait); nil while it runs.
func (p *Process) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// Stop sends SIGTERM to the process group, SIGKILL after grace, and waits
// for the exit. It reports whether SIGKILL was needed. A nil Process or one
// that exited already is a no-op.
func (p *Process) Stop(grace time.Duration) (killed bool, err error) {
	if p == nil || p.Exited() {
		return false, nil
	}
	pgid := p.PID()
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return false, fmt.Errorf("SIGTERM %s (pgid %d): %w", p.Name, pgid, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.done:
		return false, nil
	case <-timer.C:
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return true, fmt.Errorf("SIGKILL %s (pgid %d): %w", p.Name, pgid, err)
	}
	select {
	case <-p.done:
		return true, nil
	case <-time.After(killWait):
		return true, fmt.Errorf("%s (pid %d) still running %s after SIGKILL", p.Name, pgid, killWait)
	}
}

// WaitReady polls check until it succeeds, the process exits, or ctx ends.
// An exit whose log says a port was taken is reported as ErrAddrInUse.
func (p *Process) WaitReady(ctx context.Context, check func(context.Context) error) error {
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		last := p.checkWhileRunning(ctx, check)
		if last == nil {
			return nil
		}
		select {
		case <-p.done:
			if strings.Contains(p.Tail(50), "address already in use") {
				return fmt.Errorf("%s exited (%v): %w", p.Name, p.err, ErrAddrInUse)
			}
			return fmt.Errorf("%s exited before it was ready: %v (last check: %v)", p.Name, p.err, last)
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last check: %v)", p.Name, ctx.Err(), last)
		case <-ticker.C:
		}
	}
}

// checkWhileRunning runs one check, bounded by 2 s and cut short when the
// process exits: a port we lost may belong to a process that accepts
// connections and never answers.
func (p *Process) checkWhileRunning(ctx context.Context, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return check(ctx)
}

// Tail returns the last n lines of the process's log.
func (p *Process) Tail(n int) string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", p.LogPath, err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// loopbackHTTP probes the components' health endpoints. Their serving
// certificates are self-signed and only loopback addresses are dialled, so
// verification is skipped.
var loopbackHTTP = &http.Client{Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback health probe of a test process
}, Timeout: 2 * time.Second}

// HealthzOK is a WaitReady check: GET url (a component's /healthz on
// loopback, http or https) answers 200.
func HealthzOK(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := loopbackHTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", url, resp.Status, body)
	}
	return nil
}
