package testbed

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Poll calls cond at once, then every interval, until cond returns true
// (Poll returns nil) or an error (Poll returns it), or ctx ends (Poll
// returns ctx.Err()); cond gets ctx for the calls it makes. The caller puts
// the deadline on ctx. It is the one polling loop of the test bed: WaitFor
// is Poll for a test, and code that is not a test (the harnesses below this
// package, the demo) calls Poll itself.
func Poll(ctx context.Context, interval time.Duration, cond func(ctx context.Context) (bool, error)) error {
	return wait.PollUntilContextCancel(ctx, interval, true, cond)
}

// WaitFor polls cond every 10ms (see Poll) until it holds, failing the test
// (Fatalf) after timeout or when the test's context ends. what names the
// condition in the failure.
func WaitFor(t TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	if err := Poll(ctx, 10*time.Millisecond, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		if t.Context().Err() != nil {
			t.Fatalf("test ended waiting for %s", what)
		}
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}
