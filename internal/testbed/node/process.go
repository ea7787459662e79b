package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/testbed"
)

// daemon is one run of containerd.
type daemon struct {
	pid  int
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // its exit status; read after done
}

func (d *daemon) alive() bool {
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

// stopGrace is how long containerd gets to exit after SIGTERM.
const stopGrace = 5 * time.Second

// startDaemon starts containerd with the shim directory leading PATH, in its
// own process group, and waits until CRI answers.
func (n *Node) startDaemon(ctx context.Context) error {
	// A socket file left by a killed containerd would pass the wait below
	// before the new one listens, and the refused dial would cost a gRPC
	// reconnect backoff.
	if err := os.Remove(n.Socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	logFile, err := os.OpenFile(n.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close() // the child holds its own descriptor
	cmd := exec.Command(n.bin, "--config", n.configPath)
	cmd.Env = withPath(os.Environ(), n.shimDir)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Own process group: signals to the test's group do not reach it.
	// Pdeathsig: if the test process dies, containerd dies too; its shims
	// and containers are left for SweepStale.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	started := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", n.bin, err)
	}
	d := &daemon{pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		d.err = cmd.Wait()
		close(d.done)
	}()
	n.mu.Lock()
	n.daemon = d
	n.mu.Unlock()
	if err := os.WriteFile(filepath.Join(n.Dir, "containerd.pid"), []byte(strconv.Itoa(d.pid)), 0o644); err != nil {
		return err
	}
	if err := n.waitReady(ctx, d); err != nil {
		return fmt.Errorf("containerd (pid %d) not ready after %v: %w\n%s", d.pid, time.Since(started).Round(time.Millisecond), err, n.logTail(30))
	}
	return nil
}

// waitReady waits for the socket file, then polls CRI Version: dialing
// before the socket exists would cost a gRPC reconnect backoff.
func (n *Node) waitReady(ctx context.Context, d *daemon) error {
	ctx, cancel := context.WithTimeout(ctx, n.startTimeout)
	defer cancel()
	err := testbed.Poll(ctx, 10*time.Millisecond, func(context.Context) (bool, error) {
		if !d.alive() {
			return false, fmt.Errorf("containerd exited: %v", d.err)
		}
		_, err := os.Stat(n.Socket)
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for socket %s: %w", n.Socket, err)
	}
	n.conn.ResetConnectBackoff()
	var lastErr error
	err = testbed.Poll(ctx, 20*time.Millisecond, func(context.Context) (bool, error) {
		if !d.alive() {
			return false, fmt.Errorf("containerd exited: %v", d.err)
		}
		callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, lastErr = n.Runtime.Version(callCtx, &runtimeapi.VersionRequest{})
		return lastErr == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for CRI Version: %w (last error: %v)", err, lastErr)
	}
	return nil
}

// Alive reports whether containerd runs.
func (n *Node) Alive() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.daemon != nil && n.daemon.alive()
}

// PID returns the PID of the current containerd process (0 before start).
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.daemon == nil {
		return 0
	}
	return n.daemon.pid
}

// Kill9 sends SIGKILL to containerd and waits for it to exit. Shims and
// containers keep running, as after a crash.
func (n *Node) Kill9() error {
	n.mu.Lock()
	d := n.daemon
	n.mu.Unlock()
	if d == nil || !d.alive() {
		return errors.New("kill containerd: not running")
	}
	if err := syscall.Kill(d.pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill containerd (pid %d): %w", d.pid, err)
	}
	select {
	case <-d.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("containerd (pid %d) still running 10s after SIGKILL", d.pid)
	}
}

// Restart stops containerd (SIGTERM, SIGKILL after 5s) if it runs and
// starts it again with the same config; running shims re-attach.
func (n *Node) Restart(ctx context.Context) error {
	if err := n.stopDaemon(); err != nil {
		return err
	}
	return n.startDaemon(ctx)
}

// RestartWithSandboxImage stops containerd, writes its config again with
// ref as the sandbox image, and starts it, as an operator who changes
// sandbox_image and restarts containerd does: same version, same socket,
// same images. n.SandboxImage is ref from then on.
func (n *Node) RestartWithSandboxImage(ctx context.Context, ref string) error {
	if err := n.stopDaemon(); err != nil {
		return err
	}
	n.config.SandboxImage = ref
	if _, err := writeConfig(n.Version, n.config); err != nil {
		return err
	}
	n.SandboxImage = ref
	return n.startDaemon(ctx)
}

// stopDaemon sends SIGTERM, then SIGKILL after stopGrace.
func (n *Node) stopDaemon() error {
	n.mu.Lock()
	d := n.daemon
	n.mu.Unlock()
	if d == nil || !d.alive() {
		return nil
	}
	if err := syscall.Kill(d.pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop containerd (pid %d): %w", d.pid, err)
	}
	select {
	case <-d.done:
		return nil
	case <-time.After(stopGrace):
	}
	n.t.Logf("containerd (pid %d) ignored SIGTERM for %v; sending SIGKILL", d.pid, stopGrace)
	syscall.Kill(d.pid, syscall.SIGKILL)
	select {
	case <-d.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("containerd (pid %d) still running 10s after SIGKILL", d.pid)
	}
}

func (n *Node) logPath() string { return filepath.Join(n.Dir, "containerd.log") }

// logTail returns the last lines of containerd's log.
func (n *Node) logTail(lines int) string {
	data, err := os.ReadFile(n.logPath())
	if err != nil {
		return ""
	}
	all := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return "containerd log (last lines):\n" + string(bytes.Join(all, []byte("\n")))
}

// withPath returns env with dir leading PATH.
func withPath(env []string, dir string) []string {
	out := make([]string, 0, len(env)+1)
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
			continue
		}
		out = append(out, kv)
	}
	return append(out, "PATH="+dir+":"+path)
}
