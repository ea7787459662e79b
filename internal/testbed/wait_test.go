package testbed_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/nodegc/nodegc/internal/testbed"
)

func TestPoll(t *testing.T) {
	errBroken := errors.New("broken")
	for name, tc := range map[string]struct {
		trueAt, errAt int // the call (1-based) that returns true or errBroken; 0: never
		timeout       time.Duration
		wantCalls     int // exact; 0: at least 2
		wantErr       error
	}{
		"true at once":                          {trueAt: 1, timeout: time.Minute, wantCalls: 1},
		"true at third call":                    {trueAt: 3, timeout: time.Minute, wantCalls: 3},
		"an error ends it":                      {errAt: 2, trueAt: 5, timeout: time.Minute, wantCalls: 2, wantErr: errBroken},
		"context ends":                          {timeout: 50 * time.Millisecond, wantErr: context.DeadlineExceeded},
		"context already ended, still one call": {trueAt: 1, timeout: -1, wantCalls: 1},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), tc.timeout)
			defer cancel()
			calls := 0
			err := testbed.Poll(ctx, time.Millisecond, func(cctx context.Context) (bool, error) {
				calls++
				if cctx == nil {
					return false, errors.New("cond got no context")
				}
				if calls == tc.errAt {
					return false, errBroken
				}
				return calls == tc.trueAt, nil
			})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Errorf("Poll = %v, want %v", err, tc.wantErr)
			}
			if tc.wantCalls != 0 && calls != tc.wantCalls {
				t.Errorf("cond called %d times, want %d", calls, tc.wantCalls)
			}
			if tc.wantCalls == 0 && calls < 2 {
				t.Errorf("cond called %d times, want it polled until the context ended", calls)
			}
		})
	}
}

// fakeTB is a testbed.TB whose Fatalf ends the goroutine as testing's
// does, recording the message.
type fakeTB struct {
	testing.TB // not called: every method WaitFor uses is below
	ctx        context.Context
	mu         sync.Mutex
	fatal      string
}

func (f *fakeTB) Helper()                  {}
func (f *fakeTB) Context() context.Context { return f.ctx }
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// run calls fn as a test body would: in a goroutine of its own, which
// Fatalf ends.
func (f *fakeTB) run(fn func()) string {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fatal
}

func TestWaitFor(t *testing.T) {
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	for name, tc := range map[string]struct {
		ctx       context.Context
		trueAt    int // 0: never
		wantFatal string
	}{
		"holds at once":    {ctx: t.Context(), trueAt: 1},
		"holds later":      {ctx: t.Context(), trueAt: 4},
		"never holds":      {ctx: t.Context(), wantFatal: "timed out after 50ms waiting for the thing"},
		"test ended first": {ctx: ended, wantFatal: "test ended waiting for the thing"},
	} {
		t.Run(name, func(t *testing.T) {
			tb := &fakeTB{ctx: tc.ctx}
			calls := 0
			fatal := tb.run(func() {
				testbed.WaitFor(tb, 50*time.Millisecond, "the thing", func() bool {
					calls++
					return calls == tc.trueAt
				})
			})
			if fatal != tc.wantFatal {
				t.Errorf("WaitFor failed the test with %q, want %q", fatal, tc.wantFatal)
			}
			if tc.trueAt != 0 && calls != tc.trueAt {
				t.Errorf("cond called %d times, want %d", calls, tc.trueAt)
			}
		})
	}
}
