package main

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestRunGivesSignalsBack: once run returns, SIGTERM ends the process
// again, as it does without the demo: run stops catching the signals
// (inside TestDemo, the test process would otherwise swallow every
// SIGINT and SIGTERM after the demo). A child (this test binary again)
// runs an empty demo, then sends itself SIGTERM.
func TestRunGivesSignalsBack(t *testing.T) {
	if os.Getenv("NODEGC_DEMO_SIGNAL_CHILD") == "1" {
		if code := newTB().run(func(*demoTB) {}); code != 0 {
			os.Exit(code)
		}
		if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
			os.Exit(3)
		}
		time.Sleep(10 * time.Second)
		os.Exit(0) // still alive: SIGTERM was swallowed
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestRunGivesSignalsBack$")
	cmd.Env = append(os.Environ(), "NODEGC_DEMO_SIGNAL_CHILD=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("the child: %v, want it ended by SIGTERM\n%s", err, out)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("the child: %v, want it ended by SIGTERM\n%s", err, out)
	}
}
