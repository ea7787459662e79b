package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// killWait bounds the wait for a process to exit after SIGKILL.
const killWait = 10 * time.Second

// pollInterval is how often readiness checks are repeated.
const pollInterval = 50 * time.Millisecond

// process is one child binary running in its own process group, with
// stdout and stderr in a log file. Its exit is observed by one goroutine
// that closes done; err is written before done is closed and read only
// after.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error
}

// startProcess starts bin with args in a new process group. The child gets
// SIGKILL if the test binary dies (Pdeathsig), so a crashed test leaves no
// control plane behind.
//
// Pdeathsig fires when the OS thread that forked the child exits, not the
// process, and Go ends threads whose goroutine exits while locked to them
// (as namespace-switching code does). So the child is forked from a
// goroutine locked to its thread until the child has been reaped: that
// thread cannot be handed to anyone else meanwhile.
func startProcess(name, bin string, args []string, logPath string) (*process, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create log of %s: %w", name, err)
	}
	defer f.Close() // the child holds its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
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

// pid returns the process ID (also the process group ID).
func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, SIGKILL after grace, and waits
// for the exit. It reports whether SIGKILL was needed.
func (p *process) stop(grace time.Duration) (killed bool, err error) {
	if p.exited() {
		return false, nil
	}
	pgid := p.pid()
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return false, fmt.Errorf("SIGTERM %s (pgid %d): %w", p.name, pgid, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.done:
		return false, nil
	case <-timer.C:
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return true, fmt.Errorf("SIGKILL %s (pgid %d): %w", p.name, pgid, err)
	}
	select {
	case <-p.done:
		return true, nil
	case <-time.After(killWait):
		return true, fmt.Errorf("%s (pid %d) still running %s after SIGKILL", p.name, pgid, killWait)
	}
}

// waitReady polls check until it succeeds, the process exits, or ctx ends.
// An exit whose log says a port was taken is reported as errAddrInUse.
func (p *process) waitReady(ctx context.Context, check func(context.Context) error) error {
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		last := p.checkWhileRunning(ctx, check)
		if last == nil {
			return nil
		}
		select {
		case <-p.done:
			if strings.Contains(p.tail(50), "address already in use") {
				return fmt.Errorf("%s exited (%v): %w", p.name, p.err, errAddrInUse)
			}
			return fmt.Errorf("%s exited before it was ready: %v (last check: %v)", p.name, p.err, last)
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last check: %v)", p.name, ctx.Err(), last)
		case <-ticker.C:
		}
	}
}

// checkWhileRunning runs one check, bounded by 2 s and cut short when the
// process exits: a port we lost may belong to a process that accepts
// connections and never answers.
func (p *process) checkWhileRunning(ctx context.Context, check func(context.Context) error) error {
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

// tail returns the last n lines of the process log.
func (p *process) tail(n int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", p.logPath, err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
