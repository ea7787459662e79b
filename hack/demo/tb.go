package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nodegc/nodegc/internal/testbed"
)

// demoTB is the testbed.TB of a program: the harnesses (node, cluster,
// registry) take it as a test would give them *testing.T.
//
//   - Logf/Log print progress lines ("[testbed] ...").
//   - Errorf prints the error and marks the demo failed; it goes on.
//   - Fatalf and Skipf print the error, mark the demo failed and end the
//     calling goroutine (runtime.Goexit), which must be the demo's body (as
//     with testing, never another goroutine): run then runs the registered
//     cleanups in reverse order and the process exits 1. A skip is a failure
//     here: a prerequisite is missing, and the message says how to get it.
//   - Context is cancelled on SIGINT/SIGTERM, and just before the cleanups
//     run (as testing does).
//   - Failed reports a failure other than an interruption: the harnesses
//     print their components' logs when it is true, which Ctrl-C does not
//     call for. The exit code is 1 either way.
type demoTB struct {
	ctx    context.Context
	cancel context.CancelFunc

	mu          sync.Mutex
	cleanups    []func()
	failed      bool
	interrupted bool // by SIGINT/SIGTERM
}

var _ testbed.TB = (*demoTB)(nil)

func newTB() *demoTB {
	ctx, cancel := context.WithCancel(context.Background())
	return &demoTB{ctx: ctx, cancel: cancel}
}

func (t *demoTB) Helper() {}

func (t *demoTB) Log(args ...any) {
	say("[testbed] %s", strings.TrimSuffix(fmt.Sprintln(args...), "\n"))
}

func (t *demoTB) Logf(format string, args ...any) { say("[testbed] "+format, args...) }

func (t *demoTB) Errorf(format string, args ...any) {
	say("[demo] ERROR: "+format, args...)
	t.fail()
}

func (t *demoTB) Fatalf(format string, args ...any) {
	say("[demo] FATAL: "+format, args...)
	t.fail()
	runtime.Goexit()
}

func (t *demoTB) Skipf(format string, args ...any) {
	say("[demo] cannot run the demo: %s", strings.TrimPrefix(fmt.Sprintf(format, args...), "skipping: "))
	t.fail()
	runtime.Goexit()
}

func (t *demoTB) Cleanup(f func()) {
	t.mu.Lock()
	t.cleanups = append(t.cleanups, f)
	t.mu.Unlock()
}

func (t *demoTB) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed && !t.interrupted
}

func (t *demoTB) Context() context.Context { return t.ctx }

func (t *demoTB) fail() {
	t.mu.Lock()
	t.failed = true
	t.mu.Unlock()
}

// run runs body in a goroutine of its own, as testing runs a test, then
// the cleanups in reverse order, and returns the exit code: 0 unless the
// demo failed.
func (t *demoTB) run(body func(*demoTB)) int {
	stopSignals := t.cancelOnSignals()
	defer stopSignals()

	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if r := recover(); r != nil {
				say("[demo] PANIC: %v\n%s", r, debug.Stack())
				t.fail()
			}
		}()
		body(t)
	}()
	<-done

	t.cancel()
	t.mu.Lock()
	cleanups := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	if len(cleanups) > 0 {
		say("[demo] tearing down (%d steps) ...", len(cleanups))
	}
	began := time.Now()
	for i := len(cleanups) - 1; i >= 0; i-- {
		// Each cleanup in a goroutine of its own: a Fatalf in it ends only
		// that cleanup, and the next ones still run.
		cdone := make(chan struct{})
		go func() {
			defer close(cdone)
			defer func() {
				if r := recover(); r != nil {
					say("[demo] PANIC in teardown: %v\n%s", r, debug.Stack())
					t.fail()
				}
			}()
			cleanups[i]()
		}()
		<-cdone
	}
	if len(cleanups) > 0 {
		say("[demo] teardown done in %v", time.Since(began).Round(100*time.Millisecond))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failed {
		return 1
	}
	return 0
}

// cancelOnSignals cancels the context on the first SIGINT or SIGTERM. The
// signals stay caught until stop is called, after the teardown (run defers
// it), so that a second Ctrl-C during the teardown cannot leave
// containerd, mounts or loop devices behind; it says so instead. stop
// gives the signals back (signal.Stop): the demo also runs inside a test
// process (TestDemo), which must not go on swallowing them once the demo
// is over.
func (t *demoTB) cancelOnSignals() (stop func()) {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	quit := make(chan struct{})
	go func() {
		n := 0
		for {
			select {
			case s := <-ch:
				n++
				if n == 1 {
					say("[demo] %v: stopping; everything started is torn down before exiting", s)
					t.mu.Lock()
					t.interrupted = true
					t.mu.Unlock()
					t.cancel()
				} else {
					say("[demo] %v: still tearing down, please wait (an interrupted teardown would leave containerd, mounts or a loop device behind)", s)
				}
			case <-quit:
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(quit)
	}
}

var outMu sync.Mutex

// say prints one line (or block) to stdout; safe for concurrent use.
func say(format string, args ...any) {
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}
